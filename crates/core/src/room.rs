//! A room's configuration (SPEC §3): its limits, lifetimes and modes, in resolved typed form.
//!
//! The config file and the admin API both produce a [`RoomConfig`]; the engine only ever sees
//! this validated form.
//!
//! A room's [`Schedule`] (SPEC §5.3) holds events (`prequeue_at`, `opens_at`, `closes_at`,
//! `shuffle`, limit overrides) and the `before` / `after` modes. [`RoomConfig::phase`],
//! [`RoomConfig::mode_at`] and [`RoomConfig::limits_at`] say what is in force at a given
//! time; the engine, the Redis scripts' prelude and the gateway all decide through them (or
//! their Lua copy), so the first operation after a boundary sees the new phase. Priority
//! access codes (SPEC §12) are kept as SHA-256 digests and compared in constant time.

use std::time::Duration;

use crate::adaptive::AdaptiveSettings;
use crate::challenge::ProofOfWork;
use crate::key_hash::KeyHash;
use sha2::Digest;

use crate::clock::Timestamp;
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
    /// A claim of the site's own JWT carries the identity (`identity = "jwt:<claim>"` with
    /// `[room.identity_jwt]`, SPEC §14.1).
    JwtClaim(Box<SiteJwt>),
}

impl Identity {
    /// The config spelling: `anonymous`, `header:<name>` or `jwt:<claim>`.
    pub fn to_config_string(&self) -> String {
        match self {
            Identity::Anonymous => "anonymous".to_owned(),
            Identity::Header(name) => format!("header:{name}"),
            Identity::JwtClaim(site) => format!("jwt:{}", site.claim),
        }
    }
}

/// How a room reads a visitor's identity from the site's own JWT (`[room.identity_jwt]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SiteJwt {
    /// The claim whose value is the identity, such as `sub`.
    pub claim: String,
    /// Where the request carries the token.
    pub token_in: TokenLocation,
    /// What the token's signature is checked with.
    pub keys: SiteKeys,
    /// The `iss` the token must carry.
    pub issuer: String,
    /// An `aud` the token must carry.
    pub audience: String,
    /// Without a valid token: refused when true, joined as anonymous when false.
    pub required: bool,
}

/// Where a request carries the site's token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TokenLocation {
    /// A cookie of this name.
    Cookie(String),
    /// A header of this name; `Authorization` holds it as `Bearer <token>`.
    Header(String),
}

/// What the site's tokens are verified with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SiteKeys {
    /// The site's public keys, fetched from this `http(s)://` URL and cached.
    JwksUrl(String),
    /// An HS256 secret, read from this file.
    Hs256SecretFile(std::path::PathBuf),
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
    /// How long ended tickets and sessions are kept for status answers, listings and audits,
    /// within [`MIN_HISTORY_RETENTION`] ..= [`MAX_HISTORY_RETENTION`].
    pub history_retention: Duration,
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
    /// Scheduled sales (SPEC §5.3); empty for an always-on room.
    pub schedule: Schedule,
    /// Priority access codes (SPEC §12); empty for none.
    pub priority: Vec<PriorityCodes>,
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

/// How long a room keeps ended tickets and sessions unless told otherwise.
pub const DEFAULT_HISTORY_RETENTION: Duration = Duration::from_secs(3600);

/// The shortest `history_retention`: an ended ticket's status stays answerable for a minute,
/// long enough for a page polling every few seconds to learn how its ticket ended.
pub const MIN_HISTORY_RETENTION: Duration = Duration::from_secs(60);

/// The longest `history_retention`: a week, as history is held in memory and in the store.
pub const MAX_HISTORY_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

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
            history_retention: DEFAULT_HISTORY_RETENTION,
            mode: Mode::Queue,
            order: Order::Fifo,
            identity: Identity::Anonymous,
            requires: Vec::new(),
            page_template: String::new(),
            on_store_error: StoreErrorPolicy::Open,
            oidc: None,
            adaptive: None,
            challenge: None,
            schedule: Schedule::default(),
            priority: Vec::new(),
        }
    }
}

/// The default `admit_burst`: a second's worth of admissions, at least 1.
pub fn default_admit_burst(admit_per_minute: u64) -> u64 {
    (admit_per_minute / 60).max(1)
}

/// What a scheduled room does outside its events (SPEC §5.3 `before`, `after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IdleMode {
    /// Protected routes pass through; joins are admitted at once.
    #[default]
    Passthrough,
    /// Protected routes answer 503 with the closed page; joins are refused.
    Closed,
}

impl IdleMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IdleMode::Passthrough => "passthrough",
            IdleMode::Closed => "closed",
        }
    }

    /// Reads the config spelling.
    pub fn parse(text: &str) -> Option<IdleMode> {
        match text {
            "passthrough" => Some(IdleMode::Passthrough),
            "closed" => Some(IdleMode::Closed),
            _ => None,
        }
    }

    /// The room mode this idle mode behaves as.
    pub fn mode(self) -> Mode {
        match self {
            IdleMode::Passthrough => Mode::Passthrough,
            IdleMode::Closed => Mode::Closed,
        }
    }
}

/// The admission limits in force at one moment: the room's own, or an event's overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Concurrent active sessions allowed; 0 = unlimited.
    pub max_active: u64,
    /// New admissions per minute; 0 = unlimited.
    pub admit_per_minute: u64,
    /// Admission token-bucket capacity.
    pub admit_burst: u64,
}

