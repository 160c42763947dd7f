//! The server's clock as seen from this node, so a join can carry the time after which its
//! caller no longer awaits the answer (`join.lua`, a join's last argument): a join that Redis runs later than
//! that (queued behind a slow server, a pause, a failover) refuses instead of making a ticket
//! that nobody holds (SPEC §14.2, ghost tickets).
//!
//! Nodes read no system clock (the scripts use Redis' `TIME`), so the deadline is written in the
//! server's time: a `TIME` sample paired with this process's monotonic clock, taken again in
//! the background once it is a minute old. Until the first sample arrives a join carries no
//! deadline and only the cancellation after a failed call (`cancel_join.lua`) takes a late
//! ticket back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::connection::Connection;

/// How old a sample may be before another is taken: the server's clock and ours drift apart
/// by far less than a millisecond in that time.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// Slack added to each deadline: the shards of a cluster have clocks of their own, a few
/// milliseconds apart at most where NTP runs.
const SLACK: Duration = Duration::from_millis(100);

/// One reading of the server's `TIME`.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// The server's time, in milliseconds since the epoch.
    server_ms: u64,
    /// When it was the server's time, on this process's monotonic clock.
    at: Instant,
}

/// The latest sample, shared with the task that refreshes it.
#[derive(Debug, Default, Clone)]
pub(crate) struct ServerClock {
    sample: Arc<Mutex<Option<Sample>>>,
    refreshing: Arc<AtomicBool>,
}

impl ServerClock {
    /// The server's time `after` from now, in milliseconds, when a sample is known; starts a
    /// new sample on `connection` when none is or the last one is old.
    pub(crate) fn deadline(&self, after: Duration, connection: &Connection) -> Option<u64> {
        let now = Instant::now();
        let sample = *self.sample.lock();
        if sample.is_none_or(|sample| now.duration_since(sample.at) > SAMPLE_EVERY) {
            self.refresh(connection.clone());
        }
        let sample = sample?;
        let ahead = (now + after + SLACK).duration_since(sample.at);
        let ahead_ms = u64::try_from(ahead.as_millis()).ok()?;
        sample.server_ms.checked_add(ahead_ms)
    }

    /// Takes a sample from a task of its own (one at a time); a failure leaves the old one.
    fn refresh(&self, connection: Connection) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (sample, refreshing) = (self.sample.clone(), self.refreshing.clone());
        tokio::spawn(async move {
            let sent = Instant::now();
            let answer = tokio::time::timeout(
                SAMPLE_EVERY,
                connection.query::<(u64, u64)>(&redis::cmd("TIME")),
            )
            .await;
            let received = Instant::now();
            if let Ok(Ok((seconds, micros))) = answer {
                // The server read its clock somewhere between sending and receiving: the
                // middle is the best guess, wrong by half the round trip at most.
                *sample.lock() = Some(Sample {
                    server_ms: seconds.saturating_mul(1000) + micros / 1000,
                    at: sent + received.duration_since(sent) / 2,
                });
            }
            refreshing.store(false, Ordering::Release);
        });
    }
}
