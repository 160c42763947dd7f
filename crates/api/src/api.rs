//! The public JSON API under `/_anteroom/v1` (SPEC §6.1): join, status, leave, the room
//! summary, the JWKS, and the backend's session endpoints.
//!
//! Wire types live in this crate, not in the core: the status JSON is shaped exactly as §6.1
//! shows it (`status_json.rs`).
//! In a scheduled pre-queue `state` is `prequeue` with `opens_at`, and `ahead` and
//! `eta_seconds` are `null`: the order is not drawn yet.
//!
//! Join and status are on every visitor's path: they read the headers in place from the
//! request (an extracted `HeaderMap` would be a copy), and a join without a body collects
//! none. Their answer is written by `status_json.rs`.

use axum::Json;
use axum::body::{Bytes, HttpBody as _};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequest as _, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use anteroom_core::config::format_time;
use anteroom_core::engine::{AdmittedView, Entry, Session, SessionEnd, TicketRef, WaitingView};
use anteroom_core::eta::{
    ConfiguredPace, Estimate, next_poll_ms, next_poll_ms_within, with_configured_fallback,
};
use anteroom_core::ids::IdText;
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_core::{RoomId, TicketId};
use anteroom_token::{PassClaims, PassClaimsView};

use crate::AppState;
use crate::cookies::{PASS_COOKIE_PREFIX, TICKET_COOKIE_PREFIX, read_room_cookie};
use crate::error::ApiError;
use crate::join_gate::{self, Caller, Door, JoinAsk};
use crate::status_json::{EtaBasisName, StatusBody, TicketState};
use crate::ticket_request::{
    TicketQuery, held_ticket, parse_room, parse_session, refuse_cross_site, ticket_in_url,
    ticket_query,
};
use crate::view_status;

/// How long the ticket cookie lives in the browser; the store decides whether it still counts.
const TICKET_COOKIE_MAX_AGE_SECS: u64 = 24 * 3600;

/// The longest `return` path accepted.
const MAX_RETURN_LEN: usize = 2048;

/// What of a room's configuration shapes its status answers: small enough for every event
/// stream to keep a copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatusTerms {
    pub(crate) mode: Mode,
    pub(crate) pace: ConfiguredPace,
}

impl StatusTerms {
    /// The terms a status answer states for a room configured as `config`.
    pub(crate) fn of(config: &RoomConfig) -> StatusTerms {
        StatusTerms {
            mode: config.mode,
            pace: ConfiguredPace::of(config),
        }
    }
}

/// `eta_seconds` and `eta_basis` of an estimate.
pub(crate) fn eta_fields(estimate: Option<Estimate>) -> (Option<u64>, Option<EtaBasisName>) {
    match estimate {
        Some(estimate) => (Some(estimate.seconds), Some(estimate.basis.into())),
        None => (None, None),
    }
}

/// The optional body of a join.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinBody {
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
    // Kept as JSON here: `challenge.rs` reads it, and refuses a malformed one as a failed
    // challenge rather than a bad body.
    #[schema(value_type = Option<crate::challenge::Solution>)]
    challenge: Option<serde_json::Value>,
}

/// Public summary of a room, cacheable for a second.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct RoomSummary {
    room: String,
    mode: &'static str,
    serving: u64,
    waiting: u64,
    active: u64,
    admit_per_minute: u64,
    eta_seconds_for_new: Option<u64>,
}

/// The answer to a session's complete/abandon.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct SessionBody {
    room: String,
    session: String,
    state: &'static str,
}

/// Joins the queue, or resumes the caller's ticket (idempotent with a valid ticket or
/// identity). Sets the ticket cookie; in a room that can admit at once, answers `admitted`
/// with the pass.
#[utoipa::path(post, path = "/_anteroom/v1/rooms/{room}/join", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "A ticket token held (EventSource clients)")),
    request_body(content = Option<JoinBody>, description = "Optional"),
    responses(
        (status = 200, description = "The ticket's status", body = StatusBody),
        crate::problem_answers::JoinProblems,
    ))]
