//! [`RateLimitLayer`]: the rate limiter as a tower layer, for any axum or tower HTTP service.
//!
//! The layer decides each request before the inner service sees it; a refused request never
//! reaches it. Allowed responses get the rate-limit headers, unless the inner service already
//! set them. While no rule is installed the layer only records the client address
//! ([`super::ClientIp`]) and calls the inner service directly.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Request, Response};
use futures_util::future::{Either, MapOk, TryFutureExt as _};
use tower::{Layer, Service};

use anteroom_core::ratelimit::rules::RateLimitRule;
use anteroom_store::limit::LimitStore;

use super::{RateLimitSetupError, RateLimitVerdict, RateLimiter, Settled};

/// A tower layer that rate-limits requests with a [`RateLimiter`].
///
/// ```
/// use std::net::SocketAddr;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use anteroom_core::ratelimit::Algorithm;
/// use anteroom_core::ratelimit::rules::{RateLimitRule, default_params};
/// use anteroom_api::ratelimit::RateLimitLayer;
/// use tower::ServiceExt;
/// # use anteroom_core::{ManualClock, Timestamp};
/// # use anteroom_store::limit::{LimitStore, LocalLimitConfig, LocalLimitStore};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// # let clock = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
/// # let store: Arc<dyn LimitStore> = Arc::new(LocalLimitStore::new(clock, LocalLimitConfig::default()));
///
/// // One request per minute per client address, on every route.
/// let rule = RateLimitRule::new(
///     "per-ip",
///     default_params(Algorithm::FixedWindow, 1, Duration::from_secs(60)),
/// );
/// let app = axum::Router::new()
///     .route("/", axum::routing::get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(vec![rule], store).expect("valid rules"));
///
/// let request = || {
///     let mut request = axum::http::Request::new(axum::body::Body::empty());
///     let peer: SocketAddr = "203.0.113.7:50000".parse().unwrap();
///     request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
///     request
/// };
/// let first = app.clone().oneshot(request()).await.unwrap();
/// assert_eq!(first.status(), 200);
/// assert_eq!(first.headers()["ratelimit-policy"], "\"per-ip\";q=1;w=60");
/// let second = app.oneshot(request()).await.unwrap();
/// assert_eq!(second.status(), 429);
/// assert_eq!(second.headers()["retry-after"], "60");
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    limiter: RateLimiter,
    route_rules: Arc<[String]>,
}

impl RateLimitLayer {
    /// A layer applying `rules`, counting in `store` (see [`RateLimiter::new`]; use
    /// [`RateLimiter::with_options`] for trusted proxies, a redis store or another delay
    /// bound).
    pub fn new(
        rules: Vec<RateLimitRule>,
        store: Arc<dyn LimitStore>,
    ) -> Result<RateLimitLayer, RateLimitSetupError> {
        Ok(RateLimiter::new(rules, store)?.layer())
    }

    fn from_limiter(limiter: RateLimiter, route_rules: Vec<String>) -> RateLimitLayer {
        RateLimitLayer {
            limiter,
            route_rules: route_rules.into(),
        }
    }

    /// The rate limiter, for its metrics and reloads.
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }

    /// Decides a request as the layer does: the refusal to answer with, or the headers
    /// [`add_headers`] puts on the answer.
    pub async fn decide(&self, parts: &mut Parts) -> Result<HeaderMap, Response<Body>> {
        match self
            .limiter
            .check_with_route(parts, &self.route_rules)
            .await
        {
            RateLimitVerdict::Refused(response) | RateLimitVerdict::Unavailable(response) => {
                Err(response)
            }
            RateLimitVerdict::Allowed { headers } => Ok(headers),
        }
    }
    /// [`decide`](Self::decide) for a request whose peer the caller carries beside it
    /// (`peer`, not `ConnectInfo` in its extensions): what the limiter settled comes back
    /// beside the headers instead of going into the request's extensions.
    pub async fn decide_from(
        &self,
        parts: &mut Parts,
        peer: Option<IpAddr>,
    ) -> Result<(HeaderMap, Settled), Response<Body>> {
        match self
            .limiter
            .decide_from(parts, &self.route_rules, peer)
            .await
        {
            (RateLimitVerdict::Refused(response) | RateLimitVerdict::Unavailable(response), _) => {
                Err(response)
            }
            (RateLimitVerdict::Allowed { headers }, settled) => Ok((headers, settled)),
        }
    }
}

