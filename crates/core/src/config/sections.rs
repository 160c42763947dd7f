//! The server-wide sections of the config file: `[server]`, `[store]`, `[keys]` and `[auth]`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::node_sections::{
    AuthConfig, DEFAULT_REDIS_TIMEOUT, HttpEngine, KeysConfig, MAX_REDIS_TIMEOUT,
    MIN_CHECKPOINT_BYTES, MIN_REDIS_TIMEOUT, SIGNING_ALGORITHMS, ServerConfig, SharedKeysConfig,
    SseLimits, StoreConfig,
};
use super::tree::{Entry, Origin, Problems, Table, Value, closest};
use super::{Cidr, KeyHash};
use crate::duration::parse_duration;

const SERVER_KEYS: &[&str] = &[
    "join_rate_limit",
    "listen",
    "admin_listen",
    "public_url",
    "issuer",
    "trusted_proxies",
    "workers",
    "templates_dir",
    "sse_max_streams",
    "sse_max_streams_per_ticket",
    "sse_max_streams_per_ip",
    "max_once_marks",
    "http_engine",
    "tls",
    "header_timeout",
    "body_timeout",
    "idle_timeout",
    "write_timeout",
    "drain_timeout",
    "max_connections",
    "max_connections_per_address",
    "tick_interval",
    "sse_touch_interval",
];
const STORE_KEYS: &[&str] = &[
    "backend",
    "path",
    "checkpoint_bytes",
    "url",
    "cluster",
    "timeout",
];
const STORE_BACKENDS: &[&str] = &["embedded", "memory", "redis"];
const KEYS_KEYS: &[&str] = &[
    "dir",
    "algorithm",
    "ticket_secret_retention",
    "storage",
    "kek_file",
];
const AUTH_KEYS: &[&str] = &["admin_keys", "read_keys", "service_keys"];

pub(super) fn read_server(section: Option<&Entry>, problems: &mut Problems) -> ServerConfig {
    let defaults = ServerConfig::default();
    let Some(table) = section.and_then(|entry| entry.table(problems)) else {
        return defaults;
    };
    problems.unknown_keys(table, SERVER_KEYS, "[server]");
    let listen = read_socket_address(table, "listen", defaults.listen, problems);
    let admin_listen = read_socket_address(table, "admin_listen", defaults.admin_listen, problems);
    let public_url = read_public_url(table, defaults.public_url, problems);
    let issuer = read_issuer(table, &public_url, problems);
    let trusted_proxies = read_trusted_proxies(table, problems);
    let workers = read_workers(table, problems);
    let templates_dir = read_templates_dir(table, problems);
    let sse = SseLimits {
        max_streams: read_count(table, "sse_max_streams", defaults.sse.max_streams, problems),
        per_ticket: read_count(
            table,
            "sse_max_streams_per_ticket",
            defaults.sse.per_ticket,
            problems,
        ),
        per_ip: read_count(
            table,
            "sse_max_streams_per_ip",
            defaults.sse.per_ip,
            problems,
        ),
    };
    let max_once_marks = read_count(table, "max_once_marks", defaults.max_once_marks, problems);
    let http_engine = read_http_engine(table, problems);
    let tls = table
        .get("tls")
        .and_then(|entry| super::tls::read_tls(entry, problems));
    let connections = super::connection_limits::read(table, problems);
    let ticker = super::ticker_intervals::read(table, problems);
    ServerConfig {
        listen,
        admin_listen,
        public_url,
        issuer,
        trusted_proxies,
        workers,
        templates_dir,
        sse,
        max_once_marks,
        http_engine,
        tls,
        connections,
        ticker,
    }
}

fn read_socket_address(
    table: &Table,
    key: &str,
    default: SocketAddr,
    problems: &mut Problems,
) -> SocketAddr {
    let Some(entry) = table.get(key) else {
        return default;
    };
    let Some(text) = entry.string(problems) else {
        return default;
    };
    text.trim().parse().unwrap_or_else(|_| {
        let message = format!(
            "invalid socket address {text:?} for `{key}`: expected an IP address and port, such as \"0.0.0.0:8080\" or \"[::]:8080\""
        );
        problems.add(&entry.key_origin, message);
        default
    })
}