pub(crate) async fn join(
    State(app): State<AppState>,
    Path(room): Path<String>,
    query: Result<Query<TicketQuery>, QueryRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    // Takes the request itself rather than a `HeaderMap` and a body: the headers are read in
    // place (the extractor copies them), and a request without a body is not collected.
    let (room, query) = room_and_ticket_query(&room, query)?;
    refuse_cross_site(request.headers())?;
    let (mut parts, body) = request.into_parts();
    let headers = std::mem::take(&mut parts.headers);
    let (extensions, body) = if body.is_end_stream() {
        (std::mem::take(&mut parts.extensions), Bytes::new())
    } else {
        // The body limit travels in the extensions, which stay with the parts; the join gate
        // reads the connection's details from a copy.
        let extensions = parts.extensions.clone();
        let body = Bytes::from_request(Request::from_parts(parts, body), &())
            .await
            .map_err(|rejection: BytesRejection| {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    rejection.body_text(),
                )
            })?;
        (extensions, body)
    };
    let join_body: JoinBody = if body.iter().all(u8::is_ascii_whitespace) {
        JoinBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request("invalid_json", format!("the join body is not valid: {e}"))
        })?
    };
    let return_to = join_body
        .return_to
        .map(|path| validate_return(&path))
        .transpose()?;
    let config = app.api_room_config(&room).await?;
    let caller = Caller {
        query: Some(&query),
        ..Caller::new(&headers, &extensions)
    };
    let ask = JoinAsk {
        return_to,
        priority_code: join_body.priority_code,
        solution: join_body.challenge,
    };
    match join_gate::join(&app, &room, &config, &caller, Door::Api, ask).await {
        Ok(entry) => {
            let response = entry_response(&app, &room, &config, entry);
            Ok(without_cookies_unless(
                !ticket_in_url(&headers, &query),
                response,
            ))
        }
        Err(refusal) => Ok(refusal.into_response()),
    }
}

/// The caller's ticket status; keeps the ticket alive. Once admitted, issues (or re-returns)
/// the pass and sets the pass cookie. A waiting ticket whose client says which `ahead` it was
/// last shown (`X-Anteroom-Ahead`) may be answered from the node's view of the line instead
/// of the store.
#[utoipa::path(get, path = "/_anteroom/v1/rooms/{room}/status", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "The ticket token, unless sent as cookie or X-Anteroom-Ticket"),
        ("X-Anteroom-Ahead" = Option<u64>, Header, description = "The `ahead` of the last status the client was shown: the node may then answer from its view of the line, never with more people ahead (400 `invalid_ahead` when not a whole number)")),
    responses(
        (status = 200, description = "The ticket's status; with an `Age` header (seconds) when answered from the node's view of the line, which shows the line as that view read it", body = StatusBody),
        crate::problem_answers::HeldTicket, crate::problem_answers::TicketGone, crate::problem_answers::StoreUnreachable,
    ))]
pub(crate) async fn status(
    State(app): State<AppState>,
    Path(room): Path<String>,
    query: Result<Query<TicketQuery>, QueryRejection>,
    request: Request,
) -> Result<Response, ApiError> {
    // Reads the headers in place from the request (a `HeaderMap` extractor copies them).
    let (room, query) = room_and_ticket_query(&room, query)?;
    let token = held_ticket(request.headers(), &query, &room)
        .ok_or_else(|| ApiError::bad_request("ticket_missing", "no ticket: join the room first"))?;
    let shown_ahead = view_status::shown_ahead(request.headers())?;
    let cookies = !ticket_in_url(request.headers(), &query);
    let (reference, position) = app.verify_ticket_at(&room, token)?;
    let config = app.api_room_config(&room).await?;
    if let Some(answer) =
        view_status::answer(&app, &room, &config, reference, position, shown_ahead)
    {
        // Like a cache's answer, it states how old the line it shows is.
        let mut response = entry_response(&app, &room, &config, answer.entry);
        response
            .headers_mut()
            .insert(header::AGE, HeaderValue::from(answer.age.as_secs()));
        return Ok(without_cookies_unless(cookies, response));
    }
    let entry = app
        .store()
        .status(&room, reference)
        .await
        .map_err(|error| app.store_error(&room, "status", error))?;
    let response = entry_response(&app, &room, &config, entry);
    Ok(without_cookies_unless(cookies, response))
}

