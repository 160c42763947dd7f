//! [`KeyBudget`]: the share of a [`LocalLimitStore`](super::LocalLimitStore)'s keys that one
//! rule's counters may hold, so a rule whose keys a client chooses (a header, a cookie) cannot
//! crowd out every other rule's clients.
//!
//! A budget counts the keys it holds; each stored key keeps a [`KeySlot`] that gives its place
//! back when the key is dropped (swept, refunded to nothing), so the count cannot drift from the
//! keys really held. What a request for a *new* key gets once the budget is full is the budget's
//! [`OnKeysFull`]; existing keys are never dropped to make room (SPEC §10.2: evicted by time, never
//! by capacity pressure alone, or a client could reset his own limits by making keys).
//!
//! A full budget is counted ([`KeyBudget::full_total`]) and logged at most once every
//! [`FULL_LOG_INTERVAL`] per budget, not once per request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anteroom_core::ratelimit::rules::OnKeysFull;

/// How often a full budget is logged at most.
pub const FULL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The most keys one rule may hold in a local store, and how many it holds (see the module
/// docs). Shared (`Arc`) by the rule engine, the store's keys and whoever exports metrics.
#[derive(Debug)]
pub struct KeyBudget {
    name: Box<str>,
    max_keys: AtomicUsize,
    allow_when_full: AtomicBool,
    held: AtomicUsize,
    full_total: AtomicU64,
    /// When a full budget was last logged (store clock, ms); 0: never.
    logged_full_at: AtomicU64,
}

impl KeyBudget {
    /// A budget named `name` (for logs and metrics: the rule's name) of `max_keys` keys.
    pub fn new(name: impl Into<Box<str>>, max_keys: usize, when_full: OnKeysFull) -> KeyBudget {
        KeyBudget {
            name: name.into(),
            max_keys: AtomicUsize::new(max_keys),
            allow_when_full: AtomicBool::new(when_full == OnKeysFull::Allow),
            held: AtomicUsize::new(0),
            full_total: AtomicU64::new(0),
            logged_full_at: AtomicU64::new(0),
        }
    }

    /// Changes the bound and the policy in place (a reload): the keys already held stay counted.
    /// Lowering the bound below what is held drops nothing; new keys wait until enough expire.
    pub fn reconfigure(&self, max_keys: usize, when_full: OnKeysFull) {
        self.max_keys.store(max_keys, Ordering::Relaxed);
        self.allow_when_full
            .store(when_full == OnKeysFull::Allow, Ordering::Relaxed);
    }

    /// The budget's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The most keys the budget holds.
    pub fn max_keys(&self) -> usize {
        self.max_keys.load(Ordering::Relaxed)
    }

    /// What a new key gets while the budget is full.
    pub fn when_full(&self) -> OnKeysFull {
        if self.allow_when_full.load(Ordering::Relaxed) {
            OnKeysFull::Allow
        } else {
            OnKeysFull::Reject
        }
    }

    /// Keys held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Requests that met the budget full (refused or let through uncounted, by [`OnKeysFull`]).
    pub fn full_total(&self) -> u64 {
        self.full_total.load(Ordering::Relaxed)
    }

    /// Takes a place for a new key, unless the budget is full; `now_ms` dates the log line of a
    /// full budget.
    pub(crate) fn take(self: &Arc<Self>, now_ms: u64) -> Option<KeySlot> {
        let max_keys = self.max_keys();
        let taken = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < max_keys).then_some(held + 1)
            })
            .is_ok();
        if taken {
            return Some(KeySlot(self.clone()));
        }
        self.full_total.fetch_add(1, Ordering::Relaxed);
        self.log_full(now_ms);
        None
    }

    fn log_full(&self, now_ms: u64) {
        let last = self.logged_full_at.load(Ordering::Relaxed);
        let interval = u64::try_from(FULL_LOG_INTERVAL.as_millis()).unwrap_or(u64::MAX);
        let due = last == 0 || now_ms.saturating_sub(last) >= interval;
        // One logger per interval: whoever swaps the date wins.
        if due
            && self
                .logged_full_at
                .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                rule = %self.name,
                max_keys = self.max_keys(),
                when_full = ?self.when_full(),
                full_total = self.full_total(),
                "a rate limit holds as many keys as its budget allows; new keys are {} until old ones expire",
                match self.when_full() {
                    OnKeysFull::Reject => "refused",
                    OnKeysFull::Allow => "let through uncounted",
                }
            );
        }
    }
}

/// One key's place in its budget, given back when the key is dropped.
#[derive(Debug)]
pub(crate) struct KeySlot(Arc<KeyBudget>);

impl Drop for KeySlot {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_given_back_when_dropped() {
        let budget = Arc::new(KeyBudget::new("rule", 2, OnKeysFull::Reject));
        let first = budget.take(1).expect("room for one");
        let _second = budget.take(1).expect("room for two");
        assert!(budget.take(1).is_none());
        assert_eq!((budget.held(), budget.full_total()), (2, 1));
        drop(first);
        assert_eq!(budget.held(), 1);
        assert!(budget.take(1).is_some());
    }

    #[test]
    fn a_lowered_bound_drops_nothing_and_admits_nothing_new() {
        let budget = Arc::new(KeyBudget::new("rule", 2, OnKeysFull::Reject));
        let _slots = [budget.take(1), budget.take(1)];
        budget.reconfigure(1, OnKeysFull::Allow);
        assert_eq!(budget.held(), 2);
        assert!(budget.take(1).is_none());
        assert_eq!(budget.when_full(), OnKeysFull::Allow);
    }
}
