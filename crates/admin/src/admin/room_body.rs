//! A room as the admin API reads and writes it ([`RoomBody`], SPEC §3 form, with its
//! sections), made from a room's configuration and turned back into the config's raw form.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use anteroom_api::problem_answers;
use anteroom_core::config::{RawAdaptive, RawEvent, RawIdentityJwt, RawRoom};
use anteroom_core::room::RoomConfig;

/// A room in SPEC §3 form. In a request every field is optional (absent fields take their
/// defaults on PUT and stay as they are on PATCH; `id` must match the path when given); in an
/// answer every field is present except an absent `session_max`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "launch", "max_active": 1000, "admit_per_minute": 3000,
    "session_ttl": "10m", "mode": "queue"}))]
pub(crate) struct RoomBody {
    /// `[a-z0-9][a-z0-9-]{0,63}`.
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,63}$")]
    pub(crate) id: Option<String>,
    /// Path globs this room protects (shorthand for a `[[route]]`, after every `[[route]]`);
    /// a change is applied by every node's gateway within a second.
    #[schema(inline, value_type = Option<Vec<problem_answers::RoutePath>>)]
    pub(crate) routes: Option<Vec<String>>,
    /// Concurrent active sessions; 0 = unlimited.
    #[schema(minimum = 0)]
    pub(crate) max_active: Option<u64>,
    /// New admissions per minute; 0 = unlimited.
    #[schema(minimum = 0)]
    pub(crate) admit_per_minute: Option<u64>,
    /// Token-bucket burst of admissions (at least 1).
    #[schema(minimum = 1)]
    pub(crate) admit_burst: Option<u64>,
    /// Idle lifetime of a pass, such as `"10m"`.
    #[schema(pattern = "^([1-9][0-9]{0,8}(ms|s|m|h|d))+$", example = "10m")]
    pub(crate) session_ttl: Option<String>,
    /// Absolute cap on one session.
    #[schema(pattern = "^([1-9][0-9]{0,8}(ms|s|m|h|d))+$", example = "10m")]
    pub(crate) session_max: Option<String>,
    /// How long an admitted ticket has to claim its pass.
    #[schema(pattern = "^([1-9][0-9]{0,8}(ms|s|m|h|d))+$", example = "10m")]
    pub(crate) claim_ttl: Option<String>,
    /// A waiting ticket without contact for this long is abandoned.
    #[schema(pattern = "^([1-9][0-9]{0,8}(ms|s|m|h|d))+$", example = "10m")]
    pub(crate) ticket_idle_ttl: Option<String>,
    /// How long ended tickets and sessions are kept for status answers, listings and audits,
    /// `"1m"` to `"7d"` (default `"1h"`).
    #[schema(pattern = "^([1-9][0-9]{0,8}(ms|s|m|h|d))+$", example = "1h")]
    pub(crate) history_retention: Option<String>,
    /// `queue`, `queue_all`, `passthrough` or `closed`.
    #[schema(pattern = "^(queue|queue_all|passthrough|closed)$", example = "queue")]
    pub(crate) mode: Option<String>,
    /// `fifo` or `random`.
    #[schema(pattern = "^(fifo|random)$", example = "fifo")]
    pub(crate) order: Option<String>,
    /// `anonymous`, `header:<name>` or `jwt:<claim>`.
    #[schema(
        pattern = "^(anonymous|header:[A-Za-z0-9-]+|jwt:[A-Za-z0-9_.-]+)$",
        example = "anonymous"
    )]
    pub(crate) identity: Option<String>,
    /// With `identity = "jwt:<claim>"`: where the site's token is and how it is checked.
    pub(crate) identity_jwt: Option<IdentityJwtBody>,
    /// Rooms whose valid pass is needed first.
    #[schema(inline, value_type = Option<Vec<problem_answers::RoomIdText>>)]
    pub(crate) requires: Option<Vec<String>>,
    /// A custom waiting page template.
    pub(crate) page_template: Option<String>,
    /// `open` or `closed`.
    #[schema(pattern = "^(open|closed)$", example = "open")]
    pub(crate) on_store_error: Option<String>,
    /// The room as an OpenID Connect client (`[room.oidc]`, SPEC §11).
    pub(crate) oidc: Option<OidcBody>,
    /// Adaptive admission (SPEC §5.4): the controller that sets `admit_per_minute`.
    pub(crate) adaptive: Option<AdaptiveBody>,
    /// A proof of work asked for before a join (SPEC §12).
    pub(crate) challenge: Option<ChallengeBody>,
    /// Scheduled sales (SPEC §5.3), in time order.
    pub(crate) schedule: Option<Vec<EventBody>>,
    /// With a schedule, outside its events: `passthrough` or `closed`.
    #[schema(pattern = "^(passthrough|closed)$", example = "closed")]
    pub(crate) before: Option<String>,
    /// With a schedule, after its last event: `passthrough` or `closed`.
    #[schema(pattern = "^(passthrough|closed)$", example = "closed")]
    pub(crate) after: Option<String>,
    /// Priority access codes (SPEC §12).
    pub(crate) priority: Option<Vec<PriorityBody>>,
}

