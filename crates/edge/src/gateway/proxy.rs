//! The reverse proxy (SPEC §7.2): the engine's own keep-alive HTTP/1.1 client
//! (`upstream_client.rs`)
//! for request bodies in memory, hyper's pooled client for streamed bodies and h2c, to the
//! upstream, bodies streamed both ways through [`GuardedBody`] (bounded memory, a size
//! limit, an idle timeout), hop-by-hop headers removed, `X-Forwarded-*` and `Forwarded` set
//! (`forwarding.rs`: written straight into the request head by the own client, put in the
//! header map for hyper's),
//! upstream failures answered 502/504 problem+json (503 `upstream_busy` when `[upstream]
//! max_connections` leaves no connection), and the origin's `Anteroom-Release` header acted on
//! and stripped. A `Content-Length` the origin sent beside a `Transfer-Encoding` never reaches
//! the visitor, whichever client read the answer. For the engine's own connection loop the
//! own client leaves the origin's fields as it read them (`anteroom_h1::PassedFields`, written
//! by the loop after the status line) and puts in the header map only those the gateway reads
//! ([`READ_FROM_ANSWERS`]): no `HeaderName`, `HeaderValue` or map entry per field.

use std::error::Error as _;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::BoxError;
use axum::body::{Body, Bytes};
use axum::http::uri::{Authority, Scheme};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri, Version, header};
use axum::response::{IntoResponse, Response};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt as _;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use anteroom_core::config::{Cidr, HttpEngine, UpstreamConfig};
use anteroom_core::engine::SessionEnd;
use anteroom_store::StoreError;

use anteroom_api::AppState;
use anteroom_api::cookies::pass_cookie_name;
use anteroom_api::error::ApiError;

use crate::correlation::Correlation;
use crate::tls::{TlsSetupError, UpstreamTls, plain_upstream_config, upstream_tls};
use crate::visitor::Visitor;
use anteroom_h1::{
    AnswerFields, MAX_INLINE_BODY, PassedFields, remove_hop_by_hop, request_states_length,
};

use super::connection_cap::ConnectionCap;
use super::forwarding::Forwarding;
use super::passes::HeldPasses;
use super::upstream_client::{
    AddedFields, OwnRequest, UpstreamError, UpstreamPool, UpstreamTarget,
};

/// The response header through which the origin ends the visitor's session.
static ANTEROOM_RELEASE: HeaderName = HeaderName::from_static("anteroom-release");

/// The origin's answer fields the gateway reads or replaces after the proxy, whichever way
/// the others travel: `Anteroom-Release` (acted on and removed) and `X-Request-Id` (the
/// node's replaces the origin's). The rate-limit fields the gateway adds only when the
/// origin sent none are not here: an answer that may get them has all its fields in the map
/// ([`answer_fields`]).
static READ_FROM_ANSWERS: [HeaderName; 2] = [
    HeaderName::from_static("anteroom-release"),
    HeaderName::from_static("x-request-id"),
];

/// Where the own client puts the origin's answer fields: only those the gateway reads in the
/// header map when the answer goes `as_read` to a writer that writes the others as they came
/// (the engine's own connection loop); all of them otherwise (hyper's writers, an HTTP/2
/// visitor, steps that look for other fields).
pub(super) fn answer_fields(as_read: bool) -> AnswerFields<'static> {
    if as_read {
        AnswerFields::Passed {
            read: &READ_FROM_ANSWERS,
        }
    } else {
        // Room for what the gateway adds (the request id, a cookie).
        AnswerFields::Map { spare: 2 }
    }
}

/// The protected site.
pub(crate) struct Upstream {
    pub(crate) config: UpstreamConfig,
    pub(crate) authority: Authority,
    /// `max_connections`: one cap for the node's serving threads and both clients.
    cap: Option<Arc<ConnectionCap>>,
    /// `https://`: how TLS is spoken to the site (both clients and WebSocket handshakes).
    pub(crate) tls: Option<UpstreamTls>,
    /// The TLS settings hyper's connector holds (for a plain site, ones it never uses).
    hyper_tls: rustls::ClientConfig,
}

