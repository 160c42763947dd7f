//! The request bodies of the admin API as bytes and as JSON: the answers for a body too large
//! or one that does not parse are the same on every endpoint.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use anteroom_api::error::ApiError;

/// An optional JSON body: `None` when empty, 400 when it does not parse as `T`.
pub(super) fn json_body<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<Option<T>, ApiError> {
    let body = body_bytes(body)?;
    // No body, or `null`, asks for the defaults.
    if body.iter().all(u8::is_ascii_whitespace) || body.trim_ascii() == b"null" {
        return Ok(None);
    }
    serde_json::from_slice(&body).map(Some).map_err(|error| {
        ApiError::bad_request("invalid_body", format!("the body is not valid: {error}"))
    })
}

/// The body's bytes; 413 when it is larger than the admin listener takes.
pub(super) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            rejection.body_text(),
        )
    })
}