/// `response`, its cookies taken out unless `cookies` (see [`ticket_in_url`]).
fn without_cookies_unless(cookies: bool, mut response: Response) -> Response {
    if !cookies {
        response.headers_mut().remove(header::SET_COOKIE);
    }
    response
}

/// Leaves the queue (or gives up an admitted slot or a session). Leaving twice is fine.
#[utoipa::path(delete, path = "/_anteroom/v1/rooms/{room}/ticket", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "The ticket token")),
    responses(
        (status = 204, description = "Left"),
        crate::problem_answers::HeldTicket,
    ))]
pub(crate) async fn leave(
    State(app): State<AppState>,
    Path(room): Path<String>,
    query: Result<Query<TicketQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (room, query) = room_and_ticket_query(&room, query)?;
    refuse_cross_site(&headers)?;
    let token = held_ticket(&headers, &query, &room)
        .ok_or_else(|| ApiError::bad_request("ticket_missing", "no ticket to leave with"))?;
    let reference = app.verify_ticket(&room, token)?;
    match owed_leave(&app, &room, reference).await {
        // Leaving twice, or after the ticket expired, is not an error: the visitor is out.
        Ok(()) | Err(anteroom_store::StoreError::Engine(_)) => {}
        Err(other) => return Err(app.store_error(&room, "leave", other)),
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    // The visitor's cookie is cleared only when it named the ticket that left: a ticket
    // named in the URL may be anybody's.
    let cookie_left = read_room_cookie(&headers, TICKET_COOKIE_PREFIX, room.as_str())
        .is_some_and(|cookie| cookie.trim() == token.trim());
    if cookie_left
        && let Some(clear) = app
            .cookies()
            .clear_for_room(TICKET_COOKIE_PREFIX, room.as_str())
    {
        response.headers_mut().append(header::SET_COOKIE, clear);
    }
    Ok(response)
}

/// Leaves made in tasks of their own at once, at most, in the process. A task outlives its
/// request and the request's per-address permit, so while the store is held up, leaves whose
/// clients close could otherwise gather tasks as fast as they come (each ends within the
/// store's call bound); past this, a leave is made within its request.
const MAX_OWED_LEAVES: usize = 4096;

static OWED_LEAVES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_OWED_LEAVES);

/// Makes a verified ticket's leave in a task of its own, so it is made even if the request
/// goes away first: a page's leave beacon does not wait for the answer, and a place kept for
/// someone gone holds up the line behind it until the ticket expires. Without the task, a
/// leave that had to wait (the store connecting again after a cut) went with its request.
async fn owed_leave(
    app: &AppState,
    room: &RoomId,
    reference: TicketRef,
) -> Result<(), anteroom_store::StoreError> {
    let Ok(permit) = OWED_LEAVES.try_acquire() else {
        return app.store().leave(room, reference).await;
    };
    let store = app.store().clone();
    let room = room.clone();
    tokio::spawn(async move {
        let _permit = permit;
        store.leave(&room, reference).await
    })
    .await
    .unwrap_or_else(|failed| {
        Err(anteroom_store::StoreError::Backend {
            message: "the leave's task failed".to_owned(),
            source: Some(Box::new(failed)),
        })
    })
}

/// The same as `DELETE …/ticket`, for `navigator.sendBeacon` (which can only POST).
#[utoipa::path(post, path = "/_anteroom/v1/rooms/{room}/leave", tag = "public",
    params(("room" = String, Path, description = "Room id"),
        ("ticket" = Option<String>, Query, description = "The ticket token")),
    responses(
        (status = 204, description = "Left"),
        crate::problem_answers::HeldTicket,
    ))]
pub(crate) async fn leave_beacon(
    state: State<AppState>,
    room: Path<String>,
    query: Result<Query<TicketQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    leave(state, room, query, headers).await
}