/// The pools of keep-alive connections to the upstream: our own HTTP/1.1 client for requests
/// whose body is in memory (none under `http_engine = "hyper"`), hyper's for streamed bodies
/// and h2c. Each serving thread has its own: a pooled connection is then driven by the thread
/// whose requests use it.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    hyper: Client<HttpsConnector<HttpConnector>, GuardedBody<Body>>,
    own: Option<Arc<UpstreamPool>>,
}

/// One serving thread's pools ([`UpstreamClient`]) for the upstream in force: when a reload
/// replaces the upstream, the thread's next request makes new pools for the new one, and the
/// old pools close with the last request still using them. Finding the pools is an atomic
/// load and a pointer comparison.
#[derive(Clone)]
pub(crate) struct UpstreamPools {
    engine: HttpEngine,
    current: Arc<ArcSwap<PoolsFor>>,
}

/// Pools and the upstream they connect to.
pub(crate) struct PoolsFor {
    upstream: Arc<Upstream>,
    pub(super) client: UpstreamClient,
}

impl UpstreamPools {
    /// New, empty pools for `upstream`.
    pub(crate) fn new(upstream: &Arc<Upstream>, engine: HttpEngine) -> UpstreamPools {
        UpstreamPools {
            engine,
            current: Arc::new(ArcSwap::from_pointee(PoolsFor {
                upstream: upstream.clone(),
                client: upstream.client(engine),
            })),
        }
    }

    /// The pools for `upstream`, made now if the thread's are for another one.
    pub(super) fn for_upstream(&self, upstream: &Arc<Upstream>) -> Arc<PoolsFor> {
        let current = self.current.load_full();
        if Arc::ptr_eq(&current.upstream, upstream) {
            return current;
        }
        let fresh = Arc::new(PoolsFor {
            upstream: upstream.clone(),
            client: upstream.client(self.engine),
        });
        self.current.store(fresh.clone());
        fresh
    }
}

impl Upstream {
    /// The upstream of `config`. The URL was validated with the config
    /// (`http(s)://host[:port]`) and so were its TLS settings; `None` if either still fails.
    pub(crate) fn new(config: UpstreamConfig) -> Option<Upstream> {
        let authority = config
            .url
            .strip_prefix("http://")
            .or_else(|| config.url.strip_prefix("https://"))
            .map(|rest| rest.trim_end_matches('/'))
            .and_then(|rest| Authority::from_str(rest).ok())?;
        let (tls, hyper_tls) = match tls_settings(&config) {
            Ok(settings) => settings,
            Err(error) => {
                tracing::error!(%error, "TLS to the upstream cannot be set up");
                return None;
            }
        };
        let cap = config.max_connections.map(ConnectionCap::new);
        Some(Upstream {
            config,
            authority,
            cap,
            tls,
            hyper_tls,
        })
    }

    /// `host:port` to connect to (the URL's port, or the scheme's).
    pub(crate) fn address(&self) -> String {
        match self.authority.port_u16() {
            Some(_) => self.authority.as_str().to_owned(),
            None => format!("{}:{}", self.authority.host(), self.config.port()),
        }
    }

    /// `http` or `https`.
    fn scheme(&self) -> Scheme {
        if self.tls.is_some() {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        }
    }

    /// hyper's connector: TLS for an `https://` site, with its trusted authorities and the
    /// name checked; plain TCP otherwise.
    fn hyper_connector(&self) -> HttpsConnector<HttpConnector> {
        let config = &self.config;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_keepalive(Some(Duration::from_secs(60)));
        connector.enforce_http(false);
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = builder.with_tls_config(self.hyper_tls.clone());
        let builder = match &self.tls {
            Some(tls) => builder.https_only().with_server_name_resolver(
                hyper_rustls::FixedServerNameResolver::new(tls.server_name()),
            ),
            // The site is plain HTTP: the TLS settings are never used.
            None => builder.https_or_http(),
        };
        builder.enable_http1().wrap_connector(connector)
    }

