//! Thread-per-core serving of the public listener, nginx's model: one OS thread per worker,
//! each running a current-thread tokio runtime with its own socket on the listener's port
//! (`SO_REUSEPORT`, so the kernel spreads connections over the workers) and its own router, so
//! a request, its upstream connection (the gateway's pool is per router) and its answer never
//! leave the thread that accepted the connection. [`PublicListeners`] binds the sockets with
//! an exclusive bind first, so a port another process listens on is refused, not shared.
//!
//! What the workers share (the room store, the caches, the rate-limit stores, the metrics,
//! the SSE hub) is `Send + Sync` state behind `Arc`s, the same as on a multi-thread runtime.
//! Background tasks (ticker, notices, key reload, sinks, the admin listener) stay on the
//! caller's runtime. A worker's runtime lives until [`Workers::stop`], after the background
//! tasks ended: a connection to a shared store opened by a request is driven by a task on
//! that worker's runtime, and must outlive everything that may still use it.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{oneshot, watch};

use crate::h1::serve;
use crate::public_app::PublicApp;

/// Connections a worker's socket may hold before they are accepted.
const BACKLOG: i32 = 1024;

/// The public listener's sockets, one per worker, all bound to the same address.
#[derive(Debug)]
pub struct PublicListeners {
    sockets: Vec<std::net::TcpListener>,
    address: SocketAddr,
}

impl PublicListeners {
    /// Binds `workers` sockets (at least one) to `address`, with `SO_REUSEPORT` where the
    /// platform has it.
    ///
    /// An exclusive bind comes first: a port another process listens on (even one with
    /// `SO_REUSEPORT`, such as a second node started by mistake) is refused as "address in
    /// use" rather than shared, and it decides the port when `address` asks for any.
    pub fn bind(address: SocketAddr, workers: usize) -> io::Result<PublicListeners> {
        let address = std::net::TcpListener::bind(address)?.local_addr()?;
        let sockets = (0..workers.max(1))
            .map(|_| bind_one(address))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(PublicListeners { sockets, address })
    }

    /// The bound address (with the port chosen when the configured one was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// How many workers these sockets serve.
    pub fn workers(&self) -> usize {
        self.sockets.len()
    }
}

fn bind_one(address: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    #[cfg(unix)]
    socket.set_reuse_port(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&address.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The running workers (see the module documentation).
pub struct Workers {
    release: watch::Sender<bool>,
    drained: Vec<oneshot::Receiver<io::Result<()>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Starts one worker per socket of `listeners`, each serving the router `router` builds for
/// it (called once per worker, on the worker's thread) until `shutdown` resolves, then
/// draining its connections as [`serve`](crate::serve) does. Call it inside the runtime that
/// runs the background tasks: `shutdown` is awaited there.
pub fn start_workers<F, A>(
    listeners: PublicListeners,
    router: F,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<Workers>
where
    F: Fn() -> A + Send + Sync + 'static,
    A: Into<PublicApp>,
{
    let router = Arc::new(move || router().into());
    let (stop, stopping) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let (release, released) = watch::channel(false);
    let mut drained = Vec::with_capacity(listeners.sockets.len());
    let mut threads = Vec::with_capacity(listeners.sockets.len());
    for (index, socket) in listeners.sockets.into_iter().enumerate() {
        let (done, done_receiver) = oneshot::channel();
        let router = router.clone();
        let stopping = stopping.clone();
        let released = released.clone();
        let thread = std::thread::Builder::new()
            .name(format!("anteroom-worker-{index}"))
            .spawn(move || run_worker(socket, &*router, stopping, released, done))?;
        drained.push(done_receiver);
        threads.push(thread);
    }
    Ok(Workers {
        release,
        drained,
        threads,
    })
}

/// One worker's thread: its runtime serves until the stop, says so, and keeps running its
/// remaining tasks until released.
fn run_worker(
    socket: std::net::TcpListener,
    router: &(dyn Fn() -> PublicApp + Send + Sync),
    stopping: watch::Receiver<bool>,
    mut released: watch::Receiver<bool>,
    done: oneshot::Sender<io::Result<()>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = done.send(Err(error));
            return;
        }
    };
    runtime.block_on(async move {
        let served = match tokio::net::TcpListener::from_std(socket) {
            Ok(listener) => serve(listener, router(), stopped(stopping)).await,
            Err(error) => Err(error),
        };
        let _ = done.send(served);
        let _ = released.wait_for(|released| *released).await;
    });
}

async fn stopped(mut stopping: watch::Receiver<bool>) {
    let _ = stopping.wait_for(|stop| *stop).await;
}

impl Workers {
    /// Waits until every worker stopped serving: the shutdown came and its connections
    /// drained. The first failure is returned (after waiting for the others).
    pub async fn drained(&mut self) -> io::Result<()> {
        let mut result = Ok(());
        for receiver in self.drained.drain(..) {
            let served = receiver
                .await
                .unwrap_or_else(|_| Err(io::Error::other("a worker thread ended unexpectedly")));
            if let Err(error) = served
                && result.is_ok()
            {
                result = Err(error);
            }
        }
        result
    }

    /// Ends the workers' runtimes, with whatever tasks they still run, and waits for their
    /// threads.
    pub async fn stop(self) {
        let _ = self.release.send(true);
        let threads = self.threads;
        let joined = tokio::task::spawn_blocking(move || {
            threads
                .into_iter()
                .filter_map(|thread| thread.join().err())
                .count()
        })
        .await;
        if !matches!(joined, Ok(0)) {
            tracing::error!("a worker thread panicked");
        }
    }
}
