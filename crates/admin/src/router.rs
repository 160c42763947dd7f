//! The admin listener's routes (SPEC §8): the admin API under `/admin/v1` (the handlers are
//! in `admin/`), the control panel at `/`, Prometheus `/metrics` and the OpenAPI document.

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post, put};

use anteroom_api::error::ApiError;
use anteroom_api::readiness;
use metrics::gauge;

use crate::admin::{AdminState, control, events, keys, revoke, rooms, stats};
use crate::openapi;

/// The control panel (SPEC §8.3): one page with inline CSS and JS, embedded in the binary.
const PANEL_HTML: &str = include_str!("../../../web/panel.html");

/// The largest admin request body read.
const MAX_ADMIN_BODY_BYTES: usize = 64 * 1024;

/// The admin listener's routes: the panel at `/`, `/metrics`, and `/admin/v1`.
pub fn admin_router(admin: AdminState) -> Router {
    let v1 = Router::new()
        .route("/openapi.json", get(openapi_json))
        .route("/rooms", get(rooms::list))
        .route(
            "/rooms/{room}",
            get(rooms::get_room)
                .put(rooms::put_room)
                .patch(rooms::patch_room)
                .delete(rooms::delete_room),
        )
        .route("/rooms/{room}/pause", post(control::pause))
        .route("/rooms/{room}/resume", post(control::resume))
        .route("/rooms/{room}/close", post(control::close))
        .route("/rooms/{room}/open", post(control::open))
        .route("/rooms/{room}/advance", post(control::advance))
        .route("/rooms/{room}/reset", post(control::reset))
        .route("/rooms/{room}/passes", post(control::issue_pass))
        .route("/rooms/{room}/signal", put(control::signal))
        .route("/rooms/{room}/stats", get(stats::stats))
        .route("/rooms/{room}/sessions", get(stats::sessions))
        .route(
            "/rooms/{room}/sessions/{session}/revoke",
            post(revoke::revoke_session),
        )
        .route("/keys/rotate", post(keys::rotate_keys))
        .route("/keys/prune", post(keys::prune_keys))
        .route("/events", get(events::feed));
    Router::new()
        .route("/", get(panel))
        .route("/metrics", get(scrape))
        .nest("/admin/v1", v1)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_ADMIN_BODY_BYTES))
        .with_state(admin)
}

/// `GET /`: the control panel.
async fn panel() -> Response {
    let mut response = Html(PANEL_HTML).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Everything is inline: nothing may load from elsewhere, and no other site may frame it.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// `GET /admin/v1/openapi.json`
async fn openapi_json() -> Response {
    let mut response = (
        [(header::CONTENT_TYPE, "application/json")],
        openapi::document_json(),
    )
        .into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=60"),
    );
    response
}

/// `GET /metrics`
async fn scrape(State(admin): State<AdminState>) -> Response {
    let Some(metrics) = admin.metrics() else {
        return ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "metrics are not enabled on this node",
        )
        .into_response();
    };
    let ready = readiness::not_ready_because(admin.app()).await.is_empty();
    gauge!("anteroom_ready").set(if ready { 1.0 } else { 0.0 });
    let mut response = metrics.render(admin.app()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take this method",
    )
}
