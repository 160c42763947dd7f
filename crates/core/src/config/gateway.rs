//! The gateway's sections of the config file (SPEC §7, §10.4): `[upstream]` (the protected
//! site and how it is reached), `[[route]]` (which requests need which rooms and rate limits),
//! the rooms' `routes = [...]` shorthand, and `[websocket]` (per-connection message limits).

use std::path::PathBuf;
use std::time::Duration;

use super::rate_limit::parse_algorithm;
use super::tree::{Entry, Origin, Problems, Table, Value, closest};
use crate::duration::parse_duration;
use crate::ids::RoomId;
use crate::ratelimit::rules::{
    MatcherError, MatcherField, PathGlob, RateLimitRule, RequestMatcher, default_burst,
};
use crate::ratelimit::{Algorithm, LimitParams};
use crate::room::RoomConfig;

/// `[upstream]`: the protected site, for gateway mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// The site's base URL, `http://host[:port]` or `https://host[:port]` (no path).
    pub url: String,
    /// Opening a connection to the site may take this long (502 after).
    pub connect_timeout: Duration,
    /// The site must send its response headers within this long of the request (504 after).
    pub header_timeout: Duration,
    /// A body (either way) that makes no progress for this long is cut off.
    pub idle_timeout: Duration,
    /// Idle pooled connections to the site are closed after this long.
    pub pool_idle_timeout: Duration,
    /// The largest request body passed on, in bytes; `None` = unlimited.
    pub max_request_body: Option<u64>,
    /// The largest response body passed on, in bytes; `None` = unlimited.
    pub max_response_body: Option<u64>,
    /// Speak HTTP/2 without TLS (h2c, prior knowledge) to the site instead of HTTP/1.1.
    pub http2: bool,
    /// For an `https://` site: a PEM bundle of the certificate authorities trusted for it
    /// instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// For an `https://` site: the name its certificate must be valid for, also sent as SNI,
    /// instead of the URL's host.
    pub server_name: Option<String>,
    /// The most connections this node holds open to the site at once (idle ones included);
    /// `None` = no cap. A request that cannot get one within `header_timeout` is answered
    /// 503 `upstream_busy`.
    pub max_connections: Option<usize>,
}

impl UpstreamConfig {
    /// An upstream at `url` with every other field at its default.
    pub fn new(url: impl Into<String>) -> UpstreamConfig {
        UpstreamConfig {
            url: url.into(),
            connect_timeout: Duration::from_secs(5),
            header_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            pool_idle_timeout: Duration::from_secs(90),
            max_request_body: Some(DEFAULT_MAX_REQUEST_BODY),
            max_response_body: None,
            http2: false,
            ca_file: None,
            server_name: None,
            max_connections: None,
        }
    }

    /// Whether the site is reached over TLS (`https://`).
    pub fn is_https(&self) -> bool {
        self.url.starts_with("https://")
    }

    /// The URL's host, an IPv6 address without its brackets.
    pub fn host(&self) -> &str {
        split_authority(self.authority()).0
    }

    /// The URL's port, or the scheme's (80, 443); 0 for a port that does not parse (config
    /// validation refuses those).
    pub fn port(&self) -> u16 {
        match split_authority(self.authority()).1 {
            Some(port) => port.parse().unwrap_or(0),
            None if self.is_https() => 443,
            None => 80,
        }
    }

    /// `host[:port]` of the URL, as written.
    fn authority(&self) -> &str {
        let rest = self
            .url
            .strip_prefix("https://")
            .or_else(|| self.url.strip_prefix("http://"))
            .unwrap_or(&self.url);
        rest.trim_end_matches('/')
    }
}

/// The host (brackets removed) and the port text, if any, of `host[:port]`.
fn split_authority(authority: &str) -> (&str, Option<&str>) {
    if let Some(bracketed) = authority.strip_prefix('[') {
        return match bracketed.split_once(']') {
            Some((host, rest)) => (host, rest.strip_prefix(':')),
            None => (bracketed, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    }
}

/// The default `max_request_body`: 100 MiB.
pub const DEFAULT_MAX_REQUEST_BODY: u64 = 100 * 1024 * 1024;

/// How a route shows the waiting page to a navigation without a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PageMode {
    /// The page itself, answered with 200 at the requested address.
    #[default]
    Inline,
    /// 302 to `/_anteroom/wait/{room}?return=…`.
    Redirect,
}

impl PageMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PageMode::Inline => "inline",
            PageMode::Redirect => "redirect",
        }
    }
}