    /// New, empty connection pools to the upstream for `engine`.
    pub(crate) fn client(&self, engine: HttpEngine) -> UpstreamClient {
        let config = &self.config;
        let connector = self.hyper_connector();
        let mut builder = Client::builder(TokioExecutor::new());
        if let Some(max) = config.max_connections {
            // hyper's idle connections are not counted by the cap: keep each thread's
            // within it.
            builder.pool_max_idle_per_host(max);
        }
        let hyper = builder
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_only(config.http2)
            .build(connector);
        let own = (engine == HttpEngine::Own).then(|| {
            UpstreamPool::new(UpstreamTarget {
                address: self.address(),
                connect_timeout: config.connect_timeout,
                idle_timeout: config.idle_timeout,
                pool_idle_timeout: config.pool_idle_timeout,
                max_response_body: config.max_response_body,
                cap: self.cap.clone(),
                tls: self.tls.clone(),
            })
        });
        UpstreamClient { hyper, own }
    }
}

/// How TLS is spoken to the site of `config` (none for `http://`), and the settings hyper's
/// connector holds.
fn tls_settings(
    config: &UpstreamConfig,
) -> Result<(Option<UpstreamTls>, rustls::ClientConfig), TlsSetupError> {
    if config.is_https() {
        let tls = upstream_tls(config)?;
        let mut hyper_tls = tls.client_config().clone();
        // hyper-rustls offers the protocols it is told to speak (HTTP/1.1) itself.
        hyper_tls.alpn_protocols.clear();
        Ok((Some(tls), hyper_tls))
    } else {
        Ok((None, plain_upstream_config()?))
    }
}

/// Forwards the request as the upstream is to get it, through the own client when its body is
/// already in memory and through hyper's otherwise, and hands back the answer as the visitor
/// gets it, with the origin's fields the own client passed as read (`fields`; none from
/// hyper's client).
pub(super) async fn forward(
    app: &AppState,
    upstream: &Upstream,
    client: &UpstreamClient,
    (request, visitor): (Request<Body>, &Visitor),
    passes: HeldPasses,
    correlation: &Correlation,
    fields: AnswerFields<'static>,
) -> (Response, PassedFields) {
    let config = &upstream.config;
    let (mut parts, body) = request.into_parts();
    if let (Some(limit), Some(length)) = (config.max_request_body, content_length(&parts.headers))
        && length > limit
    {
        return (body_too_large(limit), PassedFields::default());
    }
    let trusted_proxies = &app.settings().trusted_proxies;
    let (headers, forwarding) = upstream_headers(trusted_proxies, upstream, &mut parts, visitor);
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |path_and_query| path_and_query.as_str());
    // A body already in memory (none, or a small one the connection loop read whole) goes
    // through our own client; a streamed one through hyper's.
    let own_client = client.own.as_ref().filter(|_| {
        !config.http2
            && body
                .size_hint()
                .exact()
                .is_some_and(|length| length <= MAX_INLINE_BODY as u64)
    });
    let outgoing = Outgoing {
        method: parts.method,
        path,
        headers,
        forwarding,
        correlation,
        body,
    };
    let answer = match own_client {
        Some(own_client) => send_own(own_client, config, outgoing, fields).await,
        None => send_hyper(&client.hyper, upstream, outgoing)
            .await
            .map(|response| (response, PassedFields::default())),
    };
    match answer {
        Ok((response, passed)) => (finish(app, passes, response).await, passed),
        Err(refused) => (refused, PassedFields::default()),
    }
}

/// A request as it goes to the upstream.
struct Outgoing<'a> {
    method: axum::http::Method,
    /// The path and query.
    path: &'a str,
    headers: HeaderMap,
    forwarding: Forwarding,
    /// The request's ids, written by the own client, put in the map for hyper's.
    correlation: &'a Correlation,
    body: Body,
}

