//! What a request says about the room and the ticket it asks about: the room of the path,
//! and the ticket token it holds (the `X-Anteroom-Ticket` header, `?ticket=` or the room's
//! cookie), read the same way by the API, the event stream and the join gate.

use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use serde::Deserialize;

use anteroom_core::engine::TicketRef;
use anteroom_core::{RoomId, SessionId, TicketId};
use anteroom_token::TicketClaims;

use crate::cookies::{TICKET_COOKIE_PREFIX, read_room_cookie};
use crate::error::ApiError;

/// `?ticket=` for clients that cannot send headers or cookies (EventSource).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TicketQuery {
    ticket: Option<String>,
}

pub(crate) fn ticket_query(
    query: Result<Query<TicketQuery>, QueryRejection>,
) -> Result<TicketQuery, ApiError> {
    query
        .map(|Query(query)| query)
        .map_err(|rejection| ApiError::bad_request("invalid_query", rejection.body_text()))
}

/// A room id from a request's path; one that cannot exist is simply not found.
pub fn parse_room(text: &str) -> Result<RoomId, ApiError> {
    RoomId::new(text).map_err(|_| ApiError::room_not_found(text))
}

/// A session id from a request's path; one that cannot exist is simply not found, like one the
/// room does not know.
pub fn parse_session(text: &str) -> Result<SessionId, ApiError> {
    text.parse().map_err(|_| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            "no such session in this room",
        )
    })
}

/// The header a client sends its ticket token in.
static TICKET_HEADER: HeaderName = HeaderName::from_static("x-anteroom-ticket");

/// The ticket the client holds: `X-Anteroom-Ticket`, then `?ticket=`, then the room's cookie.
pub(crate) fn held_ticket<'a>(
    headers: &'a HeaderMap,
    query: &'a TicketQuery,
    room: &RoomId,
) -> Option<&'a str> {
    header_ticket(headers).or(query_ticket(query)).or_else(|| {
        read_room_cookie(headers, TICKET_COOKIE_PREFIX, room.as_str())
            .filter(|token| !token.trim().is_empty())
    })
}

/// Whether the ticket [`held_ticket`] gives is the one in the URL (`?ticket=`): anyone can
/// make a link or a form with a ticket of theirs in it, so an answer about it must not touch
/// the visitor's cookies (put the ticket or its pass in the browser, or clear the visitor's own).
pub(crate) fn ticket_in_url(headers: &HeaderMap, query: &TicketQuery) -> bool {
    header_ticket(headers).is_none() && query_ticket(query).is_some()
}

/// The ticket of `X-Anteroom-Ticket`, if one is there.
fn header_ticket(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(&TICKET_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|token| !token.trim().is_empty())
}

/// The ticket of `?ticket=`, if one is there.
fn query_ticket(query: &TicketQuery) -> Option<&str> {
    query
        .ticket
        .as_deref()
        .filter(|token| !token.trim().is_empty())
}

/// The field browsers send to say which site made them send a request (Fetch Metadata).
static SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// Refuses a join or leave that a browser sent for another site (`Sec-Fetch-Site:
/// cross-site`: a form or a beacon on an attacker's page) with 403 `cross_site_request`: its
/// answer would replace or clear the visitor's ticket cookie, knocking them out of the line.
/// The waiting page's own requests are same-origin, and clients that are not browsers send no
/// such field.
pub(crate) fn refuse_cross_site(headers: &HeaderMap) -> Result<(), ApiError> {
    let cross_site = headers
        .get(&SEC_FETCH_SITE)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    if cross_site {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_site_request",
            "another site cannot make this request for the visitor",
        ));
    }
    Ok(())
}

/// Turns a verified ticket token into the store's reference.
pub(crate) fn ticket_reference(claims: &TicketClaims) -> Option<TicketRef> {
    let id: TicketId = claims.ticket_id.parse().ok()?;
    Some(TicketRef {
        id,
        generation: claims.generation,
    })
}
