//! `GET /_anteroom/oidc/authorize` and `GET /_anteroom/oidc/continue`: the visitor's side of
//! the code flow.
//!
//! An authorization request is checked in the order RFC 6749 §4.1.2.1 asks: a request with
//! an unknown client or a redirect URI not registered for it gets an error page and is never
//! redirected; every other mistake goes back to the redirect URI with `error`,
//! `error_description` and `state`. A valid request is sealed into a continuation URL and
//! the visitor is sent to the room's waiting page with that URL as `return`; the page joins
//! (or resumes) the visitor with the ticket cookie, and once the visitor is admitted and holds
//! a pass it sends them to the continuation, which answers the redirect URI with a code. A
//! visitor who already holds a valid pass gets the code at once.

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore as _;

use anteroom_core::engine::{Session, SessionState};
use anteroom_core::room::OidcClient;
use anteroom_core::{RoomId, SessionId};
use anteroom_store::StoreError;
use anteroom_token::PassExpectations;

use super::code::{Code, PendingRequest, redirect_digest};
use super::protocol::{CONTINUE_PATH, parameter, parameters};
use crate::AppState;
use crate::cookies::{pass_cookie_name, read_cookie};
use crate::page::error_page;

/// Longest `state` accepted: it travels inside the waiting page's `return`, which is bounded.
const MAX_STATE_LEN: usize = 768;
/// Longest `nonce` accepted.
const MAX_NONCE_LEN: usize = 256;

/// `GET /_anteroom/oidc/authorize`
pub(crate) async fn authorize(
    State(app): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let params = match parameters(query.as_deref().unwrap_or_default()) {
        Ok(params) => params,
        Err(_) => {
            return page(
                StatusCode::BAD_REQUEST,
                "The sign-in request repeats a parameter.",
            );
        }
    };
    let Some(client_id) = parameter(&params, "client_id") else {
        return page(
            StatusCode::BAD_REQUEST,
            "The sign-in request names no client.",
        );
    };
    let (room, client) = match client(&app, client_id).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let Some(redirect_uri) = registered_redirect(&params, &client) else {
        return page(
            StatusCode::BAD_REQUEST,
            "The sign-in request's redirect address is not registered for this client, so it was not followed.",
        );
    };
    let state = parameter(&params, "state");
    let checked = match check(&params, &client) {
        Ok(checked) => checked,
        Err((error, description)) => {
            return redirect_error(redirect_uri, error, description, state);
        }
    };
    let pending = PendingRequest {
        room: room.to_string(),
        redirect: redirect_digest(redirect_uri),
        state: checked.state,
        nonce: checked.nonce,
        challenge: checked.challenge,
        at: app.now().as_millis(),
    };
    proceed(
        &app,
        &room,
        &client,
        redirect_uri,
        pending,
        checked.prompt_none,
        &headers,
    )
    .await
}

/// `GET /_anteroom/oidc/continue?request=<sealed request>`: where the waiting page sends an
/// admitted visitor.
pub(crate) async fn resume(
    State(app): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let sealed = parameters(query.as_deref().unwrap_or_default())
        .ok()
        .and_then(|params| parameter(&params, "request").map(str::to_owned));
    let signer = app.keys().ticket_signer().clone();
    let Some(pending) = sealed.and_then(|sealed| PendingRequest::open(&signer, &sealed, app.now()))
    else {
        return page(
            StatusCode::BAD_REQUEST,
            "This sign-in link is not valid or has expired. Start again from the site you came from.",
        );
    };
    let (room, client) = match client(&app, &pending.room).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    // The client's registration may have changed while the visitor waited.
    let Some(redirect_uri) = client
        .redirect_uris
        .iter()
        .find(|uri| redirect_digest(uri) == pending.redirect)
        .cloned()
    else {
        return page(
            StatusCode::BAD_REQUEST,
            "The sign-in request's redirect address is no longer registered for this client.",
        );
    };
    proceed(
        &app,
        &room,
        &client,
        &redirect_uri,
        pending,
        false,
        &headers,
    )
    .await
}

/// What a valid request asks for.
struct Checked {
    state: String,
    nonce: String,
    challenge: Option<String>,
    prompt_none: bool,
}

/// The redirect URI the request names, when it is one registered for the client.
fn registered_redirect<'a>(params: &'a [(String, String)], client: &OidcClient) -> Option<&'a str> {
    parameter(params, "redirect_uri").filter(|uri| {
        client
            .redirect_uris
            .iter()
            .any(|registered| registered == uri)
    })
}

/// An error that goes back to the client: its `error` and `error_description`.
type Refused = (&'static str, &'static str);