/// One scheduled sale (SPEC §5.3 `[[room.schedule]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// From here visitors join, but nobody is admitted.
    pub prequeue_at: Timestamp,
    /// Admission starts here; with `shuffle`, the pre-queue cohort is drawn in random order.
    pub opens_at: Timestamp,
    /// After this the room follows its `after` mode (or waits for the next event).
    pub closes_at: Timestamp,
    /// Whether the pre-queue cohort is put in a random order at `opens_at` (a lottery).
    pub shuffle: bool,
    /// `max_active` while the event is open, instead of the room's.
    pub max_active: Option<u64>,
    /// `admit_per_minute` while the event is open, instead of the room's.
    pub admit_per_minute: Option<u64>,
    /// `admit_burst` while the event is open, instead of the room's.
    pub admit_burst: Option<u64>,
}

/// A room's events in time order, and what it does outside them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schedule {
    /// Events, in time order, never overlapping.
    pub events: Vec<Event>,
    /// Outside the events, before the last one has closed.
    pub before: IdleMode,
    /// After the last event has closed.
    pub after: IdleMode,
}

/// Where a room stands in its schedule at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The room has no schedule: its `mode` alone applies.
    Unscheduled,
    /// Before an event's pre-queue (or between events), or after the last event.
    Idle(IdleMode),
    /// Between `prequeue_at` and `opens_at` of event `event`: joins wait, nobody is admitted.
    Prequeue {
        /// Index of the event.
        event: usize,
        /// When admission starts.
        opens_at: Timestamp,
    },
    /// Between `opens_at` and `closes_at` of event `event`.
    Open {
        /// Index of the event.
        event: usize,
    },
}

impl Schedule {
    /// Where the schedule stands at `now`: the first event that has not closed decides.
    pub fn phase(&self, now: Timestamp) -> Phase {
        if self.events.is_empty() {
            return Phase::Unscheduled;
        }
        let Some((index, event)) = self
            .events
            .iter()
            .enumerate()
            .find(|(_, event)| now < event.closes_at)
        else {
            return Phase::Idle(self.after);
        };
        if now < event.prequeue_at {
            Phase::Idle(self.before)
        } else if now < event.opens_at {
            Phase::Prequeue {
                event: index,
                opens_at: event.opens_at,
            }
        } else {
            Phase::Open { event: index }
        }
    }
}

impl RoomConfig {
    /// The room's own limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_active: self.max_active,
            admit_per_minute: self.admit_per_minute,
            admit_burst: self.admit_burst,
        }
    }

    /// Where the room's schedule stands at `now`; `Unscheduled` while the operator's mode is
    /// anything but `queue` (pause, close and passthrough override the schedule).
    pub fn phase(&self, now: Timestamp) -> Phase {
        if self.mode != Mode::Queue {
            return Phase::Unscheduled;
        }
        self.schedule.phase(now)
    }

    /// The mode the room behaves as at `now`: its own, or the schedule's (an idle room passes
    /// through or is closed, a pre-queue holds everybody like `queue_all`, an open event
    /// queues).
    pub fn mode_at(&self, now: Timestamp) -> Mode {
        match self.phase(now) {
            Phase::Unscheduled => self.mode,
            Phase::Idle(idle) => idle.mode(),
            Phase::Prequeue { .. } => Mode::QueueAll,
            Phase::Open { .. } => Mode::Queue,
        }
    }

    /// The limits in force at `now`: an open event's overrides, else the room's own.
    pub fn limits_at(&self, now: Timestamp) -> Limits {
        let mut limits = self.limits();
        if let Phase::Open { event } = self.phase(now)
            && let Some(event) = self.schedule.events.get(event)
        {
            limits.max_active = event.max_active.unwrap_or(limits.max_active);
            limits.admit_per_minute = event.admit_per_minute.unwrap_or(limits.admit_per_minute);
            limits.admit_burst = event.admit_burst.unwrap_or(limits.admit_burst);
        }
        limits
    }
}

/// A priority lane's access codes (SPEC §12 `[[room.priority]]`): a join presenting one of
/// them waits in the priority lane, admitted before the regular line within the same limits.
/// Only the codes' SHA-256 hashes are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityCodes {
    /// SHA-256 of each code.
    pub hashes: Vec<[u8; 32]>,
    /// How many joins each code admits to the lane (1 by default).
    pub uses: u64,
}

impl RoomConfig {
    /// The lane entry of a presented code: its hash and how many uses it allows, if it is
    /// one of the room's. Every stored hash is compared, each in constant time, so the time
    /// taken says nothing about which code, or how much of one, matched.
    pub fn priority_code(&self, code: &str) -> Option<([u8; 32], u64)> {
        let hash = priority_code_hash(code);
        let mut found = None;
        for lane in &self.priority {
            for stored in &lane.hashes {
                let difference = stored
                    .iter()
                    .zip(hash.iter())
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b));
                if difference == 0 && found.is_none() {
                    found = Some((hash, lane.uses));
                }
            }
        }
        found
    }
}

/// The SHA-256 of a priority access code, as the config and the stores keep it.
pub fn priority_code_hash(code: &str) -> [u8; 32] {
    sha2::Sha256::digest(code.as_bytes()).into()
}
