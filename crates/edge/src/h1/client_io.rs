//! [`ClientIo`]: a client connection as both engines read and write it, carrying what the
//! connection must not outlive (its place in the node's connection count) and the timeouts
//! that a socket call alone cannot see.
//!
//! - Writes: a write that makes no progress for `write_timeout` (a client that stopped reading
//!   while its socket buffer is full) fails with `TimedOut`, and whichever engine was writing
//!   closes the connection. The timer is armed only when a write would block, so a client that
//!   reads costs nothing.
//! - Reads, for connections hyper serves: hyper times a request head (`header_read_timeout`)
//!   but not a kept-alive connection waiting for its next request. With [`ClientIo::watch_idle`]
//!   a read that waits `idle_timeout` while no request is in flight ([`InFlight`], kept by
//!   hyper's service) fails with `TimedOut`, counted from the end of the last request: bytes
//!   that start no request (HTTP/2 PINGs) do not reset it. A connection that switched
//!   protocols (a WebSocket) is never idle in this sense. The own loop times its reads itself.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::server_limits::ConnectionPermit;

/// A client connection (see the module documentation).
pub(crate) struct ClientIo<S> {
    inner: S,
    /// Counted open until the connection is dropped, whichever engine holds it then.
    _permit: Option<ConnectionPermit>,
    write_timeout: Duration,
    write_stall: Stall,
    idle: Option<IdleWatch>,
}

struct IdleWatch {
    timeout: Duration,
    requests: Arc<InFlight>,
    stall: Stall,
    /// The requests started when the timer was last looked at: one started since (pipelined
    /// behind the last, read with no wait in between) means the connection was busy.
    started: usize,
}

impl<S> ClientIo<S> {
    pub(crate) fn new(inner: S, permit: Option<ConnectionPermit>, write_timeout: Duration) -> Self {
        ClientIo {
            inner,
            _permit: permit,
            write_timeout,
            write_stall: Stall::default(),
            idle: None,
        }
    }

    /// The connection itself.
    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    /// From now on, a read waiting `timeout` while `requests` has none in flight fails.
    pub(crate) fn watch_idle(&mut self, timeout: Duration, requests: Arc<InFlight>) {
        self.idle = Some(IdleWatch {
            timeout,
            requests,
            stall: Stall::default(),
            started: 0,
        });
    }
}

/// The requests in flight on one connection hyper serves: counted by its service from the
/// request to the end of the answer's body.
#[derive(Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    /// Every request started on the connection, counted.
    started: AtomicUsize,
    /// Set once the connection switched protocols: it is no longer HTTP's to time.
    switched: AtomicBool,
    /// The connection's reader, woken when the last request ends so its idle timer starts.
    reader: AtomicWaker,
}

impl InFlight {
    /// Counts a request until the returned guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> RequestInFlight {
        self.started.fetch_add(1, Ordering::AcqRel);
        self.count.fetch_add(1, Ordering::AcqRel);
        RequestInFlight(self.clone())
    }

    /// The connection switched protocols (an upgrade was answered 101).
    pub(crate) fn switched(&self) {
        self.switched.store(true, Ordering::Release);
    }

    fn is_idle(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0 && !self.switched.load(Ordering::Acquire)
    }

    /// `Ready` once no request is in flight; otherwise the connection's reader is woken when
    /// the last one ends.
    pub(crate) fn poll_idle(&self, context: &mut Context<'_>) -> Poll<()> {
        if self.is_idle() {
            return Poll::Ready(());
        }
        self.reader.register(context.waker());
        if self.is_idle() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// One request in flight ([`InFlight::start`]).
pub(crate) struct RequestInFlight(Arc<InFlight>);

impl Drop for RequestInFlight {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.reader.wake();
        }
    }
}

