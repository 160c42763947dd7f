//! Time as the domain sees it: milliseconds since the Unix epoch, handed in by a [`Clock`].
//!
//! The core never reads a clock itself. Binaries pass a system clock (implemented outside this
//! crate), tests pass a [`ManualClock`] they move by hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A point in time, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// Whole seconds since the Unix epoch (rounded down).
    pub fn as_secs(self) -> u64 {
        self.0 / 1000
    }

    /// This instant moved forward by `duration` (saturating).
    pub fn after(self, duration: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_millis(duration)))
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

/// A duration in whole milliseconds, saturating at `u64::MAX`.
pub fn duration_millis(duration: Duration) -> u64 {
    // In u64 arithmetic: `as_millis` works in u128, and this runs several times per
    // rate-limit decision.
    duration
        .as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(duration.subsec_millis()))
}

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// A clock that only moves when told to; for tests and simulations.
#[derive(Debug, Default)]
pub struct ManualClock {
    millis: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            millis: AtomicU64::new(start.0),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.millis.fetch_add(duration_millis(by), Ordering::SeqCst);
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: Timestamp) {
        self.millis.store(to.0, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.millis.load(Ordering::SeqCst))
    }
}