/// The checks whose failures go back to the client (RFC 6749 §4.1.2.1, OIDC Core §3.1.2.6).
fn check(params: &[(String, String)], client: &OidcClient) -> Result<Checked, Refused> {
    check_request_kind(params)?;
    let state = match parameter(params, "state") {
        None => return Err(("invalid_request", "state is required")),
        Some(state) if state.len() > MAX_STATE_LEN => {
            return Err(("invalid_request", "state is longer than 768 bytes"));
        }
        Some(state) => state.to_owned(),
    };
    let nonce = match parameter(params, "nonce") {
        None => return Err(("invalid_request", "nonce is required")),
        Some(nonce) if nonce.len() > MAX_NONCE_LEN => {
            return Err(("invalid_request", "nonce is longer than 256 bytes"));
        }
        Some(nonce) => nonce.to_owned(),
    };
    let challenge = challenge(params)?;
    if challenge.is_none() && client.client_secret.is_none() {
        return Err((
            "invalid_request",
            "this client is public and must use PKCE (code_challenge with S256)",
        ));
    }
    let prompt_none =
        parameter(params, "prompt").is_some_and(|prompt| prompt.split(' ').any(|p| p == "none"));
    Ok(Checked {
        state,
        nonce,
        challenge,
        prompt_none,
    })
}

/// The request is one this provider serves: the code flow, an `openid` scope, and no request
/// object.
fn check_request_kind(params: &[(String, String)]) -> Result<(), Refused> {
    match parameter(params, "response_type") {
        None => return Err(("invalid_request", "response_type is required")),
        Some("code") => {}
        Some(_) => {
            return Err((
                "unsupported_response_type",
                "only the authorization code flow (response_type=code) is supported",
            ));
        }
    }
    if !parameter(params, "scope").is_some_and(|scope| scope.split(' ').any(|s| s == "openid")) {
        return Err(("invalid_scope", "scope must include openid"));
    }
    if parameter(params, "request").is_some() {
        return Err(("request_not_supported", "request objects are not supported"));
    }
    if parameter(params, "request_uri").is_some() {
        return Err(("request_uri_not_supported", "request_uri is not supported"));
    }
    Ok(())
}

/// The PKCE challenge, if the request has one: S256 only (RFC 7636).
fn challenge(params: &[(String, String)]) -> Result<Option<String>, Refused> {
    let method = parameter(params, "code_challenge_method");
    match (parameter(params, "code_challenge"), method) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(("invalid_request", "code_challenge is missing")),
        // Without a method the challenge would be `plain` (RFC 7636 §4.3).
        (Some(_), method) if method != Some("S256") => Err((
            "invalid_request",
            "code_challenge_method must be S256 (plain is refused)",
        )),
        (Some(challenge), _) if !is_s256_challenge(challenge) => Err((
            "invalid_request",
            "code_challenge must be the 43-character base64url SHA-256 of the verifier",
        )),
        (Some(challenge), _) => Ok(Some(challenge.to_owned())),
    }
}