/// A timer armed when an operation first waits and disarmed when it makes progress; one
/// allocation for the connection's life.
#[derive(Default)]
struct Stall {
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl Stall {
    fn progressed(&mut self) {
        self.armed = false;
    }

    /// The operation is waiting: `Ready` once it has waited `timeout` since it first did.
    fn waited(&mut self, timeout: Duration, context: &mut Context<'_>) -> Poll<()> {
        if !self.armed {
            let at = Instant::now() + timeout;
            match &mut self.timer {
                Some(timer) => timer.as_mut().reset(at),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
            }
            self.armed = true;
        }
        match &mut self.timer {
            Some(timer) => timer.as_mut().poll(context),
            None => Poll::Pending,
        }
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("the client {what}"))
}

impl<S: AsyncWrite + Unpin> ClientIo<S> {
    /// The result of a write attempt, with the write timeout applied.
    fn write_outcome<T>(
        &mut self,
        polled: Poll<io::Result<T>>,
        context: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.write_stall.progressed();
            return polled;
        }
        ready!(self.write_stall.waited(self.write_timeout, context));
        Poll::Ready(Err(timed_out("stopped reading")))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ClientIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(context, buf);
        let Some(idle) = &mut this.idle else {
            return polled;
        };
        let started = idle.requests.started.load(Ordering::Acquire);
        if started != idle.started {
            idle.started = started;
            idle.stall.progressed();
        }
        if polled.is_ready() {
            // Bytes while no request is in flight (an HTTP/2 PING or SETTINGS frame, a head
            // trickled in) do not make the connection busy: its idle time runs from the end of
            // its last request, or a client could hold its place by pinging.
            if !idle.requests.is_idle() {
                idle.stall.progressed();
            }
            return polled;
        }
        idle.requests.reader.register(context.waker());
        if !idle.requests.is_idle() {
            idle.stall.progressed();
            return Poll::Pending;
        }
        ready!(idle.stall.waited(idle.timeout, context));
        Poll::Ready(Err(timed_out("sent no request")))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ClientIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(context, buf);
        self.write_outcome(polled, context)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(context, bufs);
        self.write_outcome(polled, context)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(context);
        self.write_outcome(polled, context)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(context);
        self.write_outcome(polled, context)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_the_client_does_not_read_times_out() {
        let (near, _far) = tokio::io::duplex(16);
        let mut io = ClientIo::new(near, None, Duration::from_secs(30));
        let started = Instant::now();
        let error = io.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_progresses_is_not_timed_out() {
        let (near, mut far) = tokio::io::duplex(16);
        let mut io = ClientIo::new(near, None, Duration::from_secs(30));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut piece = [0u8; 8];
            while got.len() < 64 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                let read = far.read(&mut piece).await.unwrap();
                got.extend_from_slice(&piece[..read]);
            }
            got.len()
        });
        io.write_all(&[1u8; 64]).await.unwrap();
        drop(io);
        assert_eq!(reader.await.unwrap(), 64);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_times_out_only_while_no_request_is_in_flight() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut io = ClientIo::new(near, None, Duration::from_secs(30));
        let requests = Arc::new(InFlight::default());
        io.watch_idle(Duration::from_secs(10), requests.clone());
        let request = requests.start();
        let mut buffer = [0u8; 8];
        // In flight: reads wait as long as it takes.
        assert!(
            tokio::time::timeout(Duration::from_secs(60), io.read(&mut buffer))
                .await
                .is_err()
        );
        far.write_all(b"x").await.unwrap();
        assert_eq!(io.read(&mut buffer).await.unwrap(), 1);
        drop(request);
        let started = Instant::now();
        let error = io.read(&mut buffer).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        // A switched connection (a WebSocket) is never idle.
        requests.switched();
        assert!(
            tokio::time::timeout(Duration::from_secs(60), io.read(&mut buffer))
                .await
                .is_err()
        );
        // Bytes that start no request (an HTTP/2 PING) do not keep an idle connection open.
        let (near, mut far) = tokio::io::duplex(64);
        let mut io = ClientIo::new(near, None, Duration::from_secs(30));
        let requests = Arc::new(InFlight::default());
        io.watch_idle(Duration::from_secs(10), requests.clone());
        let pinger = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(3)).await;
                if far.write_all(b"p").await.is_err() {
                    break;
                }
            }
            far
        });
        let started = Instant::now();
        let error = loop {
            match io.read(&mut buffer).await {
                Ok(_) => {}
                Err(error) => break error,
            }
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        let _far = pinger.await.unwrap();
        // A request read and started with no wait in between (pipelined, or in the same read
        // as the bytes before it) makes the connection busy: its idle time runs afresh from
        // the end of that request.
        let (near, mut far) = tokio::io::duplex(64);
        let mut io = ClientIo::new(near, None, Duration::from_secs(30));
        let requests = Arc::new(InFlight::default());
        io.watch_idle(Duration::from_secs(10), requests.clone());
        assert!(
            tokio::time::timeout(Duration::from_secs(5), io.read(&mut buffer))
                .await
                .is_err()
        );
        far.write_all(b"GET").await.unwrap();
        assert_eq!(io.read(&mut buffer).await.unwrap(), 3);
        let request = requests.start();
        tokio::time::sleep(Duration::from_secs(20)).await;
        drop(request);
        let started = Instant::now();
        let error = io.read(&mut buffer).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }
}