fn read_public_url(table: &Table, default: String, problems: &mut Problems) -> String {
    let Some(entry) = table.get("public_url") else {
        return default;
    };
    let Some(text) = entry.string(problems) else {
        return default;
    };
    match check_http_url(&text) {
        Ok(()) => text.trim_end_matches('/').to_owned(),
        Err(reason) => {
            problems.add(&entry.key_origin, format!("`public_url` {reason}"));
            default
        }
    }
}

/// `issuer`, the public URL unless set.
fn read_issuer(table: &Table, public_url: &str, problems: &mut Problems) -> String {
    let Some(entry) = table.get("issuer") else {
        return public_url.to_owned();
    };
    match entry.string(problems) {
        Some(text) if text.trim().is_empty() => {
            problems.add(&entry.key_origin, "`issuer` must not be empty");
            public_url.to_owned()
        }
        Some(text) => text,
        None => public_url.to_owned(),
    }
}

fn read_trusted_proxies(table: &Table, problems: &mut Problems) -> Vec<Cidr> {
    table
        .get("trusted_proxies")
        .and_then(|entry| entry.strings(problems))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(text, origin)| {
            text.trim()
                .parse::<Cidr>()
                .map_err(|error| problems.add(&origin, error))
                .ok()
        })
        .collect()
}

fn read_workers(table: &Table, problems: &mut Problems) -> Option<usize> {
    let entry = table.get("workers")?;
    let count = entry.unsigned(problems)?;
    if (1..=MAX_WORKERS).contains(&count) {
        usize::try_from(count).ok()
    } else {
        problems.add(
            &entry.key_origin,
            format!("`workers` must be between 1 and {MAX_WORKERS}, found {count}"),
        );
        None
    }
}

fn read_templates_dir(table: &Table, problems: &mut Problems) -> Option<PathBuf> {
    let entry = table.get("templates_dir")?;
    match entry.string(problems) {
        Some(text) if text.trim().is_empty() => {
            problems.add(&entry.key_origin, "`templates_dir` must not be empty");
            None
        }
        text => text.map(PathBuf::from),
    }
}

/// A bound of `[server]`: from 1 to [`MAX_COUNT`].
fn read_count(table: &Table, key: &str, default: usize, problems: &mut Problems) -> usize {
    let Some(entry) = table.get(key) else {
        return default;
    };
    match entry.unsigned(problems) {
        Some(count) if (1..=MAX_COUNT).contains(&count) => {
            usize::try_from(count).unwrap_or(default)
        }
        Some(count) => {
            problems.add(
                &entry.key_origin,
                format!("`{key}` must be between 1 and {MAX_COUNT}, found {count}"),
            );
            default
        }
        None => default,
    }
}

fn read_http_engine(table: &Table, problems: &mut Problems) -> HttpEngine {
    table
        .get("http_engine")
        .and_then(|entry| {
            let text = entry.string(problems)?;
            let engine = HttpEngine::parse(&text);
            if engine.is_none() {
                problems.add(
                    &entry.key_origin,
                    format!("unknown `http_engine` {text:?}: expected \"own\" or \"hyper\""),
                );
            }
            engine
        })
        .unwrap_or_default()
}

/// The largest count a `[server]` bound may ask for.
const MAX_COUNT: u64 = 100_000_000;

/// The most serving threads `[server] workers` may ask for.
const MAX_WORKERS: u64 = 1024;

/// `[server] join_rate_limit`: whether the built-in per-IP join limit applies [true].
pub(super) fn join_rate_limit(section: Option<&Entry>, problems: &mut Problems) -> bool {
    section
        .and_then(|entry| match &entry.item.value {
            Value::Table(table) => table.get("join_rate_limit"),
            _ => None,
        })
        .and_then(|entry| entry.boolean(problems))
        .unwrap_or(true)
}