/// The request's headers as the upstream gets them: hop-by-hop ones removed, the forwarding
/// ones taken out to be set anew ([`Forwarding`]), and `Host` for HTTP/1.1.
#[inline]
fn upstream_headers(
    trusted_proxies: &[Cidr],
    upstream: &Upstream,
    parts: &mut axum::http::request::Parts,
    visitor: &Visitor,
) -> (HeaderMap, Forwarding) {
    let mut headers = std::mem::take(&mut parts.headers);
    let host = request_host(&parts.uri, &headers);
    remove_hop_by_hop(&mut headers);
    let forwarding = Forwarding::take(
        &mut headers,
        visitor.peer_ip(),
        visitor.scheme(),
        host.as_ref(),
        trusted_proxies,
    );
    if upstream.config.http2 {
        // The target's authority says where the request goes; the visitor's host travels in
        // X-Forwarded-Host and Forwarded.
        headers.remove(header::HOST);
    } else if let Some(host) = host
        .or_else(|| HeaderValue::from_str(upstream.authority.as_str()).ok())
        .filter(|host| headers.get(header::HOST) != Some(host))
    {
        // The visitor's host, or the site's own for an HTTP/1.0 visitor who named none: an
        // HTTP/1.1 request always carries one (both clients send the same).
        headers.insert(header::HOST, host);
    }
    (headers, forwarding)
}

/// Sends a request whose body is in memory through the own client, the answer's fields as
/// `fields` says; `Err` is the answer to the visitor when it could not be.
#[inline]
async fn send_own(
    own_client: &Arc<UpstreamPool>,
    config: &UpstreamConfig,
    outgoing: Outgoing<'_>,
    fields: AnswerFields<'static>,
) -> Result<(Response, PassedFields), Response> {
    // A small body hyper reads (sent with `Expect`, say) may still stall on the way.
    let bytes = match outgoing.body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => return Err(visitors_body_failed(is_timeout(&error))),
    };
    if let Some(limit) = config.max_request_body
        && bytes.len() as u64 > limit
    {
        return Err(body_too_large(limit));
    }
    let request = OwnRequest {
        method: &outgoing.method,
        target: outgoing.path,
        headers: &outgoing.headers,
        added: AddedFields {
            correlation: outgoing.correlation,
            forwarding: &outgoing.forwarding,
        },
        body: bytes,
    };
    own_client
        .send(request, config.header_timeout, fields)
        .await
        .map_err(|error| own_client_failure(&error, config))
}

/// Sends a request with a streamed body (or over h2c) through hyper's pooled client, under
/// the upstream's connection cap; `Err` is the answer to the visitor when it could not be.
async fn send_hyper(
    hyper: &Client<HttpsConnector<HttpConnector>, GuardedBody<Body>>,
    upstream: &Upstream,
    outgoing: Outgoing<'_>,
) -> Result<Response, Response> {
    let config = &upstream.config;
    let Some(request) = hyper_request(upstream, outgoing) else {
        return Err(
            ApiError::bad_request("invalid_uri", "the request target cannot be forwarded")
                .into_response(),
        );
    };
    // Waiting for a connection under the cap counts towards the answer's head.
    let answer_by = Instant::now() + config.header_timeout;
    let permit = match &upstream.cap {
        None => None,
        Some(cap) => Some(cap.acquire(answer_by).await.map_err(|_| upstream_busy())?),
    };
    let response = match tokio::time::timeout_at(answer_by, hyper.request(request)).await {
        Err(_) => return Err(upstream_timeout(config.header_timeout)),
        Ok(Err(error)) => return Err(upstream_failure(&error, config)),
        Ok(Ok(response)) => response,
    };
    let (mut parts, body) = response.into_parts();
    // The origin framed the body with its coding (RFC 9112 §6.3): a length beside it may be
    // false, and the visitor's connection would be framed by it once the coding is removed.
    // (The own client's answers come without either: `anteroom_h1::parse_answer_head`.)
    if parts.headers.contains_key(header::TRANSFER_ENCODING) {
        // hyper took off `chunked` only: the visitor would get a body still coded otherwise
        // (the own client refuses the same answers).
        if !anteroom_h1::only_chunked(&parts.headers) {
            tracing::debug!("the site's answer is coded with more than chunked");
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_failed",
                "the site's answer could not be read",
            )
            .into_response());
        }
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    remove_hop_by_hop(&mut parts.headers);
    // The connection is in use until the body has ended: the permit goes with the body.
    let body =
        GuardedBody::new(body, config.max_response_body, config.idle_timeout).holding(permit);
    Ok(Response::from_parts(parts, Body::new(body)))
}

