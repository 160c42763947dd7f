//! What the rate-limit layer tests share: the local limit store on tokio's (pausable) clock,
//! rules built in code, an app behind the layer, and one `send` that returns status, headers
//! and body.

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

use anteroom_api::ratelimit::{ClientIp, RateLimitOptions, RateLimiter};
use anteroom_core::ratelimit::Algorithm;
use anteroom_core::ratelimit::rules::{RateLimitRule, RequestMatcher, default_params};
use anteroom_core::{Clock, Timestamp};
use anteroom_store::limit::{
    LimitRequest, LimitStore, LimitStoreError, LocalLimitConfig, LocalLimitStore, Reservation,
    Reserved,
};

/// Milliseconds since the epoch at which every test's clock starts.
const EPOCH_MILLIS: u64 = 1_700_000_000_000;

/// A clock reading tokio's time, so `tokio::time::pause` and `advance` move the limit store's
/// time too.
struct TokioClock {
    origin: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap();
        Timestamp(EPOCH_MILLIS + elapsed)
    }
}

/// The local limit store, with switches to make it fail and to make its allowed decisions ask
/// for a delay (as a leaky bucket within its burst does), and a count of its calls.
pub(crate) struct TestStore {
    inner: LocalLimitStore,
    /// Answer every call with an error.
    pub(crate) failing: AtomicBool,
    /// Added to every allowed decision's delay.
    pub(crate) allowed_delay: Mutex<Duration>,
    /// How many `reserve` calls were made.
    pub(crate) calls: AtomicUsize,
    /// How many `refund` calls were made.
    pub(crate) refunds: AtomicUsize,
}

impl Default for TestStore {
    fn default() -> Self {
        let clock = Arc::new(TokioClock {
            origin: Instant::now(),
        });
        TestStore {
            inner: LocalLimitStore::new(clock, LocalLimitConfig::default()),
            failing: AtomicBool::new(false),
            allowed_delay: Mutex::new(Duration::ZERO),
            calls: AtomicUsize::new(0),
            refunds: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl LimitStore for TestStore {
    async fn reserve(&self, requests: &[LimitRequest<'_>]) -> Result<Reserved, LimitStoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(LimitStoreError::Backend {
                message: "the test store is down".to_owned(),
                source: None,
            });
        }
        let mut reserved = self.inner.reserve(requests).await?;
        let delay = *self.allowed_delay.lock().unwrap();
        for decision in reserved
            .decisions
            .iter_mut()
            .filter(|decision| decision.allowed)
        {
            decision.delay += delay;
        }
        Ok(reserved)
    }

    async fn refund(
        &self,
        requests: &[LimitRequest<'_>],
        reservations: &[Option<Reservation>],
    ) -> Result<(), LimitStoreError> {
        self.refunds.fetch_add(1, Ordering::SeqCst);
        self.inner.refund(requests, reservations).await
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
    store: &Arc<TestStore>,
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
