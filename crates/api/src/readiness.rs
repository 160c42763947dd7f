//! `GET /_anteroom/readyz` (SPEC §14.6): whether this node should be sent traffic. Unlike
//! `healthz` (the process answers), it says 200 only when the store answers, the signing keys
//! are loaded and every room of the config file is installed in the store, and 503 while the
//! node drains for a shutdown: a load balancer or Kubernetes then stops sending it visitors
//! that it would refuse or queue wrongly. The rooms are known through `AppState::know_rooms`;
//! draining starts with `AppState::start_draining`, called by the binary at SIGTERM.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::AppState;
use crate::error::ApiError;

/// The answer when ready.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Ready {
    /// Always `ready`.
    status: &'static str,
}

/// Readiness (SPEC §14.6): 200 only when the store answers, the signing keys are loaded and
/// every room of the config file is installed; 503 `not_ready` (naming why) otherwise and
/// while the node drains for a shutdown.
#[utoipa::path(get, path = "/_anteroom/readyz", tag = "public",
    responses(
        (status = 200, description = "Ready", body = crate::readiness::Ready),
        crate::problem_answers::NotReady,
    ))]
pub(crate) async fn ready(State(app): State<AppState>) -> Response {
    let reasons = not_ready_because(&app).await;
    let mut response = if reasons.is_empty() {
        Json(Ready { status: "ready" }).into_response()
    } else {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            format!("not ready: {}", reasons.join("; ")),
        )
        .into_response()
    };
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Why the node should not get traffic now; empty when it should.
pub async fn not_ready_because(app: &AppState) -> Vec<String> {
    let mut reasons = Vec::new();
    if app.is_draining() {
        reasons.push("draining for a shutdown".to_owned());
    }
    let keys = app.keys().jwks();
    if keys["keys"].as_array().is_none_or(Vec::is_empty) {
        reasons.push("no signing key is loaded".to_owned());
    }
    match app.store_check().installed(app.store().as_ref()).await {
        Some(installed) => {
            let missing: Vec<_> = app
                .expected_rooms()
                .into_iter()
                .filter(|room| !installed.contains(room))
                .map(|room| room.to_string())
                .collect();
            if !missing.is_empty() {
                reasons.push(format!(
                    "rooms of the config file not installed yet: {}",
                    missing.join(", ")
                ));
            }
        }
        None => reasons.push("the store does not answer".to_owned()),
    }
    reasons
}