/// The request as hyper's client sends it: to the upstream's absolute URI, its body guarded,
/// the forwarding headers set; `None` when the target cannot be written as a URI.
fn hyper_request(
    upstream: &Upstream,
    outgoing: Outgoing<'_>,
) -> Option<Request<GuardedBody<Body>>> {
    let config = &upstream.config;
    let Outgoing {
        method,
        path,
        mut headers,
        forwarding,
        correlation,
        body,
    } = outgoing;
    let uri = Uri::builder()
        .scheme(upstream.scheme())
        .authority(upstream.authority.clone())
        .path_and_query(path)
        .build();
    let uri = uri.ok()?;
    if body.is_end_stream()
        && request_states_length(&method, 0)
        && !headers.contains_key(header::CONTENT_LENGTH)
    {
        // An empty POST, PUT or PATCH says so, as the own client writes it (hyper's client
        // sends no length for an empty body).
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
    }
    let mut request = Request::new(GuardedBody::new(
        body,
        config.max_request_body,
        config.idle_timeout,
    ));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    correlation.insert_into(&mut headers);
    forwarding.insert_into(&mut headers);
    *request.headers_mut() = headers;
    *request.version_mut() = if config.http2 {
        Version::HTTP_2
    } else {
        Version::HTTP_11
    };
    Some(request)
}

/// The upstream's answer (its hop-by-hop headers already removed by the client that read
/// it) as the visitor gets it: `Anteroom-Release` acted on and stripped (the own client puts
/// it in the map however the other fields travel: [`READ_FROM_ANSWERS`]).
async fn finish(app: &AppState, passes: HeldPasses, mut response: Response) -> Response {
    *response.version_mut() = Version::HTTP_11;
    release_if_asked(app, passes, &mut response).await;
    response
}

/// Acts on the origin's `Anteroom-Release` header and strips it (see [`end_session`]); the
/// gateway's answers and `WaitingRoomLayer`'s inner service's alike.
pub(crate) async fn release_if_asked(app: &AppState, passes: HeldPasses, response: &mut Response) {
    // Most answers carry none: one pass over the names says so, where removing it would
    // hash its name. Every line of it goes (`remove` takes them all).
    if !response
        .headers()
        .keys()
        .any(|name| *name == ANTEROOM_RELEASE)
    {
        return;
    }
    if let Some(value) = response.headers_mut().remove(&ANTEROOM_RELEASE) {
        end_session(app, passes, &value, response).await;
    }
}

/// 504 when connecting or the answer's head timed out, 502 for anything else.
fn own_client_failure(error: &UpstreamError, config: &UpstreamConfig) -> Response {
    tracing::debug!(%error, "upstream failed");
    let (code, detail) = match error {
        UpstreamError::ConnectTimeout => return upstream_timeout(config.connect_timeout),
        UpstreamError::HeadTimeout => return upstream_timeout(config.header_timeout),
        UpstreamError::WriteTimeout => return upstream_timeout(config.idle_timeout),
        UpstreamError::Busy => return upstream_busy(),
        UpstreamError::Connect(_) => ("upstream_unreachable", "the site cannot be reached"),
        UpstreamError::Io(_) | UpstreamError::Malformed => {
            ("upstream_failed", "the site's answer could not be read")
        }
    };
    ApiError::new(StatusCode::BAD_GATEWAY, code, detail).into_response()
}

