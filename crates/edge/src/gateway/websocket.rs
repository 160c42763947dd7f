//! WebSocket proxying (SPEC §7.2, §10.4). The gateway ends both legs: it opens the upstream
//! connection first (so a site that answers the handshake with anything but 101 has that
//! answer passed to the visitor as it is, its status measured as the site's, and the
//! subprotocol the site picks is the one the visitor gets), then completes the visitor's
//! upgrade and pumps messages both ways.
//!
//! Each connection's visitor→site data messages go through the `[websocket]` limit with the
//! rate-limit algorithms on a state local to the connection: one task reads the visitor's
//! messages in order, so the check is race-free and costs no store round trip. A message over
//! the limit is dropped (and counted) or, with `on_exceed = "close"`, the connection is closed
//! with 1008. Control frames are not limited. Messages larger than `max_message_size` are
//! refused by both legs. A connection keeps the `[websocket]` settings it was opened with; a
//! reload applies to connections opened after it.
//!
//! A socket on a protected route lives no longer than the passes it was let through with: every
//! second they are asked again ([`SocketPass::still_holds`]: a revocation heard, a reset or
//! closed room, and the session's end as the store says it), and once one no longer holds the
//! visitor is closed with 1008 and the site's leg closed. The socket does not renew its
//! session (the visitor's requests do, on any node), so it ends with the session, as the
//! visitor's cookie does. A pass checked only at the handshake would let a visitor stay on
//! the site past their session, its slot already given to the next. A socket let through
//! without a pass (its room's store unreachable, `on_store_error = "open"`) lives no longer
//! than the outage ([`SocketLetThrough`]).

use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::extract::ws::{self, CloseFrame, WebSocket, WebSocketUpgrade};
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig as UpstreamWsConfig;
use tokio_tungstenite::tungstenite::{self, Message as UpstreamMessage};

use anteroom_core::config::{OnExceed, WebSocketConfig};
use anteroom_core::ratelimit::{LimitParams, LimitState, decide_in_place};

use anteroom_api::error::ApiError;

use super::Gateway;
use super::passes::{HeldPasses, RECHECK_MS};
use super::protect::{SocketLetThrough, SocketPass};
use anteroom_core::RoomId;
use anteroom_h1::remove_hop_by_hop;

use super::forwarding::set_forwarding;
use super::proxy::{Upstream, release_if_asked, request_host};
use super::upstream_stream::UpstreamStream;
use super::websocket_stats::WebSocketStats;
use crate::client_scheme::ClientScheme;

/// Whether the request asks to upgrade to WebSocket.
pub(crate) fn is_upgrade<B>(request: &Request<B>) -> bool {
    request
        .headers()
        .get_all(header::UPGRADE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.eq_ignore_ascii_case("websocket"))
}

/// Headers of the visitor's handshake that belong to the handshake itself, not to the site.
const HANDSHAKE_HEADERS: [&str; 4] = [
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-accept",
];

/// Opens the upstream leg, then upgrades the visitor and pumps messages while `passes` (those
/// the request was let through with) hold, and while the route's `rooms` that let it through
/// without a pass (their store down) still would.
pub(crate) async fn proxy(
    gateway: &Gateway,
    upstream: &Upstream,
    settings: &WebSocketConfig,
    (request, rooms): (Request<Body>, &[RoomId]),
    passes: HeldPasses,
) -> Response {
    let (mut parts, _body) = request.into_parts();
    let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let Some(handshake) = site_handshake(gateway, upstream, &parts) else {
        return ApiError::bad_request("invalid_uri", "the request target cannot be forwarded")
            .into_response();
    };
    let (site, site_response) = match connect_site(upstream, settings, handshake).await {
        Ok(connected) => connected,
        // The site answered the handshake with something else than 101 (a 404 for a path
        // without a socket, a 401, a redirect): its answer is the visitor's, its
        // `Anteroom-Release` acted on, and its status, not a 502, is what the site's
        // measurements count.
        Err(Leg::Refused(tungstenite::Error::Http(answer))) => {
            let mut answer = site_answer(*answer);
            release_if_asked(gateway.app(), passes, &mut answer).await;
            return answer;
        }
        Err(failed) => return failed.into_response(),
    };
    let mut upgrade = upgrade
        .max_message_size(settings.max_message_size)
        .max_frame_size(settings.max_message_size);
    if let Some(protocol) = site_response.headers().get(header::SEC_WEBSOCKET_PROTOCOL) {
        upgrade.set_selected_protocol(protocol.clone());
    }
    let (limit, on_exceed) = (settings.limit, settings.on_exceed);
    // Every room of the route lets a request on with a pass, save one whose store is down
    // and which is `open`.
    let let_through: Vec<SocketLetThrough> = gateway
        .inner
        .rooms
        .with_requirements(rooms)
        .iter()
        .filter(|room| !passes.iter().any(|held| held.room() == *room))
        .map(|room| SocketLetThrough::new(room.clone(), gateway.app().now()))
        .collect();
    let gateway = gateway.clone();
    upgrade.on_upgrade(move |visitor| async move {
        let stats = &gateway.inner.websocket_stats;
        stats.connections.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let rate = MessageRate::new(limit, on_exceed);
        pump(visitor, site, rate, (&gateway, passes, let_through)).await;
        stats.open.fetch_sub(1, Ordering::Relaxed);
    })
}

