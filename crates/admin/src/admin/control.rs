//! The operator's controls: pause, resume, close, open, advance, reset, passes by hand, and
//! the origin's load signal for adaptive admission (SPEC §5.4).

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use anteroom_core::RoomId;
use anteroom_core::adaptive::LoadSignal;
use anteroom_core::duration::parse_duration;
use anteroom_core::engine::{MAX_IDENTITY_LEN, RoomSnapshot};
use anteroom_core::room::Mode;

use super::auth::WriteAccess;
use super::bodies::json_body;
use super::conditional::{IfMatch, RoomTag, update_room};
use anteroom_api::join_path::sign_pass;
use anteroom_api::parse_room;

use super::AdminState;
use crate::admin_event::AdminEvent;
use anteroom_api::error::ApiError;
use anteroom_api::problem_answers;
use anteroom_core::config::format_time;

/// The most tickets one advance admits.
const MAX_ADVANCE: u64 = 1_000_000_000;

/// The longest pass an operator can issue by hand (the key pruning horizon counts it).
const MAX_PASS_TTL: Duration = anteroom_api::MAX_HAND_ISSUED_PASS_TTL;

/// A room's figures after a control.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RoomFigures {
    /// Room id.
    pub(crate) room: String,
    /// `queue`, `queue_all`, `passthrough` or `closed`.
    pub(crate) mode: &'static str,
    /// Generation (bumped by a reset).
    pub(crate) generation: u32,
    /// Highest admitted position.
    pub(crate) serving: u64,
    /// The position the next visitor gets.
    pub(crate) next_position: u64,
    /// Live waiting tickets.
    pub(crate) waiting: u64,
    /// Active sessions.
    pub(crate) active: u64,
    /// Admitted tickets that have not claimed their pass yet.
    pub(crate) admitted_unclaimed: u64,
}

impl RoomFigures {
    pub(crate) fn new(room: &RoomId, snapshot: &RoomSnapshot) -> RoomFigures {
        RoomFigures {
            room: room.to_string(),
            mode: snapshot.mode.as_str(),
            generation: snapshot.generation,
            serving: snapshot.serving,
            next_position: snapshot.last_position + 1,
            waiting: snapshot.waiting,
            active: snapshot.active,
            admitted_unclaimed: snapshot.admitted_unclaimed,
        }
    }
}

/// `POST …/advance` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdvanceBody {
    /// How many more waiting tickets to admit now (bounded by the line and free capacity).
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub(crate) count: u64,
}

/// `POST …/advance` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Advanced {
    /// How many tickets were admitted (may be fewer than asked: the line or capacity ran out).
    pub(crate) admitted: u64,
    /// The room after.
    #[serde(flatten)]
    pub(crate) figures: RoomFigures,
}

/// `POST …/reset` body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetBody {
    /// Also delete the old generation's tickets and sessions.
    #[serde(default)]
    pub(crate) purge: bool,
}

/// `POST …/passes` body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PassRequest {
    /// Identity bound to the pass (`uid`).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 256)]
    pub(crate) uid: Option<String>,
    /// Lifetime, such as `"30m"`; the room's `session_ttl` when absent (at most 7 days).
    #[serde(default)]
    #[schema(pattern = "^[1-9][0-9]{0,2}(s|m|h)$", example = "30m")]
    pub(crate) ttl: Option<String>,
}

/// `POST …/passes` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct IssuedPass {
    /// Room id.
    pub(crate) room: String,
    /// The session the pass stands for (`sub` and `jti`).
    pub(crate) session: String,
    /// The signed pass (a JWT).
    pub(crate) pass: String,
    /// When it expires.
    pub(crate) expires_at: String,
}

/// A control that sets the room's mode through a conditional write: the handler `$name` for
/// `POST /admin/v1/rooms/{room}/$name`, recorded as `$name` in the event log.
macro_rules! mode_control {
    ($(#[$doc:meta])* $name:ident, $path:tt, $mode:expr, $description:tt) => {
        $(#[$doc])*
        #[utoipa::path(post, path = $path, tag = "admin",
            security(("admin_key" = [])),
            params(("room" = String, Path, description = "Room id"), super::conditional::IfMatchHeader),
            description = $description,
            responses(
                (status = 200, description = "The room after", body = RoomFigures, headers(("ETag" = String, description = "The room's new version"))),
                problem_answers::ConditionalControl,
            ))]
        pub(crate) async fn $name(
            _: WriteAccess,
            State(admin): State<AdminState>,
            Path(room): Path<String>,
            headers: HeaderMap,
        ) -> Result<Response, ApiError> {
            set_mode(&admin, &room, &headers, $mode, stringify!($name)).await
        }
    };
}

