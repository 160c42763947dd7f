//! The OpenAPI 3.1 document of the public API (§6.1) and the admin API (§8.1), generated from
//! the handlers' annotations and the wire types' schemas with utoipa, served at
//! `/admin/v1/openapi.json` and checked into `docs/openapi.json` (a test fails when the two
//! differ; `ANTEROOM_WRITE_OPENAPI=1 cargo test -p anteroom-admin --test openapi` rewrites it).
//!
//! The admin handlers carry their own `#[utoipa::path]`. The public API's routes are
//! described here, next to each other, with the wire types of `api.rs`; every error is an RFC
//! 9457 problem ([`crate::error::Problem`]).

use std::sync::LazyLock;

use serde::Deserialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::admin;
use crate::api;
use crate::error::{FieldError, Problem};

/// The document as pretty JSON, built once.
pub fn document_json() -> String {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
        let mut json = ApiDoc::openapi()
            .to_pretty_json()
            .unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"));
        json.push('\n');
        json
    });
    DOCUMENT.clone()
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "anteroom",
        description = "A self-hosted virtual waiting room and rate-limiting gateway. The public \
            API lives on the public listener under /_anteroom/; the admin API on the admin \
            listener (default 127.0.0.1:9090) under /admin/v1, with `Authorization: Bearer \
            <admin key>`. Every error is application/problem+json with a stable `code`.",
        license(name = "Apache-2.0")
    ),
    paths(
        join, challenge, status, events, leave, leave_beacon, summary, complete_session,
        abandon_session, waiting_page, jwks, health, ready,
        admin::rooms::list, admin::rooms::get_room, admin::rooms::put_room,
        admin::rooms::patch_room, admin::rooms::delete_room,
        admin::control::pause, admin::control::resume, admin::control::close,
        admin::control::open, admin::control::advance, admin::control::reset,
        admin::control::issue_pass, admin::control::signal, admin::keys::rotate_keys,
        admin::keys::prune_keys, admin::stats::stats, admin::stats::sessions,
        admin::revoke::revoke_session, admin::events::feed,
    ),
    components(schemas(Problem, FieldError, JoinBody, admin::stats::SessionFilter)),
    modifiers(&SecuritySchemes),
    tags(
        (name = "public", description = "Visitors and the protected site (public listener)"),
        (name = "admin", description = "Operators (admin listener)"),
    )
)]
struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme(
            "admin_key",
            bearer("An admin key (read and write) or a read-only key from [auth]"),
        );
        components.add_security_scheme(
            "service_key",
            bearer("A backend service key from [auth] service_keys"),
        );
    }
}

/// The optional body of a join.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)]
struct JoinBody {
    /// Where to go once admitted: a same-origin path starting with a single `/`.
    #[serde(rename = "return")]
    #[schema(max_length = 2048)]
    return_to: Option<String>,
    /// A priority access code (`[[room.priority]]`): a new ticket joins the priority lane,
    /// admitted before the regular line. A wrong or used-up code is refused with 403
    /// `invalid_priority_code` and changes nothing; resuming a held ticket never spends one.
    #[schema(max_length = 256)]
    priority_code: Option<String>,
    /// A proof-of-work solution, for rooms with `challenge` (SPEC §12).
    challenge: Option<crate::challenge::Solution>,
}

// The public routes (`lib.rs: reserved_routes`), described where the document is assembled.

