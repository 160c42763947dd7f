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
mod rate_limit;
mod raw_keys;
mod room;
mod room_identity;
mod room_oidc;
mod sections;
mod span_export;
mod ticker_intervals;
mod tls;
mod tree;
mod verify;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

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
pub use verify::{OriginalUri, VerifyProxy};

use crate::ratelimit::rules::RateLimitRule;
use crate::room::RoomConfig;
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

/// `[verify]` (SPEC §14.1): the one set of headers the verify endpoint reads the visitor's
/// request from (see [`VerifyProxy::headers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyConfig {
    /// The preset the headers came from (explicit header names may replace its own).
    pub proxy: VerifyProxy,
    /// Where the visitor's URI is.
    pub uri: OriginalUri,
    /// The header with the visitor's method (lower case); `None`: the request's own method.
    pub method_header: Option<String>,
    /// The header with the visitor's host (lower case); `None`, or when it is absent: `Host`.
    pub host_header: Option<String>,
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The public listener (site and `/_anteroom/*`).
    pub listen: SocketAddr,
    /// The admin listener (admin API, control panel, metrics).
    pub admin_listen: SocketAddr,
    /// The public base URL, `http://` or `https://`, without a trailing slash.
    pub public_url: String,
    /// The `iss` of issued tokens; the public URL unless set.
    pub issuer: String,
    /// Peers whose `X-Forwarded-For` / `Forwarded` headers are believed.
    pub trusted_proxies: Vec<Cidr>,
    /// Threads serving the public listener, each with its own event loop and socket on the
    /// port; `None`: one per available core.
    pub workers: Option<usize>,
    /// The only directory rooms' `page_template` files are read from; `None`: custom pages
    /// are refused.
    pub templates_dir: Option<PathBuf>,
    /// How many event streams the node holds, in all and per ticket and client address.
    pub sse: SseLimits,
    /// The most one-time marks (used challenges) the node holds when they are its own (no
    /// Redis store).
    pub max_once_marks: usize,
    /// Which HTTP engine serves the public listener and reaches the upstream.
    pub http_engine: HttpEngine,
    /// `[server.tls]`: the public listener speaks TLS with these certificates; `None`: plain
    /// HTTP (TLS ends in a proxy in front, or nowhere).
    pub tls: Option<TlsConfig>,
    /// Timeouts and caps of the public listener's client connections.
    pub connections: ConnectionLimits,
    /// How often the admission ticker runs and touches connected streams' tickets.
    pub ticker: TickerIntervals,
}

/// `[server] http_engine` (SPEC §14.4): the node's own HTTP/1 loop and upstream client for
/// the small requests a waiting room lives on, with hyper for the rest (`"own"`, the
/// default), or hyper for everything (`"hyper"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpEngine {
    /// The node's own HTTP/1 loop and upstream client, hyper for upgrades, streamed bodies
    /// and HTTP/2.
    #[default]
    Own,
    /// hyper alone, both ways.
    Hyper,
}

impl HttpEngine {
    /// The engine a config spelling names.
    pub fn parse(text: &str) -> Option<HttpEngine> {
        match text {
            "own" => Some(HttpEngine::Own),
            "hyper" => Some(HttpEngine::Hyper),
            _ => None,
        }
    }

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpEngine::Own => "own",
            HttpEngine::Hyper => "hyper",
        }
    }
}

/// `[server] sse_max_streams`, `sse_max_streams_per_ticket`, `sse_max_streams_per_ip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    /// Open event streams on the node.
    pub max_streams: usize,
    /// Open event streams of one ticket (a visitor's tabs).
    pub per_ticket: usize,
    /// Open event streams from one client address (many visitors share one behind a NAT).
    pub per_ip: usize,
}

impl Default for SseLimits {
    fn default() -> Self {
        SseLimits {
            max_streams: 18_000,
            per_ticket: 4,
            per_ip: 64,
        }
    }
}

/// The most one-time marks a node holds unless configured (about 100 MB at most).
pub const DEFAULT_MAX_ONCE_MARKS: usize = 1_000_000;

impl Default for ServerConfig {
    fn default() -> Self {
        let public_url = "http://localhost:8080".to_owned();
        ServerConfig {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8080),
            admin_listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9090),
            issuer: public_url.clone(),
            public_url,
            trusted_proxies: Vec::new(),
            workers: None,
            templates_dir: None,
            sse: SseLimits::default(),
            max_once_marks: DEFAULT_MAX_ONCE_MARKS,
            http_engine: HttpEngine::Own,
            tls: None,
            connections: ConnectionLimits::default(),
            ticker: TickerIntervals::default(),
        }
    }
}

