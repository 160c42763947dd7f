//! Admin keys: `Authorization: Bearer <key>` checked against the configured SHA-256 hashes in
//! constant time. [`ReadAccess`] and [`WriteAccess`] are extractors, so a handler states what
//! it needs in its signature and cannot forget the check.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};

use anteroom_api::error::ApiError;
use anteroom_api::key_matches;

use super::AdminState;

/// The caller holds an admin key or a read-only key.
pub(crate) struct ReadAccess;

/// The caller holds an admin key (read-only keys get 403).
pub(crate) struct WriteAccess;

/// What a presented key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    Read,
    Write,
}

fn grant(admin: &AdminState, parts: &Parts) -> Result<Grant, ApiError> {
    let presented = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token)
        .ok_or_else(unauthorized)?;
    let settings = admin.settings();
    // Both lists are always checked, so the time taken says nothing about which matched.
    let write = key_matches(&settings.admin_keys, presented);
    let read = key_matches(&settings.read_keys, presented);
    match (write, read) {
        (true, _) => Ok(Grant::Write),
        (false, true) => Ok(Grant::Read),
        (false, false) => Err(unauthorized()),
    }
}

/// The token of `Bearer <token>` (the scheme is case-insensitive, RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "a valid admin key is required: Authorization: Bearer <key>",
    )
}

impl FromRequestParts<AdminState> for ReadAccess {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        admin: &AdminState,
    ) -> Result<Self, Self::Rejection> {
        grant(admin, parts).map(|_| ReadAccess)
    }
}

impl FromRequestParts<AdminState> for WriteAccess {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        admin: &AdminState,
    ) -> Result<Self, Self::Rejection> {
        match grant(admin, parts)? {
            Grant::Write => Ok(WriteAccess),
            Grant::Read => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this key may only read; changes need an admin key",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn bearer_tokens_are_read_with_any_scheme_case() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
    }
}
