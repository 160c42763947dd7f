//! The join path as the crates above take it: the gateway of `anteroom-edge` joins a visitor
//! through the same gate as the public API (SPEC §14.2), hands out the entry as the status JSON
//! with its ticket and pass cookies, renews passes and shows the waiting page in place of a
//! protected one; the admin API signs the passes it issues by hand. Outcomes are typed
//! ([`JoinRefusal`], [`HeldBack`]): problem+json is made only when they are answered.
//!
//! This is the only way into the join path from outside the crate; the gate, the status
//! shaping and the pages stay crate-private behind it.

use axum::http::{Extensions, HeaderMap, HeaderValue, header};
use axum::response::Response;

use anteroom_core::RoomId;
use anteroom_core::engine::{Entry, Session};
use anteroom_core::room::RoomConfig;
use anteroom_token::PassClaims;

use crate::AppState;
use crate::api::{self, EntryAnswer, StatusTerms};
use crate::error::ApiError;
use crate::join_gate::{self, Caller, Door, JoinAsk};
use crate::page;

pub use crate::join_gate::{IdentityRefusal, JoinRefusal, SignIn, identity_from_header};
pub use crate::page::HeldBack;

/// A visitor without a pass at the gateway, asking for a protected page.
pub struct GatewayVisitor<'a> {
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The connection's details (the peer address) and what earlier layers left.
    pub extensions: &'a Extensions,
    /// Rooms this request was found to hold a valid pass of (or was just given one) earlier
    /// in the same request: what a room's `requires` is checked against.
    pub proven_passes: &'a [RoomId],
    /// Where the visitor goes once admitted (a safe relative address, [`safe_return`]).
    pub return_to: String,
}

/// Joins `visitor` to `room` (or resumes their place) through the join gate, as a protected
/// request at the gateway: admitted at once, waiting, or refused.
pub async fn join(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    visitor: GatewayVisitor<'_>,
) -> Result<Entry, JoinRefusal> {
    let caller = Caller {
        proven_passes: visitor.proven_passes,
        ..Caller::new(visitor.headers, visitor.extensions)
    };
    let ask = JoinAsk {
        return_to: Some(visitor.return_to),
        ..JoinAsk::default()
    };
    join_gate::join(app, room, config, &caller, Door::Gateway, ask).await
}

/// An entry as the visitor is given it: the ticket cookie (and the pass cookie once
/// admitted), the signed pass, and the status JSON.
pub struct GivenEntry {
    answer: EntryAnswer,
    /// `Set-Cookie` values: the ticket, and the pass when admitted.
    pub cookies: Vec<HeaderValue>,
}

impl GivenEntry {
    /// The signed pass, once admitted.
    pub fn pass(&self) -> Option<&str> {
        self.answer.body.pass.as_deref()
    }

    /// The status JSON (SPEC §6.1).
    pub fn status_json(&self) -> Option<serde_json::Value> {
        serde_json::to_value(&self.answer.body).ok()
    }
}

/// Gives `entry` in `room`: its status JSON and cookies, signing the pass when admitted.
pub fn give_entry(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    entry: Entry,
) -> Result<GivenEntry, ApiError> {
    let answer = api::entry_answer(app, room, StatusTerms::of(config), entry)?;
    let mut set = HeaderMap::new();
    api::set_entry_cookies(app, room, &answer, &mut set);
    let cookies = set.get_all(header::SET_COOKIE).iter().cloned().collect();
    Ok(GivenEntry { answer, cookies })
}

/// The claims of the pass of `session`: `iat` is its last renewal, `exp` its current expiry.
pub fn pass_claims(app: &AppState, room: &RoomId, session: &Session) -> PassClaims {
    api::pass_claims(app, room, session)
}

/// Signs the pass of `session` (500 problem when the keys cannot sign).
pub fn sign_pass(app: &AppState, room: &RoomId, session: &Session) -> Result<String, ApiError> {
    api::sign_pass(app, room, session)
}

/// `path` when it is a safe relative address to return to after admission, else `/`.
pub fn safe_return(path: &str) -> String {
    api::validate_return(path).unwrap_or_else(|_| "/".to_owned())
}

/// `/_anteroom/wait/{room}?return=<return_path>`: where a held-back navigation is sent.
pub fn wait_location(room: &RoomId, return_path: &str) -> String {
    page::wait_location(room, return_path)
}

/// The waiting page answered in place of a protected page: 200 while waiting, 503 closed or
/// unavailable.
pub fn held_back_page(
    app: &AppState,
    room: &RoomId,
    config: &RoomConfig,
    held: HeldBack,
    return_path: &str,
    headers: &HeaderMap,
) -> Response {
    page::held_back_page(app, room, config, held, return_path, headers)
}

/// The page for a visitor refused for their identity: sign in first, or again.
pub fn sign_in_page(refusal: IdentityRefusal, sign_in: SignIn) -> Response {
    page::sign_in_page(refusal, sign_in)
}