/// `[store]`: which backend holds the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// `backend = "embedded"`: a durable redb file.
    Embedded {
        /// The database file.
        path: PathBuf,
        /// `checkpoint_bytes`: log bytes after which the write-ahead log is checkpointed
        /// into the database file.
        checkpoint_bytes: u64,
    },
    /// `backend = "memory"`: nothing survives a restart (tests and demos).
    Memory,
    /// `backend = "redis"`: shared by several nodes.
    Redis {
        /// `url` (one standalone server) or the `cluster` nodes.
        urls: Vec<String>,
        /// Whether `urls` are Redis Cluster nodes.
        cluster: bool,
    },
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig::Embedded {
            path: PathBuf::from("data/anteroom.redb"),
            checkpoint_bytes: DEFAULT_CHECKPOINT_BYTES,
        }
    }
}

/// The default `[store] checkpoint_bytes`: 32 MiB of write-ahead log.
pub const DEFAULT_CHECKPOINT_BYTES: u64 = 32 << 20;
/// The smallest `[store] checkpoint_bytes` accepted.
pub const MIN_CHECKPOINT_BYTES: u64 = 4096;

/// The signing algorithms `[keys] algorithm` accepts.
pub const SIGNING_ALGORITHMS: &[&str] = &["EdDSA", "ES256", "RS256", "HS256"];

/// `[keys]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysConfig {
    /// Where signing keys live; generated on first start when empty.
    pub dir: PathBuf,
    /// One of [`SIGNING_ALGORITHMS`].
    pub algorithm: String,
    /// How long a ticket secret retired by a key rotation keeps verifying the tickets,
    /// challenges and sealed values it made. Ticket tokens have no expiry of their own (a
    /// waiting visitor keeps their ticket while they keep contact), so this is the longest
    /// wait a rotation honours.
    pub ticket_secret_retention: Duration,
    /// `storage = "redis"`: the keys live in the `[store]` Redis, shared by every node,
    /// sealed with a key-encryption key; `None` (`storage = "dir"`): in `dir`.
    pub shared: Option<SharedKeysConfig>,
}

/// Keys kept in the store's Redis instead of a directory (`[keys] storage = "redis"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedKeysConfig {
    /// The file holding the 32-byte key-encryption key (hex or base64).
    pub kek_file: PathBuf,
}

/// The default of `[keys] ticket_secret_retention`: a day, longer than any queue is expected
/// to be waited in, and as long as a pending OpenID Connect request lives.
pub const DEFAULT_TICKET_SECRET_RETENTION: Duration = Duration::from_secs(24 * 3600);

impl Default for KeysConfig {
    fn default() -> Self {
        KeysConfig {
            dir: PathBuf::from("data/keys"),
            algorithm: "EdDSA".to_owned(),
            ticket_secret_retention: DEFAULT_TICKET_SECRET_RETENTION,
            shared: None,
        }
    }
}

/// `[auth]`: SHA-256 hashes of the API keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthConfig {
    /// Keys for the admin API.
    pub admin_keys: Vec<KeyHash>,
    /// Read-only admin keys.
    pub read_keys: Vec<KeyHash>,
    /// Keys for the backend API (completing and abandoning sessions).
    pub service_keys: Vec<KeyHash>,
}

/// One problem found in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The 1-based line of the file it is on; `None` for environment overrides.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
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

/// The top-level keys this version reads.
const SUPPORTED_SECTIONS: &[&str] = &[
    "server",
    "upstream",
    "store",
    "keys",
    "auth",
    ROOM_SECTION,
    RATE_LIMIT_SECTION,
    "route",
    "websocket",
    "events",
    "verify",
    "log",
    "tracing",
];
/// Top-level sections of later versions, with how they are written.
const UNSUPPORTED_SECTIONS: &[(&str, &str)] = &[];
/// Every top-level key, supported or not.
const TOP_LEVEL_KEYS: &[&str] = &[
    "server",
    "upstream",
    "store",
    "keys",
    "auth",
    ROOM_SECTION,
    "route",
    RATE_LIMIT_SECTION,
    "websocket",
    "events",
    "verify",
    "log",
    "tracing",
];
const ROOM_SECTION: &str = "room";
const RATE_LIMIT_SECTION: &str = "rate_limit";

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
                if let Some(suggestion) = tree::closest(&entry.key, TOP_LEVEL_KEYS.iter().copied())
                {
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
