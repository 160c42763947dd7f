//! `POST /_anteroom/oidc/token`: redeems an authorization code for an ID token and an access
//! token (RFC 6749 §4.1.3, OIDC Core §3.1.3).
//!
//! The client authenticates with `client_secret_basic` or `client_secret_post` (the secret's
//! SHA-256 compared in constant time with the configured hash), or as a public client with
//! its `client_id` alone, whose codes always carry a PKCE challenge. Everything about the
//! request is checked before the code is spent: a request with a wrong verifier or redirect
//! URI does not use up the code. A code is then redeemed once, on any node (the store records
//! it); a second redemption fails with `invalid_grant` and ends the session the code was
//! issued for, which revokes every token issued for it (RFC 6749 §4.1.2: the code may have
//! been stolen).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use subtle::ConstantTimeEq as _;

use anteroom_core::engine::{SessionEnd, SessionState};
use anteroom_core::{RoomId, SessionId, Timestamp};
use anteroom_store::{CodeUse, Redemption, StoreError};
use anteroom_token::{ACCESS_TOKEN_SCOPE, AccessTokenClaims, IdTokenClaims};

use super::code::{Code, s256};
use super::protocol::{OAuthError, no_store, parameter, parameters};
use crate::key_source::OIDC_TOKEN_TTL;
use crate::{AppState, key_matches};