/// The handshake request to the site: the visitor's headers without hop-by-hop and handshake
/// ones, with the forwarding headers set and the visitor's host; `None` when the target
/// cannot be written as a WebSocket URI.
fn site_handshake(
    gateway: &Gateway,
    upstream: &Upstream,
    parts: &axum::http::request::Parts,
) -> Option<tungstenite::handshake::client::Request> {
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |path_and_query| path_and_query.as_str());
    let scheme = if upstream.tls.is_some() { "wss" } else { "ws" };
    let target = format!("{scheme}://{}{path}", upstream.authority);
    let mut handshake = target.as_str().into_client_request().ok()?;
    let host = request_host(&parts.uri, &parts.headers);
    let peer = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|axum::extract::ConnectInfo(address)| address.ip());
    let mut headers = parts.headers.clone();
    remove_hop_by_hop(&mut headers);
    for name in HANDSHAKE_HEADERS {
        headers.remove(name);
    }
    set_forwarding(
        &mut headers,
        peer,
        ClientScheme::of(&parts.extensions),
        host.as_ref(),
        &gateway.app().settings().trusted_proxies,
    );
    for (name, value) in &headers {
        if name != header::HOST {
            handshake.headers_mut().append(name.clone(), value.clone());
        }
    }
    if let Some(host) = host {
        handshake.headers_mut().insert(header::HOST, host);
    }
    Some(handshake)
}

/// Connects to the site and makes the WebSocket handshake, each within its timeout.
async fn connect_site(
    upstream: &Upstream,
    settings: &WebSocketConfig,
    handshake: tungstenite::handshake::client::Request,
) -> Result<(SiteSocket, tungstenite::handshake::client::Response), Leg> {
    let config = &upstream.config;
    let mut leg_config = UpstreamWsConfig::default();
    leg_config.max_message_size = Some(settings.max_message_size);
    leg_config.max_frame_size = Some(settings.max_message_size);
    let stream = tokio::time::timeout(
        config.connect_timeout,
        UpstreamStream::connect(&upstream.address(), upstream.tls.as_ref()),
    )
    .await
    .map_err(|_| Leg::Timeout)?
    .map_err(|_| Leg::Unreachable)?;
    tokio::time::timeout(
        config.header_timeout,
        tokio_tungstenite::client_async_with_config(handshake, stream, Some(leg_config)),
    )
    .await
    .map_err(|_| Leg::Timeout)?
    .map_err(Leg::Refused)
}

/// Why the site's leg could not be opened.
enum Leg {
    Timeout,
    Unreachable,
    Refused(tungstenite::Error),
}

impl IntoResponse for Leg {
    fn into_response(self) -> Response {
        match self {
            Leg::Timeout => ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                "the site did not accept the WebSocket in time",
            ),
            Leg::Unreachable => ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                "the site cannot be reached",
            ),
            Leg::Refused(error) => {
                tracing::debug!(%error, "the site's WebSocket handshake failed");
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream_refused",
                    "the site's WebSocket handshake failed",
                )
            }
        }
        .into_response()
    }
}

