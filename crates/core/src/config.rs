//! The configuration file model (SPEC §13): TOML text and environment overrides in, validated
//! typed [`Config`] out, or every problem found, each with its line.
//!
//! Configuration comes in two stages. The text is parsed into a tree that remembers the line of
//! every key and value; the environment overrides are applied to that tree; then each section
//! is validated into plain typed values, collecting every problem rather than stopping at the
//! first. This module reads no file and no environment itself: the caller passes the file's
//! text and the process environment in.
//!
//! # Environment overrides
//!
//! Every value can be overridden by an environment variable named `ANTEROOM_`, then the path of
//! the value with a double underscore between levels. Names are case-insensitive:
//!
//! | variable                              | overrides                                   |
//! |---------------------------------------|---------------------------------------------|
//! | `ANTEROOM_SERVER__LISTEN`             | `[server] listen`                           |
//! | `ANTEROOM_STORE__BACKEND`             | `[store] backend`                           |
//! | `ANTEROOM_AUTH__ADMIN_KEYS`           | `[auth] admin_keys`                         |
//! | `ANTEROOM_ROOM__SALE_2026__MAX_ACTIVE`| `max_active` of the `[[room]]` with `id = "sale-2026"` |
//! | `ANTEROOM_RATE_LIMIT__JOIN_PER_IP__LIMIT` | `limit` of the `[[rate_limit]]` with `name = "join-per-ip"` |
//!
//! - A room is chosen by its id, a rate limit by its name, matched case-insensitively with `_`
//!   and `-` alike; naming a room or rate limit the file does not define is a problem (they
//!   cannot be created from the environment).
//! - A value is read as a TOML value (number, boolean, string in quotes, array, inline table)
//!   when it parses as one, and as plain text otherwise, so `ANTEROOM_SERVER__LISTEN=127.0.0.1:9000`
//!   and `ANTEROOM_ROOM__LAUNCH__SESSION_TTL=10m` need no quotes. Where a list of strings is
//!   expected, plain text is split at commas: `ANTEROOM_SERVER__TRUSTED_PROXIES=10.0.0.0/8,::1`.
//! - Overrides are applied before validation, so an overridden value is checked like any other;
//!   a problem in it names the variable instead of a line.
//! - Variables with no `__` that do not name a section (such as one giving the config file's
//!   path) are not overrides and are left alone.
//! - When `ANTEROOM_STORE__BACKEND` switches the backend, the file's keys for its other
//!   backends are ignored instead of refused.
//!
//! ```
//! use anteroom_core::config::{StoreConfig, parse_config};
//!
//! let source = "[server]\nlisten = \"0.0.0.0:8000\"\n\n[[room]]\nid = \"launch\"\nmax_active = 100\n";
//! let env = [("ANTEROOM_STORE__BACKEND".to_owned(), "memory".to_owned())];
//! let config = parse_config(source, &env).expect("valid");
//! assert_eq!(config.server.listen.port(), 8000);
//! assert_eq!(config.store, StoreConfig::Memory);
//! assert_eq!(config.rooms[0].max_active, 100);
//!
//! let errors = parse_config("[server]\nlisen = \"0.0.0.0:8000\"\n", &[]).expect_err("typo");
//! assert_eq!(errors.to_string(), "line 2: unknown key `lisen` in [server]; did you mean `listen`?");
//! ```

mod connection_limits;
mod env;
mod events;
mod gateway;
mod log;
mod node_sections;
mod rate_limit;
mod raw_keys;
mod room;
mod room_identity;
mod room_oidc;
mod sections;
mod span_export;
mod ticker_intervals;
mod tls;
mod top_level;
mod tree;
mod verify;

#[cfg(test)]
mod tests;

use toml::de::DeTable;

