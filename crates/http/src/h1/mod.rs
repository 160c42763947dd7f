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

pub(crate) mod client;
pub(crate) mod server;
pub(crate) mod stream;

use std::future::Future;
use std::sync::Arc;

use anteroom_core::config::HttpEngine;

use crate::PublicApp;

/// How long requests in flight may take to finish after shutdown begins.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a client may take to send a request's headers (slow-loris bound).
pub(crate) const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests in flight
/// finish (for up to ten seconds) and ends open event streams.
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
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
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
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
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
    if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
        tracing::warn!("connections still open after the drain timeout; closing them");
    }
    Ok(())
}

/// One accepted connection: an event stream opening it goes to [`stream`], other HTTP/1
/// requests to [`server`], HTTP/2 (and anything [`server`] hands over) to hyper.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    app: PublicApp,
    builder: Arc<hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>>,
    watcher: hyper_util::server::graceful::Watcher,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let hand_over = server::HandOver { builder, watcher };
    if app.engine == HttpEngine::Hyper {
        drop(stop);
        return server::serve_with_hyper(stream, peer, app.router, hand_over);
    }
    let mut start = [0u8; stream::PEEK_BYTES];
    let peeked = tokio::select! {
        peeked = tokio::time::timeout(HEADER_READ_TIMEOUT, stream.peek(&mut start)) => peeked,
        _ = stop.wait_for(|stop| *stop) => return,
    };
    match peeked {
        // Closed, broken, or silent for as long as a request head may take.
        Ok(Ok(0) | Err(_)) | Err(_) => {}
        Ok(Ok(read)) if stream::is_event_stream_request(&start[..read]) => {
            drop(hand_over);
            stream::serve(stream, peer, app.router, stop).await;
        }
        Ok(Ok(read)) if is_http2_preface(&start[..read]) => {
            drop(stop);
            server::serve_with_hyper(stream, peer, app.router, hand_over);
        }
        Ok(Ok(_)) => server::serve(stream, peer, app, hand_over, stop).await,
    }
}

/// Whether a connection's first bytes are (the start of) HTTP/2's connection preface.
fn is_http2_preface(start: &[u8]) -> bool {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    !start.is_empty() && PREFACE.starts_with(&start[..start.len().min(PREFACE.len())])
}
