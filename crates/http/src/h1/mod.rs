//! The node's HTTP engine: every public connection is accepted here and served by one of
//! its parts, chosen in [`serve_connection`] alone. Under `[server] http_engine = "hyper"`
//! hyper serves every connection and the gateway reaches the origin with hyper's client only;
//! otherwise (`"own"`, the default):
//!
//! - `server.rs`: the HTTP/1 keep-alive loop of our own for the small requests a waiting room
//!   lives on (joins, status polls, proxied requests with a pass), handing to hyper what it
//!   does not serve itself (upgrades, streamed bodies, HTTP/2);
//! - `stream.rs`: connections that open with an event stream, served with far less memory for
//!   as long as the stream stays open;
//! - `client.rs`: the gateway's keep-alive HTTP/1.1 client to the origin for requests whose
//!   body is in memory (hyper's client takes streamed bodies and h2c).
//!
//! Message framing both ways (heads, lengths, chunked coding, hop-by-hop fields) is the
//! `anteroom-h1` crate's, shared by all three.

mod bodies;
pub(crate) mod client;
mod client_io;
pub(crate) mod limits;
mod sentry;
pub(crate) mod server;
pub(crate) mod stream;

use std::future::Future;
use std::sync::Arc;

use anteroom_core::config::HttpEngine;

use crate::PublicApp;
use client_io::ClientIo;

/// How long the accept loop pauses after a failed accept (out of descriptors and the like):
/// the failing connection stays queued, so retrying at once would spin.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests in flight
/// finish (for up to the app's `drain_timeout`) and ends open event streams.
///
/// Every accepted connection is first counted against the app's caps ([`limits`]): over a
/// cap it is refused at once, else it is served with the app's timeouts.
///
/// Each connection speaks HTTP/1.1 or HTTP/2 (prior knowledge), with upgrades (WebSocket), and
/// every request carries the peer's `ConnectInfo<SocketAddr>`. HTTP/1 requests are served by
/// [`server`]'s keep-alive loop (hyper takes over a connection for upgrades, streamed request
/// bodies and HTTP/2); a connection whose first request opens an event stream is served by
/// [`stream`], with far less memory for as long as the stream stays open.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: impl Into<PublicApp>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = app.into();
    let limits = app.limits.clone();
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.timeouts.header_timeout);
    builder.http2().timer(hyper_util::rt::TokioTimer::new());
    let builder = Arc::new(builder);
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
        // A TLS handshake, when there is one, belongs here: after the count, before the peek.
        let stream = ClientIo::new(stream, Some(permit), limits.timeouts.write_timeout);
        tokio::spawn(serve_connection(
            stream,
            peer,
            app.clone(),
            builder.clone(),
            graceful.watcher(),
            stop.subscribe(),
        ));
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

/// One accepted connection: an event stream opening it goes to [`stream`], other HTTP/1
/// requests to [`server`], HTTP/2 (and anything [`server`] hands over) to hyper.
async fn serve_connection(
    mut stream: server::Client,
    peer: std::net::SocketAddr,
    app: PublicApp,
    builder: Arc<hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>>,
    watcher: hyper_util::server::graceful::Watcher,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let timeouts = app.limits.timeouts;
    let hand_over = server::HandOver {
        builder,
        watcher,
        limits: app.limits.clone(),
    };
    if app.engine == HttpEngine::Hyper {
        drop(stop);
        return with_hyper(stream, peer, app, hand_over);
    }
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
            drop(hand_over);
            stream::serve(stream, peer, app.router, timeouts.header_timeout, stop).await;
        }
        Ok(Ok(read)) if is_http2_preface(&start[..read]) => {
            drop(stop);
            let requests = Arc::new(client_io::InFlight::default());
            stream.watch_idle(timeouts.idle_timeout, requests.clone());
            server::serve_with_hyper(stream, peer, app.router, hand_over, requests);
        }
        Ok(Ok(_)) => server::serve(stream, peer, app, hand_over, stop).await,
    }
}

/// Hands the whole connection to hyper (`http_engine = "hyper"`).
fn with_hyper(
    mut stream: server::Client,
    peer: std::net::SocketAddr,
    app: PublicApp,
    hand_over: server::HandOver,
) {
    let requests = Arc::new(client_io::InFlight::default());
    stream.watch_idle(app.limits.timeouts.idle_timeout, requests.clone());
    server::serve_with_hyper(stream, peer, app.router, hand_over, requests);
}

/// Whether a connection's first bytes are (the start of) HTTP/2's connection preface.
fn is_http2_preface(start: &[u8]) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    !start.is_empty() && PREFACE.starts_with(&start[..start.len().min(PREFACE.len())])
}
