//! `GET /.well-known/openid-configuration` (OpenID Connect Discovery 1.0 §4).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::protocol::{AUTHORIZE_PATH, TOKEN_PATH, USERINFO_PATH};
use crate::AppState;

/// The provider's metadata: the issuer of passes, the endpoints under the public URL, and
/// what the adapter supports (the code flow with PKCE S256, the node's signing algorithm).
pub(crate) async fn discovery(State(app): State<AppState>) -> Response {
    let base = app.settings().public_url.trim_end_matches('/');
    let algorithm = app.keys().algorithm().as_str();
    let document = json!({
        "issuer": app.settings().issuer,
        "authorization_endpoint": format!("{base}{AUTHORIZE_PATH}"),
        "token_endpoint": format!("{base}{TOKEN_PATH}"),
        "userinfo_endpoint": format!("{base}{USERINFO_PATH}"),
        "jwks_uri": format!("{base}/.well-known/jwks.json"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": [algorithm],
        "scopes_supported": ["openid"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
        "code_challenge_methods_supported": ["S256"],
        "claims_supported": ["iss", "sub", "aud", "exp", "iat", "auth_time", "nonce", "room"],
    });
    let mut response = Json(document).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