/// `Anteroom-Release: 1` ends the session of the route's last room (the innermost tier);
/// `Anteroom-Release: <room>` the session of that room. The slot frees at once (the store
/// ticks the room in the same operation) and the pass cookie is cleared.
async fn end_session(
    app: &AppState,
    passes: HeldPasses,
    value: &HeaderValue,
    response: &mut Response,
) {
    let named = value.to_str().unwrap_or_default().trim();
    let held = if named == "1" || named.eq_ignore_ascii_case("true") {
        passes.last()
    } else {
        passes.iter().find(|held| held.room().as_str() == named)
    };
    let Some(held) = held else {
        tracing::debug!(
            value = named,
            "Anteroom-Release on a request without that pass"
        );
        return;
    };
    match app
        .store()
        .end_session(held.room(), held.pass.session, SessionEnd::Completed)
        .await
    {
        Ok(_) | Err(StoreError::Engine(_)) => {
            held.pass.revoke();
            if let Some(clear) = app.cookies().clear(&pass_cookie_name(held.room().as_str())) {
                response.headers_mut().append(header::SET_COOKIE, clear);
            }
        }
        Err(error) => {
            tracing::warn!(room = %held.room(), %error, "cannot end the session the origin released");
        }
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse().ok())
}

/// The host the visitor asked for: the URI's authority (HTTP/2) or the `Host` header.
pub(crate) fn request_host(uri: &Uri, headers: &HeaderMap) -> Option<HeaderValue> {
    uri.authority()
        .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
        .or_else(|| headers.get(header::HOST).cloned())
}

fn body_too_large(limit: u64) -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the request body is larger than {limit} bytes"),
    )
    .into_response()
}

/// No connection to the site became free within the header timeout (`max_connections`).
fn upstream_busy() -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "upstream_busy",
        "every connection to the site is in use; try again shortly",
    )
    .retry_after(1)
    .into_response()
}

fn upstream_timeout(after: Duration) -> Response {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "upstream_timeout",
        format!("the site did not answer within {} ms", after.as_millis()),
    )
    .into_response()
}

/// 413 when the request body outgrew its limit on the way, 408 when it stopped arriving, 400
/// when it failed otherwise (the visitor's doing: not counted as the site's 5xx); 504 when
/// connecting or the site timed out, 502 for anything else.
fn upstream_failure(
    error: &hyper_util::client::legacy::Error,
    config: &UpstreamConfig,
) -> Response {
    let mut source: Option<&(dyn std::error::Error + 'static)> = error.source();
    // The request's own body failed (hyper's "user body" error): the visitor's, not the site's.
    let mut visitors_body = false;
    while let Some(cause) = source {
        // A user error with a cause is the body's (one without, such as the connection's
        // task gone, is not the visitor's doing).
        visitors_body |= cause
            .downcast_ref::<hyper::Error>()
            .is_some_and(|error| error.is_user() && error.source().is_some());
        if cause.downcast_ref::<BodyError>() == Some(&BodyError::TooLarge)
            && let Some(limit) = config.max_request_body
        {
            return body_too_large(limit);
        }
        source = cause.source();
    }
    let timed_out = is_timeout(error);
    if visitors_body {
        tracing::debug!(%error, "the request body failed");
        return visitors_body_failed(timed_out);
    }
    if timed_out {
        tracing::debug!(%error, "upstream timed out");
        return upstream_timeout(if error.is_connect() {
            config.connect_timeout
        } else {
            config.idle_timeout
        });
    }
    tracing::debug!(%error, source = ?error.source(), "upstream failed");
    let (code, detail) = if error.is_connect() {
        ("upstream_unreachable", "the site cannot be reached")
    } else {
        ("upstream_failed", "the site's answer could not be read")
    };
    ApiError::new(StatusCode::BAD_GATEWAY, code, detail).into_response()
}

/// The answer to a request whose own body failed on the way: 408 when it stopped arriving,
/// else 400. The visitor's doing, so not one of the site's 5xx that adaptive admission reads.
fn visitors_body_failed(timed_out: bool) -> Response {
    if timed_out {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request body stopped arriving",
        )
        .into_response()
    } else {
        ApiError::bad_request("invalid_body", "the request body could not be read").into_response()
    }
}