/// One route (SPEC §7.1): the requests it selects and what they need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// A label for logs and measurements: `name`, else `route-<n>` (n counts `[[route]]`
    /// entries from 1), else `room-<id>` for a room's `routes` shorthand.
    pub name: String,
    /// Hosts, path globs and methods; an empty list selects everything.
    pub matcher: RequestMatcher,
    /// Rooms whose pass is needed, in order (tier 1 then tier 2). A room's own `requires`
    /// are needed before it.
    pub rooms: Vec<RoomId>,
    /// Route-only rate limits (rules without `match`) applied to the route's requests.
    pub rate_limits: Vec<String>,
    /// Health checks, static assets: no room is checked.
    pub bypass: bool,
    /// How navigations without a pass see the waiting page.
    pub page: PageMode,
}

/// What happens to a WebSocket message over the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnExceed {
    /// Drop the message silently (and count it).
    #[default]
    Drop,
    /// Close the connection with 1008 (policy violation).
    Close,
}

/// `[websocket]`: limits on each proxied WebSocket connection (SPEC §10.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSocketConfig {
    /// Client→upstream data messages allowed per connection; `None`: no limit.
    pub limit: Option<LimitParams>,
    /// What happens to a message over the limit.
    pub on_exceed: OnExceed,
    /// The largest message accepted from either side, in bytes.
    pub max_message_size: usize,
}