/// `[room.identity_jwt]`: the site's own token as the visitor's identity.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct IdentityJwtBody {
    /// The cookie holding the token (or `header`).
    #[schema(example = "site_session")]
    pub(crate) cookie: Option<String>,
    /// The header holding the token; `Authorization` is read as `Bearer <token>`.
    #[schema(example = "Authorization")]
    pub(crate) header: Option<String>,
    /// The site's key set, fetched and cached (or `hs256_secret_file`).
    #[schema(example = "https://login.example/.well-known/jwks.json")]
    pub(crate) jwks_url: Option<String>,
    /// A file on the node holding the site's HS256 secret (at least 32 bytes).
    pub(crate) hs256_secret_file: Option<String>,
    /// The `iss` tokens must carry.
    pub(crate) issuer: Option<String>,
    /// An `aud` tokens must carry.
    pub(crate) audience: Option<String>,
    /// Refuse visitors without a valid token (otherwise they join as anonymous).
    pub(crate) required: Option<bool>,
}

impl From<RawIdentityJwt> for IdentityJwtBody {
    fn from(raw: RawIdentityJwt) -> IdentityJwtBody {
        IdentityJwtBody {
            cookie: raw.cookie,
            header: raw.header,
            jwks_url: raw.jwks_url,
            hs256_secret_file: raw.hs256_secret_file,
            issuer: raw.issuer,
            audience: raw.audience,
            required: raw.required,
        }
    }
}

impl From<IdentityJwtBody> for RawIdentityJwt {
    fn from(body: IdentityJwtBody) -> RawIdentityJwt {
        RawIdentityJwt {
            cookie: body.cookie,
            header: body.header,
            jwks_url: body.jwks_url,
            hs256_secret_file: body.hs256_secret_file,
            issuer: body.issuer,
            audience: body.audience,
            required: body.required,
        }
    }
}

/// A room as an OpenID Connect client: the room id is the client id.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OidcBody {
    /// SHA-256 of the client secret; absent for a public client, which must use PKCE.
    #[schema(pattern = "^sha256:[0-9a-fA-F]{64}$")]
    pub(crate) client_secret: Option<String>,
    /// The redirect URIs a request may name, matched exactly (at least one).
    #[schema(inline, value_type = Option<Vec<problem_answers::RedirectUri>>, min_items = 1,
        example = json!(["https://app.example/oauth2/callback"]))]
    pub(crate) redirect_uris: Option<Vec<String>>,
    /// How long an authorization code can be redeemed, 1s to 60s.
    #[schema(pattern = "^([1-9][0-9]{0,8}(ms|s|m|h|d))+$", example = "60s")]
    pub(crate) code_ttl: Option<String>,
}

/// `[room.adaptive]`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdaptiveBody {
    /// The p95 latency to hold the origin at, in milliseconds.
    #[schema(minimum = 1)]
    target_p95_ms: Option<u64>,
    /// The highest share of 5xx answers tolerated [0.05].
    #[schema(minimum = 0, maximum = 1)]
    max_error_rate: Option<f64>,
    /// The lowest rate the controller sets.
    #[schema(minimum = 1)]
    min_per_minute: Option<u64>,
    /// The highest rate the controller sets (at least `min_per_minute`).
    #[schema(minimum = 1)]
    max_per_minute: Option<u64>,
    /// How often the controller runs ["10s"].
    #[schema(pattern = "^([1-9][0-9]{0,8}(ms|s|m|h|d))+$", example = "10s")]
    interval: Option<String>,
}

/// `challenge`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChallengeBody {
    /// `pow`.
    #[schema(pattern = "^pow$", example = "pow")]
    pub(crate) kind: String,
    /// Leading zero bits asked for [18].
    #[schema(minimum = 1, maximum = 32)]
    pub(crate) difficulty: Option<u64>,
}

impl From<RawAdaptive> for AdaptiveBody {
    fn from(raw: RawAdaptive) -> AdaptiveBody {
        AdaptiveBody {
            target_p95_ms: raw.target_p95_ms,
            max_error_rate: raw.max_error_rate,
            min_per_minute: raw.min_per_minute,
            max_per_minute: raw.max_per_minute,
            interval: raw.interval,
        }
    }
}