/// `POST /_anteroom/oidc/token`
pub(crate) async fn token(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match exchange(&app, &headers, &body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

/// The exchange as its steps: the form is read, the client authenticated, the code opened and
/// checked, spent (once), its session found live, and the tokens signed.
async fn exchange(
    app: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, OAuthError> {
    let params = form_parameters(headers, body)?;
    let room = authenticate(app, headers, &params).await?;
    check_grant_type(&params)?;
    let now = app.now();
    let (code, session_id) = checked_code(app, &room, &params, now)?;
    redeem(app, &room, &code, session_id, now).await?;
    let generation = live_session_generation(app, &room, &code, session_id, now).await?;
    let (id_token, access_token) = sign_tokens(app, &room, code, generation, now)?;
    let mut response = Json(json!({
        "access_token": access_token,
        "token_type": "Bearer",
        "expires_in": OIDC_TOKEN_TTL.as_secs(),
        "id_token": id_token,
        "scope": ACCESS_TOKEN_SCOPE,
    }))
    .into_response();
    no_store(response.headers_mut());
    Ok(response)
}

/// The request's parameters, from a body that must be `application/x-www-form-urlencoded`.
fn form_parameters(headers: &HeaderMap, body: &[u8]) -> Result<Vec<(String, String)>, OAuthError> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|value| {
            value
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !is_form {
        return Err(OAuthError::invalid_request(
            "the body must be application/x-www-form-urlencoded",
        ));
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| OAuthError::invalid_request("the body is not UTF-8"))?;
    parameters(text).map_err(OAuthError::invalid_request)
}

fn check_grant_type(params: &[(String, String)]) -> Result<(), OAuthError> {
    match parameter(params, "grant_type") {
        None => Err(OAuthError::invalid_request("grant_type is required")),
        Some("authorization_code") => Ok(()),
        Some(_) => Err(OAuthError::new(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "only grant_type=authorization_code is supported",
        )),
    }
}

/// The code, opened and checked against the request (expiry, redirect URI, PKCE verifier)
/// before it is spent, with the session it was issued for.
fn checked_code(
    app: &AppState,
    room: &RoomId,
    params: &[(String, String)],
    now: Timestamp,
) -> Result<(Code, SessionId), OAuthError> {
    let sealed =
        parameter(params, "code").ok_or_else(|| OAuthError::invalid_request("code is required"))?;
    let code = Code::open(app.keys().ticket_signer(), room, sealed, now)
        .ok_or_else(|| OAuthError::invalid_grant("the code is not valid for this client"))?;
    if now.as_millis() >= code.expires_at {
        return Err(OAuthError::invalid_grant("the code has expired"));
    }
    if parameter(params, "redirect_uri") != Some(code.redirect_uri.as_str()) {
        return Err(OAuthError::invalid_grant(
            "redirect_uri is not the one of the authorization request",
        ));
    }
    check_verifier(
        code.challenge.as_deref(),
        parameter(params, "code_verifier"),
    )?;
    let session_id: SessionId = code
        .session
        .parse()
        .map_err(|_| OAuthError::invalid_grant("the code is not valid for this client"))?;
    Ok((code, session_id))
}

/// Spends the code; a code redeemed again ends its session (and so revokes its tokens).
async fn redeem(
    app: &AppState,
    room: &RoomId,
    code: &Code,
    session_id: SessionId,
    now: Timestamp,
) -> Result<(), OAuthError> {
    let redemption = app
        .code_redemptions()
        .redeem(CodeUse {
            code_id: &code.id,
            issued_at: Timestamp(code.issued_at),
            expires_at: Timestamp(code.expires_at),
            now,
        })
        .await
        .map_err(|error| store_failed(app, room, error))?;
    match redemption {
        Redemption::First => Ok(()),
        Redemption::Again => {
            revoke(app, room, session_id).await;
            Err(OAuthError::invalid_grant(
                "the code was already used; the tokens issued for it are revoked",
            ))
        }
        Redemption::Unknown => Err(OAuthError::invalid_grant(
            "the code can no longer be redeemed",
        )),
    }
}

/// The generation of the code's session, which must still be active, unexpired and of the
/// generation the code was issued for.
async fn live_session_generation(
    app: &AppState,
    room: &RoomId,
    code: &Code,
    session_id: SessionId,
    now: Timestamp,
) -> Result<u32, OAuthError> {
    let session = app
        .store()
        .session(room, session_id)
        .await
        .map_err(|error| store_failed(app, room, error))?
        .filter(|session| {
            session.state == SessionState::Active
                && session.expires_at > now
                && session.generation == code.generation
        })
        .ok_or_else(|| OAuthError::invalid_grant("the visitor's session has ended"))?;
    Ok(session.generation)
}

/// The ID token and the access token for the code's session.
fn sign_tokens(
    app: &AppState,
    room: &RoomId,
    code: Code,
    generation: u32,
    now: Timestamp,
) -> Result<(String, String), OAuthError> {
    let issuer = app.settings().issuer.clone();
    let iat = now.as_secs();
    let exp = iat.saturating_add(OIDC_TOKEN_TTL.as_secs());
    let keys = app.keys();
    let signed = keys
        .sign_id_token(&IdTokenClaims {
            iss: issuer.clone(),
            sub: code.session.clone(),
            aud: room.to_string(),
            exp,
            iat,
            auth_time: code.auth_time,
            nonce: code.nonce,
        })
        .and_then(|id_token| {
            let access_token = keys.sign_access_token(&AccessTokenClaims {
                iss: issuer,
                sub: code.session,
                aud: room.to_string(),
                client_id: room.to_string(),
                jti: code.id,
                iat,
                exp,
                r#gen: generation,
                scope: ACCESS_TOKEN_SCOPE.to_owned(),
            })?;
            Ok((id_token, access_token))
        });
    signed.map_err(|error| {
        tracing::error!(%error, "cannot sign OIDC tokens");
        OAuthError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "the tokens could not be signed",
        )
    })
}

/// Authenticates the client (RFC 6749 §2.3.1): HTTP Basic or the body, never both; a public
/// client names itself with `client_id` and presents no secret.
async fn authenticate(
    app: &AppState,
    headers: &HeaderMap,
    params: &[(String, String)],
) -> Result<RoomId, OAuthError> {
    let basic = basic_credentials(headers)?;
    let body_id = parameter(params, "client_id");
    let (client_id, secret) = match (basic, parameter(params, "client_secret")) {
        (Some(_), Some(_)) => {
            return Err(OAuthError::invalid_request(
                "use one client authentication method, not two",
            ));
        }
        (Some((id, secret)), None) => {
            if body_id.is_some_and(|body_id| body_id != id) {
                return Err(OAuthError::invalid_request(
                    "client_id differs from the one of the Authorization header",
                ));
            }
            (id, Some(secret))
        }
        (None, secret) => {
            let id = body_id.ok_or_else(|| OAuthError::invalid_client("client_id is required"))?;
            (id.to_owned(), secret.map(str::to_owned))
        }
    };
    let unknown = || OAuthError::invalid_client("unknown client");
    let room = RoomId::new(&client_id).map_err(|_| unknown())?;
    let client = match app.room_config(&room).await {
        Ok(config) => config.oidc.ok_or_else(unknown)?,
        Err(StoreError::RoomNotFound(_)) => return Err(unknown()),
        Err(error) => return Err(store_failed(app, &room, error)),
    };
    match (&client.client_secret, secret) {
        (Some(hash), Some(secret)) if key_matches(std::slice::from_ref(hash), &secret) => {}
        (Some(_), _) => return Err(OAuthError::invalid_client("client authentication failed")),
        (None, None) => {}
        (None, Some(_)) => {
            return Err(OAuthError::invalid_client(
                "this client is public and has no secret",
            ));
        }
    }
    Ok(room)
}

/// The client id and secret of an `Authorization: Basic` header, each form-urlencoded
/// (RFC 6749 §2.3.1); `None` without such a header.
fn basic_credentials(headers: &HeaderMap) -> Result<Option<(String, String)>, OAuthError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let malformed = || OAuthError::invalid_client("malformed Basic credentials");
    let value = value.to_str().map_err(|_| malformed())?;
    let Some((scheme, encoded)) = value.trim().split_once(' ') else {
        return Err(malformed());
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(OAuthError::invalid_client(
            "client authentication must use the Basic scheme",
        ));
    }
    let decoded = STANDARD.decode(encoded.trim()).map_err(|_| malformed())?;
    let decoded = String::from_utf8(decoded).map_err(|_| malformed())?;
    let (id, secret) = decoded.split_once(':').ok_or_else(malformed)?;
    Ok(Some((
        form_decode(id).ok_or_else(malformed)?,
        form_decode(secret).ok_or_else(malformed)?,
    )))
}

/// Decodes one application/x-www-form-urlencoded component (`+` is a space).
fn form_decode(text: &str) -> Option<String> {
    let spaced = text.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|decoded| decoded.into_owned())
}