/// Checks that `url` is an absolute `http://` or `https://` URL with a host.
fn check_http_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let Some(rest) = rest else {
        return Err(format!(
            "must start with http:// or https://, found {url:?}"
        ));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || url.chars().any(char::is_whitespace) {
        return Err(format!(
            "must be a URL with a host and no spaces, found {url:?}"
        ));
    }
    Ok(())
}

pub(super) fn read_store(section: Option<&Entry>, problems: &mut Problems) -> StoreConfig {
    let defaults = StoreConfig::default();
    let Some(table) = section.and_then(|entry| entry.table(problems)) else {
        return defaults;
    };
    problems.unknown_keys(table, STORE_KEYS, "[store]");
    let Some(backend) = read_backend(table, problems) else {
        return defaults;
    };
    refuse_other_backends_keys(table, &backend, problems);
    match backend.as_str() {
        "memory" => StoreConfig::Memory,
        "redis" => read_redis(table, section, problems).unwrap_or(defaults),
        _ => read_embedded(table, defaults, problems),
    }
}

/// `backend`, `embedded` unless set; `None` for one this version does not know.
fn read_backend(table: &Table, problems: &mut Problems) -> Option<String> {
    let Some(entry) = table.get("backend") else {
        return Some("embedded".to_owned());
    };
    entry.string(problems).filter(|backend| {
        let known = STORE_BACKENDS.contains(&backend.as_str());
        if !known {
            let mut message = format!(
                "unknown store backend {backend:?}: expected one of {}",
                STORE_BACKENDS.join(", ")
            );
            if let Some(suggestion) = closest(backend, STORE_BACKENDS.iter().copied()) {
                message.push_str(&format!("; did you mean {suggestion:?}?"));
            }
            problems.add(&entry.key_origin, message);
        }
        known
    })
}

/// Keys of another backend are a mistake in a file, but not when the environment switched
/// the backend (a file for production, ANTEROOM_STORE__BACKEND=memory for a test run).
fn refuse_other_backends_keys(table: &Table, backend: &str, problems: &mut Problems) {
    let backend_from_env = table
        .get("backend")
        .is_some_and(|entry| entry.item.origin.is_env());
    if backend_from_env {
        return;
    }
    let used_keys: &[&str] = match backend {
        "embedded" => &["path", "checkpoint_bytes"],
        "redis" => &["url", "cluster", "timeout"],
        _ => &[],
    };
    for key in ["path", "checkpoint_bytes", "url", "cluster", "timeout"]
        .into_iter()
        .filter(|key| !used_keys.contains(key))
    {
        if let Some(entry) = table.get(key) {
            let message = format!("`{key}` does not apply to the {backend:?} store backend");
            problems.add(&entry.key_origin, message);
        }
    }
}

fn read_embedded(table: &Table, defaults: StoreConfig, problems: &mut Problems) -> StoreConfig {
    let StoreConfig::Embedded {
        path: default_path,
        checkpoint_bytes: default_checkpoint_bytes,
    } = defaults
    else {
        return defaults;
    };
    let path = match table
        .get("path")
        .map(|entry| (entry, entry.string(problems)))
    {
        None | Some((_, None)) => default_path,
        Some((entry, Some(path))) if path.is_empty() => {
            problems.add(&entry.key_origin, "`path` must not be empty");
            default_path
        }
        Some((_, Some(path))) => PathBuf::from(path),
    };
    let checkpoint_bytes = match table
        .get("checkpoint_bytes")
        .map(|entry| (entry, entry.unsigned(problems)))
    {
        None | Some((_, None)) => default_checkpoint_bytes,
        Some((entry, Some(bytes))) if bytes < MIN_CHECKPOINT_BYTES => {
            problems.add(
                &entry.key_origin,
                format!(
                    "`checkpoint_bytes` must be at least {MIN_CHECKPOINT_BYTES}, found {bytes}"
                ),
            );
            default_checkpoint_bytes
        }
        Some((_, Some(bytes))) => bytes,
    };
    StoreConfig::Embedded {
        path,
        checkpoint_bytes,
    }
}

