//! What an operator reads: a room's stats with its recent per-second history, and its sessions
//! listed by state a page at a time.
//!
//! Session pages are ordered by session id, and the cursor is the last id of the previous
//! page: a page holds the ids after it. Sessions that start or end between two calls may
//! appear or disappear, but walking the pages never shows one twice, and every session that
//! stays in the state throughout is shown exactly once.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use anteroom_core::engine::{Draw, RoomTotals, Session, SessionEnd, SessionState};
use anteroom_core::lottery::seed_to_hex;
use anteroom_store::{SessionFilter as StoreFilter, SessionQuery};

use super::auth::ReadAccess;
use super::history::HISTORY_SECONDS;
use anteroom_api::parse_room;

use super::AdminState;
use anteroom_api::error::ApiError;
use anteroom_api::problem_answers;
use anteroom_core::config::format_time;

/// Sessions a page holds unless `limit` says otherwise.
pub(crate) const DEFAULT_PAGE: usize = 100;
/// The most sessions one page holds.
pub(crate) const MAX_PAGE: usize = 500;

/// `GET …/stats` query.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct StatsQuery {
    /// Seconds of history to include (0 to 3600; 3600 when absent).
    #[param(minimum = 0, maximum = 3600)]
    history: Option<usize>,
}

/// A room's figures, totals, pace and recent history.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Stats {
    /// Room id.
    room: String,
    /// Mode.
    mode: &'static str,
    /// Generation.
    generation: u32,
    /// Live waiting tickets.
    waiting: u64,
    /// Highest admitted position.
    serving: u64,
    /// The position the next visitor gets.
    next_position: u64,
    /// Active sessions.
    active: u64,
    /// Admitted tickets that have not claimed their pass yet.
    admitted_unclaimed: u64,
    /// `max_active` (0 = unlimited).
    max_active: u64,
    /// `admit_per_minute` (0 = unlimited).
    admit_per_minute: u64,
    /// Running totals.
    totals: Totals,
    /// Measured admissions per minute; `null` while unknown.
    admission_rate_per_minute: Option<f64>,
    /// Expected wait, in seconds, for somebody joining now; `null` while unknown.
    eta_seconds_for_new: Option<u64>,
    /// The latest pre-queue lottery of a scheduled sale (SPEC §5.3); `null` before any.
    draw: Option<DrawBody>,
    /// Per-second history kept by this node (empty after a restart).
    history: HistoryBody,
    /// The adaptive controller's last run on this node (rooms with `[room.adaptive]`; absent
    /// until it first ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptive: Option<anteroom_api::adaptive_status::AdaptiveStatus>,
}

/// A pre-queue lottery, enough to reproduce it: list the cohort (the tickets waiting when it
/// was drawn) in the order they joined, and shuffle them with `seed` as
/// `docs/scheduled-sales.md` describes; the first gets the cohort's lowest position.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DrawBody {
    /// The `opens_at` of the event it was drawn for (RFC 3339).
    opens_at: String,
    /// When it was drawn (RFC 3339).
    drawn_at: String,
    /// The 32-byte seed, as 64 hex digits.
    seed: String,
    /// How many waiting tickets it ordered.
    cohort: u64,
    /// The last position issued before the draw: the cohort waited at or below it.
    through_position: u64,
}

impl From<Draw> for DrawBody {
    fn from(draw: Draw) -> DrawBody {
        DrawBody {
            opens_at: format_time(draw.opens_at),
            drawn_at: format_time(draw.drawn_at),
            seed: seed_to_hex(&draw.seed),
            cohort: draw.cohort,
            through_position: draw.through_position,
        }
    }
}

/// Running totals of a room.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Totals {
    joined: u64,
    admitted: u64,
    no_show: u64,
    abandoned: u64,
    left: u64,
    passes: u64,
    completed: u64,
    sessions_abandoned: u64,
    expired: u64,
}

impl From<RoomTotals> for Totals {
    fn from(totals: RoomTotals) -> Totals {
        Totals {
            joined: totals.joined,
            admitted: totals.admitted,
            no_show: totals.no_show,
            abandoned: totals.abandoned,
            left: totals.left,
            passes: totals.passes,
            completed: totals.completed,
            sessions_abandoned: totals.sessions_abandoned,
            expired: totals.expired,
        }
    }
}