impl Default for WebSocketConfig {
    fn default() -> Self {
        WebSocketConfig {
            limit: None,
            on_exceed: OnExceed::Drop,
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

/// The default `max_message_size`: 1 MiB.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 1024 * 1024;

const UPSTREAM_KEYS: &[&str] = &[
    "url",
    "connect_timeout",
    "header_timeout",
    "idle_timeout",
    "pool_idle_timeout",
    "max_request_body",
    "max_response_body",
    "http2",
    "ca_file",
    "server_name",
    "max_connections",
];
const ROUTE_KEYS: &[&str] = &[
    "name",
    "hosts",
    "paths",
    "methods",
    "rooms",
    "rate_limits",
    "bypass",
    "page",
    "case_insensitive",
];
const WEBSOCKET_KEYS: &[&str] = &[
    "limit",
    "period",
    "burst",
    "algorithm",
    "on_exceed",
    "max_message_size",
];

pub(super) fn read_upstream(
    section: Option<&Entry>,
    problems: &mut Problems,
) -> Option<UpstreamConfig> {
    let entry = section?;
    let table = entry.table(problems)?;
    problems.unknown_keys(table, UPSTREAM_KEYS, "[upstream]");
    let Some(url_entry) = table.get("url") else {
        problems.add(
            &entry.key_origin,
            "[upstream] needs a `url`, such as \"http://127.0.0.1:3000\"",
        );
        return None;
    };
    let url = url_entry.string(problems)?;
    if let Err(reason) = check_upstream_url(&url) {
        problems.add(&url_entry.key_origin, format!("`url` {reason}"));
        return None;
    }
    let mut upstream = UpstreamConfig::new(url.trim_end_matches('/'));
    let duration = |key: &str, default: Duration, problems: &mut Problems| {
        table
            .get(key)
            .and_then(|entry| read_positive_duration(entry, problems))
            .unwrap_or(default)
    };
    upstream.connect_timeout = duration("connect_timeout", upstream.connect_timeout, problems);
    upstream.header_timeout = duration("header_timeout", upstream.header_timeout, problems);
    upstream.idle_timeout = duration("idle_timeout", upstream.idle_timeout, problems);
    upstream.pool_idle_timeout =
        duration("pool_idle_timeout", upstream.pool_idle_timeout, problems);
    if let Some(entry) = table.get("max_request_body") {
        upstream.max_request_body = read_size(entry, problems).unwrap_or(upstream.max_request_body);
    }
    if let Some(entry) = table.get("max_response_body") {
        upstream.max_response_body =
            read_size(entry, problems).unwrap_or(upstream.max_response_body);
    }
    if let Some(flag) = table.get("http2").and_then(|entry| entry.boolean(problems)) {
        upstream.http2 = flag;
    }
    if let Some(entry) = table.get("max_connections") {
        upstream.max_connections = read_connection_cap(entry, problems);
    }
    read_upstream_tls(table, &mut upstream, problems);
    Some(upstream)
}

/// `max_connections`: a positive number of connections; 0 = no cap.
fn read_connection_cap(entry: &Entry, problems: &mut Problems) -> Option<usize> {
    let count = entry.unsigned(problems)?;
    match usize::try_from(count) {
        Ok(0) => None,
        Ok(count) => Some(count),
        Err(_) => {
            problems.add(
                &entry.key_origin,
                format!("`max_connections` is too large, found {count}"),
            );
            None
        }
    }
}

/// `ca_file` and `server_name`, which only mean something for an `https://` site, and
/// `http2`, which is h2c and so only means something without TLS.
fn read_upstream_tls(table: &Table, upstream: &mut UpstreamConfig, problems: &mut Problems) {
    let https = upstream.is_https();
    for key in ["ca_file", "server_name"] {
        if let Some(entry) = table.get(key)
            && !https
        {
            problems.add(
                &entry.key_origin,
                format!(
                    "`{key}` applies only to an https:// `url`: the site is spoken to in plain HTTP"
                ),
            );
        }
    }
    if https && upstream.http2 {
        let origin = table
            .get("http2")
            .map_or(Origin::Line(1), |entry| entry.key_origin.clone());
        problems.add(
            &origin,
            "`http2 = true` is HTTP/2 without TLS (h2c) and cannot be used with an https:// `url`; HTTP/1.1 over TLS is spoken to an https:// site",
        );
    }
    if !https {
        return;
    }
    upstream.ca_file = table
        .get("ca_file")
        .and_then(|entry| match entry.string(problems) {
            Some(text) if text.trim().is_empty() => {
                problems.add(&entry.key_origin, "`ca_file` must not be empty");
                None
            }
            text => text.map(PathBuf::from),
        });
    upstream.server_name = table.get("server_name").and_then(|entry| {
        let text = entry.string(problems)?;
        let name = text.trim().trim_end_matches('.').to_ascii_lowercase();
        if is_server_name(&name) {
            Some(name)
        } else {
            problems.add(
                &entry.key_origin,
                format!("`server_name` must be a DNS name or an IP address, found {text:?}"),
            );
            None
        }
    });
}

/// A DNS name (letters, digits, `-`, labels of 1 to 63 between dots) or an IP address.
fn is_server_name(name: &str) -> bool {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let label = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    !name.is_empty() && name.len() <= 253 && name.split('.').all(label)
}

/// The upstream is spoken to at its root, in plain HTTP (or h2c) or over TLS.
fn check_upstream_url(url: &str) -> Result<(), String> {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(format!(
            "must start with http:// or https://, found {url:?}"
        ));
    };
    let rest = rest.trim_end_matches('/');
    let valid_host = !rest.is_empty()
        && !rest.contains(['/', '?', '#', '@'])
        && !url.chars().any(char::is_whitespace);
    if !valid_host {
        return Err(format!(
            "must be the site's root, http(s)://host[:port] with no path, found {url:?}"
        ));
    }
    let (host, port) = split_authority(rest);
    if host.is_empty()
        || port.is_some_and(|port| port.parse::<u16>().map_or(true, |port| port == 0))
    {
        return Err(format!(
            "must name a host and, if any, a port from 1 to 65535, found {url:?}"
        ));
    }
    Ok(())
}

pub(super) fn read_positive_duration(entry: &Entry, problems: &mut Problems) -> Option<Duration> {
    let text = entry.duration_text(problems)?;
    match parse_duration(&text) {
        Ok(duration) if duration.is_zero() => {
            problems.add(
                &entry.key_origin,
                format!("`{}` must be longer than zero, found {text:?}", entry.key),
            );
            None
        }
        Ok(duration) => Some(duration),
        Err(error) => {
            problems.add(&entry.key_origin, format!("`{}`: {error}", entry.key));
            None
        }
    }
}

/// A size: a number of bytes, or text such as `"10MiB"`, `"512KB"`, `"1GiB"`; 0 = unlimited.
/// `None` when wrong (reported); `Some(None)` for unlimited.
fn read_size(entry: &Entry, problems: &mut Problems) -> Option<Option<u64>> {
    let bytes = match (&entry.item.value, &entry.item.env_text) {
        (Value::Integer(_), _) => entry.unsigned(problems)?,
        (Value::String(text), _) | (_, Some(text)) => match parse_size(text) {
            Some(bytes) => bytes,
            None => {
                problems.add(
                    &entry.key_origin,
                    format!(
                        "invalid size {text:?} for `{}`: expected bytes or a number with B, KB, KiB, MB, MiB, GB or GiB, such as \"10MiB\"",
                        entry.key
                    ),
                );
                return None;
            }
        },
        _ => {
            problems.add(
                &entry.key_origin,
                format!(
                    "`{}` must be a size, such as \"10MiB\" or 1048576",
                    entry.key
                ),
            );
            return None;
        }
    };
    Some((bytes > 0).then_some(bytes))
}

/// Parses `"10MiB"`, `"512KB"`, `"100"` (bytes).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let amount: u64 = text[..digits_end].parse().ok()?;
    let unit: u64 = match text[digits_end..].trim() {
        "" | "B" => 1,
        "KB" => 1000,
        "KiB" => 1 << 10,
        "MB" => 1000 * 1000,
        "MiB" => 1 << 20,
        "GB" => 1000 * 1000 * 1000,
        "GiB" => 1 << 30,
        _ => return None,
    };
    amount.checked_mul(unit)
}

/// The route of a room's `routes = [...]` shorthand (SPEC §7.1): the room's path globs, any
/// host and method, needing only that room. `None` when the room lists no paths. The gateway
/// puts these after every `[[route]]` (the first matching route wins), in room order.
pub fn room_route(room: &RoomConfig) -> Result<Option<RouteConfig>, MatcherError> {
    if room.routes.is_empty() {
        return Ok(None);
    }
    let matcher = RequestMatcher::default().with_paths(room.routes.iter().map(String::as_str))?;
    Ok(Some(RouteConfig {
        name: format!("room-{}", room.id),
        matcher,
        rooms: vec![room.id.clone()],
        rate_limits: Vec::new(),
        bypass: false,
        page: PageMode::Inline,
    }))
}

/// Reads every `[[route]]`. Route-only rate limits that no route lists are reported, since
/// they would never apply.
pub(super) fn read_routes(
    root: &Table,
    rooms: &[RoomConfig],
    rules: &[RateLimitRule],
    problems: &mut Problems,
) -> Vec<RouteConfig> {
    let mut routes = Vec::new();
    if let Some(entry) = root.get("route") {
        match &entry.item.value {
            Value::Array(elements) => {
                for (index, element) in elements.iter().enumerate() {
                    match &element.value {
                        Value::Table(table) => {
                            let reader = RouteReader {
                                table,
                                header: &element.origin,
                                rooms,
                                rules,
                            };
                            if let Some(route) = reader.read(index + 1, problems) {
                                routes.push(route);
                            }
                        }
                        _ => problems.add(
                            &element.origin,
                            "each route must be a table, written [[route]]",
                        ),
                    }
                }
            }
            _ => problems.add(
                &entry.key_origin,
                "`route` must be an array of tables, written [[route]]",
            ),
        }
    }
    // A room's `routes` shorthand (checked with the room) becomes a route at run time, from
    // the room as the store holds it: see [`room_route`].
    let room_routes: Vec<RouteConfig> = rooms
        .iter()
        .filter_map(|room| room_route(room).ok().flatten())
        .collect();
    for rule in rules.iter().filter(|rule| rule.route_only()) {
        let listed = routes
            .iter()
            .chain(&room_routes)
            .any(|route| route.rate_limits.contains(&rule.name));
        if !listed {
            let origin = rule_origin(root, &rule.name);
            problems.add(
                &origin,
                format!(
                    "rate limit {:?}: has no `match` and no [[route]] lists it in `rate_limits`, so it never applies; add `match = {{ paths = [\"/**\"] }}` to apply it everywhere",
                    rule.name
                ),
            );
        }
    }
    routes
}

/// Where the `[[rate_limit]]` named `name` starts.
fn rule_origin(root: &Table, name: &str) -> Origin {
    find_named(root, "rate_limit", "name", name, "name")
}

fn find_named(root: &Table, section: &str, key: &str, value: &str, field: &str) -> Origin {
    let Some(Value::Array(elements)) = root.get(section).map(|entry| &entry.item.value) else {
        return Origin::Line(1);
    };
    elements
        .iter()
        .find_map(|element| match &element.value {
            Value::Table(table)
                if matches!(table.get(key).map(|entry| &entry.item.value), Some(Value::String(text)) if text == value) =>
            {
                Some(
                    table
                        .get(field)
                        .map_or(element.origin.clone(), |entry| entry.key_origin.clone()),
                )
            }
            _ => None,
        })
        .unwrap_or(Origin::Line(1))
}

struct RouteReader<'a> {
    table: &'a Table,
    header: &'a Origin,
    rooms: &'a [RoomConfig],
    rules: &'a [RateLimitRule],
}

