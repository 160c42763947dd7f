//! `GET|POST /_anteroom/oidc/userinfo` (OIDC Core §5.3): who the bearer of an access token
//! is, as long as the token holds.
//!
//! The token must verify (signature by a key of the set, `exp`, `iss`, `scope`), name as
//! audience a room that is still an OIDC client, and its session must still be active in the
//! store, in the token's generation: a session ended by the site, by expiry, by a reset or
//! because its code was redeemed twice revokes the token on every node at once.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use anteroom_core::engine::SessionState;
use anteroom_core::{RoomId, SessionId};
use anteroom_store::StoreError;

use super::protocol::{OAuthError, no_store};
use crate::AppState;

/// `GET|POST /_anteroom/oidc/userinfo`
pub(crate) async fn userinfo(State(app): State<AppState>, headers: HeaderMap) -> Response {
    match lookup(&app, &headers).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn lookup(app: &AppState, headers: &HeaderMap) -> Result<Response, OAuthError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .filter(|token| !token.is_empty())
        .ok_or_else(OAuthError::missing_token)?;
    let now = app.now();
    let claims = app
        .keys()
        .verify_access_token(token, &app.settings().issuer, now.as_secs())
        .map_err(|_| OAuthError::invalid_token("the access token is invalid or expired"))?;
    let not_a_client =
        || OAuthError::invalid_token("the access token is not for a client of this issuer");
    let room = RoomId::new(&claims.aud).map_err(|_| not_a_client())?;
    match app.room_config(&room).await {
        Ok(config) if config.oidc.is_some() => {}
        Ok(_) | Err(StoreError::RoomNotFound(_)) => return Err(not_a_client()),
        Err(error) => {
            let _ = app.store_error(&room, "oidc", error);
            return Err(OAuthError::unavailable());
        }
    }
    let session_id: SessionId = claims
        .sub
        .parse()
        .map_err(|_| OAuthError::invalid_token("the access token is invalid or expired"))?;
    let session = match app.store().session(&room, session_id).await {
        Ok(session) => session,
        Err(error) => {
            let _ = app.store_error(&room, "oidc", error);
            return Err(OAuthError::unavailable());
        }
    };
    let holds = session.is_some_and(|session| {
        session.state == SessionState::Active
            && session.expires_at > now
            && session.generation == claims.r#gen
    });
    if !holds {
        return Err(OAuthError::invalid_token(
            "the access token has been revoked",
        ));
    }
    let mut response = Json(json!({"sub": claims.sub, "room": claims.aud})).into_response();
    no_store(response.headers_mut());
    Ok(response)
}