/// Parallel per-second series, oldest first.
#[derive(Debug, Default, Serialize, ToSchema)]
pub(crate) struct HistoryBody {
    /// Unix seconds of each sample.
    at: Vec<u64>,
    /// Waiting tickets.
    waiting: Vec<u64>,
    /// Active sessions.
    active: Vec<u64>,
    /// Admitted-unclaimed tickets.
    admitted_unclaimed: Vec<u64>,
    /// Serving counter.
    serving: Vec<u64>,
    /// Admissions during that second.
    admitted: Vec<u64>,
    /// Joins during that second.
    joined: Vec<u64>,
    /// Upstream responses this node's gateway saw on the room's routes during that second.
    upstream_responses: Vec<u64>,
    /// Their median latency (time to the upstream's response headers) in milliseconds, to
    /// within 10 %; `null` for a second without responses.
    upstream_p50_ms: Vec<Option<f64>>,
    /// Their 95th-percentile latency in milliseconds, to within 10 %; `null` for a second
    /// without responses.
    upstream_p95_ms: Vec<Option<f64>>,
}

/// `GET /admin/v1/rooms/{room}/stats`
#[utoipa::path(get, path = "/admin/v1/rooms/{room}/stats", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id"), StatsQuery),
    responses(
        (status = 200, description = "The room's stats", body = Stats),
        problem_answers::BadQuery, problem_answers::NoValidKey, problem_answers::RoomNotFound,
    ))]
pub(crate) async fn stats(
    _: ReadAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
    query: Result<Query<StatsQuery>, QueryRejection>,
) -> Result<Json<Stats>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let seconds = query.history.unwrap_or(HISTORY_SECONDS);
    if seconds > HISTORY_SECONDS {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("history is at most {HISTORY_SECONDS} seconds"),
        ));
    }
    let id = parse_room(&room)?;
    let store = admin.app().store();
    let config = store.room(&id).await?;
    let snapshot = store.snapshot(&id).await?;
    let mut history = HistoryBody::default();
    for sample in admin.history().recent(&id, seconds) {
        history.at.push(sample.at);
        history.waiting.push(sample.waiting);
        history.active.push(sample.active);
        history.admitted_unclaimed.push(sample.admitted_unclaimed);
        history.serving.push(sample.serving);
        history.admitted.push(sample.admitted);
        history.joined.push(sample.joined);
        history.upstream_responses.push(sample.upstream_responses);
        history.upstream_p50_ms.push(sample.upstream_p50_ms);
        history.upstream_p95_ms.push(sample.upstream_p95_ms);
    }
    Ok(Json(Stats {
        room: id.to_string(),
        mode: snapshot.mode.as_str(),
        generation: snapshot.generation,
        waiting: snapshot.waiting,
        serving: snapshot.serving,
        next_position: snapshot.last_position + 1,
        active: snapshot.active,
        admitted_unclaimed: snapshot.admitted_unclaimed,
        max_active: config.max_active,
        admit_per_minute: config.admit_per_minute,
        totals: snapshot.totals.into(),
        admission_rate_per_minute: snapshot.admission_rate.map(|rate| rate * 60.0),
        eta_seconds_for_new: snapshot.eta_seconds_for_new,
        draw: snapshot.draw.map(DrawBody::from),
        history,
        adaptive: admin.app().adaptive().status(&id),
    }))
}

/// A session state to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SessionFilter {
    /// Holding a slot.
    Active,
    /// Ran out of time.
    Expired,
    /// Completed by the site.
    Completed,
    /// Given up by the site or the visitor.
    Abandoned,
    /// Revoked by an operator.
    Revoked,
    /// Ended by a reset.
    Reset,
}

impl SessionFilter {
    fn store_filter(self) -> StoreFilter {
        match self {
            SessionFilter::Active => StoreFilter::Active,
            SessionFilter::Expired => StoreFilter::Ended(SessionEnd::Expired),
            SessionFilter::Completed => StoreFilter::Ended(SessionEnd::Completed),
            SessionFilter::Abandoned => StoreFilter::Ended(SessionEnd::Abandoned),
            SessionFilter::Revoked => StoreFilter::Ended(SessionEnd::Revoked),
            SessionFilter::Reset => StoreFilter::Ended(SessionEnd::Reset),
        }
    }
}