/// An S256 challenge is the unpadded base64url of a SHA-256 digest: 43 characters.
fn is_s256_challenge(challenge: &str) -> bool {
    challenge.len() == 43
        && challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// With a valid pass, the code; otherwise the waiting page, which returns to the
/// continuation once the visitor is admitted (or, with `prompt=none`, `login_required`).
async fn proceed(
    app: &AppState,
    room: &RoomId,
    client: &OidcClient,
    redirect_uri: &str,
    pending: PendingRequest,
    prompt_none: bool,
    headers: &HeaderMap,
) -> Response {
    let session = match held_session(app, room, headers).await {
        Ok(session) => session,
        Err(error) => return store_failed(app, room, error),
    };
    // A code stands for the room's pass and the passes it requires, as the gateway asks
    // of every request: a visitor whose pass of a required room ended (revoked, reset,
    // expired) goes through that room's page first, then this room's, then here again.
    let missing = match session {
        Some(_) => match missing_requirement(app, room, headers).await {
            Ok(missing) => missing,
            Err(error) => return store_failed(app, room, error),
        },
        None => None,
    };
    if let (Some(session), None) = (&session, &missing) {
        return code_redirect(app, room, client, redirect_uri, pending, session);
    }
    if prompt_none {
        return redirect_error(
            redirect_uri,
            "login_required",
            "the visitor has not been through the waiting room yet",
            Some(&pending.state),
        );
    }
    let continuation = format!(
        "{CONTINUE_PATH}?request={}",
        pending.seal(app.keys().ticket_signer())
    );
    let return_to: String = form_urlencoded::byte_serialize(continuation.as_bytes()).collect();
    let page = format!("/_anteroom/wait/{room}?return={return_to}");
    match missing {
        // This room's page would resume the visitor's admitted ticket and send them straight
        // back here: the required room's page comes first, and returns to this room's.
        Some(required) => found(&crate::join_path::wait_location(&required, &page)),
        None => found(&page),
    }
}

/// The session of the visitor's valid pass for `room`, if it is still active.
async fn held_session(
    app: &AppState,
    room: &RoomId,
    headers: &HeaderMap,
) -> Result<Option<Session>, StoreError> {
    let Some(token) = read_cookie(headers, &pass_cookie_name(room.as_str())) else {
        return Ok(None);
    };
    let snapshot = app.store().snapshot(room).await?;
    let now = app.now();
    let expect = PassExpectations {
        room: room.as_str(),
        issuer: &app.settings().issuer,
        generation: snapshot.generation,
    };
    let Ok(claims) = app.keys().verify_pass(token, &expect, now.as_secs()) else {
        return Ok(None);
    };
    let Ok(session_id) = claims.sub.parse::<SessionId>() else {
        return Ok(None);
    };
    let session = app.store().session(room, session_id).await?;
    Ok(session.filter(|session| session.state == SessionState::Active && session.expires_at > now))
}

/// The first room `room` requires of which the visitor holds no valid pass with an active
/// session ([`held_session`]), if any.
async fn missing_requirement(
    app: &AppState,
    room: &RoomId,
    headers: &HeaderMap,
) -> Result<Option<RoomId>, StoreError> {
    let config = app.room_config(room).await?;
    for required in &config.requires {
        if held_session(app, required, headers).await?.is_none() {
            return Ok(Some(required.clone()));
        }
    }
    Ok(None)
}

/// Redirects to the client with a fresh one-time code and the request's `state`.
fn code_redirect(
    app: &AppState,
    room: &RoomId,
    client: &OidcClient,
    redirect_uri: &str,
    pending: PendingRequest,
    session: &Session,
) -> Response {
    let now = app.now().as_millis();
    let mut id = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut id);
    let ttl_ms = u64::try_from(client.code_ttl.as_millis()).unwrap_or(u64::MAX);
    let code = Code {
        id: URL_SAFE_NO_PAD.encode(id),
        session: session.id.to_string(),
        generation: session.generation,
        auth_time: session.issued_at.as_secs(),
        redirect_uri: redirect_uri.to_owned(),
        nonce: pending.nonce,
        challenge: pending.challenge,
        issued_at: now,
        expires_at: now.saturating_add(ttl_ms),
    };
    let sealed = code.seal(app.keys().ticket_signer(), room);
    found(&with_query(
        redirect_uri,
        &[("code", &sealed), ("state", &pending.state)],
    ))
}

/// The room and its OIDC client registration for `client_id`, or the error page.
async fn client(app: &AppState, client_id: &str) -> Result<(RoomId, OidcClient), Response> {
    let unknown = || {
        page(
            StatusCode::BAD_REQUEST,
            "The sign-in request names an unknown client.",
        )
    };
    let room = RoomId::new(client_id).map_err(|_| unknown())?;
    match app.room_config(&room).await {
        Ok(config) => match config.oidc {
            Some(client) => Ok((room, client)),
            None => Err(unknown()),
        },
        Err(StoreError::RoomNotFound(_)) => Err(unknown()),
        Err(error) => Err(store_failed(app, &room, error)),
    }
}

fn store_failed(app: &AppState, room: &RoomId, error: StoreError) -> Response {
    let error = app.store_error(room, "oidc", error);
    page(
        error.status(),
        "The waiting room cannot be reached right now. Please try again in a moment.",
    )
}

/// An error sent back to the client (RFC 6749 §4.1.2.1).
fn redirect_error(
    redirect_uri: &str,
    error: &str,
    description: &str,
    state: Option<&str>,
) -> Response {
    let mut pairs = vec![("error", error), ("error_description", description)];
    if let Some(state) = state {
        pairs.push(("state", state));
    }
    found(&with_query(redirect_uri, &pairs))
}

/// `uri` with `pairs` added to its query.
fn with_query(uri: &str, pairs: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.extend_pairs(pairs);
    let separator = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{separator}{}", query.finish())
}

/// 302 Found to `location`, never cached.
fn found(location: &str) -> Response {
    let mut response = StatusCode::FOUND.into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn page(status: StatusCode, message: &'static str) -> Response {
    error_page(status, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_appended() {
        assert_eq!(
            with_query("https://a.example/cb", &[("code", "x y"), ("state", "s&t")]),
            "https://a.example/cb?code=x+y&state=s%26t"
        );
        assert_eq!(
            with_query("https://a.example/cb?k=1", &[("code", "c")]),
            "https://a.example/cb?k=1&code=c"
        );
    }
}