mode_control!(
    /// `POST /admin/v1/rooms/{room}/pause`: Stops admission; everyone queues and keeps their place (mode queue_all).
    pause,
    "/admin/v1/rooms/{room}/pause",
    Mode::QueueAll,
    "Stops admission; everyone queues and keeps their place (mode queue_all)."
);

mode_control!(
    /// `POST /admin/v1/rooms/{room}/resume`: Starts admission again (mode queue).
    resume,
    "/admin/v1/rooms/{room}/resume",
    Mode::Queue,
    "Starts admission again (mode queue)."
);

mode_control!(
    /// `POST /admin/v1/rooms/{room}/close`: Closes the room: joins are refused and protected routes answer 503.
    close,
    "/admin/v1/rooms/{room}/close",
    Mode::Closed,
    "Closes the room: joins are refused and protected routes answer 503."
);

mode_control!(
    /// `POST /admin/v1/rooms/{room}/open`: Opens a closed room again (mode queue).
    open,
    "/admin/v1/rooms/{room}/open",
    Mode::Queue,
    "Opens a closed room again (mode queue)."
);

/// Sets the room's mode through a conditional write (see `conditional.rs`).
async fn set_mode(
    admin: &AdminState,
    room: &str,
    headers: &HeaderMap,
    mode: Mode,
    verb: &str,
) -> Result<Response, ApiError> {
    let id = parse_room(room)?;
    let if_match = IfMatch::from_headers(headers)?;
    let (config, snapshot) = update_room(admin, &id, &if_match, |mut config| {
        config.mode = mode;
        Ok(config)
    })
    .await?;
    admin
        .record(AdminEvent::room_updated(
            &id,
            verb,
            admin.now(),
            super::rooms::room_json(&config),
        ))
        .await;
    let mut response = Json(RoomFigures::new(&id, &snapshot)).into_response();
    RoomTag::of(&config).set_on(response.headers_mut());
    Ok(response)
}

/// `POST /admin/v1/rooms/{room}/advance`
#[utoipa::path(post, path = "/admin/v1/rooms/{room}/advance", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id")),
    request_body = AdvanceBody,
    description = "Admits up to `count` more waiting tickets now, lowest positions first, \
        bounded by the last issued position and by free capacity (so I2 holds); the admission \
        rate and a pause do not hold it back.",
    responses(
        (status = 200, description = "What was admitted and the room after", body = Advanced),
        problem_answers::BadBody, problem_answers::WriteRefused, problem_answers::RoomNotFound,
    ))]
pub(crate) async fn advance(
    _: WriteAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Advanced>, ApiError> {
    let id = parse_room(&room)?;
    let Some(AdvanceBody { count }) = json_body(body)? else {
        return Err(ApiError::bad_request(
            "invalid_body",
            "advance needs a body such as {\"count\": 10}",
        ));
    };
    if !(1..=MAX_ADVANCE).contains(&count) {
        return Err(ApiError::bad_request(
            "invalid_body",
            format!("count must be 1 to {MAX_ADVANCE}"),
        ));
    }
    let (admitted, snapshot) = admin.app().store().advance(&id, count).await?;
    admin
        .record(AdminEvent::new(
            "counter.advanced",
            Some(&id),
            admin.now(),
            serde_json::json!({"asked": count, "admitted": admitted, "serving": snapshot.serving}),
        ))
        .await;
    Ok(Json(Advanced {
        admitted,
        figures: RoomFigures::new(&id, &snapshot),
    }))
}

/// `POST /admin/v1/rooms/{room}/reset`
#[utoipa::path(post, path = "/admin/v1/rooms/{room}/reset", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id")),
    request_body(content = Option<ResetBody>, description = "Optional; `purge` deletes the old generation's records"),
    description = "Starts a new generation: every waiting and admitted ticket ends, every \
        active session is revoked; tickets and passes of older generations are refused.",
    responses(
        (status = 200, description = "The room after", body = RoomFigures),
        problem_answers::BadBody, problem_answers::WriteRefused, problem_answers::RoomNotFound,
    ))]
pub(crate) async fn reset(
    _: WriteAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RoomFigures>, ApiError> {
    let id = parse_room(&room)?;
    let ResetBody { purge } = json_body(body)?.unwrap_or_default();
    let snapshot = admin.app().store().reset(&id, purge).await?;
    admin
        .record(AdminEvent::new(
            "room.reset",
            Some(&id),
            admin.now(),
            serde_json::json!({"purge": purge, "generation": snapshot.generation}),
        ))
        .await;
    Ok(Json(RoomFigures::new(&id, &snapshot)))
}

/// `POST /admin/v1/rooms/{room}/passes`
#[utoipa::path(post, path = "/admin/v1/rooms/{room}/passes", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id")),
    request_body(content = Option<PassRequest>, description = "Optional uid and lifetime"),
    description = "Issues a pass by hand (VIP or bypass): opens a session that counts \
        against capacity like any other (refused while every slot is taken), and returns its \
        signed JWT.",
    responses(
        (status = 201, description = "The pass", body = IssuedPass),
        problem_answers::RoomFull, problem_answers::BadBody, problem_answers::WriteRefused, problem_answers::RoomNotFound,
    ))]
