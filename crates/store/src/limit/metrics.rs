//! Counters a rate-limit store keeps for monitoring: plain atomics, read by whoever exports
//! metrics.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a rate-limit store counts. Shared (`Arc`) between the store and its readers.
#[derive(Debug, Default)]
pub struct LimitMetrics {
    keys_evicted: AtomicU64,
    keys_refused: AtomicU64,
    store_errors: AtomicU64,
    refund_errors: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitMetricsSnapshot {
    /// Keys dropped because their state could no longer affect a decision.
    pub keys_evicted: u64,
    /// Requests refused because their key was new and the store was at its key cap.
    pub keys_refused: u64,
    /// Calls that failed in the backend (timeouts, connection loss, script errors).
    pub store_errors: u64,
    /// Refunds that failed: their reservations stayed consumed (the store errs towards
    /// limiting).
    pub refund_errors: u64,
}

impl LimitMetrics {
    /// The counters now.
    pub fn snapshot(&self) -> LimitMetricsSnapshot {
        LimitMetricsSnapshot {
            keys_evicted: self.keys_evicted.load(Ordering::Relaxed),
            keys_refused: self.keys_refused.load(Ordering::Relaxed),
            store_errors: self.store_errors.load(Ordering::Relaxed),
            refund_errors: self.refund_errors.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn evicted(&self, keys: u64) {
        self.keys_evicted.fetch_add(keys, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self) {
        self.keys_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refund_error(&self) {
        self.refund_errors.fetch_add(1, Ordering::Relaxed);
    }
}
