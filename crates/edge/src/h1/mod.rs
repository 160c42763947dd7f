//! The node's HTTP engine: every public connection is accepted here and served by one of
//! its parts, chosen in [`serve_connection`] alone. Under `[server] http_engine = "hyper"`
//! hyper serves every connection and the gateway reaches the origin with hyper's client only;
//! otherwise (`"own"`, the default):
//!
//! - `server.rs`: the HTTP/1 keep-alive loop of our own for the small requests a waiting room
//!   lives on (joins, status polls, proxied requests with a pass), handing to hyper what it
//!   does not serve itself (upgrades, streamed bodies, HTTP/2);
//! - `stream.rs`: connections that open with an event stream, served with far less memory for
//!   as long as the stream stays open.
//!
//! The connection caps and timeouts are `server_limits.rs`'s; the keep-alive HTTP/1.1 client
//! to the origin is the gateway's (`gateway/upstream_client.rs`). Message framing both ways
//! (heads, lengths, chunked coding, hop-by-hop fields) is the `anteroom-h1` crate's, shared
//! by the server, the stream and that client.
//!
//! Under `[server.tls]` the handshake runs in the connection's own task, within
//! `header_timeout`; ALPN `h2` goes to hyper, HTTP/1.1 to the same own loop over TLS, and its
//! requests carry `ClientScheme::Https`, so the origin hears `proto=https`.
//!
//! On connections hyper serves, `client_io.rs` times the socket (writes that stall, a
//! connection idle between requests) and `delivery.rs` the answers (an HTTP/2 client that
//! stops taking them without stopping a write).

mod bodies;
mod client_io;
mod delivery;
mod sentry;
pub(crate) mod server;
pub(crate) mod stream;

use std::future::Future;
use std::sync::Arc;

use anteroom_core::config::HttpEngine;

use crate::public_app::PublicApp;
use crate::request_metrics::RequestMetrics;
use crate::server_limits::{ConnectionPermit, ServerLimits};
use client_io::ClientIo;

/// How long the accept loop pauses after a failed accept (out of descriptors and the like):
/// the failing connection stays queued, so retrying at once would spin.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests in flight
/// finish (for up to the app's `drain_timeout`) and ends open event streams.
///
/// Every accepted connection is first counted against the app's caps (`server_limits.rs`): over
/// a cap it is refused at once, else it is served with the app's timeouts.
///
/// Each connection speaks HTTP/1.1 or HTTP/2 (prior knowledge), with upgrades (WebSocket), and
/// every request carries the peer's `ConnectInfo<SocketAddr>`. HTTP/1 requests are served by
/// `server.rs`'s keep-alive loop (hyper takes over a connection for upgrades, streamed request
/// bodies and HTTP/2); a connection whose first request opens an event stream is served by
/// `stream.rs`, with far less memory for as long as the stream stays open.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: impl Into<PublicApp>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = app.into();
    let limits = app.limits.clone();
    let builder = connection_builder(&limits);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // Turned `true` at shutdown; every connection still deciding, and every event stream
    // served by `stream`, holds a receiver until it is done.
    let (stop, _) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    limits.accept_failed(&error);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(permit) = limits.admit(peer) else {
            limits.refuse(stream, peer);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let accepted = Accepted {
            peer,
            app: app.clone(),
            builder: builder.clone(),
            watcher: graceful.watcher(),
            stop: stop.subscribe(),
        };
        spawn_connection(stream, permit, accepted, limits.timeouts.write_timeout);
    }
    drop(listener);
    stop.send_replace(true);
    let drained = async {
        graceful.shutdown().await;
        stop.closed().await;
    };
    if tokio::time::timeout(limits.timeouts.drain_timeout, drained)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain timeout; closing them");
    }
    Ok(())
}

/// The most streams an HTTP/2 client may have open at once on one connection (nginx's
/// `http2_max_concurrent_streams` by default; hyper's own default is 200).
const MAX_HTTP2_STREAMS: u32 = 128;

/// How often an HTTP/2 connection's peer is pinged, and how long its answer may take.
const HTTP2_PING_EVERY: std::time::Duration = std::time::Duration::from_secs(20);

/// hyper's server for the connections it serves, with the listener's header timeout.
fn connection_builder(
    limits: &ServerLimits,
) -> Arc<hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>> {
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.timeouts.header_timeout);
    // nginx's default of streams at once; a PING every 20 s closes a connection whose peer
    // is gone (an answer the peer leaves untaken is timed by `delivery`).
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(MAX_HTTP2_STREAMS)
        .keep_alive_interval(Some(HTTP2_PING_EVERY))
        .keep_alive_timeout(HTTP2_PING_EVERY);
    Arc::new(builder)
}

/// Serves an accepted connection in a task of its own, after the TLS handshake when the
/// listener has TLS.
fn spawn_connection(
    stream: tokio::net::TcpStream,
    permit: ConnectionPermit,
    accepted: Accepted,
    write_timeout: std::time::Duration,
) {
    match accepted.app.tls.clone() {
        None => {
            let stream = ClientIo::new(stream, Some(permit), write_timeout);
            tokio::spawn(serve_connection(stream, accepted));
        }
        Some(acceptor) => {
            tokio::spawn(async move {
                if let Some(stream) = handshake(&acceptor, stream, &accepted).await {
                    let stream = ClientIo::new(stream, Some(permit), write_timeout);
                    serve_tls_connection(stream, accepted);
                }
            });
        }
    }
}