fn read_redis(
    table: &super::tree::Table,
    section: Option<&Entry>,
    problems: &mut Problems,
) -> Option<StoreConfig> {
    let (urls, cluster) = match (table.get("url"), table.get("cluster")) {
        (Some(url), None) => (vec![(url.string(problems)?, url.key_origin.clone())], false),
        (None, Some(cluster)) => {
            let urls = cluster.strings(problems)?;
            if urls.is_empty() {
                problems.add(
                    &cluster.key_origin,
                    "`cluster` must list at least one node URL",
                );
                return None;
            }
            (urls, true)
        }
        (Some(url), Some(_)) => {
            problems.add(
                &url.key_origin,
                "the redis store takes either `url` (standalone) or `cluster` (Redis Cluster), not both",
            );
            return None;
        }
        (None, None) => {
            let origin = section.map_or(Origin::Line(1), |entry| entry.key_origin.clone());
            problems.add(
                &origin,
                "the redis store needs `url = \"redis://…\"` (standalone) or `cluster = [\"redis://…\", …]`",
            );
            return None;
        }
    };
    let mut valid = true;
    for (url, origin) in &urls {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            problems.add(
                origin,
                format!("redis URL must start with redis:// or rediss://, found {url:?}"),
            );
            valid = false;
        }
    }
    let mut timeout = DEFAULT_REDIS_TIMEOUT;
    if let Some(entry) = table.get("timeout") {
        match read_duration(entry, problems) {
            Some(read) if (MIN_REDIS_TIMEOUT..=MAX_REDIS_TIMEOUT).contains(&read) => timeout = read,
            Some(read) => {
                problems.add(
                    &entry.key_origin,
                    format!(
                        "`timeout` must be between {} ms and {} s, found {} ms",
                        MIN_REDIS_TIMEOUT.as_millis(),
                        MAX_REDIS_TIMEOUT.as_secs(),
                        read.as_millis()
                    ),
                );
                valid = false;
            }
            None => valid = false,
        }
    }
    valid.then(|| StoreConfig::Redis {
        urls: urls.into_iter().map(|(url, _)| url).collect(),
        cluster,
        timeout,
    })
}

pub(super) fn read_keys(
    section: Option<&Entry>,
    store: &StoreConfig,
    problems: &mut Problems,
) -> KeysConfig {
    let defaults = KeysConfig::default();
    let Some(table) = section.and_then(|entry| entry.table(problems)) else {
        return defaults;
    };
    problems.unknown_keys(table, KEYS_KEYS, "[keys]");
    let dir = match table
        .get("dir")
        .map(|entry| (entry, entry.string(problems)))
    {
        None | Some((_, None)) => defaults.dir,
        Some((entry, Some(dir))) if dir.is_empty() => {
            problems.add(&entry.key_origin, "`dir` must not be empty");
            defaults.dir
        }
        Some((_, Some(dir))) => PathBuf::from(dir),
    };
    let algorithm = match table
        .get("algorithm")
        .map(|entry| (entry, entry.string(problems)))
    {
        None | Some((_, None)) => defaults.algorithm,
        Some((_, Some(algorithm))) if SIGNING_ALGORITHMS.contains(&algorithm.as_str()) => algorithm,
        Some((entry, Some(algorithm))) => {
            let mut message = format!(
                "unknown signing algorithm {algorithm:?}: expected one of {}",
                SIGNING_ALGORITHMS.join(", ")
            );
            if let Some(suggestion) = closest(&algorithm, SIGNING_ALGORITHMS.iter().copied()) {
                message.push_str(&format!("; did you mean {suggestion:?}?"));
            }
            problems.add(&entry.key_origin, message);
            defaults.algorithm
        }
    };
    let ticket_secret_retention = table
        .get("ticket_secret_retention")
        .and_then(|entry| read_duration(entry, problems))
        .unwrap_or(defaults.ticket_secret_retention);
    KeysConfig {
        dir,
        algorithm,
        ticket_secret_retention,
        shared: read_shared_keys(table, store, problems),
    }
}