/// The layers are made here, beside the layer, so the limiter's module needs nothing of it.
impl RateLimiter {
    /// A tower layer applying the rules to every request.
    pub fn layer(&self) -> RateLimitLayer {
        RateLimitLayer::from_limiter(self.clone(), Vec::new())
    }

    /// A tower layer for one route: like [`layer`](Self::layer), and also applying the
    /// route-only rules (rules without `match`) named in `rule_names`.
    pub fn route_layer<I, N>(&self, rule_names: I) -> RateLimitLayer
    where
        I: IntoIterator<Item = N>,
        N: Into<String>,
    {
        let names = rule_names.into_iter().map(Into::into).collect();
        RateLimitLayer::from_limiter(self.clone(), names)
    }
}

/// Puts the rate-limit headers of an allowed request on its answer, unless the answer already
/// has them.
pub fn add_headers(response: &mut Response<Body>, headers: &HeaderMap) {
    let response_headers = response.headers_mut();
    for (name, value) in headers {
        if !response_headers.contains_key(name) {
            response_headers.insert(name.clone(), value.clone());
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            limiter: self.limiter.clone(),
            route_rules: self.route_rules.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around an inner service.
#[derive(Clone, Debug)]
pub struct RateLimitService<S> {
    inner: S,
    limiter: RateLimiter,
    route_rules: Arc<[String]>,
}

/// The answer of an inner service, its body boxed like the layer's own answers.
type MapBody<ResBody> = fn(Response<ResBody>) -> Response<Body>;

/// Checks that wait for a store, and the inner call after them.
pub(crate) type CheckedFuture<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

/// The future of a layer that checks requests (this one and the gateway's): left, the inner
/// service called at once, with no boxed future; right, the checks.
pub type LayerFuture<F, ResBody, E> = Either<MapOk<F, MapBody<ResBody>>, CheckedFuture<E>>;

/// Calls the inner service at once, its answer's body boxed like the layer's own answers.
pub fn call_at_once<S, ReqBody, ResBody>(
    inner: &mut S,
    request: Request<ReqBody>,
) -> LayerFuture<S::Future, ResBody, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let map_body: MapBody<ResBody> = |response| response.map(Body::new);
    Either::Left(inner.call(request).map_ok(map_body))
}

/// The inner service polled ready, for a future of its own; a fresh clone stays for the next
/// call.
pub fn take_ready<S: Clone>(inner: &mut S) -> S {
    let fresh = inner.clone();
    std::mem::replace(inner, fresh)
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    /// Left: no rule installed, the inner service called at once. Right: the decision.
    type Future = LayerFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // Without rules there is nothing to decide: the request goes straight on, with no
        // boxed future and no clone of the inner service (a join or status call's common
        // case, when the built-in join rule is off).
        if self.limiter.allows_without_rules(&mut request) {
            return call_at_once(&mut self.inner, request);
        }
        let mut inner = take_ready(&mut self.inner);
        let layer = RateLimitLayer {
            limiter: self.limiter.clone(),
            route_rules: self.route_rules.clone(),
        };
        Either::Right(Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let headers = match layer.decide(&mut parts).await {
                Err(refused) => return Ok(refused),
                Ok(headers) => headers,
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let mut response = response.map(Body::new);
            add_headers(&mut response, &headers);
            Ok(response)
        }))
    }
}