/// Whether `error` or one of its sources is a time-out: an I/O one (a connect, or a request
/// body's `body_timeout`, `h1/bodies.rs`) or a guarded body's idle bound ([`BodyError::Idle`]).
fn is_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        let io_timeout = error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
        if io_timeout || error.downcast_ref::<BodyError>() == Some(&BodyError::Idle) {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Why [`GuardedBody`] cut a body off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BodyError {
    /// The body grew past its limit.
    #[error("body larger than the configured limit")]
    TooLarge,
    /// No data came for the idle timeout.
    #[error("body made no progress within the idle timeout")]
    Idle,
}

/// A body passed through as it streams: bounded in size, cut off when it stalls for
/// `idle`. Memory stays at the frames in flight whatever the body's length.
///
/// The idle timer is armed only when the body first waits, and a frame does not move it: the
/// frame's time is noted, and a timer that fires after progress is pushed to the last
/// frame's time plus `idle` instead of ending the body. A body that never waits costs no
/// timer, and one that streams costs one clock read per frame, not a timer update.
pub(crate) struct GuardedBody<B> {
    inner: B,
    limit: Option<u64>,
    seen: u64,
    idle: Duration,
    idle_timer: Option<Pin<Box<Sleep>>>,
    /// When the last frame came, once the timer is armed.
    last_frame: Option<Instant>,
    /// The request's permit under `[upstream] max_connections`, freed with the body.
    _permit: Option<OwnedSemaphorePermit>,
}

impl<B> GuardedBody<B> {
    pub(crate) fn new(inner: B, limit: Option<u64>, idle: Duration) -> GuardedBody<B> {
        GuardedBody {
            inner,
            limit,
            seen: 0,
            idle,
            idle_timer: None,
            last_frame: None,
            _permit: None,
        }
    }

    /// This body, holding `permit` until it is dropped.
    fn holding(mut self, permit: Option<OwnedSemaphorePermit>) -> GuardedBody<B> {
        self._permit = permit;
        self
    }
}

impl<B> http_body::Body for GuardedBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.seen = this.seen.saturating_add(data.len() as u64);
                    if this.limit.is_some_and(|limit| this.seen > limit) {
                        return Poll::Ready(Some(Err(BodyError::TooLarge.into())));
                    }
                }
                if this.idle_timer.is_some() {
                    this.last_frame = Some(Instant::now());
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let idle = this.idle;
                let timer = this.idle_timer.get_or_insert_with(|| {
                    this.last_frame = Some(Instant::now());
                    Box::pin(tokio::time::sleep(idle))
                });
                loop {
                    if timer.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let deadline = this.last_frame.map_or(timer.deadline(), |last| last + idle);
                    if deadline <= timer.deadline() {
                        return Poll::Ready(Some(Err(BodyError::Idle.into())));
                    }
                    // Frames came since the timer was set: it fires `idle` after the last.
                    timer.as_mut().reset(deadline);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_is_cut_off_only_when_it_stalls_for_the_idle_timeout() {
        use http_body_util::{BodyExt, StreamBody};
        let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(1);
        let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let data = receiver.recv().await?;
            Some((Ok::<_, Infallible>(Frame::data(data)), receiver))
        });
        let idle = Duration::from_secs(1);
        let mut body = GuardedBody::new(StreamBody::new(Box::pin(frames)), None, idle);
        let started = Instant::now();
        // Five frames 700 ms apart: 3.5 s in all, longer than the idle timeout, never idle.
        let feeder = tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(700)).await;
                sender.send(Bytes::from_static(b"x")).await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        });
        for _ in 0..5 {
            let frame = body.frame().await.unwrap().unwrap();
            assert_eq!(frame.into_data().unwrap(), "x");
        }
        // Then it stalls: cut off one idle timeout after the last frame.
        let error = body.frame().await.unwrap().unwrap_err();
        assert_eq!(error.downcast_ref::<BodyError>(), Some(&BodyError::Idle));
        let cut_after = started.elapsed();
        let last_frame = Duration::from_millis(3_500);
        assert!(
            cut_after >= last_frame + idle && cut_after < last_frame + idle * 11 / 10,
            "cut off after {cut_after:?}"
        );
        feeder.abort();
    }
}