/// `GET …/sessions` query.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SessionsQuery {
    /// Only sessions in this state; every state when absent.
    state: Option<SessionFilter>,
    /// The `next_cursor` of the previous page.
    #[param(max_length = 64, pattern = "^[A-Za-z0-9_-]*$")]
    cursor: Option<String>,
    /// Sessions per page, 1 to 500 (100 when absent).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
}

/// One page of sessions.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionPage {
    /// Room id.
    room: String,
    /// At most `limit` sessions, ordered by id.
    sessions: Vec<SessionItem>,
    /// Pass as `cursor` for the next page; `null` on the last page. With a `state` filter a
    /// page may hold fewer than `limit` sessions (each page examines a bounded number) and
    /// still be followed by more: follow `next_cursor` until it is `null`.
    next_cursor: Option<String>,
}

/// A session as listed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SessionItem {
    /// Session id (the pass's `sub` and `jti`).
    id: String,
    /// `active`, `expired`, `completed`, `abandoned`, `revoked` or `reset`.
    state: &'static str,
    /// The ticket's position; 0 for a pass issued by hand.
    position: u64,
    /// Room generation.
    generation: u32,
    /// Identity bound to the pass.
    uid: Option<String>,
    /// First issued.
    issued_at: String,
    /// Last renewed.
    renewed_at: String,
    /// When it expires (or expired) unless renewed.
    expires_at: String,
    /// When it ended; `null` while active.
    ended_at: Option<String>,
}

impl SessionItem {
    pub(crate) fn new(session: &Session) -> SessionItem {
        let (state, ended_at) = match session.state {
            SessionState::Active => ("active", None),
            SessionState::Ended { reason, at } => (reason.as_str(), Some(format_time(at))),
        };
        SessionItem {
            id: session.id.to_string(),
            state,
            position: session.position,
            generation: session.generation,
            uid: session.uid.clone(),
            issued_at: format_time(session.issued_at),
            renewed_at: format_time(session.renewed_at),
            expires_at: format_time(session.expires_at),
            ended_at,
        }
    }
}

/// `GET /admin/v1/rooms/{room}/sessions`
#[utoipa::path(get, path = "/admin/v1/rooms/{room}/sessions", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id"), SessionsQuery),
    responses(
        (status = 200, description = "One page of sessions", body = SessionPage),
        problem_answers::BadQuery, problem_answers::NoValidKey, problem_answers::RoomNotFound,
    ))]
pub(crate) async fn sessions(
    _: ReadAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
    query: Result<Query<SessionsQuery>, QueryRejection>,
) -> Result<Json<SessionPage>, ApiError> {
    let Query(query) = query.map_err(bad_query)?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("limit must be 1 to {MAX_PAGE}"),
        ));
    }
    let cursor = query.cursor.filter(|cursor| !cursor.is_empty());
    if let Some(cursor) = &cursor
        && (cursor.len() > 64
            || !cursor
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    {
        return Err(ApiError::bad_request(
            "invalid_query",
            "cursor must be the next_cursor of a previous page",
        ));
    }
    let id = parse_room(&room)?;
    let page = admin
        .app()
        .store()
        .session_page(
            &id,
            &SessionQuery {
                after: cursor,
                filter: query
                    .state
                    .map_or(StoreFilter::Any, SessionFilter::store_filter),
                limit,
            },
        )
        .await?;
    Ok(Json(SessionPage {
        room: id.to_string(),
        sessions: page.sessions.iter().map(SessionItem::new).collect(),
        next_cursor: page.next_after,
    }))
}

fn bad_query(rejection: QueryRejection) -> ApiError {
    ApiError::bad_request("invalid_query", rejection.body_text())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use anteroom_core::counters::CounterRecord;
    use anteroom_core::engine::RoomTotals;

    use super::Totals;

    #[test]
    fn the_stats_answer_carries_every_room_total_under_its_name() {
        let mut totals = RoomTotals::default();
        for (index, field) in RoomTotals::FIELDS.iter().enumerate() {
            *(field.slot)(&mut totals) = index as u64 + 1;
        }
        let json = serde_json::to_value(Totals::from(totals)).unwrap();
        let expected: serde_json::Map<String, serde_json::Value> = totals
            .fields()
            .map(|(name, value)| (name.to_owned(), value.into()))
            .collect();
        assert_eq!(json, serde_json::Value::Object(expected));
    }
}