/// PKCE (RFC 7636 §4.6): a code with a challenge needs the verifier that hashes to it; a
/// code without one takes no verifier.
fn check_verifier(challenge: Option<&str>, verifier: Option<&str>) -> Result<(), OAuthError> {
    match (challenge, verifier) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(OAuthError::invalid_grant("code_verifier is required")),
        (None, Some(_)) => Err(OAuthError::invalid_grant(
            "the authorization request had no code_challenge",
        )),
        (Some(challenge), Some(verifier)) => {
            let well_formed = (43..=128).contains(&verifier.len())
                && verifier
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
            if well_formed && bool::from(s256(verifier).as_bytes().ct_eq(challenge.as_bytes())) {
                Ok(())
            } else {
                Err(OAuthError::invalid_grant(
                    "code_verifier does not match the code challenge",
                ))
            }
        }
    }
}

/// Ends the session a reused code was issued for; the pass and every token of it stop
/// working on every node.
async fn revoke(app: &AppState, room: &RoomId, session: SessionId) {
    match app
        .store()
        .end_session(room, session, SessionEnd::Revoked)
        .await
    {
        Ok(_) | Err(StoreError::Engine(_) | StoreError::RoomNotFound(_)) => {}
        Err(error) => {
            tracing::warn!(%room, %error, "cannot revoke the session of a reused authorization code");
        }
    }
}

fn store_failed(app: &AppState, room: &RoomId, error: StoreError) -> OAuthError {
    if matches!(error, StoreError::RoomNotFound(_)) {
        return OAuthError::invalid_client("unknown client");
    }
    let _ = app.store_error(room, "oidc", error);
    OAuthError::unavailable()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifiers() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        let code = |result: Result<(), OAuthError>| result.err().map(|error| error.code());
        assert_eq!(code(check_verifier(Some(challenge), Some(verifier))), None);
        assert_eq!(code(check_verifier(None, None)), None);
        let wrong = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXK";
        assert_eq!(
            code(check_verifier(Some(challenge), Some(wrong))),
            Some("invalid_grant")
        );
        assert_eq!(
            code(check_verifier(Some(challenge), None)),
            Some("invalid_grant")
        );
        assert_eq!(
            code(check_verifier(None, Some(verifier))),
            Some("invalid_grant")
        );
        // `plain` would send the challenge itself as the verifier.
        assert_eq!(
            code(check_verifier(Some(challenge), Some(challenge))),
            Some("invalid_grant")
        );
    }

    #[test]
    fn basic_credentials_are_form_decoded() {
        let mut headers = HeaderMap::new();
        let encoded = STANDARD.encode("launch:s%3Acret+x");
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {encoded}").parse().expect("header value"),
        );
        let credentials = basic_credentials(&headers).ok().flatten();
        assert_eq!(
            credentials,
            Some(("launch".to_owned(), "s:cret x".to_owned()))
        );
        headers.insert(
            header::AUTHORIZATION,
            "Basic !!!".parse().expect("header value"),
        );
        assert!(basic_credentials(&headers).is_err());
    }
}