/// `storage` and `kek_file`: keys in the store's Redis need a key-encryption key, and a
/// key-encryption key means nothing for a directory.
fn read_shared_keys(
    table: &Table,
    store: &StoreConfig,
    problems: &mut Problems,
) -> Option<SharedKeysConfig> {
    let storage = table
        .get("storage")
        .and_then(|entry| Some((entry, entry.string(problems)?)));
    let kek_file = table
        .get("kek_file")
        .and_then(|entry| Some((entry, entry.string(problems)?)));
    let in_redis = match storage {
        None => None,
        Some((_, storage)) if storage == "dir" => None,
        Some((entry, storage)) if storage == "redis" => Some(entry),
        Some((entry, storage)) => {
            problems.add(
                &entry.key_origin,
                format!("`storage` must be \"dir\" or \"redis\", found {storage:?}"),
            );
            return None;
        }
    };
    match (in_redis, kek_file) {
        (None, None) => None,
        (None, Some((entry, _))) => {
            problems.add(
                &entry.key_origin,
                "`kek_file` is only for `storage = \"redis\"` (keys in a directory are not sealed)",
            );
            None
        }
        (Some(entry), None) => {
            problems.add(
                &entry.key_origin,
                "`storage = \"redis\"` needs `kek_file`, the file holding the 32-byte key-encryption key that seals the keys in Redis",
            );
            None
        }
        (Some(storage), Some((entry, kek_file))) => {
            if !matches!(store, StoreConfig::Redis { .. }) {
                problems.add(
                    &storage.key_origin,
                    "`storage = \"redis\"` keeps the keys in the `[store]` Redis: it needs `[store] backend = \"redis\"`",
                );
                return None;
            }
            if kek_file.is_empty() {
                problems.add(&entry.key_origin, "`kek_file` must not be empty");
                return None;
            }
            Some(SharedKeysConfig {
                kek_file: PathBuf::from(kek_file),
            })
        }
    }
}

/// A duration such as `"24h"`; zero is allowed.
fn read_duration(entry: &Entry, problems: &mut Problems) -> Option<Duration> {
    let text = entry.duration_text(problems)?;
    parse_duration(&text)
        .map_err(|error| problems.add(&entry.key_origin, format!("`{}`: {error}", entry.key)))
        .ok()
}

pub(super) fn read_auth(section: Option<&Entry>, problems: &mut Problems) -> AuthConfig {
    let Some(table) = section.and_then(|entry| entry.table(problems)) else {
        return AuthConfig::default();
    };
    problems.unknown_keys(table, AUTH_KEYS, "[auth]");
    let mut hashes = |key: &str| -> Vec<KeyHash> {
        let Some(entry) = table.get(key) else {
            return Vec::new();
        };
        // A wrong type is reported without the value: it may be a key written by mistake.
        let is_list = match &entry.item.value {
            Value::Array(_) => true,
            Value::String(_) => entry.item.origin.is_env(),
            _ => false,
        };
        if !is_list {
            let message = format!("`{key}` must be an array of \"sha256:<hex>\" strings");
            problems.add(&entry.key_origin, message);
            return Vec::new();
        }
        let texts = entry.strings(problems).unwrap_or_default();
        texts
            .into_iter()
            .filter_map(|(text, origin)| {
                text.trim()
                    .parse::<KeyHash>()
                    .map_err(|error| problems.add(&origin, error))
                    .ok()
            })
            .collect()
    };
    AuthConfig {
        admin_keys: hashes("admin_keys"),
        read_keys: hashes("read_keys"),
        service_keys: hashes("service_keys"),
    }
}
