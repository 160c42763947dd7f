//! What the rate-limit layer tests share: a small fixed-window `LimitStore` with the trait's
//! all-or-nothing semantics (its clock is tokio's, so paused time moves it), rules built in
//! code, an app behind the layer, and one `send` that returns status, headers and body.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Extension};
use axum::routing::{get, post};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::time::Instant;
use tower::ServiceExt;

use anteroom_core::ratelimit::rules::{RateLimitRule, RequestMatcher, default_params};
use anteroom_core::ratelimit::{Algorithm, Decision};
use anteroom_http::{ClientIp, RateLimitOptions, RateLimiter};
use anteroom_store::limit::{LimitRequest, LimitStore, LimitStoreError};

/// A fixed window per key, opened by the key's first request. All or nothing: when one
/// request of a batch is refused, no counter moves.
#[derive(Default)]
pub(crate) struct FixedWindowStore {
    windows: Mutex<HashMap<String, (Instant, u64)>>,
    /// Answer every call with an error.
    pub(crate) failing: AtomicBool,
    /// Every allowed decision asks the request to wait this long (as a leaky bucket within its
    /// burst does).
    pub(crate) allowed_delay: Mutex<Duration>,
    /// How many `acquire` calls were made.
    pub(crate) calls: AtomicUsize,
}

#[async_trait]
impl LimitStore for FixedWindowStore {
    async fn acquire(
        &self,
        requests: &[LimitRequest<'_>],
    ) -> Result<Vec<Decision>, LimitStoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(LimitStoreError::Backend {
                message: "the test store is down".to_owned(),
                source: None,
            });
        }
        let now = Instant::now();
        let delay = *self.allowed_delay.lock().unwrap();
        let mut windows = self.windows.lock().unwrap();
        let mut decisions = Vec::new();
        // Requests of one batch under the same key see each other's cost.
        let mut pending: HashMap<&str, u64> = HashMap::new();
        for request in requests {
            let period = request.params.period;
            let (start, used) = match windows.get(request.key) {
                Some((start, used)) if now < *start + period => (*start, *used),
                _ => (now, 0),
            };
            let used = used + pending.get(request.key).copied().unwrap_or(0);
            let reset_after = (start + period).saturating_duration_since(now);
            let allowed = used + request.cost <= request.params.limit;
            if allowed {
                *pending.entry(request.key).or_default() += request.cost;
            }
            decisions.push(Decision {
                allowed,
                limit: request.params.limit,
                remaining: if allowed {
                    request.params.limit - used - request.cost
                } else {
                    0
                },
                reset_after,
                retry_after: (!allowed).then_some(reset_after),
                delay: if allowed { delay } else { Duration::ZERO },
            });
        }
        if decisions.iter().all(|decision| decision.allowed) {
            for request in requests {
                let period = request.params.period;
                let window = windows.entry(request.key.to_owned()).or_insert((now, 0));
                if now >= window.0 + period {
                    *window = (now, 0);
                }
                window.1 += request.cost;
            }
        }
        Ok(decisions)
    }
}

/// A rule named `name` allowing `limit` requests per `period_secs` per client IP (fixed
/// window), on the paths `paths` (every path when empty).
pub(crate) fn rule(name: &str, limit: u64, period_secs: u64, paths: &[&str]) -> RateLimitRule {
    let params = default_params(
        Algorithm::FixedWindow,
        limit,
        Duration::from_secs(period_secs),
    );
    let mut rule = RateLimitRule::new(name, params);
    rule.matcher = Some(
        RequestMatcher::default()
            .with_paths(paths.iter().copied())
            .unwrap(),
    );
    rule
}

/// An app behind `limiter`: `POST /_anteroom/v1/rooms/{room}/join`, `GET /api/{*rest}`
/// (echoing the client address the limiter settled on), and `GET` anything else.
pub(crate) fn app(limiter: &RateLimiter) -> Router {
    Router::new()
        .route(
            "/_anteroom/v1/rooms/{room}/join",
            post(|| async { "joined" }),
        )
        .route(
            "/api/{*rest}",
            get(|Extension(ClientIp(ip)): Extension<ClientIp>| async move { ip.to_string() }),
        )
        .fallback(|| async { "ok" })
        .layer(limiter.layer())
}

/// A limiter over `rules` counting in `store`.
pub(crate) fn limiter(
    rules: Vec<RateLimitRule>,
    store: &Arc<FixedWindowStore>,
    options: RateLimitOptions,
) -> RateLimiter {
    let store: Arc<dyn LimitStore> = store.clone();
    RateLimiter::with_options(rules, store, options).unwrap()
}

/// A request from `peer`.
pub(crate) fn request(method: Method, path: &str, peer: &str) -> Request<Body> {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, "shop.example")
        .body(Body::empty())
        .unwrap();
    let peer: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

/// A `GET` of `path` from `peer`.
pub(crate) fn get_from(path: &str, peer: &str) -> Request<Body> {
    request(Method::GET, path, peer)
}

/// What came back.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

impl Answer {
    /// The value of header `name`, if present.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// Sends `request` to `app`.
pub(crate) async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// The statuses of sending each request in turn.
pub(crate) async fn statuses(app: &Router, requests: Vec<Request<Body>>) -> Vec<u16> {
    let mut found = Vec::new();
    for request in requests {
        found.push(send(app, request).await.status.as_u16());
    }
    found
}
