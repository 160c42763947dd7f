//! [`LocalMarks`]: one-time marks (a solved proof-of-work challenge, an adaptive controller's
//! turn) held in this process, apart from the rate-limit counters, so filling one can never
//! make the other refuse.
//!
//! A mark is a key and the time it expires. Memory is bounded by `max_marks`: at the bound,
//! expired marks are swept (at most once per [`SWEEP_INTERVAL`], so a full store under a flood
//! does not rescan on every request), and when none has expired a new mark is refused:
//! [`Marked::Full`]. Live marks are never dropped to make room: that would let a replay of the
//! dropped one through. A full store is counted ([`LocalMarks::full_total`]) and logged at most
//! once every [`FULL_LOG_INTERVAL`].
//!
//! On a node with a Redis store the marks live in Redis instead, shared by every node; this type
//! is the single-node case.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anteroom_core::Clock;
use parking_lot::Mutex;

use crate::limit::FULL_LOG_INTERVAL;

/// How often a full store looks for expired marks at most.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// The most marks held unless configured: about 100 MB at most, and room for a million
/// solved challenges within their five minutes.
pub const DEFAULT_MAX_MARKS: usize = 1_000_000;

/// What [`LocalMarks::mark`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// The key was not marked: it is now, until its time is up.
    First,
    /// The key is marked already (a replay).
    Seen,
    /// The key is not marked and no room is left for it: nothing was recorded, so the caller
    /// must refuse whatever the mark was to guard.
    Full,
}

/// One-time marks in process memory (see the module docs).
pub struct LocalMarks {
    marks: Mutex<Table>,
    max_marks: usize,
    clock: Arc<dyn Clock>,
    full_total: AtomicU64,
    logged_full_at: AtomicU64,
}

#[derive(Default)]
struct Table {
    /// Each mark's expiry (ms).
    expires_at: HashMap<Box<str>, u64>,
    /// When the table was last swept (ms).
    swept_at: u64,
}

impl LocalMarks {
    /// An empty store of at most `max_marks` marks, reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>, max_marks: usize) -> LocalMarks {
        LocalMarks {
            marks: Mutex::new(Table::default()),
            max_marks,
            clock,
            full_total: AtomicU64::new(0),
            logged_full_at: AtomicU64::new(0),
        }
    }

    /// Marks `key` for `ttl`, unless it is marked already or the store is full.
    pub fn mark(&self, key: &str, ttl: Duration) -> Marked {
        let now = self.clock.now().as_millis();
        let expires_at = now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let mut table = self.marks.lock();
        if let Some(expiry) = table.expires_at.get_mut(key) {
            if *expiry > now {
                return Marked::Seen;
            }
            *expiry = expires_at;
            return Marked::First;
        }
        if table.expires_at.len() >= self.max_marks {
            let interval = u64::try_from(SWEEP_INTERVAL.as_millis()).unwrap_or(u64::MAX);
            if now.saturating_sub(table.swept_at) >= interval {
                table.swept_at = now;
                table.expires_at.retain(|_, expiry| *expiry > now);
            }
            if table.expires_at.len() >= self.max_marks {
                drop(table);
                self.full(now);
                return Marked::Full;
            }
        }
        table.expires_at.insert(key.into(), expires_at);
        Marked::First
    }

    /// Marks held now (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.marks.lock().expires_at.len()
    }

    /// Whether no mark is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most marks held.
    pub fn max_marks(&self) -> usize {
        self.max_marks
    }

    /// Marks refused because the store was full.
    pub fn full_total(&self) -> u64 {
        self.full_total.load(Ordering::Relaxed)
    }

    fn full(&self, now_ms: u64) {
        self.full_total.fetch_add(1, Ordering::Relaxed);
        let last = self.logged_full_at.load(Ordering::Relaxed);
        let interval = u64::try_from(FULL_LOG_INTERVAL.as_millis()).unwrap_or(u64::MAX);
        let due = last == 0 || now_ms.saturating_sub(last) >= interval;
        if due
            && self
                .logged_full_at
                .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                max_marks = self.max_marks,
                full_total = self.full_total(),
                "the one-time marks are full: joins with a proof-of-work solution are refused until marks expire"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anteroom_core::{ManualClock, Timestamp};

    fn marks(max_marks: usize) -> (Arc<ManualClock>, LocalMarks) {
        let clock = Arc::new(ManualClock::new(Timestamp(1_000)));
        (clock.clone(), LocalMarks::new(clock, max_marks))
    }

    #[test]
    fn a_mark_holds_until_its_time_is_up() {
        let (clock, marks) = marks(10);
        let ttl = Duration::from_secs(300);
        assert_eq!(marks.mark("challenge|n1", ttl), Marked::First);
        assert_eq!(marks.mark("challenge|n1", ttl), Marked::Seen);
        clock.advance(ttl - Duration::from_millis(1));
        assert_eq!(marks.mark("challenge|n1", ttl), Marked::Seen);
        clock.advance(Duration::from_millis(1));
        assert_eq!(marks.mark("challenge|n1", ttl), Marked::First);
    }

    #[test]
    fn a_full_store_refuses_new_marks_and_never_forgets_live_ones() {
        let (clock, marks) = marks(2);
        let ttl = Duration::from_secs(300);
        assert_eq!(marks.mark("a", ttl), Marked::First);
        assert_eq!(marks.mark("b", Duration::from_secs(1)), Marked::First);
        assert_eq!(marks.mark("c", ttl), Marked::Full);
        assert_eq!(
            marks.mark("a", ttl),
            Marked::Seen,
            "a replay stays a replay"
        );
        assert_eq!(marks.full_total(), 1);
        // Once a mark expires, the next new one sweeps it away and takes its place.
        clock.advance(Duration::from_secs(1));
        assert_eq!(marks.mark("c", ttl), Marked::First);
        assert_eq!(marks.len(), 2);
        assert_eq!(marks.mark("a", ttl), Marked::Seen);
    }

    #[test]
    fn a_full_store_sweeps_at_most_once_a_second() {
        let (clock, marks) = marks(1);
        assert_eq!(marks.mark("a", Duration::from_millis(100)), Marked::First);
        // Full, nothing expired: this sweep finds nothing and dates the next.
        assert_eq!(marks.mark("b", Duration::from_secs(5)), Marked::Full);
        clock.advance(Duration::from_millis(500));
        assert_eq!(marks.mark("b", Duration::from_secs(5)), Marked::Full);
        clock.advance(Duration::from_millis(500));
        assert_eq!(marks.mark("b", Duration::from_secs(5)), Marked::First);
    }
}