/// The room's public summary, cacheable for a second.
#[utoipa::path(get, path = "/_anteroom/v1/rooms/{room}", tag = "public",
    params(("room" = String, Path, description = "Room id")),
    responses(
        (status = 200, description = "The summary", body = RoomSummary),
        crate::problem_answers::RoomNotFound, crate::problem_answers::StoreUnreachable,
    ))]
pub(crate) async fn summary(
    State(app): State<AppState>,
    Path(room): Path<String>,
) -> Result<Response, ApiError> {
    let room = parse_room(&room)?;
    let config = app.api_room_config(&room).await?;
    let snapshot = app
        .store()
        .snapshot(&room)
        .await
        .map_err(|error| app.store_error(&room, "snapshot", error))?;
    let body = RoomSummary {
        room: room.to_string(),
        mode: config.mode.as_str(),
        serving: snapshot.serving,
        waiting: snapshot.waiting,
        active: snapshot.active,
        admit_per_minute: config.admit_per_minute,
        eta_seconds_for_new: snapshot.eta_seconds_for_new,
    };
    let mut response = Json(body).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=1"),
    );
    Ok(response)
}

/// The public keys that verify passes.
#[utoipa::path(get, path = "/.well-known/jwks.json", tag = "public",
    responses((status = 200, description = "A JWK set", body = Object)))]
pub(crate) async fn jwks(State(app): State<AppState>) -> Response {
    let mut response = Json(app.keys().jwks()).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

/// A backend's session endpoint: the handler `$name` ends the session with `$reason`.
macro_rules! session_end {
    ($(#[$doc:meta])* $name:ident, $path:tt, $reason:expr) => {
        $(#[$doc])*
        #[utoipa::path(post, path = $path, tag = "public",
            security(("service_key" = [])),
            params(("room" = String, Path, description = "Room id"), ("session" = String, Path, description = "Session id (the pass's sub)")),
            responses(
                (status = 200, description = "The session after", body = SessionBody),
                crate::problem_answers::NoValidServiceKey, crate::problem_answers::RoomOrSessionNotFound,
            ))]
        pub(crate) async fn $name(
            state: State<AppState>,
            path: Path<(String, String)>,
            headers: HeaderMap,
        ) -> Result<Response, ApiError> {
            end_session(state, path, headers, $reason).await
        }
    };
}

session_end!(
    /// The backend ends a session early (completed), freeing its slot and revoking its pass.
    complete_session,
    "/_anteroom/v1/rooms/{room}/sessions/{session}/complete",
    SessionEnd::Completed
);

session_end!(
    /// The backend ends a session early (abandoned), freeing its slot and revoking its pass.
    abandon_session,
    "/_anteroom/v1/rooms/{room}/sessions/{session}/abandon",
    SessionEnd::Abandoned
);

async fn end_session(
    State(app): State<AppState>,
    Path((room, session)): Path<(String, String)>,
    headers: HeaderMap,
    reason: SessionEnd,
) -> Result<Response, ApiError> {
    app.require_service_key(&headers)?;
    let room = parse_room(&room)?;
    let session = parse_session(&session)?;
    let ended = app
        .store()
        .end_session(&room, session, reason)
        .await
        .map_err(|error| app.store_error(&room, "end_session", error))?;
    let state = match ended.state {
        anteroom_core::engine::SessionState::Active => "active",
        anteroom_core::engine::SessionState::Ended { reason, .. } => reason.as_str(),
    };
    Ok(Json(SessionBody {
        room: room.to_string(),
        session: session.to_string(),
        state,
    })
    .into_response())
}

/// Problem+json for any unknown path under the reserved prefix.
pub(crate) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// Problem+json for a known path asked with the wrong method.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take this method",
    )
}

/// Liveness.
#[utoipa::path(get, path = "/_anteroom/healthz", tag = "public",
    responses((status = 200, description = "ok", content_type = "text/plain", body = String)))]
pub(crate) async fn health() -> &'static str {
    "ok"
}