impl RouteReader<'_> {
    fn read(&self, number: usize, problems: &mut Problems) -> Option<RouteConfig> {
        problems.unknown_keys(self.table, ROUTE_KEYS, "[[route]]");
        let before = problems.list.len();
        let name = self.read_name(number, problems);
        let label = format!("route {name:?}");
        let mut matcher = self.read_matcher(&label, problems);
        self.read_case(&mut matcher, &label, problems);
        let rooms = self.read_rooms(&label, problems);
        let rate_limits = self.read_rate_limits(&label, problems);
        let bypass = self.read_bypass(&label, problems);
        let page = self.read_page(&label, problems);
        (problems.list.len() == before).then_some(RouteConfig {
            name,
            matcher,
            rooms,
            rate_limits,
            bypass,
            page,
        })
    }

    /// `name`, `route-<number>` if absent; empty when wrong (reported).
    fn read_name(&self, number: usize, problems: &mut Problems) -> String {
        let Some(entry) = self.table.get("name") else {
            return format!("route-{number}");
        };
        match entry.string(problems) {
            Some(name) if crate::ratelimit::rules::is_valid_rule_name(&name) => name,
            Some(name) => {
                problems.add(
                    &entry.key_origin,
                    format!(
                        "invalid route name {name:?}: use 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit"
                    ),
                );
                String::new()
            }
            None => String::new(),
        }
    }

    /// `hosts`, `paths` and `methods`.
    fn read_matcher(&self, label: &str, problems: &mut Problems) -> RequestMatcher {
        let mut matcher = RequestMatcher::default();
        for field in [
            MatcherField::Hosts,
            MatcherField::Paths,
            MatcherField::Methods,
        ] {
            let Some(entry) = self.table.get(field.key()) else {
                continue;
            };
            for (text, origin) in entry.strings(problems).unwrap_or_default() {
                if let Err(error) = matcher.add(field, &text) {
                    let key = field.key();
                    problems.add(&origin, format!("{label}: {key}: {error}"));
                }
            }
        }
        matcher
    }

    fn read_rooms(&self, label: &str, problems: &mut Problems) -> Vec<RoomId> {
        let mut rooms = Vec::new();
        let Some(entry) = self.table.get("rooms") else {
            return rooms;
        };
        for (text, origin) in entry.strings(problems).unwrap_or_default() {
            match RoomId::new(&text) {
                Err(error) => problems.add(&origin, format!("{label}: rooms: {error}")),
                Ok(id) if rooms.contains(&id) => problems.add(
                    &origin,
                    format!("{label}: rooms: lists {text:?} more than once"),
                ),
                Ok(id) if !self.rooms.iter().any(|room| room.id == id) => {
                    let mut message = format!("{label}: rooms: unknown room {text:?}");
                    let ids = self.rooms.iter().map(|room| room.id.as_str());
                    if let Some(suggestion) = closest(&text, ids) {
                        message.push_str(&format!("; did you mean {suggestion:?}?"));
                    }
                    problems.add(&origin, message);
                }
                Ok(id) => rooms.push(id),
            }
        }
        rooms
    }

    fn read_rate_limits(&self, label: &str, problems: &mut Problems) -> Vec<String> {
        let mut rate_limits = Vec::new();
        let Some(entry) = self.table.get("rate_limits") else {
            return rate_limits;
        };
        for (text, origin) in entry.strings(problems).unwrap_or_default() {
            match self.rules.iter().find(|rule| rule.name == text) {
                None => {
                    let mut message = format!("{label}: rate_limits: unknown rate limit {text:?}");
                    let names = self.rules.iter().map(|rule| rule.name.as_str());
                    if let Some(suggestion) = closest(&text, names) {
                        message.push_str(&format!("; did you mean {suggestion:?}?"));
                    }
                    problems.add(&origin, message);
                }
                Some(_) if rate_limits.contains(&text) => problems.add(
                    &origin,
                    format!("{label}: rate_limits: lists {text:?} more than once"),
                ),
                Some(_) => rate_limits.push(text),
            }
        }
        rate_limits
    }

    /// `bypass`, and whether the route does anything: a route bypasses, or names rooms or
    /// rate limits, not both.
    fn read_bypass(&self, label: &str, problems: &mut Problems) -> bool {
        let bypass_entry = self.table.get("bypass");
        let bypass = bypass_entry
            .and_then(|entry| entry.boolean(problems))
            .unwrap_or(false);
        let guards = self.table.get("rooms").is_some() || self.table.get("rate_limits").is_some();
        if let Some(entry) = bypass_entry.filter(|_| bypass) {
            if guards {
                problems.add(
                    &entry.key_origin,
                    format!(
                        "{label}: `bypass = true` lets requests through untouched, so it cannot be combined with `rooms` or `rate_limits`"
                    ),
                );
            }
        } else if !guards {
            problems.add(
                self.header,
                format!("{label}: needs `rooms`, `rate_limits` or `bypass = true`"),
            );
        }
        bypass
    }

    fn read_page(&self, label: &str, problems: &mut Problems) -> PageMode {
        let Some(entry) = self.table.get("page") else {
            return PageMode::Inline;
        };
        match entry.string(problems).as_deref() {
            Some("inline") | None => PageMode::Inline,
            Some("redirect") => PageMode::Redirect,
            Some(other) => {
                let mut message = format!(
                    "{label}: page: unknown page {other:?}: expected one of inline, redirect"
                );
                if let Some(suggestion) = closest(other, ["inline", "redirect"].into_iter()) {
                    message.push_str(&format!("; did you mean {suggestion:?}?"));
                }
                problems.add(&entry.key_origin, message);
                PageMode::Inline
            }
        }
    }
}