pub use crate::cidr::{Cidr, CidrError};
pub use crate::key_hash::{KeyHash, KeyHashError};
pub use connection_limits::{ConnectionLimits, MAX_CONNECTION_TIMEOUT, MIN_DESCRIPTOR_RESERVE};
pub use events::{EventSinkConfig, EventSinkKind, SecretSource, WebhookConfig};
pub use gateway::{
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_MAX_REQUEST_BODY, OnExceed, PageMode, RouteConfig,
    UpstreamConfig, WebSocketConfig, parse_size, room_route,
};

pub use log::{AccessLogFormat, LogConfig};
pub use node_sections::{
    AuthConfig, DEFAULT_CHECKPOINT_BYTES, DEFAULT_MAX_ONCE_MARKS, DEFAULT_REDIS_TIMEOUT,
    DEFAULT_TICKET_SECRET_RETENTION, HttpEngine, KeysConfig, MAX_REDIS_TIMEOUT,
    MIN_CHECKPOINT_BYTES, MIN_REDIS_TIMEOUT, SIGNING_ALGORITHMS, ServerConfig, SharedKeysConfig,
    SseLimits, StoreConfig,
};
pub use rate_limit::{
    JOIN_RULE_BURST, JOIN_RULE_LIMIT, JOIN_RULE_NAME, JOIN_RULE_PERIOD, default_join_rule,
};
pub use room::{
    FieldProblem, RawAdaptive, RawChallenge, RawEvent, RawPriority, RawRoom, format_time,
};
pub use room_identity::RawIdentityJwt;
pub use room_oidc::RawOidc;
pub use span_export::TracingConfig;
pub use ticker_intervals::TickerIntervals;
pub use tls::{CertificateFiles, TlsConfig, TlsVersion};
pub use tree::ConfigProblem;
pub use verify::{OriginalUri, VerifyConfig, VerifyProxy};

use crate::ratelimit::rules::RateLimitRule;
use crate::room::RoomConfig;
use top_level::UNSUPPORTED_SECTIONS;
use top_level::{RATE_LIMIT_SECTION, ROOM_SECTION, SUPPORTED_SECTIONS, top_level_keys};
use tree::{LineIndex, Problems, Table};

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// `[server]`: listeners and public identity.
    pub server: ServerConfig,
    /// `[upstream]`: the protected site, for gateway mode; absent beside an existing proxy.
    pub upstream: Option<UpstreamConfig>,
    /// `[store]`: where state lives.
    pub store: StoreConfig,
    /// `[keys]`: signing keys.
    pub keys: KeysConfig,
    /// `[auth]`: hashes of the admin, read-only and service API keys.
    pub auth: AuthConfig,
    /// `[[room]]`: the rooms defined in the file, in file order.
    pub rooms: Vec<RoomConfig>,
    /// `[[rate_limit]]`: the rate-limit rules, in file order.
    pub rate_limits: Vec<RateLimitRule>,
    /// `[[route]]` in file order: the first route that matches a request is its route. The
    /// rooms' `routes = [...]` shorthands come after them, built from the rooms as the store
    /// holds them ([`room_route`]), so the admin API can change them while the node serves.
    pub routes: Vec<RouteConfig>,
    /// `[websocket]`: per-connection message limits; absent when the section is.
    pub websocket: Option<WebSocketConfig>,
    /// `[[events.sink]]`: where live events go, in file order.
    pub events: Vec<EventSinkConfig>,
    /// `[verify]`: which proxy calls the verify endpoint, and the headers it reads.
    pub verify: VerifyConfig,
    /// `[log]`: the access log.
    pub log: LogConfig,
    /// `[tracing]`: span export.
    pub tracing: TracingConfig,
}

/// Every problem found in a configuration, in line order (environment problems last).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", list_problems(.0))]
pub struct ConfigErrors(pub Vec<ConfigProblem>);

