//! Rooms in raw form (SPEC §3 field names, durations and modes as text), their validation, and
//! the `[[room]]` entries of the config file.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::KeyHash;
use super::raw_keys::raw_keys;
use super::room_identity::{RawIdentityJwt, read_identity_jwt, resolve_identity};
use super::room_oidc::{RawOidc, read_oidc};
use super::tree::{Entry, Origin, Problems, Table, Value, closest};
use crate::adaptive::AdaptiveSettings;
use crate::challenge::{self, ProofOfWork};
use crate::clock::Timestamp;
use crate::duration::{format_duration, parse_duration};
use crate::ids::RoomId;
use crate::page_template::template_path;
use crate::room::{
    Event, Identity, IdleMode, MAX_HISTORY_RETENTION, MIN_HISTORY_RETENTION, Mode, Order,
    PriorityCodes, RoomConfig, StoreErrorPolicy, default_admit_burst,
};

/// A room as written in the config file or sent to the admin API: SPEC §3 field names, with
/// durations and modes as text. Absent fields take their documented defaults.
///
/// ```
/// use anteroom_core::config::RawRoom;
///
/// let raw = RawRoom {
///     id: "launch".to_owned(),
///     max_active: Some(100),
///     session_ttl: Some("15m".to_owned()),
///     ..RawRoom::default()
/// };
/// let room = raw.resolve().expect("valid");
/// assert_eq!(room.max_active, 100);
/// assert_eq!(RawRoom::from_config(&room).resolve(), Ok(room));
/// ```
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoom {
    /// The room's id: `[a-z0-9][a-z0-9-]{0,63}`.
    pub id: String,
    /// Path globs this room protects.
    pub routes: Option<Vec<String>>,
    /// Concurrent active sessions; 0 = unlimited.
    pub max_active: Option<u64>,
    /// New admissions per minute; 0 = unlimited.
    pub admit_per_minute: Option<u64>,
    /// Admission token-bucket capacity.
    pub admit_burst: Option<u64>,
    /// Idle lifetime of a pass, such as `"10m"`.
    pub session_ttl: Option<String>,
    /// Absolute cap on one session.
    pub session_max: Option<String>,
    /// How long an admitted ticket has to claim its pass.
    pub claim_ttl: Option<String>,
    /// A waiting ticket with no contact for this long is abandoned.
    pub ticket_idle_ttl: Option<String>,
    /// How long ended tickets and sessions are kept, `"1m"` to `"7d"` \[`"1h"`\].
    pub history_retention: Option<String>,
    /// `queue`, `queue_all`, `passthrough` or `closed`.
    pub mode: Option<String>,
    /// `fifo` or `random`.
    pub order: Option<String>,
    /// `anonymous`, `header:<name>` or `jwt:<claim>`.
    pub identity: Option<String>,
    /// `[room.identity_jwt]`: where the site's token is and how it is checked, for
    /// `identity = "jwt:<claim>"` (SPEC §14.1).
    pub identity_jwt: Option<RawIdentityJwt>,
    /// Ids of rooms whose valid pass is needed first.
    pub requires: Option<Vec<String>>,
    /// Path of a custom waiting page template.
    pub page_template: Option<String>,
    /// `open` or `closed`.
    pub on_store_error: Option<String>,
    /// The room as an OpenID Connect client (`[room.oidc]`, SPEC §11).
    pub oidc: Option<RawOidc>,
    /// `[room.adaptive]` (SPEC §5.4).
    pub adaptive: Option<RawAdaptive>,
    /// `challenge = { kind = "pow", difficulty = 18 }` (SPEC §12).
    pub challenge: Option<RawChallenge>,
    /// Scheduled sales (SPEC §5.3), in time order.
    pub schedule: Option<Vec<RawEvent>>,
    /// Outside the scheduled events: `passthrough` or `closed`.
    pub before: Option<String>,
    /// After the last scheduled event: `passthrough` or `closed`.
    pub after: Option<String>,
    /// Priority access codes (SPEC §12).
    pub priority: Option<Vec<RawPriority>>,
}

/// `[room.adaptive]` as written (SPEC §5.4).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdaptive {
    /// The p95 latency to hold the origin at, in milliseconds (required, at least 1).
    pub target_p95_ms: Option<u64>,
    /// The highest share of 5xx answers tolerated, 0 to 1 [0.05].
    pub max_error_rate: Option<f64>,
    /// The lowest rate set (required, at least 1).
    pub min_per_minute: Option<u64>,
    /// The highest rate set (required, at least `min_per_minute`).
    pub max_per_minute: Option<u64>,
    /// How often the controller runs ["10s"].
    pub interval: Option<String>,
}

/// `challenge` as written (SPEC §12).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChallenge {
    /// The only kind: `pow`.
    #[serde(default)]
    pub kind: String,
    /// Leading zero bits asked for, 1 to 32 \[18\].
    pub difficulty: Option<u64>,
}

