//! [`LocalLimitStore`]: rate-limit state in this process.
//!
//! Keys live in a sharded concurrent map (`DashMap`); each key's state sits behind its own
//! small mutex, so requests on one key are serialised (race-free) and different keys proceed
//! in parallel.
//!
//! - **One request** (the common case) takes the shard's read lock and the key's mutex, and
//!   decides in place.
//! - **Several requests** (several rules on one HTTP request) are all or nothing: the keys'
//!   mutexes are taken in key order (so two such calls cannot deadlock), every request is
//!   decided against a working copy, and the copies are stored only if every request is
//!   allowed.
//!
//! Memory is bounded two ways:
//! - **By time.** Every key records when its state stops mattering ([`forget_at`]): from then
//!   on it decides exactly like a new key. [`LocalLimitStore::sweep`] drops such keys, never
//!   earlier; [`LocalLimitStore::spawn_sweeper`] runs it periodically.
//! - **By a cap on keys** ([`LocalLimitConfig::max_keys`]). At the cap, a request for a *new*
//!   key is refused: it gets a rejection (fail closed, so flooding the store with fresh keys
//!   cannot open the door) with `retry_after` [`LocalLimitConfig::refused_retry_after`], and
//!   [`LimitMetrics`] counts it. Existing keys are never dropped to make room: an attacker who
//!   could evict state by creating keys could reset his own limits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use anteroom_core::Clock;
use anteroom_core::ratelimit::{
    Decision, LimitParams, LimitState, decide, decide_in_place, forget_at,
};
use async_trait::async_trait;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use parking_lot::Mutex;

use super::metrics::LimitMetrics;
use super::{LimitRequest, LimitStore, LimitStoreError, validate};

/// Bounds of a [`LocalLimitStore`].
#[derive(Debug, Clone)]
pub struct LocalLimitConfig {
    /// The most keys held at once (1,000,000 by default, roughly 100 MB at worst).
    pub max_keys: usize,
    /// `retry_after` of a request refused because the store is at `max_keys` (1 s by default).
    pub refused_retry_after: Duration,
}

impl Default for LocalLimitConfig {
    fn default() -> Self {
        LocalLimitConfig {
            max_keys: 1_000_000,
            refused_retry_after: Duration::from_secs(1),
        }
    }
}

/// Rate-limit state in process memory (see the module docs).
pub struct LocalLimitStore {
    map: DashMap<Box<str>, Arc<Mutex<Slot>>>,
    keys: AtomicUsize,
    clock: Arc<dyn Clock>,
    config: LocalLimitConfig,
    metrics: Arc<LimitMetrics>,
}

/// One key.
#[derive(Default)]
struct Slot {
    state: Option<LimitState>,
    /// When `state` stops mattering (ms); the sweeper drops the key from then on.
    forget_at: u64,
    /// Set by the sweeper when it unlinks the slot: whoever finds it set must look the key up
    /// again.
    removed: bool,
}