impl RouteReader<'_> {
    /// `case_insensitive = true`: the route's path globs match in any ASCII case (SPEC
    /// §14.3), for origins that read paths so (IIS, Express by default).
    fn read_case(&self, matcher: &mut RequestMatcher, label: &str, problems: &mut Problems) {
        let Some(entry) = self.table.get("case_insensitive") else {
            return;
        };
        if entry.boolean(problems) != Some(true) {
            return;
        }
        if matcher.paths.is_empty() {
            problems.add(
                &entry.key_origin,
                format!("{label}: `case_insensitive` applies to `paths`, and the route has none"),
            );
        }
        let globs = std::mem::take(&mut matcher.paths);
        matcher.paths = globs
            .into_iter()
            .map(PathGlob::ignoring_ascii_case)
            .collect();
    }
}

pub(super) fn read_websocket(
    section: Option<&Entry>,
    problems: &mut Problems,
) -> Option<WebSocketConfig> {
    let entry = section?;
    let table = entry.table(problems)?;
    problems.unknown_keys(table, WEBSOCKET_KEYS, "[websocket]");
    let mut config = WebSocketConfig::default();
    if let Some(entry) = table.get("on_exceed") {
        match entry.string(problems).as_deref() {
            Some("drop") => config.on_exceed = OnExceed::Drop,
            Some("close") => config.on_exceed = OnExceed::Close,
            Some(other) => problems.add(
                &entry.key_origin,
                format!("unknown on_exceed {other:?}: expected one of drop, close"),
            ),
            None => {}
        }
    }
    if let Some(entry) = table.get("max_message_size") {
        match read_size(entry, problems) {
            Some(Some(bytes)) => config.max_message_size = usize::try_from(bytes).unwrap_or(usize::MAX),
            Some(None) => problems.add(
                &entry.key_origin,
                "`max_message_size` must be more than zero: an unbounded message size lets one client exhaust memory",
            ),
            None => {}
        }
    }
    let limit = table.get("limit");
    let period = table.get("period");
    match (limit, period) {
        (None, None) => {
            for key in ["burst", "algorithm"] {
                if let Some(entry) = table.get(key) {
                    problems.add(
                        &entry.key_origin,
                        format!("`{key}` needs `limit` and `period` in [websocket]"),
                    );
                }
            }
        }
        (Some(_), None) | (None, Some(_)) => problems.add(
            &entry.key_origin,
            "[websocket] needs both `limit` and `period` (messages per period), such as limit = 20, period = \"1s\"",
        ),
        (Some(limit), Some(period)) => {
            config.limit = read_message_limit(table, limit, period, problems);
        }
    }
    Some(config)
}