impl From<AdaptiveBody> for RawAdaptive {
    fn from(body: AdaptiveBody) -> RawAdaptive {
        RawAdaptive {
            target_p95_ms: body.target_p95_ms,
            max_error_rate: body.max_error_rate,
            min_per_minute: body.min_per_minute,
            max_per_minute: body.max_per_minute,
            interval: body.interval,
        }
    }
}

/// Priority access codes (`[[room.priority]]`): digests only, never the codes.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PriorityBody {
    /// Each code's SHA-256, `sha256:<64 hex digits>`.
    #[schema(inline, value_type = Vec<problem_answers::CodeDigest>)]
    pub(crate) codes: Vec<String>,
    /// Joins each code admits to the priority lane (1 if absent).
    #[schema(minimum = 1)]
    pub(crate) uses: Option<u64>,
}

/// One scheduled event (`[[room.schedule]]`); times in RFC 3339.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventBody {
    /// Visitors may join from here (nobody is admitted yet); `opens_at` if absent.
    #[schema(example = "2026-12-01T09:30:00Z")]
    pub(crate) prequeue_at: Option<String>,
    /// Admission starts.
    #[schema(example = "2026-12-01T10:00:00Z")]
    pub(crate) opens_at: String,
    /// The event ends.
    #[schema(example = "2026-12-01T12:00:00Z")]
    pub(crate) closes_at: String,
    /// Whether the pre-queue is drawn in random order at `opens_at`.
    pub(crate) shuffle: Option<bool>,
    /// `max_active` while the event is open.
    #[schema(minimum = 0)]
    pub(crate) max_active: Option<u64>,
    /// `admit_per_minute` while the event is open.
    #[schema(minimum = 0)]
    pub(crate) admit_per_minute: Option<u64>,
    /// `admit_burst` while the event is open.
    #[schema(minimum = 1)]
    pub(crate) admit_burst: Option<u64>,
}

impl EventBody {
    fn from_raw(raw: RawEvent) -> EventBody {
        EventBody {
            prequeue_at: raw.prequeue_at,
            opens_at: raw.opens_at,
            closes_at: raw.closes_at,
            shuffle: raw.shuffle,
            max_active: raw.max_active,
            admit_per_minute: raw.admit_per_minute,
            admit_burst: raw.admit_burst,
        }
    }

    pub(crate) fn into_raw(self) -> RawEvent {
        RawEvent {
            prequeue_at: self.prequeue_at,
            opens_at: self.opens_at,
            closes_at: self.closes_at,
            shuffle: self.shuffle,
            max_active: self.max_active,
            admit_per_minute: self.admit_per_minute,
            admit_burst: self.admit_burst,
        }
    }
}

/// `GET /admin/v1/rooms`
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RoomList {
    /// Every room, ordered by id.
    pub(crate) rooms: Vec<RoomBody>,
}

impl RoomBody {
    pub(crate) fn from_config(config: &RoomConfig) -> RoomBody {
        let raw = RawRoom::from_config(config);
        RoomBody {
            id: Some(raw.id),
            routes: raw.routes,
            max_active: raw.max_active,
            admit_per_minute: raw.admit_per_minute,
            admit_burst: raw.admit_burst,
            session_ttl: raw.session_ttl,
            session_max: raw.session_max,
            claim_ttl: raw.claim_ttl,
            ticket_idle_ttl: raw.ticket_idle_ttl,
            history_retention: raw.history_retention,
            mode: raw.mode,
            order: raw.order,
            identity: raw.identity,
            identity_jwt: raw.identity_jwt.map(IdentityJwtBody::from),
            requires: raw.requires,
            page_template: raw.page_template,
            on_store_error: raw.on_store_error,
            oidc: raw.oidc.map(|oidc| OidcBody {
                client_secret: oidc.client_secret,
                redirect_uris: oidc.redirect_uris,
                code_ttl: oidc.code_ttl,
            }),
            adaptive: raw.adaptive.map(AdaptiveBody::from),
            challenge: raw.challenge.map(|challenge| ChallengeBody {
                kind: challenge.kind,
                difficulty: challenge.difficulty,
            }),
            schedule: raw
                .schedule
                .map(|events| events.into_iter().map(EventBody::from_raw).collect()),
            before: raw.before,
            after: raw.after,
            priority: raw.priority.map(|lanes| {
                lanes
                    .into_iter()
                    .map(|lane| PriorityBody {
                        codes: lane.codes,
                        uses: lane.uses,
                    })
                    .collect()
            }),
        }
    }
}