/// The room of the path and the `?ticket=` of a ticket's request.
fn room_and_ticket_query(
    room: &str,
    query: Result<Query<TicketQuery>, QueryRejection>,
) -> Result<(RoomId, TicketQuery), ApiError> {
    Ok((parse_room(room)?, ticket_query(query)?))
}

/// Accepts only same-origin relative paths, so admission can never redirect off-site.
pub(crate) fn validate_return(path: &str) -> Result<String, ApiError> {
    let refuse = || {
        ApiError::bad_request(
            "invalid_return",
            "return must be a relative path starting with a single /",
        )
    };
    if path.len() > MAX_RETURN_LEN
        || !path.starts_with('/')
        || path.starts_with("//")
        || path.contains('\\')
        || path.chars().any(char::is_control)
    {
        return Err(refuse());
    }
    Ok(path.to_owned())
}

/// What a ticket's entry means for the client: the status JSON (with the signed pass once
/// admitted), and the pass cookie's lifetime.
pub(crate) struct EntryAnswer {
    /// The status JSON, with the signed pass in `pass` once admitted.
    pub(crate) body: StatusBody,
    /// The pass cookie's lifetime in seconds, once admitted.
    pub(crate) pass_max_age: Option<u64>,
}

/// The signed ticket token for a ticket.
pub(crate) fn ticket_token(
    app: &AppState,
    room: &RoomId,
    ticket: TicketId,
    position: u64,
    generation: u32,
) -> String {
    app.keys().ticket_signer().sign_fields(
        room.as_str(),
        ticket.to_text().as_str(),
        position,
        generation,
    )
}

/// Shapes an entry as §6.1's status JSON, signing the pass when admitted.
pub(crate) fn entry_answer(
    app: &AppState,
    room: &RoomId,
    terms: StatusTerms,
    entry: Entry,
) -> Result<EntryAnswer, ApiError> {
    match entry {
        Entry::Waiting(view) => Ok(waiting_answer(app, room, terms, &view)),
        Entry::Admitted(view) => admitted_answer(app, room, view),
    }
}

/// The status JSON of a waiting ticket.
fn waiting_answer(
    app: &AppState,
    room: &RoomId,
    terms: StatusTerms,
    view: &WaitingView,
) -> EntryAnswer {
    let state = if view.opens_at.is_some() {
        TicketState::Prequeue
    } else if view.paused || terms.mode == Mode::QueueAll {
        TicketState::Paused
    } else {
        TicketState::Waiting
    };
    // Before the draw the order is unknown: no `ahead`, no estimate.
    let ahead = view.opens_at.is_none().then_some(view.ahead);
    // Nobody is admitted while paused: no estimate (SPEC §5.5, null at a zero rate).
    let estimate = ahead
        .filter(|_| state != TicketState::Paused)
        .and_then(|ahead| with_configured_fallback(view.eta_seconds, ahead, terms.pace));
    let (eta_seconds, eta_basis) = eta_fields(estimate);
    let body = StatusBody {
        room: room.to_string(),
        state,
        ticket: ticket_token(app, room, view.ticket, view.position, view.generation),
        position: view.position,
        ahead,
        serving: view.serving,
        waiting: view.waiting,
        eta_seconds,
        eta_basis,
        // No later than the wait shown: an admission seen late holds a slot unused (I2).
        next_poll_ms: next_poll_ms_within(ahead.unwrap_or(0), eta_seconds, &mut rand::thread_rng()),
        opens_at: view.opens_at.map(format_time),
        pass: None,
        pass_expires_at: None,
        redirect: None,
    };
    EntryAnswer {
        body,
        pass_max_age: None,
    }
}

