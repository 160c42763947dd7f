//! [`WaitingRoomLayer`]: the gateway's rooms and passes as a tower layer (SPEC §1.3, §10.5),
//! for a Rust service that answers its own routes instead of sitting behind the gateway.
//!
//! Each request takes the gateway's own steps ([`Gateway::route_of`], [`Gateway::check`]), so
//! the decisions are the gateway's, not a copy of them: the path in its one spelling (else
//! 400 `ambiguous_path`), the first matching route, the route's own rate limits, then its
//! rooms: a valid pass goes on (renewed once half its `session_ttl` has passed), a visitor the
//! room can take at once is let in with a new pass, anybody else gets the waiting page (inline
//! or a 302 to it, by the route's `page`) or 429 `waiting_room`; a closed room, and a store
//! that fails closed, 503. Where the gateway would proxy, the layer calls the inner service,
//! then puts the pass cookies and rate-limit headers on its answer and acts on its
//! `Anteroom-Release` header, as the gateway does with the upstream's.
//!
//! A request on a route that checks nothing (no route matched, or a bypass without rate
//! limits) goes to the inner service at once, with no boxed future. Its path is still put in
//! canonical form first: the inner router must route the path the routes were matched on, or
//! `/shop/../free` could be matched as `/free` and routed as `/shop/**`.

use std::task::{Context, Poll};

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response};
use axum::response::IntoResponse as _;
use futures_util::future::Either;
use tower::{Layer, Service};

use super::{Gateway, LetThrough, protect, proxy};
use crate::visitor::Visitor;
use anteroom_api::ratelimit::{LayerFuture, call_at_once, take_ready};

/// A tower layer that holds requests on protected routes back until their visitor has a pass
/// of the route's rooms, as the gateway does; made by
/// `WaitingRoom::layer`.
#[derive(Clone)]
pub struct WaitingRoomLayer {
    gateway: Gateway,
}

impl WaitingRoomLayer {
    pub(crate) fn new(gateway: Gateway) -> WaitingRoomLayer {
        WaitingRoomLayer { gateway }
    }
}

impl<S> Layer<S> for WaitingRoomLayer {
    type Service = WaitingRoomService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WaitingRoomService {
            inner,
            gateway: self.gateway.clone(),
        }
    }
}

/// The service [`WaitingRoomLayer`] wraps around an inner service.
#[derive(Clone)]
pub struct WaitingRoomService<S> {
    inner: S,
    gateway: Gateway,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for WaitingRoomService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    /// Left: a route that checks nothing, the inner service called at once. Right: the checks.
    type Future = LayerFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let live = self.gateway.live();
        let route = match self.gateway.route_of(&live, &mut parts) {
            Ok(route) => route.clone(),
            Err(refused) => {
                let refused = refused.into_response();
                return Either::Right(Box::pin(async move { Ok(refused) }));
            }
        };
        let has_rate_limiter = self.gateway.app().rate_limiter().is_some();
        if route.checks_nothing(has_rate_limiter) {
            return call_at_once(&mut self.inner, Request::from_parts(parts, body));
        }
        let mut inner = take_ready(&mut self.inner);
        let gateway = self.gateway.clone();
        let visitor = Visitor::of(&parts.extensions);
        Either::Right(Box::pin(async move {
            let LetThrough {
                limit_headers,
                cookies,
                passes,
                ..
            } = match gateway.check(&route, &mut parts, &visitor).await {
                Ok(let_through) => let_through,
                Err(held_back) => return Ok(held_back),
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let mut response = response.map(Body::new);
            proxy::release_if_asked(gateway.app(), passes, &mut response).await;
            protect::add_cookies(&mut response, cookies);
            anteroom_api::ratelimit::add_headers(&mut response, &limit_headers);
            Ok(response)
        }))
    }
}