pub(crate) async fn issue_pass(
    _: WriteAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = parse_room(&room)?;
    let request: PassRequest = json_body(body)?.unwrap_or_default();
    if let Some(uid) = &request.uid
        && (uid.is_empty() || uid.len() > MAX_IDENTITY_LEN)
    {
        return Err(ApiError::bad_request(
            "invalid_body",
            format!("uid must be 1 to {MAX_IDENTITY_LEN} bytes"),
        ));
    }
    let store = admin.app().store();
    let config = store.room(&id).await?;
    let ttl = match &request.ttl {
        None => config.session_ttl,
        Some(text) => match parse_duration(text) {
            Ok(ttl) if !ttl.is_zero() && ttl <= MAX_PASS_TTL => ttl,
            Ok(_) => {
                return Err(ApiError::bad_request(
                    "invalid_body",
                    "ttl must be longer than zero and at most 7d",
                ));
            }
            Err(error) => {
                return Err(ApiError::bad_request(
                    "invalid_body",
                    format!("ttl: {error}"),
                ));
            }
        },
    };
    let session = store.issue_session(&id, request.uid, ttl).await?;
    let pass = sign_pass(admin.app(), &id, &session)?;
    // The store wrote the sinks' `pass.issued` with the session; the live feed shows it too.
    admin.record_locally(vec![AdminEvent::new(
        "pass.issued",
        Some(&id),
        admin.now(),
        serde_json::json!({"session": session.id.to_string(), "by_hand": true}),
    )]);
    let body = IssuedPass {
        room: id.to_string(),
        session: session.id.to_string(),
        pass,
        expires_at: format_time(session.expires_at),
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// The body of `PUT /admin/v1/rooms/{room}/signal`: the origin's own view of its health.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SignalBody {
    /// The origin's 95th-percentile latency over its last few seconds, in milliseconds.
    #[schema(minimum = 0)]
    p95_ms: f64,
    /// The origin's share of failed (5xx) answers over the same time, 0 to 1; 0 when absent.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    error_rate: Option<f64>,
    /// Requests the origin is working on (shown in stats and metrics only).
    #[serde(default)]
    #[schema(minimum = 0)]
    in_flight: Option<u64>,
}

/// `PUT /admin/v1/rooms/{room}/signal`
#[utoipa::path(put, path = "/admin/v1/rooms/{room}/signal", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id")),
    request_body(content = SignalBody, description = "The origin's load signal"),
    description = "The origin's load signal for adaptive admission (SPEC §5.4), for origins \
        not behind the gateway. The signal is kept in the store: the room's controller on every \
        node sharing it uses the last signal any node received while it is at most 30 s old; \
        without one for 30 s the rate drops to `min_per_minute`. Sending it to one node is \
        enough.",
    responses(
        (status = 204, description = "Taken"),
        problem_answers::BadSignalBody, problem_answers::WriteRefused, problem_answers::RoomNotFound, problem_answers::NotAdaptive, problem_answers::StoreUnreachable,
    ))]
pub(crate) async fn signal(
    _: WriteAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = parse_room(&room)?;
    let Some(body) = json_body::<SignalBody>(body)? else {
        return Err(ApiError::bad_request(
            "invalid_json",
            "the body must be {\"p95_ms\": …, \"error_rate\": …}",
        ));
    };
    let mut problems = Vec::new();
    if !(body.p95_ms.is_finite() && body.p95_ms >= 0.0) {
        problems.push((
            "p95_ms".to_owned(),
            "must be a number of milliseconds, at least 0".to_owned(),
        ));
    }
    let error_rate = body.error_rate.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&error_rate) {
        problems.push((
            "error_rate".to_owned(),
            "must be between 0 and 1".to_owned(),
        ));
    }
    if !problems.is_empty() {
        return Err(
            ApiError::bad_request("invalid_signal", "the signal has invalid fields")
                .with_errors(problems),
        );
    }
    let config = admin.app().store().room(&id).await?;
    if config.adaptive.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_adaptive",
            "this room has no [room.adaptive]; add one to use load signals",
        ));
    }
    // In the store, not this node: every node's controller reads it (SPEC §5.4).
    let signal = LoadSignal {
        p95_ms: body.p95_ms,
        error_rate,
        in_flight: body.in_flight,
        received_at: admin.now(),
    };
    admin.app().store().put_load_signal(&id, signal).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
