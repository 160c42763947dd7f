//! The node-wide sections as validated: `[server]`, `[store]`, `[keys]` and `[auth]` (read by
//! `sections.rs`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::connection_limits::ConnectionLimits;
use super::ticker_intervals::TickerIntervals;
use super::tls::TlsConfig;
use crate::cidr::Cidr;
use crate::key_hash::KeyHash;

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
        /// `timeout`: how long one call to Redis may take, connecting included, before it
        /// fails (and the room follows its `on_store_error`).
        timeout: Duration,
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

/// The default `[store] timeout` of the Redis store: long enough for a Redis that a crowd keeps
/// busy (a join waits there behind its room's calls), short enough that a Redis gone quiet is
/// noticed within a visitor's patience.
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(2);
/// The shortest `[store] timeout` accepted: below it a loaded Redis fails calls it answers.
pub const MIN_REDIS_TIMEOUT: Duration = Duration::from_millis(10);
/// The longest `[store] timeout` accepted: every request waiting on Redis holds its
/// connection that long.
pub const MAX_REDIS_TIMEOUT: Duration = Duration::from_secs(60);

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