/// Joins the queue, or resumes the caller's ticket (idempotent with a valid ticket or
/// identity). Sets the ticket cookie; in a room that can admit at once, answers `admitted`
/// with the pass.
#[utoipa::path(post, path = "/_anteroom/v1/rooms/{room}/join", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "A ticket token held (EventSource clients)")),
    request_body(content = Option<JoinBody>, description = "Optional"),
    responses(
        (status = 200, description = "The ticket's status", body = api::StatusBody),
        (status = 400, description = "A bad body, return path or identity", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "The room takes its identity from the site's token (`identity = \"jwt:<claim>\"`, `required = true`): none sent (`identity_required`), or one that does not verify, is expired or is for another issuer or audience (`identity_invalid`, the detail says which)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "A priority access code that is wrong or used up (`invalid_priority_code`); or the room asks for a proof of work: none sent (`challenge_required`), a wrong, expired or forged one (`challenge_failed`), or one already used (`challenge_used`); `challenge_url` says where to get one; or the room `requires` another room's pass first (`pass_required`); or its identity header came from a peer outside `trusted_proxies` (`untrusted_proxy`)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such room", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is too large", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Over the per-IP join limit (`rate_limited`, with the rate-limit headers), or too many joins with a priority code from this address (`code_attempts_exceeded`)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The room is closed, or the store cannot be reached, or this node cannot record more solved challenges right now (`challenge_unavailable`, with `Retry-After`), or the site's keys cannot be had to check its token (`identity_unavailable`, with `Retry-After`)", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn join() {}

/// A proof-of-work challenge for a room with `challenge` (SPEC §12): find a counter such that
/// SHA-256 of the challenge followed by the counter in decimal has `difficulty` leading zero
/// bits, then join with `{"challenge": {"token": <challenge>, "counter": <counter>}}`. Each
/// challenge is good for one join, for five minutes.
#[utoipa::path(post, path = "/_anteroom/v1/rooms/{room}/challenge", tag = "public",
    params(("room" = String, Path, description = "Room id")),
    responses(
        (status = 200, description = "A challenge", body = crate::challenge::ChallengeBody),
        (status = 404, description = "No such room, or the room asks for no proof of work (`challenge_not_used`)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store cannot be reached", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn challenge() {}

/// The caller's ticket status; keeps the ticket alive. Once admitted, issues (or re-returns)
/// the pass and sets the pass cookie.
#[utoipa::path(get, path = "/_anteroom/v1/rooms/{room}/status", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "The ticket token, unless sent as cookie or X-Anteroom-Ticket")),
    responses(
        (status = 200, description = "The ticket's status", body = api::StatusBody),
        (status = 400, description = "No ticket, or one that does not verify", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such room", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The ticket expired, left or belongs to an older generation", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store cannot be reached", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn status() {}

/// Server-Sent Events for one ticket: `status` (the status JSON, at most once a second),
/// `admitted` (then the stream ends), `closed`; a keep-alive comment every 15 s.
#[utoipa::path(get, path = "/_anteroom/v1/rooms/{room}/events", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "The ticket token (EventSource cannot send headers)")),
    responses(
        (status = 200, description = "The event stream; each event's data is the status JSON", content_type = "text/event-stream", body = api::StatusBody),
        (status = 400, description = "No ticket, or one that does not verify", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such room", body = Problem, content_type = "application/problem+json"),
        (status = 410, description = "The ticket expired", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The ticket, or the client address, has as many streams open as it may (`too_many_streams`, with `Retry-After`): poll instead", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "This node holds as many streams as it can: poll instead", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn events() {}

/// Leaves the queue (or gives up an admitted slot or a session). Leaving twice is fine.
#[utoipa::path(delete, path = "/_anteroom/v1/rooms/{room}/ticket", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "The ticket token")),
    responses(
        (status = 204, description = "Left"),
        (status = 400, description = "No ticket, or one that does not verify", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such room", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn leave() {}

/// The same as `DELETE …/ticket`, for `navigator.sendBeacon` (which can only POST).
#[utoipa::path(post, path = "/_anteroom/v1/rooms/{room}/leave", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "The ticket token")),
    responses(
        (status = 204, description = "Left"),
        (status = 400, description = "No ticket, or one that does not verify", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such room", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn leave_beacon() {}

/// The room's public summary, cacheable for a second.
#[utoipa::path(get, path = "/_anteroom/v1/rooms/{room}", tag = "public",
    params(("room" = String, Path, description = "Room id")),
    responses(
        (status = 200, description = "The summary", body = api::RoomSummary),
        (status = 404, description = "No such room", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store cannot be reached", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn summary() {}

/// The backend ends a session early (completed), freeing its slot and revoking its pass.
#[utoipa::path(post, path = "/_anteroom/v1/rooms/{room}/sessions/{session}/complete", tag = "public",
    security(("service_key" = [])),
    params(("room" = String, Path, description = "Room id"), ("session" = String, Path, description = "Session id (the pass's sub)")),
    responses(
        (status = 200, description = "The session after", body = api::SessionBody),
        (status = 401, description = "No valid service key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such room or session", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn complete_session() {}

/// The backend ends a session early (abandoned), freeing its slot and revoking its pass.
#[utoipa::path(post, path = "/_anteroom/v1/rooms/{room}/sessions/{session}/abandon", tag = "public",
    security(("service_key" = [])),
    params(("room" = String, Path, description = "Room id"), ("session" = String, Path, description = "Session id (the pass's sub)")),
    responses(
        (status = 200, description = "The session after", body = api::SessionBody),
        (status = 401, description = "No valid service key", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such room or session", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn abandon_session() {}

/// The waiting page: joins (or resumes) server-side and shows position, people ahead and ETA;
/// `Accept: application/json` gets the status JSON instead.
#[utoipa::path(get, path = "/_anteroom/wait/{room}", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("return" = Option<String>, Query, description = "Where to go once admitted (same-origin path)"),
        ("lang" = Option<String>, Query, description = "`en` or `ko`"),
        ("code" = Option<String>, Query, description = "A priority access code, for a new ticket in the priority lane")),
    responses(
        (status = 200, description = "The page (or the status JSON)", content(
            (String = "text/html"), (api::StatusBody = "application/json"))),
        (status = 400, description = "A query the page cannot take", content(
            (String = "text/html"), (Problem = "application/problem+json"))),
        (status = 303, description = "The room requires another room's pass first: that room's page, which returns here once admitted"),
        (status = 403, description = "A priority access code that is wrong or used up; or the room's identity header came from a peer outside `trusted_proxies`; or (JSON) another room's pass is required first", content(
            (String = "text/html"), (Problem = "application/problem+json"))),
        (status = 404, description = "No such room, or an unknown query parameter", content(
            (String = "text/html"), (Problem = "application/problem+json"))),
        (status = 429, description = "Over the per-IP join limit, or too many priority code attempts from this address", content(
            (String = "text/html"), (Problem = "application/problem+json"))),
        (status = 503, description = "Closed, or the store cannot be reached", content(
            (String = "text/html"), (Problem = "application/problem+json"))),
    ))]
#[allow(dead_code)]
fn waiting_page() {}

/// The public keys that verify passes.
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "public",
    responses((status = 200, description = "A JWK set", body = Object)))]
#[allow(dead_code)]
fn jwks() {}

/// Liveness.
#[utoipa::path(get, path = "/_anteroom/healthz", tag = "public",
    responses((status = 200, description = "ok", content_type = "text/plain", body = String)))]
#[allow(dead_code)]
fn health() {}

/// Readiness (SPEC §14.6): 200 only when the store answers, the signing keys are loaded and
/// every room of the config file is installed; 503 `not_ready` (naming why) otherwise and
/// while the node drains for a shutdown.
#[utoipa::path(get, path = "/_anteroom/readyz", tag = "public",
    responses(
        (status = 200, description = "Ready", body = crate::readiness::Ready),
        (status = 503, description = "Not ready (`not_ready`)", body = Problem, content_type = "application/problem+json"),
    ))]
#[allow(dead_code)]
fn ready() {}