/// The default `max_error_rate`.
const DEFAULT_MAX_ERROR_RATE: f64 = 0.05;

impl RawAdaptive {
    /// Validates the settings, each problem as a message naming its key.
    fn resolve(&self) -> Result<AdaptiveSettings, Vec<String>> {
        let mut problems = Vec::new();
        let mut required = |key: &str, value: Option<u64>, least: u64| match value {
            None => {
                problems.push(format!("`{key}` is required"));
                least
            }
            Some(value) if value < least => {
                problems.push(format!("`{key}` must be at least {least}, found {value}"));
                least
            }
            Some(value) => value,
        };
        let target_p95_ms = required("target_p95_ms", self.target_p95_ms, 1);
        let min_per_minute = required("min_per_minute", self.min_per_minute, 1);
        let max_per_minute = required("max_per_minute", self.max_per_minute, 1);
        if self.min_per_minute.is_some()
            && self.max_per_minute.is_some()
            && max_per_minute < min_per_minute
        {
            problems.push(format!(
                "`max_per_minute` ({max_per_minute}) must be at least `min_per_minute` ({min_per_minute})"
            ));
        }
        let max_error_rate = self.max_error_rate.unwrap_or(DEFAULT_MAX_ERROR_RATE);
        if !(0.0..=1.0).contains(&max_error_rate) {
            problems.push(format!(
                "`max_error_rate` must be between 0 and 1, found {max_error_rate}"
            ));
        }
        let interval = match self.interval.as_deref().map(parse_duration) {
            None => crate::adaptive::DEFAULT_INTERVAL,
            Some(Ok(interval)) if interval >= std::time::Duration::from_millis(100) => interval,
            Some(Ok(_)) => {
                problems.push("`interval` must be at least 100ms".to_owned());
                crate::adaptive::DEFAULT_INTERVAL
            }
            Some(Err(error)) => {
                problems.push(format!("`interval`: {error}"));
                crate::adaptive::DEFAULT_INTERVAL
            }
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(AdaptiveSettings {
            target_p95_ms,
            max_error_ppm: (max_error_rate * 1_000_000.0).round() as u32,
            min_per_minute,
            max_per_minute,
            interval,
        })
    }

    fn from_settings(settings: &AdaptiveSettings) -> RawAdaptive {
        RawAdaptive {
            target_p95_ms: Some(settings.target_p95_ms),
            max_error_rate: Some(f64::from(settings.max_error_ppm) / 1_000_000.0),
            min_per_minute: Some(settings.min_per_minute),
            max_per_minute: Some(settings.max_per_minute),
            interval: Some(format_duration(settings.interval)),
        }
    }
}

impl RawChallenge {
    fn resolve(&self) -> Result<ProofOfWork, Vec<String>> {
        let mut problems = Vec::new();
        if self.kind != "pow" {
            problems.push(format!(
                "unknown challenge kind {:?}: expected \"pow\"",
                self.kind
            ));
        }
        let difficulty = self
            .difficulty
            .unwrap_or(u64::from(challenge::DEFAULT_DIFFICULTY));
        let max = challenge::MAX_DIFFICULTY;
        let difficulty = match u8::try_from(difficulty) {
            Ok(bits) if (1..=max).contains(&bits) => bits,
            _ => {
                problems.push(format!(
                    "`difficulty` must be between 1 and {max}, found {difficulty}"
                ));
                challenge::DEFAULT_DIFFICULTY
            }
        };
        if problems.is_empty() {
            Ok(ProofOfWork { difficulty })
        } else {
            Err(problems)
        }
    }
}

/// One `[[room.priority]]` entry in raw form.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPriority {
    /// The codes' SHA-256 digests, each `"sha256:<64 hex digits>"` (`anteroom keys hash`).
    #[serde(default)]
    pub codes: Vec<String>,
    /// How many joins each code admits to the priority lane; 1 if absent.
    pub uses: Option<u64>,
}

/// One `[[room.schedule]]` entry in raw form: times as RFC 3339 text.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEvent {
    /// When visitors may start to join (nobody is admitted yet); `opens_at` if absent.
    pub prequeue_at: Option<String>,
    /// When admission starts.
    #[serde(default)]
    pub opens_at: String,
    /// When the event ends.
    #[serde(default)]
    pub closes_at: String,
    /// Whether the pre-queue is drawn in random order at `opens_at`.
    pub shuffle: Option<bool>,
    /// `max_active` while the event is open.
    pub max_active: Option<u64>,
    /// `admit_per_minute` while the event is open.
    pub admit_per_minute: Option<u64>,
    /// `admit_burst` while the event is open.
    pub admit_burst: Option<u64>,
}