/// The site's answer to a handshake it did not take, as the visitor gets it: its status and
/// its fields but those of its connection, with its body when the bytes the handshake read
/// hold all of it (a length, no coding, all there); otherwise without (the handshake reads
/// the head and whatever came with it, not the rest: a cut or still chunked body would be
/// passed on as whole).
fn site_answer(answer: tungstenite::http::Response<Option<Vec<u8>>>) -> Response {
    let (parts, read) = answer.into_parts();
    let read = read.unwrap_or_default();
    let whole = !parts.headers.contains_key(header::TRANSFER_ENCODING)
        && parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|length| anteroom_h1::parse_length(length.as_bytes()))
            .is_some_and(|length| length == read.len() as u64);
    let mut headers = parts.headers;
    remove_hop_by_hop(&mut headers);
    headers.remove(header::CONTENT_LENGTH);
    let body = if whole {
        Body::from(read)
    } else {
        for representation in [header::CONTENT_TYPE, header::CONTENT_ENCODING] {
            headers.remove(representation);
        }
        Body::empty()
    };
    let mut response = Response::new(body);
    *response.status_mut() = parts.status;
    *response.headers_mut() = headers;
    response
}

type SiteSocket = WebSocketStream<UpstreamStream>;

/// The visitor's data messages counted against `[websocket]`'s limit, from the connection's
/// start.
struct MessageRate {
    limit: Option<LimitParams>,
    on_exceed: OnExceed,
    started: tokio::time::Instant,
    state: Option<LimitState>,
}

/// What becomes of a data message over the limit.
enum OverLimit {
    Drop,
    Close(CloseFrame),
}

impl MessageRate {
    fn new(limit: Option<LimitParams>, on_exceed: OnExceed) -> MessageRate {
        MessageRate {
            limit,
            on_exceed,
            started: tokio::time::Instant::now(),
            state: None,
        }
    }

    /// Counts one data message: `Some` when it is over the limit (and counted in `stats`).
    fn count(&mut self, stats: &WebSocketStats) -> Option<OverLimit> {
        let params = self.limit.as_ref()?;
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if decide_in_place(params, &mut self.state, now_ms, 1).allowed {
            return None;
        }
        Some(match self.on_exceed {
            OnExceed::Drop => {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
                OverLimit::Drop
            }
            OnExceed::Close => {
                stats.closed_over_limit.fetch_add(1, Ordering::Relaxed);
                OverLimit::Close(CloseFrame {
                    code: ws::close_code::POLICY,
                    reason: "message rate limit exceeded".into(),
                })
            }
        })
    }
}

type VisitorSink = futures_util::stream::SplitSink<WebSocket, ws::Message>;
type SiteSink = futures_util::stream::SplitSink<SiteSocket, UpstreamMessage>;

/// Pumps messages until either side closes, the visitor goes over the limit, or one of the
/// `passes` (or rooms' outages, `let_through`) the socket was let through with no longer
/// holds.
async fn pump(
    visitor: WebSocket,
    site: SiteSocket,
    rate: MessageRate,
    (gateway, passes, let_through): (&Gateway, HeldPasses, Vec<SocketLetThrough>),
) {
    let stats = &gateway.inner.websocket_stats;
    let (mut to_visitor, from_visitor) = visitor.split();
    let (mut to_site, from_site) = site.split();
    let closing = {
        let visitor_to_site = visitor_to_site(from_visitor, &mut to_site, rate, stats);
        let site_to_visitor = site_to_visitor(from_site, &mut to_visitor);
        let passes_end = until_a_pass_ends(gateway, passes, let_through);
        tokio::pin!(visitor_to_site, site_to_visitor, passes_end);
        tokio::select! {
            over_limit = &mut visitor_to_site => over_limit,
            () = &mut site_to_visitor => None,
            pass_ended = &mut passes_end => {
                stats.closed_pass_ended.fetch_add(1, Ordering::Relaxed);
                Some(pass_ended)
            }
        }
    };
    if let Some(frame) = closing {
        let _ = to_visitor.send(ws::Message::Close(Some(frame))).await;
        let _ = to_site.close().await;
    }
}