impl LocalLimitStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>, config: LocalLimitConfig) -> LocalLimitStore {
        LocalLimitStore {
            map: DashMap::new(),
            keys: AtomicUsize::new(0),
            clock,
            config,
            metrics: Arc::new(LimitMetrics::default()),
        }
    }

    /// The store's counters.
    pub fn metrics(&self) -> Arc<LimitMetrics> {
        self.metrics.clone()
    }

    /// How many keys the store holds.
    pub fn len(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides synchronously; [`LimitStore::acquire`] is this. Never fails except on invalid
    /// parameters.
    pub fn acquire_now(
        &self,
        requests: &[LimitRequest<'_>],
    ) -> Result<Vec<Decision>, LimitStoreError> {
        validate(requests)?;
        let now = self.clock.now().as_millis();
        Ok(match requests {
            [] => Vec::new(),
            [request] => vec![self.acquire_one(request, now)],
            _ => self.acquire_all(requests, now),
        })
    }

    /// Drops every key whose state can no longer affect a decision; returns how many.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now().as_millis();
        let mut evicted = 0;
        self.map.retain(|_, slot| {
            // A slot someone is deciding on right now is in use: keep it.
            let Some(mut slot) = slot.try_lock() else {
                return true;
            };
            if slot.forget_at > now {
                return true;
            }
            slot.removed = true;
            evicted += 1;
            false
        });
        self.keys.fetch_sub(evicted, Ordering::Relaxed);
        self.metrics.evicted(evicted as u64);
        evicted
    }

    /// Sweeps every `every` on the current tokio runtime until the store is dropped.
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let store: Weak<LocalLimitStore> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            loop {
                interval.tick().await;
                let Some(store) = store.upgrade() else {
                    return;
                };
                store.sweep();
            }
        })
    }

    fn acquire_one(&self, request: &LimitRequest<'_>, now: u64) -> Decision {
        let LimitRequest { key, params, cost } = *request;
        if let Some(slot) = self.map.get(key) {
            // The shard's read lock keeps the sweeper from unlinking the slot meanwhile.
            return decide_on(&mut slot.lock(), params, now, cost);
        }
        let (decision, next) = decide(params, None, now, cost);
        let Some(next) = next else {
            // Rejected or a peek: a new key stores nothing.
            return decision;
        };
        match self.map.entry(key.into()) {
            Entry::Occupied(entry) => decide_on(&mut entry.get().lock(), params, now, cost),
            Entry::Vacant(entry) => {
                if !self.reserve_key() {
                    return self.refused(params);
                }
                let forget = forget_at(params, &next);
                entry.insert(Arc::new(Mutex::new(Slot {
                    state: Some(next),
                    forget_at: forget,
                    removed: false,
                })));
                decision
            }
        }
    }

    fn acquire_all(&self, requests: &[LimitRequest<'_>], now: u64) -> Vec<Decision> {
        let mut keys: Vec<&str> = requests.iter().map(|request| request.key).collect();
        keys.sort_unstable();
        keys.dedup();
        loop {
            // The slot of each key (in key order), `None` for a new key refused at the cap.
            let slots: Vec<Option<Arc<Mutex<Slot>>>> =
                keys.iter().map(|key| self.slot_for(key)).collect();
            let mut guards: Vec<_> = slots
                .iter()
                .map(|slot| slot.as_ref().map(|slot| slot.lock()))
                .collect();
            if guards.iter().flatten().any(|guard| guard.removed) {
                continue;
            }
            let mut working: Vec<Option<LimitState>> = guards
                .iter()
                .map(|guard| guard.as_ref().and_then(|guard| guard.state.clone()))
                .collect();
            let mut changed: Vec<Option<&LimitParams>> = vec![None; keys.len()];
            let mut all_allowed = true;
            let decisions: Vec<Decision> = requests
                .iter()
                .map(|request| {
                    let index = keys.binary_search(&request.key).unwrap_or_default();
                    if guards[index].is_none() {
                        all_allowed = false;
                        return self.refused(request.params);
                    }
                    let (decision, next) =
                        decide(request.params, working[index].as_ref(), now, request.cost);
                    if !decision.allowed {
                        all_allowed = false;
                    } else if let Some(next) = next {
                        working[index] = Some(next);
                        changed[index] = Some(request.params);
                    }
                    decision
                })
                .collect();
            if all_allowed {
                for ((guard, state), params) in guards.iter_mut().zip(working).zip(changed) {
                    if let (Some(guard), Some(params)) = (guard.as_mut(), params) {
                        guard.forget_at =
                            state.as_ref().map_or(0, |state| forget_at(params, state));
                        guard.state = state;
                    }
                }
            }
            return decisions;
        }
    }

    /// The key's slot, inserting an empty one for a new key; `None` at the key cap.
    fn slot_for(&self, key: &str) -> Option<Arc<Mutex<Slot>>> {
        if let Some(slot) = self.map.get(key) {
            return Some(slot.clone());
        }
        match self.map.entry(key.into()) {
            Entry::Occupied(entry) => Some(entry.get().clone()),
            Entry::Vacant(entry) => {
                if !self.reserve_key() {
                    return None;
                }
                // An empty slot is forgettable at once: if nothing is stored in it, the next
                // sweep drops it.
                Some(entry.insert(Arc::default()).clone())
            }
        }
    }

    /// Counts one more key, unless the store is at its cap.
    fn reserve_key(&self) -> bool {
        self.keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |keys| {
                (keys < self.config.max_keys).then_some(keys + 1)
            })
            .is_ok()
    }

    fn refused(&self, params: &LimitParams) -> Decision {
        self.metrics.refused();
        Decision {
            allowed: false,
            limit: params.limit,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: Some(self.config.refused_retry_after),
            delay: Duration::ZERO,
        }
    }
}

/// Decides on a locked slot, recording when its new state stops mattering.
fn decide_on(slot: &mut Slot, params: &LimitParams, now: u64, cost: u64) -> Decision {
    let decision = decide_in_place(params, &mut slot.state, now, cost);
    if decision.allowed
        && cost > 0
        && let Some(state) = &slot.state
    {
        slot.forget_at = forget_at(params, state);
    }
    decision
}

#[async_trait]
impl LimitStore for LocalLimitStore {
    async fn acquire(
        &self,
        requests: &[LimitRequest<'_>],
    ) -> Result<Vec<Decision>, LimitStoreError> {
        self.acquire_now(requests)
    }
}
