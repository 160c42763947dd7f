//! Revoking one session by hand (SPEC §8.2): an operator ends a visitor's session, which
//! frees its slot and refuses its pass on every node.
//!
//! The store ends the session (as `revoked`) and adds it to the room's revocation set; this
//! node also remembers it at once, so its gateway and verify endpoint refuse the pass from the
//! next request. Other nodes learn it from the store's change notices (Redis), and every node
//! looks a cached pass's session up at least once a second, so the pass stops working
//! everywhere within a second. Revoking a session that already ended changes nothing and
//! answers how it ended.

use axum::Json;
use axum::extract::{Path, State};

use anteroom_core::engine::SessionEnd;

use super::auth::WriteAccess;
use super::stats::SessionItem;
use anteroom_api::{parse_room, parse_session};

use super::AdminState;
use anteroom_api::error::ApiError;
use anteroom_api::problem_answers;

/// `POST /admin/v1/rooms/{room}/sessions/{session}/revoke`
#[utoipa::path(post, path = "/admin/v1/rooms/{room}/sessions/{session}/revoke", tag = "admin",
    security(("admin_key" = [])),
    params(
        ("room" = String, Path, description = "Room id"),
        ("session" = String, Path, description = "Session id (the pass's `sub` and `jti`), as `sessions` lists it"),
    ),
    description = "Ends one active session as `revoked`: its slot frees at once and its pass \
        is refused by every node within a second. A session that already ended is left as it \
        is (the answer shows how it ended).",
    responses(
        (status = 200, description = "The session after", body = SessionItem),
        problem_answers::WriteRefused, problem_answers::RoomOrSessionNotFound, problem_answers::StoreUnreachable,
    ))]
pub(crate) async fn revoke_session(
    _: WriteAccess,
    State(admin): State<AdminState>,
    Path((room, session)): Path<(String, String)>,
) -> Result<Json<SessionItem>, ApiError> {
    let id = parse_room(&room)?;
    let session = parse_session(&session)?;
    let ended = admin
        .app()
        .store()
        .end_session(&id, session, SessionEnd::Revoked)
        .await?;
    admin.app().revocations().record(session);
    // The store wrote the `session.revoked` event with the change (SPEC §14.9).
    Ok(Json(SessionItem::new(&ended)))
}