/// A problem with one field of a [`RawRoom`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldProblem {
    /// The field's SPEC §3 name, such as `session_ttl`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl RawRoom {
    /// Validates every field, collecting every problem as (field name, message).
    ///
    /// Whether the rooms named in `requires` exist is for the caller to check, since it knows
    /// the other rooms; a room requiring itself is refused here.
    pub fn resolve(&self) -> Result<RoomConfig, Vec<FieldProblem>> {
        let mut problems = Vec::new();
        let mut report = |field: &str, message: String| {
            problems.push(FieldProblem {
                field: field.to_owned(),
                message,
            });
        };
        // Start from the defaults and overwrite each field that is present and valid.
        let mut room = RoomConfig::with_defaults(placeholder_id());
        let id = RoomId::new(&self.id)
            .map_err(|error| report("id", error.to_string()))
            .ok();
        self.resolve_routes(&mut room, &mut report);
        self.resolve_admission(&mut room, &mut report);
        self.resolve_durations(&mut room, &mut report);
        self.resolve_choices(&mut room, &mut report);
        self.resolve_requires(&mut room, &mut report);
        self.resolve_extensions(&mut room, &mut report);
        self.resolve_schedule(&mut room, &mut report);
        self.resolve_priority(&mut room, &mut report);
        match id {
            Some(id) if problems.is_empty() => Ok(RoomConfig { id, ..room }),
            _ => Err(problems),
        }
    }

    fn resolve_routes(&self, room: &mut RoomConfig, report: &mut impl FnMut(&str, String)) {
        let Some(routes) = &self.routes else {
            return;
        };
        for route in routes.iter().filter(|route| !route.starts_with('/')) {
            report(
                "routes",
                format!("route {route:?} must be a path starting with '/'"),
            );
        }
        room.routes = routes.clone();
        // The globs are compiled here, so a room the admin API accepts always makes a
        // route (the gateway builds it from the stored room at run time).
        if routes.iter().all(|route| route.starts_with('/'))
            && let Err(error) = super::gateway::room_route(room)
        {
            report("routes", error.to_string());
        }
    }

    fn resolve_admission(&self, room: &mut RoomConfig, report: &mut impl FnMut(&str, String)) {
        room.max_active = self.max_active.unwrap_or(room.max_active);
        room.admit_per_minute = self.admit_per_minute.unwrap_or(room.admit_per_minute);
        room.admit_burst = self
            .admit_burst
            .unwrap_or_else(|| default_admit_burst(room.admit_per_minute));
        if room.admit_burst == 0 {
            report("admit_burst", "must be at least 1".to_owned());
        }
    }

    fn resolve_durations(&self, room: &mut RoomConfig, report: &mut impl FnMut(&str, String)) {
        let mut duration = |field: &str, text: &Option<String>| {
            let text = text.as_deref()?;
            match parse_duration(text) {
                Ok(duration) if duration.is_zero() => {
                    report(field, format!("must be longer than zero, found {text:?}"));
                    None
                }
                Ok(duration) => Some(duration),
                Err(error) => {
                    report(field, error.to_string());
                    None
                }
            }
        };
        let session_ttl = duration("session_ttl", &self.session_ttl);
        let session_max = duration("session_max", &self.session_max);
        room.session_ttl = session_ttl.unwrap_or(room.session_ttl);
        room.session_max = session_max;
        room.claim_ttl = duration("claim_ttl", &self.claim_ttl).unwrap_or(room.claim_ttl);
        room.ticket_idle_ttl =
            duration("ticket_idle_ttl", &self.ticket_idle_ttl).unwrap_or(room.ticket_idle_ttl);
        let retention = duration("history_retention", &self.history_retention);
        let bounds = MIN_HISTORY_RETENTION..=MAX_HISTORY_RETENTION;
        match retention {
            Some(retention) if bounds.contains(&retention) => room.history_retention = retention,
            Some(_) => report(
                "history_retention",
                format!(
                    "must be between {} and {}, found {:?}",
                    format_duration(MIN_HISTORY_RETENTION),
                    format_duration(MAX_HISTORY_RETENTION),
                    self.history_retention.as_deref().unwrap_or_default()
                ),
            ),
            None => {}
        }
        // Compare with the default ttl too, but not with an invalid one already reported.
        let ttl_is_valid = self.session_ttl.is_none() || session_ttl.is_some();
        if let Some(max) = session_max
            && ttl_is_valid
            && max < room.session_ttl
        {
            let ttl = format_duration(room.session_ttl);
            let max = format_duration(max);
            report(
                "session_max",
                format!("must be at least session_ttl ({ttl}), found {max:?}"),
            );
        }
    }

    /// The fields spelled as one of a fixed set of words, and the identity.
    fn resolve_choices(&self, room: &mut RoomConfig, report: &mut impl FnMut(&str, String)) {
        let mode_choices = &["queue", "queue_all", "passthrough", "closed"];
        if let Some(mode) = parse_choice(report, "mode", &self.mode, Mode::parse, mode_choices) {
            room.mode = mode;
        }
        let order_choices = &["fifo", "random"];
        if let Some(order) = parse_choice(report, "order", &self.order, Order::parse, order_choices)
        {
            room.order = order;
        }
        let policy_choices = &["open", "closed"];
        let field = "on_store_error";
        let parse = StoreErrorPolicy::parse;
        if let Some(policy) =
            parse_choice(report, field, &self.on_store_error, parse, policy_choices)
        {
            room.on_store_error = policy;
        }
        let identity_jwt = self.identity_jwt.as_ref();
        if let Some(identity) = resolve_identity(self.identity.as_deref(), identity_jwt, report) {
            room.identity = identity;
        }
    }

    fn resolve_requires(&self, room: &mut RoomConfig, report: &mut impl FnMut(&str, String)) {
        for required in self.requires.iter().flatten() {
            match RoomId::new(required) {
                Err(error) => report("requires", error.to_string()),
                Ok(_) if *required == self.id => {
                    report("requires", "a room cannot require itself".to_owned());
                }
                Ok(required_id) if room.requires.contains(&required_id) => {
                    report("requires", format!("lists {required:?} more than once"));
                }
                Ok(required_id) => room.requires.push(required_id),
            }
        }
    }

    /// The page template and the optional tables: OIDC, adaptive pacing, the challenge.
    fn resolve_extensions(&self, room: &mut RoomConfig, report: &mut impl FnMut(&str, String)) {
        if let Some(template) = &self.page_template {
            room.page_template = template.clone();
        }
        if let Some(oidc) = &self.oidc {
            room.oidc = oidc.resolve(report);
        }
        if let Some(adaptive) = &self.adaptive {
            match adaptive.resolve() {
                Ok(settings) => room.adaptive = Some(settings),
                Err(messages) => messages.into_iter().for_each(|m| report("adaptive", m)),
            }
        }
        if let Some(challenge) = &self.challenge {
            match challenge.resolve() {
                Ok(pow) => room.challenge = Some(pow),
                Err(messages) => messages.into_iter().for_each(|m| report("challenge", m)),
            }
        }
    }

    fn resolve_schedule(&self, room: &mut RoomConfig, report: &mut impl FnMut(&str, String)) {
        let idle_choices = &["passthrough", "closed"];
        let parse = IdleMode::parse;
        if let Some(before) = parse_choice(report, "before", &self.before, parse, idle_choices) {
            room.schedule.before = before;
        }
        if let Some(after) = parse_choice(report, "after", &self.after, parse, idle_choices) {
            room.schedule.after = after;
        }
        let mut previous_close: Option<Timestamp> = None;
        for (index, raw) in self.schedule.iter().flatten().enumerate() {
            let Some(event) = resolve_event(raw, index, report) else {
                continue;
            };
            if let Some(close) = previous_close
                && event.prequeue_at < close
            {
                report(
                    &event_field(index, "prequeue_at"),
                    "events must be in time order without overlap: this one starts before the previous one closes".to_owned(),
                );
            }
            previous_close = Some(event.closes_at);
            room.schedule.events.push(event);
        }
    }

    fn resolve_priority(&self, room: &mut RoomConfig, report: &mut impl FnMut(&str, String)) {
        for (index, raw) in self.priority.iter().flatten().enumerate() {
            let field = |key: &str| format!("priority[{index}].{key}");
            let mut hashes = Vec::new();
            for code in &raw.codes {
                match code.parse::<KeyHash>() {
                    Ok(hash) => hashes.push(hash.0),
                    Err(error) => report(&field("codes"), error.to_string()),
                }
            }
            if raw.codes.is_empty() {
                report(&field("codes"), "must list at least one code".to_owned());
            }
            let uses = raw.uses.unwrap_or(1);
            if uses == 0 {
                report(&field("uses"), "must be at least 1".to_owned());
            }
            room.priority.push(PriorityCodes { hashes, uses });
        }
    }

    /// The raw form of a resolved room, every field present (except an absent `session_max`),
    /// so the admin API can show rooms with SPEC §3 field names.
    pub fn from_config(config: &RoomConfig) -> RawRoom {
        let schedule = &config.schedule;
        RawRoom {
            id: config.id.to_string(),
            routes: Some(config.routes.clone()),
            max_active: Some(config.max_active),
            admit_per_minute: Some(config.admit_per_minute),
            admit_burst: Some(config.admit_burst),
            session_ttl: Some(format_duration(config.session_ttl)),
            session_max: config.session_max.map(format_duration),
            claim_ttl: Some(format_duration(config.claim_ttl)),
            ticket_idle_ttl: Some(format_duration(config.ticket_idle_ttl)),
            history_retention: Some(format_duration(config.history_retention)),
            mode: Some(config.mode.as_str().to_owned()),
            order: Some(config.order.as_str().to_owned()),
            identity: Some(config.identity.to_config_string()),
            identity_jwt: match &config.identity {
                Identity::JwtClaim(site) => Some(RawIdentityJwt::from_site(site)),
                Identity::Anonymous | Identity::Header(_) => None,
            },
            requires: Some(config.requires.iter().map(RoomId::to_string).collect()),
            page_template: Some(config.page_template.clone()),
            on_store_error: Some(config.on_store_error.as_str().to_owned()),
            oidc: config.oidc.as_ref().map(RawOidc::from_client),
            adaptive: config.adaptive.as_ref().map(RawAdaptive::from_settings),
            challenge: config.challenge.map(|pow| RawChallenge {
                kind: "pow".to_owned(),
                difficulty: Some(u64::from(pow.difficulty)),
            }),
            schedule: (!schedule.events.is_empty())
                .then(|| schedule.events.iter().map(raw_event).collect()),
            before: (schedule.before != IdleMode::default())
                .then(|| schedule.before.as_str().to_owned()),
            after: (schedule.after != IdleMode::default())
                .then(|| schedule.after.as_str().to_owned()),
            priority: (!config.priority.is_empty()).then(|| {
                config
                    .priority
                    .iter()
                    .map(|lane| RawPriority {
                        codes: lane
                            .hashes
                            .iter()
                            .map(|hash| KeyHash(*hash).to_string())
                            .collect(),
                        uses: Some(lane.uses),
                    })
                    .collect()
            }),
        }
    }
}