/// The status JSON of an admitted ticket, with its pass signed.
fn admitted_answer(
    app: &AppState,
    room: &RoomId,
    view: AdmittedView,
) -> Result<EntryAnswer, ApiError> {
    let session = &view.session;
    let pass = sign_pass(app, room, session)?;
    let body = StatusBody {
        room: room.to_string(),
        state: TicketState::Admitted,
        ticket: ticket_token(app, room, view.ticket, view.position, session.generation),
        position: view.position,
        ahead: Some(0),
        serving: view.serving,
        waiting: view.waiting,
        eta_seconds: Some(0),
        eta_basis: Some(EtaBasisName::Measured),
        next_poll_ms: next_poll_ms(0, &mut rand::thread_rng()),
        opens_at: None,
        pass: Some(pass),
        pass_expires_at: Some(format_time(session.expires_at)),
        redirect: Some(view.return_to.unwrap_or_else(|| "/".to_owned())),
    };
    let max_age = session
        .expires_at
        .as_secs()
        .saturating_sub(app.now().as_secs());
    Ok(EntryAnswer {
        body,
        pass_max_age: Some(max_age),
    })
}

/// The claims of the pass of `session`: `iat` is its last renewal, `exp` its current expiry.
pub(crate) fn pass_claims(app: &AppState, room: &RoomId, session: &Session) -> PassClaims {
    let id = session.id.to_text();
    pass_claims_view(app, room, session, &id).to_claims()
}

/// [`pass_claims`] borrowed from the session, its room and `id`, the session id's text (both
/// `sub` and `jti`): what the pass is signed from.
fn pass_claims_view<'a>(
    app: &'a AppState,
    room: &'a RoomId,
    session: &'a Session,
    id: &'a IdText,
) -> PassClaimsView<'a> {
    PassClaimsView {
        iss: &app.settings().issuer,
        aud: room.as_str(),
        sub: id.as_str(),
        jti: id.as_str(),
        iat: session.renewed_at.as_secs(),
        nbf: session.issued_at.as_secs(),
        exp: session.expires_at.as_secs(),
        pos: session.position,
        r#gen: session.generation,
        uid: session.uid.as_deref(),
        scope: anteroom_token::PASS_SCOPE,
    }
}

/// Signs the pass of `session`.
pub(crate) fn sign_pass(
    app: &AppState,
    room: &RoomId,
    session: &Session,
) -> Result<String, ApiError> {
    let id = session.id.to_text();
    app.keys()
        .sign_pass_view(&pass_claims_view(app, room, session, &id))
        .map_err(|error| {
            tracing::error!(%error, "cannot sign a pass");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the pass could not be issued",
            )
        })
}

/// The status JSON of an entry as a JSON value (for SSE events).
pub(crate) fn entry_body(
    app: &AppState,
    room: &RoomId,
    terms: StatusTerms,
    entry: Entry,
) -> serde_json::Value {
    match entry_answer(app, room, terms, entry) {
        Ok(answer) => serde_json::to_value(&answer.body).unwrap_or_default(),
        Err(error) => {
            serde_json::json!({"room": room.as_str(), "state": "error", "code": error.code()})
        }
    }
}

/// Adds the ticket cookie, and the pass cookie when there is a pass, to `headers`.
pub(crate) fn set_entry_cookies(
    app: &AppState,
    room: &RoomId,
    answer: &EntryAnswer,
    headers: &mut HeaderMap,
) {
    if let Some(cookie) = app.cookies().set_for_room(
        TICKET_COOKIE_PREFIX,
        room.as_str(),
        &answer.body.ticket,
        TICKET_COOKIE_MAX_AGE_SECS,
    ) {
        headers.append(header::SET_COOKIE, cookie);
    }
    if let (Some(pass), Some(max_age)) = (&answer.body.pass, answer.pass_max_age)
        && let Some(cookie) =
            app.cookies()
                .set_for_room(PASS_COOKIE_PREFIX, room.as_str(), pass, max_age)
    {
        headers.append(header::SET_COOKIE, cookie);
    }
}

pub(crate) fn entry_response(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    entry: Entry,
) -> Response {
    let answer = match entry_answer(app, room, StatusTerms::of(config), entry) {
        Ok(answer) => answer,
        Err(error) => return error.into_response(),
    };
    // Written by hand into a buffer of its exact size, which the body takes over as it is.
    let body = crate::status_json::encode(&answer.body);
    let mut response = Response::new(axum::body::Body::from(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    set_entry_cookies(app, room, &answer, headers);
    response
}