fn list_problems(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(ConfigProblem::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Parses and validates a whole config file. `env` is the process environment as (name, value)
/// pairs; only names starting with `ANTEROOM_` are used (see the module documentation).
pub fn parse_config(source: &str, env: &[(String, String)]) -> Result<Config, ConfigErrors> {
    let lines = LineIndex::new(source);
    let (document, syntax_errors) = DeTable::parse_recoverable(source);
    let mut problems = Problems::default();
    let mut last_line = 1;
    for error in &syntax_errors {
        // The parser places nearly every error; one it cannot place (its recursion limit) is
        // reported on the line of the error before it, so every problem has a line.
        let line = error
            .span()
            .map_or(last_line, |span| lines.line(span.start));
        // After the first error on a line the parser's guesses at the rest of it only add
        // noise (one line of stray characters gave a hundred problems).
        if problems
            .list
            .last()
            .is_some_and(|problem| problem.line == Some(line))
        {
            continue;
        }
        last_line = line;
        problems.list.push(ConfigProblem {
            line: Some(line),
            message: format!("invalid TOML: {}", error.message()),
        });
    }
    let syntax_lines: Vec<Option<usize>> =
        problems.list.iter().map(|problem| problem.line).collect();

    let mut root = Table::from_document(document.into_inner(), &lines);
    env::apply_overrides(&mut root, env, &mut problems);
    let config = read_document(&root, &mut problems);

    // The parser recovers from syntax errors; what it made of a broken line would only add
    // confusing follow-up problems on that line.
    let syntax_count = syntax_lines.len();
    let mut index = 0;
    problems.list.retain(|problem| {
        index += 1;
        index <= syntax_count || problem.line.is_none() || !syntax_lines.contains(&problem.line)
    });
    if problems.list.is_empty() {
        return Ok(config);
    }
    problems
        .list
        .sort_by_key(|problem| (problem.line.is_none(), problem.line));
    Err(ConfigErrors(problems.list))
}

fn read_document(root: &Table, problems: &mut Problems) -> Config {
    for entry in &root.entries {
        if SUPPORTED_SECTIONS.contains(&entry.key.as_str()) {
            continue;
        }
        match UNSUPPORTED_SECTIONS
            .iter()
            .find(|(key, _)| *key == entry.key)
        {
            Some((_, written)) => room::report_unsupported(entry, written, problems),
            None => {
                let mut message = format!("unknown key `{}`", entry.key);
                if let Some(suggestion) = tree::closest(&entry.key, top_level_keys()) {
                    message.push_str(&format!("; did you mean `{suggestion}`?"));
                }
                problems.add(&entry.key_origin, message);
            }
        }
    }
    let server = sections::read_server(root.get("server"), problems);
    let rooms = room::read_rooms(
        root.get(ROOM_SECTION),
        server.templates_dir.as_deref(),
        problems,
    );
    let mut rate_limits = rate_limit::read_rate_limits(
        root.get(RATE_LIMIT_SECTION),
        rate_limit::redis_store_selected(root),
        problems,
    );
    // The built-in per-IP join limit (§12), unless a rule of its name replaces it or
    // `[server] join_rate_limit = false` removes it.
    if sections::join_rate_limit(root.get("server"), problems)
        && !rate_limits
            .iter()
            .any(|rule| rule.name == rate_limit::JOIN_RULE_NAME)
    {
        rate_limits.extend(rate_limit::default_join_rule());
    }
    let routes = gateway::read_routes(root, &rooms, &rate_limits, problems);
    let store = sections::read_store(root.get("store"), problems);
    Config {
        server,
        upstream: gateway::read_upstream(root.get("upstream"), problems),
        keys: sections::read_keys(root.get("keys"), &store, problems),
        store,
        auth: sections::read_auth(root.get("auth"), problems),
        rooms,
        rate_limits,
        routes,
        websocket: gateway::read_websocket(root.get("websocket"), problems),
        events: events::read_events(root.get("events"), problems),
        verify: verify::read_verify(root.get("verify"), problems),
        log: log::read_log(root.get("log"), problems),
        tracing: span_export::read_tracing(root.get("tracing"), problems),
    }
}