/// Asks the socket's `passes` and `let_through` rooms again every [`RECHECK_MS`] (the most a
/// session's end may go unseen by requests, too) until one no longer holds: the frame the
/// visitor is closed with. Never ends for a socket that needed no pass.
async fn until_a_pass_ends(
    gateway: &Gateway,
    passes: HeldPasses,
    let_through: Vec<SocketLetThrough>,
) -> CloseFrame {
    if passes.is_empty() && let_through.is_empty() {
        return std::future::pending().await;
    }
    let mut passes: Vec<SocketPass> = passes.into_iter().map(SocketPass::new).collect();
    let every = std::time::Duration::from_millis(RECHECK_MS);
    let mut checks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        checks.tick().await;
        for pass in &mut passes {
            if !pass.still_holds(gateway).await {
                return CloseFrame {
                    code: ws::close_code::POLICY,
                    reason: "the pass no longer holds".into(),
                };
            }
        }
        for room in &let_through {
            if !room.still_holds(gateway).await {
                return CloseFrame {
                    code: ws::close_code::POLICY,
                    reason: "the room lets nobody in without a pass again".into(),
                };
            }
        }
    }
}

/// Passes the visitor's messages to the site until either closes; `Some` when the visitor
/// went over the limit and is to be closed with that frame.
async fn visitor_to_site(
    mut from_visitor: futures_util::stream::SplitStream<WebSocket>,
    to_site: &mut SiteSink,
    mut rate: MessageRate,
    stats: &WebSocketStats,
) -> Option<CloseFrame> {
    while let Some(Ok(message)) = from_visitor.next().await {
        let data = matches!(message, ws::Message::Text(_) | ws::Message::Binary(_));
        if data {
            match rate.count(stats) {
                None => {}
                Some(OverLimit::Drop) => continue,
                Some(OverLimit::Close(frame)) => return Some(frame),
            }
        }
        let closing = matches!(message, ws::Message::Close(_));
        let Some(message) = to_site_message(message) else {
            continue;
        };
        if to_site.send(message).await.is_err() {
            break;
        }
        if data {
            stats.forwarded.fetch_add(1, Ordering::Relaxed);
        }
        if closing {
            break;
        }
    }
    let _ = to_site.close().await;
    None
}

/// Passes the site's messages to the visitor until either closes.
async fn site_to_visitor(
    mut from_site: futures_util::stream::SplitStream<SiteSocket>,
    to_visitor: &mut VisitorSink,
) {
    while let Some(Ok(message)) = from_site.next().await {
        let closing = matches!(message, UpstreamMessage::Close(_));
        let Some(message) = to_visitor_message(message) else {
            continue;
        };
        if to_visitor.send(message).await.is_err() || closing {
            break;
        }
    }
}

fn to_site_message(message: ws::Message) -> Option<UpstreamMessage> {
    Some(match message {
        ws::Message::Text(text) => {
            UpstreamMessage::Text(tungstenite::Utf8Bytes::try_from(Bytes::from(text)).ok()?)
        }
        ws::Message::Binary(data) => UpstreamMessage::Binary(data),
        ws::Message::Ping(data) => UpstreamMessage::Ping(data),
        ws::Message::Pong(data) => UpstreamMessage::Pong(data),
        ws::Message::Close(frame) => {
            UpstreamMessage::Close(frame.map(|frame| tungstenite::protocol::CloseFrame {
                code: frame.code.into(),
                reason:
                    tungstenite::Utf8Bytes::try_from(Bytes::from(frame.reason)).unwrap_or_default(),
            }))
        }
    })
}

fn to_visitor_message(message: UpstreamMessage) -> Option<ws::Message> {
    Some(match message {
        UpstreamMessage::Text(text) => {
            ws::Message::Text(ws::Utf8Bytes::try_from(Bytes::from(text)).ok()?)
        }
        UpstreamMessage::Binary(data) => ws::Message::Binary(data),
        UpstreamMessage::Ping(data) => ws::Message::Ping(data),
        UpstreamMessage::Pong(data) => ws::Message::Pong(data),
        UpstreamMessage::Close(frame) => ws::Message::Close(frame.map(|frame| CloseFrame {
            code: frame.code.into(),
            reason: ws::Utf8Bytes::try_from(Bytes::from(frame.reason)).unwrap_or_default(),
        })),
        UpstreamMessage::Frame(_) => return None,
    })
}
