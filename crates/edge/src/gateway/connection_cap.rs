//! `[upstream] max_connections`: one cap on the connections a node uses and holds open to the
//! origin, shared by every serving thread and both upstream clients.
//!
//! The cap is one semaphore for the node rather than a share per serving thread: visitors'
//! connections are not spread evenly over the threads, and a thread's share would sit unused
//! while another thread's requests waited. A request holds a permit while it uses a connection
//! (until its answer's body has ended), whichever client carries it: at most `max` requests are
//! with the origin at once. The engine's own client also counts the connections it holds open,
//! idle ones included, against the same `max`: an idle connection lives in the pool of the
//! thread that opened it (its socket is driven by that thread's runtime), so a request on a
//! thread with nothing idle, when the count is full, closes the oldest idle connection of
//! another thread's pool to open its own. (A permit in hand means some connection is idle.)
//! hyper's client keeps idle connections we cannot close from outside; they are bounded by
//! its `pool_max_idle_per_host`, set to `max` per thread.
//!
//! A request that gets no permit within the header timeout is answered 503 `upstream_busy`:
//! a burst waits in a queue for a connection, as a proxy with a queue timeout does, instead of
//! failing at once; an origin that stays saturated is not piled onto.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The node's cap on connections to the origin.
#[derive(Debug)]
pub(crate) struct ConnectionCap {
    max: usize,
    /// One permit per request with the origin.
    in_use: Arc<Semaphore>,
    /// Connections the engine's own client holds open, idle or in use.
    open: AtomicUsize,
    /// The own client's pools, whose idle connections can be closed for another thread.
    pools: Mutex<Vec<Weak<dyn IdleConnections>>>,
}

/// A pool of the own client (`upstream_client.rs`) as the cap sees it: idle connections it
/// can close to make room for another thread's request.
pub(crate) trait IdleConnections: Send + Sync {
    /// Closes the connection idle the longest; whether there was one.
    fn close_oldest_idle(&self) -> bool;
}

/// No connection to the origin became free within the header timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("every connection to the upstream is in use")]
pub(crate) struct Busy;

/// One open connection of the own client under the cap; the count goes down when it drops.
#[derive(Debug)]
pub(crate) struct OpenSlot(Arc<ConnectionCap>);

impl Drop for OpenSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ConnectionCap {
    /// A cap of `max` connections.
    pub(crate) fn new(max: usize) -> Arc<ConnectionCap> {
        Arc::new(ConnectionCap {
            max,
            in_use: Arc::new(Semaphore::new(max)),
            open: AtomicUsize::new(0),
            pools: Mutex::new(Vec::new()),
        })
    }

    /// Makes `pool`'s idle connections closable by requests of other threads.
    pub(crate) fn register<P: IdleConnections + 'static>(&self, pool: &Arc<P>) {
        let pool: Weak<P> = Arc::downgrade(pool);
        let mut pools = self.pools.lock();
        pools.retain(|pool| pool.strong_count() > 0);
        pools.push(pool);
    }

    /// A permit to use one connection, waiting in line until `by` at the latest.
    pub(crate) async fn acquire(&self, by: Instant) -> Result<OwnedSemaphorePermit, Busy> {
        match tokio::time::timeout_at(by, self.in_use.clone().acquire_owned()).await {
            // Freed just as the time ran out: too late to ask the origin anything.
            Ok(Ok(_)) if Instant::now() >= by => Err(Busy),
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; a timeout is the only way out.
            Ok(Err(_)) | Err(_) => Err(Busy),
        }
    }

    /// Room for one more open connection of the own client (the caller holds a permit),
    /// closing another pool's idle connection when the count is full.
    pub(crate) async fn open_slot(self: &Arc<Self>, by: Instant) -> Result<OpenSlot, Busy> {
        loop {
            let counted = self
                .open
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                    (open < self.max).then_some(open + 1)
                });
            if counted.is_ok() {
                return Ok(OpenSlot(self.clone()));
            }
            if self.close_idle_elsewhere() {
                continue;
            }
            // The idle connection our permit implies is changing hands right now.
            if Instant::now() >= by {
                return Err(Busy);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Closes the oldest idle connection of the first pool that has one.
    fn close_idle_elsewhere(&self) -> bool {
        let pools: Vec<Arc<dyn IdleConnections>> =
            self.pools.lock().iter().filter_map(Weak::upgrade).collect();
        pools.iter().any(|pool| pool.close_oldest_idle())
    }
}
