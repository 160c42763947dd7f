//! The counts of the proxied WebSocket connections and their messages (`websocket.rs` counts,
//! the admin API's metrics read them), kept by the gateway's state for the node's lifetime.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of the proxied WebSocket connections and their messages (visitor→site).
#[derive(Debug, Default)]
pub struct WebSocketStats {
    pub(super) connections: AtomicU64,
    pub(super) open: AtomicU64,
    pub(super) forwarded: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) closed_over_limit: AtomicU64,
    pub(super) closed_pass_ended: AtomicU64,
}

/// A copy of [`WebSocketStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WebSocketStatsSnapshot {
    /// Connections proxied since start.
    pub connections: u64,
    /// Connections open now.
    pub open: u64,
    /// Data messages passed from visitors to the site.
    pub forwarded: u64,
    /// Data messages over the limit, dropped.
    pub dropped: u64,
    /// Connections closed with 1008 for going over the limit.
    pub closed_over_limit: u64,
    /// Connections closed with 1008 because a pass they were let through with no longer held
    /// (expired, revoked, its session ended, its room reset or closed).
    pub closed_pass_ended: u64,
}

impl WebSocketStats {
    /// A copy of the counts.
    pub fn snapshot(&self) -> WebSocketStatsSnapshot {
        WebSocketStatsSnapshot {
            connections: self.connections.load(Ordering::Relaxed),
            open: self.open.load(Ordering::Relaxed),
            forwarded: self.forwarded.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            closed_over_limit: self.closed_over_limit.load(Ordering::Relaxed),
            closed_pass_ended: self.closed_pass_ended.load(Ordering::Relaxed),
        }
    }
}