fn read_message_limit(
    table: &Table,
    limit_entry: &Entry,
    period_entry: &Entry,
    problems: &mut Problems,
) -> Option<LimitParams> {
    let limit = match limit_entry.unsigned(problems)? {
        0 => {
            problems.add(&limit_entry.key_origin, "`limit` must be at least 1");
            return None;
        }
        limit => limit,
    };
    let period = read_positive_duration(period_entry, problems)?;
    let algorithm = match table.get("algorithm") {
        None => Algorithm::TokenBucket,
        Some(entry) => {
            let text = entry.string(problems)?;
            parse_algorithm(&text)
                .map_err(|message| problems.add(&entry.key_origin, message))
                .ok()?
        }
    };
    let burst = read_message_burst(table, algorithm, limit, problems)?;
    let params = LimitParams {
        algorithm,
        limit,
        period,
        burst,
        delay: 0,
        // Messages are never held back: within the burst they pass at once.
        nodelay: algorithm == Algorithm::LeakyBucket,
    };
    match params.validate() {
        Ok(()) => Some(params),
        Err(error) => {
            problems.add(&limit_entry.key_origin, format!("[websocket]: {error}"));
            None
        }
    }
}

/// `burst` of `[websocket]`: only for the bucket algorithms, at least 1 but for the leaky one.
fn read_message_burst(
    table: &Table,
    algorithm: Algorithm,
    limit: u64,
    problems: &mut Problems,
) -> Option<u64> {
    let Some(entry) = table.get("burst") else {
        return Some(default_burst(algorithm, limit));
    };
    let burst = entry.unsigned(problems)?;
    let window = matches!(
        algorithm,
        Algorithm::FixedWindow | Algorithm::SlidingLog | Algorithm::SlidingWindow
    );
    if window {
        problems.add(
            &entry.key_origin,
            format!(
                "`burst` does not apply to the {} algorithm, which allows `limit` per `period`; remove it",
                algorithm.as_str()
            ),
        );
        return None;
    }
    if burst == 0 && algorithm != Algorithm::LeakyBucket {
        problems.add(&entry.key_origin, "`burst` must be at least 1");
        return None;
    }
    Some(burst)
}
