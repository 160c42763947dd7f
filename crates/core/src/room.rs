//! A room's configuration (SPEC §3): its limits, lifetimes and modes, in resolved typed form.
//!
//! The config file and the admin API both produce a [`RoomConfig`]; the engine only ever sees
//! this validated form.

use std::time::Duration;

use crate::adaptive::AdaptiveSettings;
use crate::challenge::ProofOfWork;
use crate::config::KeyHash;
use crate::ids::RoomId;

/// How a room treats visitors (SPEC §3 `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Always on: admit at once while nobody waits and limits allow, otherwise queue.
    Queue,
    /// Everyone queues and admission stops (the operator's emergency brake).
    QueueAll,
    /// Observe only: sessions are counted, nobody waits.
    Passthrough,
    /// Joins are refused and protected routes answer 503.
    Closed,
}

impl Mode {
    /// The config spelling of this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Queue => "queue",
            Mode::QueueAll => "queue_all",
            Mode::Passthrough => "passthrough",
            Mode::Closed => "closed",
        }
    }

    /// Reads the config spelling of a mode.
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "queue" => Some(Mode::Queue),
            "queue_all" => Some(Mode::QueueAll),
            "passthrough" => Some(Mode::Passthrough),
            "closed" => Some(Mode::Closed),
            _ => None,
        }
    }
}

/// In which order waiting tickets are admitted (SPEC §3 `order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Lowest position first.
    Fifo,
    /// Uniformly at random among the waiting tickets.
    Random,
}

impl Order {
    /// The config spelling of this order.
    pub fn as_str(self) -> &'static str {
        match self {
            Order::Fifo => "fifo",
            Order::Random => "random",
        }
    }

    /// Reads the config spelling of an order.
    pub fn parse(text: &str) -> Option<Order> {
        match text {
            "fifo" => Some(Order::Fifo),
            "random" => Some(Order::Random),
            _ => None,
        }
    }
}

/// Where a visitor's identity comes from (SPEC §3 `identity`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// No identity: every join is a new ticket unless the visitor presents one.
    Anonymous,
    /// A request header carries the identity (set by a trusted front end).
    Header(String),
    /// A claim of the site's own JWT carries the identity.
    JwtClaim(String),
}

impl Identity {
    /// The config spelling: `anonymous`, `header:<name>` or `jwt:<claim>`.
    pub fn to_config_string(&self) -> String {
        match self {
            Identity::Anonymous => "anonymous".to_owned(),
            Identity::Header(name) => format!("header:{name}"),
            Identity::JwtClaim(claim) => format!("jwt:{claim}"),
        }
    }

    /// Reads the config spelling.
    pub fn parse(text: &str) -> Option<Identity> {
        if text == "anonymous" {
            return Some(Identity::Anonymous);
        }
        if let Some(name) = text.strip_prefix("header:") {
            return (!name.is_empty()).then(|| Identity::Header(name.to_owned()));
        }
        if let Some(claim) = text.strip_prefix("jwt:") {
            return (!claim.is_empty()).then(|| Identity::JwtClaim(claim.to_owned()));
        }
        None
    }
}

/// What a room does when its store cannot be reached (SPEC §9.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreErrorPolicy {
    /// Let protected traffic through without a pass.
    Open,
    /// Answer 503 with the "temporarily unavailable" page.
    Closed,
}

impl StoreErrorPolicy {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreErrorPolicy::Open => "open",
            StoreErrorPolicy::Closed => "closed",
        }
    }

    /// Reads the config spelling.
    pub fn parse(text: &str) -> Option<StoreErrorPolicy> {
        match text {
            "open" => Some(StoreErrorPolicy::Open),
            "closed" => Some(StoreErrorPolicy::Closed),
            _ => None,
        }
    }
}

/// A room's validated configuration (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomConfig {
    /// The room's id.
    pub id: RoomId,
    /// Path globs this room protects (shorthand routes, §7.1).
    pub routes: Vec<String>,
    /// Concurrent active sessions allowed; 0 = unlimited.
    pub max_active: u64,
    /// New admissions per minute; 0 = unlimited.
    pub admit_per_minute: u64,
    /// Admission token-bucket capacity.
    pub admit_burst: u64,
    /// Idle lifetime of a pass, renewed by activity.
    pub session_ttl: Duration,
    /// Absolute cap on one session.
    pub session_max: Option<Duration>,
    /// How long an admitted ticket has to claim its pass.
    pub claim_ttl: Duration,
    /// A waiting ticket with no contact for this long is abandoned.
    pub ticket_idle_ttl: Duration,
    /// How the room treats visitors.
    pub mode: Mode,
    /// Admission order.
    pub order: Order,
    /// Where a visitor's identity comes from.
    pub identity: Identity,
    /// Rooms whose valid pass is needed first.
    pub requires: Vec<RoomId>,
    /// Path of a custom waiting page template; empty for the built-in page.
    pub page_template: String,
    /// Behaviour when the store is unreachable.
    pub on_store_error: StoreErrorPolicy,
    /// The room as an OpenID Connect client (SPEC §11); `None` when the room takes no OIDC
    /// requests.
    pub oidc: Option<OidcClient>,
    /// `[room.adaptive]`: the controller that sets `admit_per_minute` (§5.4); none if absent.
    pub adaptive: Option<AdaptiveSettings>,
    /// `challenge`: the proof of work asked for before a join (§12); none if absent.
    pub challenge: Option<ProofOfWork>,
}

/// A room as an OpenID Connect client (SPEC §11, `[room.oidc]`): the room id is the client id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcClient {
    /// SHA-256 of the client secret; `None` for a public client, which must use PKCE.
    pub client_secret: Option<KeyHash>,
    /// The redirect URIs a request may name, compared exactly.
    pub redirect_uris: Vec<String>,
    /// How long an authorization code can be redeemed, at most [`MAX_CODE_TTL`].
    pub code_ttl: Duration,
}

/// The longest lifetime of an authorization code, and the default.
pub const MAX_CODE_TTL: Duration = Duration::from_secs(60);

impl RoomConfig {
    /// A room with every field at its documented default.
    pub fn with_defaults(id: RoomId) -> RoomConfig {
        RoomConfig {
            id,
            routes: Vec::new(),
            max_active: 0,
            admit_per_minute: 0,
            admit_burst: default_admit_burst(0),
            session_ttl: Duration::from_secs(600),
            session_max: None,
            claim_ttl: Duration::from_secs(120),
            ticket_idle_ttl: Duration::from_secs(300),
            mode: Mode::Queue,
            order: Order::Fifo,
            identity: Identity::Anonymous,
            requires: Vec::new(),
            page_template: String::new(),
            on_store_error: StoreErrorPolicy::Open,
            oidc: None,
            adaptive: None,
            challenge: None,
        }
    }
}

/// The default `admit_burst`: a second's worth of admissions, at least 1.
pub fn default_admit_burst(admit_per_minute: u64) -> u64 {
    (admit_per_minute / 60).max(1)
}