/// How problems name a key of the `index`-th (0-based) schedule entry.
fn event_field(index: usize, key: &str) -> String {
    format!("schedule[{index}].{key}")
}

/// Validates one schedule entry: times in RFC 3339, `prequeue_at ≤ opens_at < closes_at`, a
/// burst of at least 1. An event that overrides only `admit_per_minute` gets that rate's
/// default burst.
fn resolve_event(
    raw: &RawEvent,
    index: usize,
    report: &mut impl FnMut(&str, String),
) -> Option<Event> {
    let mut time = |key: &str, text: &str| match parse_time(text) {
        Some(at) => Some(at),
        None => {
            let message = if text.is_empty() {
                "is required".to_owned()
            } else {
                format!("{text:?} is not an RFC 3339 time such as \"2026-12-01T10:00:00Z\"")
            };
            report(&event_field(index, key), message);
            None
        }
    };
    let opens_at = time("opens_at", &raw.opens_at);
    let closes_at = time("closes_at", &raw.closes_at);
    let prequeue_at = match &raw.prequeue_at {
        Some(text) => time("prequeue_at", text),
        None => opens_at,
    };
    let (prequeue_at, opens_at, closes_at) = (prequeue_at?, opens_at?, closes_at?);
    let mut valid = true;
    if prequeue_at > opens_at {
        report(
            &event_field(index, "prequeue_at"),
            "must not be after opens_at".to_owned(),
        );
        valid = false;
    }
    if closes_at <= opens_at {
        report(
            &event_field(index, "closes_at"),
            "must be after opens_at".to_owned(),
        );
        valid = false;
    }
    if raw.admit_burst == Some(0) {
        report(
            &event_field(index, "admit_burst"),
            "must be at least 1".to_owned(),
        );
        valid = false;
    }
    let admit_burst = raw
        .admit_burst
        .or_else(|| raw.admit_per_minute.map(default_admit_burst));
    valid.then_some(Event {
        prequeue_at,
        opens_at,
        closes_at,
        shuffle: raw.shuffle.unwrap_or(false),
        max_active: raw.max_active,
        admit_per_minute: raw.admit_per_minute,
        admit_burst,
    })
}