/// What serving one accepted connection needs besides the connection itself.
struct Accepted {
    peer: std::net::SocketAddr,
    app: PublicApp,
    builder: Arc<hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>>,
    watcher: hyper_util::server::graceful::Watcher,
    /// Turns `true` at shutdown.
    stop: tokio::sync::watch::Receiver<bool>,
}

impl Accepted {
    /// What hyper needs to take the connection over, the peer, the app and the stop signal.
    fn split(
        self,
    ) -> (
        server::HandOver,
        std::net::SocketAddr,
        PublicApp,
        tokio::sync::watch::Receiver<bool>,
    ) {
        let hand_over = server::HandOver {
            builder: self.builder,
            watcher: self.watcher,
            limits: self.app.limits.clone(),
            requests: RequestMetrics::of(self.app.listener),
        };
        (hand_over, self.peer, self.app, self.stop)
    }
}

/// One accepted plain TCP connection: an event stream opening it goes to [`stream`], other
/// HTTP/1 requests to [`server`], HTTP/2 (and anything [`server`] hands over) to hyper.
async fn serve_connection(stream: server::Client, accepted: Accepted) {
    let timeouts = accepted.app.limits.timeouts;
    if accepted.app.engine == HttpEngine::Hyper {
        return with_hyper(stream, accepted);
    }
    let mut stop = accepted.stop.clone();
    let mut start = [0u8; stream::PEEK_BYTES];
    let peeked = tokio::select! {
        peeked = tokio::time::timeout(
            timeouts.header_timeout,
            stream.get_ref().peek(&mut start),
        ) => peeked,
        _ = stop.wait_for(|stop| *stop) => return,
    };
    match peeked {
        // Closed, broken, or silent for as long as a request head may take.
        Ok(Ok(0) | Err(_)) | Err(_) => {}
        Ok(Ok(read)) if stream::is_event_stream_request(&start[..read]) => {
            let (_, peer, app, stop) = accepted.split();
            // A task of its own, and this one ends: a task is as large as its future's
            // largest state, and an event stream lives for hours without needing any of this
            // one's (the peek, the other branches, what `accepted` held).
            tokio::spawn(stream::serve(
                stream,
                peer,
                app.router,
                RequestMetrics::of(app.listener),
                timeouts.header_timeout,
                stop,
            ));
        }
        Ok(Ok(read)) if is_http2_preface(&start[..read]) => with_hyper(stream, accepted),
        Ok(Ok(_)) => {
            let (hand_over, peer, app, stop) = accepted.split();
            // Boxed: this task would otherwise be as large as the loop's future while it peeks.
            Box::pin(server::serve(stream, peer, app, hand_over, stop)).await;
        }
    }
}

/// The TLS handshake of a new connection, within the header timeout (a client that never
/// completes one is closed like one that never sends a head); `None` when it failed.
async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    accepted: &Accepted,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    let mut stop = accepted.stop.clone();
    let timeout = accepted.app.limits.timeouts.header_timeout;
    let shaken = tokio::select! {
        shaken = tokio::time::timeout(timeout, acceptor.accept(stream)) => shaken,
        _ = stop.wait_for(|stop| *stop) => return None,
    };
    match shaken {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(error)) => {
            tracing::debug!(peer = %accepted.peer, %error, "TLS handshake failed");
            None
        }
        Err(_elapsed) => None,
    }
}

/// One connection over TLS: HTTP/2 when ALPN chose it, or under the hyper engine, goes to
/// hyper; HTTP/1.1 to [`server`]'s loop (event streams included: there is no peeking under
/// TLS, and the loop streams answers as they come).
fn serve_tls_connection(stream: server::Client<server::TlsClient>, accepted: Accepted) {
    let h2 = stream.get_ref().get_ref().1.alpn_protocol() == Some(b"h2");
    if h2 || accepted.app.engine == HttpEngine::Hyper {
        return with_hyper(stream, accepted);
    }
    tokio::spawn(async move {
        let (hand_over, peer, app, stop) = accepted.split();
        server::serve(stream, peer, app, hand_over, stop).await;
    });
}

/// Hands the whole connection to hyper (`http_engine = "hyper"`, HTTP/2).
fn with_hyper<S: server::Transport>(mut stream: server::Client<S>, accepted: Accepted) {
    let requests = Arc::new(client_io::InFlight::default());
    stream.watch_idle(accepted.app.limits.timeouts.idle_timeout, requests.clone());
    let scheme = stream.get_ref().scheme();
    let (hand_over, peer, app, _) = accepted.split();
    server::serve_with_hyper(stream, (peer, scheme), app.router, hand_over, requests);
}

/// Whether a connection's first bytes are (the start of) HTTP/2's connection preface.
fn is_http2_preface(start: &[u8]) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    !start.is_empty() && PREFACE.starts_with(&start[..start.len().min(PREFACE.len())])
}
