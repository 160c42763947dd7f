//! What the OIDC endpoints share: where they live, errors in the JSON form OAuth clients read
//! (RFC 6749 §5.2), and form parameters.

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Where the OIDC endpoints live under the public URL.
pub(crate) const AUTHORIZE_PATH: &str = "/_anteroom/oidc/authorize";
pub(crate) const CONTINUE_PATH: &str = "/_anteroom/oidc/continue";
pub(crate) const TOKEN_PATH: &str = "/_anteroom/oidc/token";
pub(crate) const USERINFO_PATH: &str = "/_anteroom/oidc/userinfo";

/// An OAuth error answered as JSON (RFC 6749 §5.2): `{"error", "error_description"}`,
/// never cached.
pub(crate) struct OAuthError {
    status: StatusCode,
    error: &'static str,
    description: String,
    challenge: Option<String>,
}

impl OAuthError {
    pub(crate) fn new(
        status: StatusCode,
        error: &'static str,
        description: impl Into<String>,
    ) -> Self {
        OAuthError {
            status,
            error,
            description: description.into(),
            challenge: None,
        }
    }

    /// `invalid_request`, 400.
    pub(crate) fn invalid_request(description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", description)
    }

    /// `invalid_grant`, 400.
    pub(crate) fn invalid_grant(description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_grant", description)
    }

    /// `invalid_client`, 401 with a Basic challenge (RFC 6749 §5.2).
    pub(crate) fn invalid_client(description: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::UNAUTHORIZED, "invalid_client", description);
        error.challenge = Some("Basic realm=\"anteroom\"".to_owned());
        error
    }

    /// The store could not be reached: 503, `temporarily_unavailable`.
    pub(crate) fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "temporarily_unavailable",
            "the store cannot be reached; try again shortly",
        )
    }

    /// A bearer token error (RFC 6750 §3): 401 with `WWW-Authenticate: Bearer error=…`;
    /// without a token at all, the challenge carries no error code (§3.1).
    pub(crate) fn invalid_token(description: &'static str) -> Self {
        let mut error = Self::new(StatusCode::UNAUTHORIZED, "invalid_token", description);
        error.challenge = Some(format!(
            "Bearer error=\"invalid_token\", error_description=\"{description}\""
        ));
        error
    }

    /// No bearer token was presented.
    pub(crate) fn missing_token() -> Self {
        let mut error = Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request",
            "an access token is required (Authorization: Bearer)",
        );
        error.challenge = Some("Bearer".to_owned());
        error
    }

    #[cfg(test)]
    pub(crate) fn code(&self) -> &'static str {
        self.error
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.error, "error_description": self.description});
        let mut response = (self.status, Json(body)).into_response();
        let headers = response.headers_mut();
        no_store(headers);
        if let Some(value) = self
            .challenge
            .and_then(|challenge| HeaderValue::from_str(&challenge).ok())
        {
            headers.insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// `Cache-Control: no-store` and `Pragma: no-cache`, as token responses need (RFC 6749 §5.1).
pub(crate) fn no_store(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}

/// The parameters of a query string or form body, refusing a parameter given twice
/// (RFC 6749 §3.1, §3.2).
pub(crate) fn parameters(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut seen: Vec<(String, String)> = Vec::new();
    for (name, value) in form_urlencoded::parse(text.as_bytes()) {
        if seen.iter().any(|(known, _)| *known == name) {
            return Err(format!("parameter {name:?} is given more than once"));
        }
        seen.push((name.into_owned(), value.into_owned()));
    }
    Ok(seen)
}

/// The value of `name` among `parameters`; an empty value counts as absent (RFC 6749 §3.1).
pub(crate) fn parameter<'a>(parameters: &'a [(String, String)], name: &str) -> Option<&'a str> {
    parameters
        .iter()
        .find(|(known, value)| known == name && !value.is_empty())
        .map(|(_, value)| value.as_str())
}