fn raw_event(event: &Event) -> RawEvent {
    RawEvent {
        prequeue_at: Some(format_time(event.prequeue_at)),
        opens_at: format_time(event.opens_at),
        closes_at: format_time(event.closes_at),
        shuffle: Some(event.shuffle),
        max_active: event.max_active,
        admit_per_minute: event.admit_per_minute,
        admit_burst: event.admit_burst,
    }
}

/// Reads an RFC 3339 time (with an offset) at or after the epoch, to the millisecond.
pub(crate) fn parse_time(text: &str) -> Option<Timestamp> {
    let moment =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    let millis = moment.unix_timestamp_nanos() / 1_000_000;
    u64::try_from(millis).ok().map(Timestamp)
}

/// Writes a time as RFC 3339 in UTC (how schedules are written back and shown).
pub fn format_time(at: Timestamp) -> String {
    let nanos = i128::from(at.as_millis()) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|moment| {
            moment
                .format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// An id that is always valid, to borrow the defaults of [`RoomConfig::with_defaults`].
fn placeholder_id() -> RoomId {
    RoomId::new("defaults").expect("\"defaults\" is a valid room id")
}

/// Reads one of a fixed set of spellings, naming them all (and the likely one) on a mistake.
/// `None` when the field is absent or wrong.
fn parse_choice<T>(
    report: &mut impl FnMut(&str, String),
    field: &str,
    text: &Option<String>,
    parse: fn(&str) -> Option<T>,
    choices: &[&str],
) -> Option<T> {
    let text = text.as_deref()?;
    let parsed = parse(text);
    if parsed.is_none() {
        let mut message = format!(
            "unknown {field} {text:?}: expected one of {}",
            choices.join(", ")
        );
        if let Some(suggestion) = closest(text, choices.iter().copied()) {
            message.push_str(&format!("; did you mean {suggestion:?}?"));
        }
        report(field, message);
    }
    parsed
}

/// One `[[room]]` entry read from the tree, with where each field was written.
struct RoomSource {
    raw: RawRoom,
    /// The `[[room]]` header.
    header: Origin,
    /// Where each present field's key was written (schedule keys as `schedule[i].key`).
    origins: HashMap<String, Origin>,
    has_id: bool,
}

impl RoomSource {
    /// Where `field` was written: its key, else its schedule entry, else the room's header.
    fn origin(&self, field: &str) -> &Origin {
        // A missing key of `[room.oidc]` (or `[room.identity_jwt]`) is reported at the table's
        // header.
        let table = field.split_once('.').map(|(table, _)| table);
        self.origins
            .get(field)
            .or_else(|| table.and_then(|table| self.origins.get(table)))
            .unwrap_or(&self.header)
    }

    /// How messages name the room.
    fn label(&self) -> String {
        if self.has_id {
            format!("room {:?}", self.raw.id)
        } else {
            "room without an id".to_owned()
        }
    }
}

/// Reads and validates every `[[room]]`, including the checks that span rooms: unique ids,
/// `requires` naming existing rooms, and no cycle of requirements.
pub(super) fn read_rooms(
    entry: Option<&Entry>,
    templates_dir: Option<&Path>,
    problems: &mut Problems,
) -> Vec<RoomConfig> {
    let Some(entry) = entry else {
        return Vec::new();
    };
    let Value::Array(elements) = &entry.item.value else {
        problems.add(
            &entry.key_origin,
            "`room` must be an array of tables, written [[room]]",
        );
        return Vec::new();
    };
    let sources: Vec<RoomSource> = elements
        .iter()
        .filter_map(|element| match &element.value {
            Value::Table(table) => Some(read_room(table, &element.origin, problems)),
            _ => {
                problems.add(
                    &element.origin,
                    "each room must be a table, written [[room]]",
                );
                None
            }
        })
        .collect();

    let mut rooms = Vec::new();
    for source in &sources {
        match source.raw.resolve() {
            Ok(room) => rooms.push(room),
            Err(field_problems) => {
                for problem in field_problems {
                    if problem.field == "id" && !source.has_id {
                        continue;
                    }
                    let message =
                        format!("{}: {}: {}", source.label(), problem.field, problem.message);
                    problems.add(source.origin(&problem.field), message);
                }
            }
        }
    }
    check_unique_ids(&sources, problems);
    check_requires(&sources, problems);
    check_page_templates(&sources, templates_dir, problems);
    rooms
}

/// Every `page_template` names a file inside `[server] templates_dir` (SPEC §6.4).
fn check_page_templates(
    sources: &[RoomSource],
    templates_dir: Option<&Path>,
    problems: &mut Problems,
) {
    for source in sources {
        let Some(name) = source.raw.page_template.as_deref() else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        if let Err(error) = template_path(templates_dir, name) {
            let message = format!("{}: page_template: {error}", source.label());
            problems.add(source.origin("page_template"), message);
        }
    }
}

fn read_room(table: &Table, header: &Origin, problems: &mut Problems) -> RoomSource {
    let mut origins = HashMap::new();
    let mut raw = RawRoom::default();
    let mut has_id = false;
    let room_keys = raw_keys::<RawRoom>();
    for entry in &table.entries {
        let Some(field) = room_keys.iter().copied().find(|field| *field == entry.key) else {
            let mut message = format!("unknown key `{}` in [[room]]", entry.key);
            if let Some(suggestion) = closest(&entry.key, room_keys.iter().copied()) {
                message.push_str(&format!("; did you mean `{suggestion}`?"));
            }
            problems.add(&entry.key_origin, message);
            continue;
        };
        origins.insert(field.to_owned(), entry.key_origin.clone());
        if field == "id" {
            if let Some(id) = entry.string(problems) {
                raw.id = id;
                has_id = true;
            }
        } else {
            read_room_field(&mut raw, field, entry, &mut origins, problems);
        }
    }
    if !has_id && table.get("id").is_none() {
        problems.add(header, "[[room]] has no `id`");
    }
    RoomSource {
        raw,
        header: header.clone(),
        origins,
        has_id,
    }
}

/// Reads one known `[[room]]` key other than `id` into `raw`, by the key's type.
fn read_room_field(
    raw: &mut RawRoom,
    field: &str,
    entry: &Entry,
    origins: &mut HashMap<String, Origin>,
    problems: &mut Problems,
) {
    let strings = |problems: &mut Problems| {
        entry
            .strings(problems)
            .map(|list| list.into_iter().map(|(text, _)| text).collect())
    };
    match field {
        "routes" => raw.routes = strings(problems),
        "max_active" => raw.max_active = entry.unsigned(problems),
        "admit_per_minute" => raw.admit_per_minute = entry.unsigned(problems),
        "admit_burst" => raw.admit_burst = entry.unsigned(problems),
        "session_ttl" => raw.session_ttl = entry.duration_text(problems),
        "session_max" => raw.session_max = entry.duration_text(problems),
        "claim_ttl" => raw.claim_ttl = entry.duration_text(problems),
        "ticket_idle_ttl" => raw.ticket_idle_ttl = entry.duration_text(problems),
        "history_retention" => raw.history_retention = entry.duration_text(problems),
        "mode" => raw.mode = entry.string(problems),
        "order" => raw.order = entry.string(problems),
        "identity" => raw.identity = entry.string(problems),
        "requires" => raw.requires = strings(problems),
        "page_template" => raw.page_template = entry.string(problems),
        "identity_jwt" => {
            raw.identity_jwt = entry
                .table(problems)
                .map(|table| read_identity_jwt(table, origins, problems));
        }
        "oidc" => {
            raw.oidc = entry
                .table(problems)
                .map(|table| read_oidc(table, origins, problems));
        }
        "adaptive" => raw.adaptive = read_adaptive(entry, problems),
        "challenge" => raw.challenge = read_challenge(entry, problems),
        "on_store_error" => raw.on_store_error = entry.string(problems),
        "before" => raw.before = entry.string(problems),
        "after" => raw.after = entry.string(problems),
        "priority" => raw.priority = read_priority(entry, origins, problems),
        _ => raw.schedule = read_events(entry, origins, problems),
    }
}

/// `[room.adaptive]`: its keys read by type; their values are checked by `resolve`.
fn read_adaptive(entry: &Entry, problems: &mut Problems) -> Option<RawAdaptive> {
    let table = entry.table(problems)?;
    problems.unknown_keys(table, raw_keys::<RawAdaptive>(), "[room.adaptive]");
    let mut raw = RawAdaptive::default();
    for key in &table.entries {
        match key.key.as_str() {
            "target_p95_ms" => raw.target_p95_ms = key.unsigned(problems),
            "min_per_minute" => raw.min_per_minute = key.unsigned(problems),
            "max_per_minute" => raw.max_per_minute = key.unsigned(problems),
            "interval" => raw.interval = key.duration_text(problems),
            "max_error_rate" => raw.max_error_rate = key.fraction(problems),
            _ => {}
        }
    }
    Some(raw)
}

/// `challenge = { kind = "pow", difficulty = 18 }`.
fn read_challenge(entry: &Entry, problems: &mut Problems) -> Option<RawChallenge> {
    let table = entry.table(problems)?;
    problems.unknown_keys(table, raw_keys::<RawChallenge>(), "`challenge`");
    let mut raw = RawChallenge::default();
    for key in &table.entries {
        match key.key.as_str() {
            "kind" => raw.kind = key.string(problems).unwrap_or_default(),
            "difficulty" => raw.difficulty = key.unsigned(problems),
            _ => {}
        }
    }
    if table.get("kind").is_none() {
        problems.add(&entry.key_origin, "`challenge` needs a `kind` (\"pow\")");
        return None;
    }
    Some(raw)
}

/// Reads an array of tables written `[[room.<name>]]`, noting where each entry and each key was
/// written (`<name>[i]`, `<name>[i].<key>`); `read_key` takes one key of one entry.
fn read_entries<T: Default>(
    entry: &Entry,
    name: &str,
    fields: &[&str],
    origins: &mut HashMap<String, Origin>,
    problems: &mut Problems,
    mut read_key: impl FnMut(&mut T, &Entry, &mut Problems),
) -> Option<Vec<T>> {
    let written = format!("[[room.{name}]]");
    let Value::Array(elements) = &entry.item.value else {
        problems.add(
            &entry.key_origin,
            format!("`{name}` must be an array of tables, written {written}"),
        );
        return None;
    };
    let mut read = Vec::new();
    for (index, element) in elements.iter().enumerate() {
        let Value::Table(table) = &element.value else {
            problems.add(
                &element.origin,
                format!("each {name} entry must be a table, written {written}"),
            );
            continue;
        };
        origins.insert(format!("{name}[{index}]"), element.origin.clone());
        problems.unknown_keys(table, fields, &written);
        let mut value = T::default();
        for key_entry in &table.entries {
            origins.insert(
                format!("{name}[{index}].{}", key_entry.key),
                key_entry.key_origin.clone(),
            );
            read_key(&mut value, key_entry, problems);
        }
        read.push(value);
    }
    Some(read)
}

/// Reads `[[room.schedule]]` entries.
fn read_events(
    entry: &Entry,
    origins: &mut HashMap<String, Origin>,
    problems: &mut Problems,
) -> Option<Vec<RawEvent>> {
    read_entries(
        entry,
        "schedule",
        raw_keys::<RawEvent>(),
        origins,
        problems,
        |event: &mut RawEvent, key_entry, problems| match key_entry.key.as_str() {
            "prequeue_at" => event.prequeue_at = key_entry.time_text(problems),
            "opens_at" => event.opens_at = key_entry.time_text(problems).unwrap_or_default(),
            "closes_at" => event.closes_at = key_entry.time_text(problems).unwrap_or_default(),
            "shuffle" => event.shuffle = key_entry.boolean(problems),
            "max_active" => event.max_active = key_entry.unsigned(problems),
            "admit_per_minute" => event.admit_per_minute = key_entry.unsigned(problems),
            "admit_burst" => event.admit_burst = key_entry.unsigned(problems),
            _ => {}
        },
    )
}

/// Reads `[[room.priority]]` entries.
fn read_priority(
    entry: &Entry,
    origins: &mut HashMap<String, Origin>,
    problems: &mut Problems,
) -> Option<Vec<RawPriority>> {
    read_entries(
        entry,
        "priority",
        raw_keys::<RawPriority>(),
        origins,
        problems,
        |lane: &mut RawPriority, key_entry, problems| match key_entry.key.as_str() {
            "codes" => {
                lane.codes = key_entry
                    .strings(problems)
                    .map(|codes| codes.into_iter().map(|(code, _)| code).collect())
                    .unwrap_or_default();
            }
            "uses" => lane.uses = key_entry.unsigned(problems),
            _ => {}
        },
    )
}

/// Reports a table or key that a later version of anteroom reads.
pub(super) fn report_unsupported(entry: &Entry, written: &str, problems: &mut Problems) {
    let message = format!("{written} is not supported by this version");
    match &entry.item.value {
        Value::Array(elements) if !elements.is_empty() => {
            for element in elements {
                problems.add(&element.origin, &message);
            }
        }
        _ => problems.add(&entry.key_origin, message),
    }
}

fn check_unique_ids(sources: &[RoomSource], problems: &mut Problems) {
    let mut first_seen: HashMap<&str, &Origin> = HashMap::new();
    for source in sources.iter().filter(|source| source.has_id) {
        let origin = source.origin("id");
        match first_seen.get(source.raw.id.as_str()) {
            Some(first) => problems.add(
                origin,
                format!(
                    "duplicate room id {:?}, first defined at {}",
                    source.raw.id,
                    first.describe()
                ),
            ),
            None => {
                first_seen.insert(&source.raw.id, origin);
            }
        }
    }
}

/// Every required room must exist, and requirements must not go round in a cycle.
fn check_requires(sources: &[RoomSource], problems: &mut Problems) {
    let ids: Vec<&str> = sources
        .iter()
        .filter(|s| s.has_id)
        .map(|s| s.raw.id.as_str())
        .collect();
    for source in sources {
        for required in source.raw.requires.iter().flatten() {
            // Malformed ids and self-references are reported by `resolve`.
            if ids.contains(&required.as_str())
                || RoomId::new(required).is_err()
                || *required == source.raw.id
            {
                continue;
            }
            let mut message = format!("{}: requires: unknown room {required:?}", source.label());
            if let Some(suggestion) = closest(required, ids.iter().copied()) {
                message.push_str(&format!("; did you mean {suggestion:?}?"));
            }
            problems.add(source.origin("requires"), message);
        }
    }

    let graph: HashMap<&str, Vec<&str>> = sources
        .iter()
        .filter(|source| source.has_id)
        .map(|source| {
            let edges = source.raw.requires.iter().flatten();
            let edges = edges
                .filter(|required| **required != source.raw.id && ids.contains(&required.as_str()));
            (source.raw.id.as_str(), edges.map(String::as_str).collect())
        })
        .collect();
    let mut reported: BTreeSet<Vec<&str>> = BTreeSet::new();
    for source in sources.iter().filter(|source| source.has_id) {
        let start = source.raw.id.as_str();
        let Some(cycle) = find_cycle_through(start, &graph) else {
            continue;
        };
        let mut members = cycle.clone();
        members.sort_unstable();
        members.dedup();
        if reported.insert(members) {
            let mut path = cycle;
            path.push(start);
            let message = format!(
                "{}: requires: rooms require each other in a cycle: {}",
                source.label(),
                path.join(" -> ")
            );
            problems.add(source.origin("requires"), message);
        }
    }
}

/// A path of requirements from `start` back to `start` (without repeating `start` at the end).
fn find_cycle_through<'a>(
    start: &'a str,
    graph: &HashMap<&'a str, Vec<&'a str>>,
) -> Option<Vec<&'a str>> {
    let mut path = vec![start];
    let mut visited = BTreeSet::new();
    // Each stack frame is (room, index of its next edge to try).
    let mut stack = vec![(start, 0usize)];
    while let Some((room, next_edge)) = stack.last_mut() {
        let edges = graph.get(*room).map(Vec::as_slice).unwrap_or_default();
        let Some(&next) = edges.get(*next_edge) else {
            stack.pop();
            path.pop();
            continue;
        };
        *next_edge += 1;
        if next == start {
            return Some(path);
        }
        if visited.insert(next) {
            stack.push((next, 0));
            path.push(next);
        }
    }
    None
}
