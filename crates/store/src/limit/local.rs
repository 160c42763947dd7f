//! [`LocalLimitStore`]: rate-limit state in this process.
//!
//! Keys live in a sharded map: 64 shards, each a hash table behind its own mutex, picked by
//! the key's hash (aHash, keyed at random per store: keys come from clients, so the hash must
//! resist collisions made on purpose; aHash does, at a tenth of SipHash's cost on short keys,
//! the largest single cost of a decision before). A decision
//! takes one shard lock, so requests on one key are serialised (race-free) and keys of
//! different shards proceed in parallel.
//!
//! - **One request** (the common case): hash once, lock the shard, decide in place.
//! - **Several requests** (several rules on one HTTP request) are all or nothing: the shards of
//!   all their keys are locked in shard order (so two such calls cannot deadlock), every request
//!   is decided against a working copy, and the copies are stored only if every request is
//!   allowed.
//!
//! - **Refunds** ([`LocalLimitStore::refund_now`]) take each reservation back out of its key
//!   with the core's `refund`, under the key's shard lock; a key left with a state that decides
//!   like none is dropped.
//!
//! Memory is bounded two ways:
//! - **By time.** Every key records when its state stops mattering ([`forget_at`]): from then
//!   on it decides exactly like a new key. [`LocalLimitStore::sweep`] drops such keys, never
//!   earlier; [`LocalLimitStore::spawn_sweeper`] runs it periodically. Rejections and peeks
//!   never create a key.
//! - **By a budget of keys per rule** ([`KeyBudget`], named by each request; requests naming
//!   none share one of [`LocalLimitConfig::max_keys`]). A rule whose keys a client picks (a
//!   header value) fills only its own budget, so the other rules' clients are decided as before.
//!   In a full budget, a request that would store a *new* key gets what the budget's
//!   [`OnKeysFull`] says: `Reject`, a rejection (fail closed, so flooding a rule with fresh keys
//!   cannot open the door) with `retry_after` [`LocalLimitConfig::refused_retry_after`], counted
//!   in [`LimitMetrics`]; `Allow`, the decision of a new key, stored nowhere. Existing keys are
//!   never dropped to make room: an attacker who could evict state by creating keys could reset
//!   his own limits.
//!
//! (A `DashMap` was the first cut; holding several keys of one shard at once needs either its
//! raw, unsafe API or a second lock per key, and the second lock made a decision about twice as
//! slow as `governor`'s. Plain shards lock once per decision.)

use ahash::RandomState;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use anteroom_core::Clock;
use anteroom_core::ratelimit::rules::OnKeysFull;
use anteroom_core::ratelimit::{
    Decision, LimitParams, LimitState, Reservation, decide, decide_in_place, forget_at, refund,
    reservation,
};
use async_trait::async_trait;
use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::budget::{KeyBudget, KeySlot};
use super::metrics::LimitMetrics;
use super::{LimitRequest, LimitStore, LimitStoreError, Reserved, check_refund, validate};

const SHARDS: usize = 64;

/// Bounds of a [`LocalLimitStore`].
#[derive(Debug, Clone)]
pub struct LocalLimitConfig {
    /// The most keys held at once by requests that name no [`KeyBudget`] (1,000,000 by
    /// default: about 100 bytes each plus the key). Full, such new keys are refused.
    pub max_keys: usize,
    /// `retry_after` of a request refused because its budget is full (1 s by default).
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
    shards: Box<[Shard]>,
    hasher: RandomState,
    keys: AtomicUsize,
    /// The budget of requests that name none.
    default_budget: Arc<KeyBudget>,
    clock: Arc<dyn Clock>,
    config: LocalLimitConfig,
    metrics: Arc<LimitMetrics>,
}

/// One shard, on its own cache lines so neighbours' locks do not contend.
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    table: Mutex<HashTable<Entry>>,
}

/// One key.
struct Entry {
    key: Box<str>,
    hash: u64,
    /// Always `Some`: the `Option` is what the core's in-place decision takes.
    state: Option<LimitState>,
    /// When `state` stops mattering (ms); the sweeper drops the key from then on.
    forget_at: u64,
    /// The key's place in its budget, given back when the entry is dropped.
    _slot: KeySlot,
}

/// A key decided in a multi-request call.
struct Working<'a> {
    key: &'a str,
    hash: u64,
    state: Option<LimitState>,
    existed: bool,
    /// The parameters of the last request that changed it, if any did.
    changed: Option<&'a LimitParams>,
    /// A new key's place in its budget, taken by the first request that changed it.
    slot: Option<KeySlot>,
}

impl LocalLimitStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>, config: LocalLimitConfig) -> LocalLimitStore {
        LocalLimitStore {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            hasher: RandomState::new(),
            keys: AtomicUsize::new(0),
            default_budget: Arc::new(KeyBudget::new(
                "default",
                config.max_keys,
                OnKeysFull::Reject,
            )),
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
        Ok(self.reserve_now(requests)?.decisions)
    }

    /// Decides synchronously; [`LimitStore::reserve`] is this. Never fails except on invalid
    /// parameters.
    pub fn reserve_now(&self, requests: &[LimitRequest<'_>]) -> Result<Reserved, LimitStoreError> {
        validate(requests)?;
        let now = self.clock.now().as_millis();
        Ok(match requests {
            [] => Reserved {
                decisions: Vec::new(),
                reservations: Vec::new(),
            },
            [request] => {
                let (decision, reservation) = self.decide_one::<true>(request, now);
                Reserved {
                    decisions: vec![decision],
                    reservations: vec![reservation],
                }
            }
            _ => self.decide_all(requests, now),
        })
    }

    /// Hands back what [`LocalLimitStore::reserve_now`] took, synchronously;
    /// [`LimitStore::refund`] is this. The requests are refunded last first, each under its
    /// key's shard lock.
    pub fn refund_now(
        &self,
        requests: &[LimitRequest<'_>],
        reservations: &[Option<Reservation>],
    ) -> Result<(), LimitStoreError> {
        check_refund(requests, reservations)?;
        for (request, reservation) in requests.iter().zip(reservations).rev() {
            let Some(reservation) = reservation else {
                continue;
            };
            let hash = self.hasher.hash_one(request.key);
            let mut table = self.shards[self.shard_of(hash)].table.lock();
            let Ok(entry) = table.find_entry(hash, |entry| &*entry.key == request.key) else {
                // Evicted meanwhile: nothing of the reservation is left.
                continue;
            };
            match refund(request.params, entry.get().state.as_ref(), reservation) {
                Some(state) => {
                    let entry = entry.into_mut();
                    entry.forget_at = forget_at(request.params, &state);
                    entry.state = Some(state);
                }
                None => {
                    entry.remove();
                    self.keys.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Decides one request synchronously, without allocating: the hot path for callers with
    /// a single limit (and for benchmarks).
    pub fn acquire_one(&self, request: &LimitRequest<'_>) -> Result<Decision, LimitStoreError> {
        validate(std::slice::from_ref(request))?;
        Ok(self
            .decide_one::<false>(request, self.clock.now().as_millis())
            .0)
    }

    /// Drops every key whose state can no longer affect a decision; returns how many.
    pub fn sweep(&self) -> usize {
        let now = self.clock.now().as_millis();
        let mut evicted = 0;
        for shard in self.shards.iter() {
            shard.table.lock().retain(|entry| {
                let keep = entry.forget_at > now;
                evicted += usize::from(!keep);
                keep
            });
        }
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

    fn shard_of(&self, hash: u64) -> usize {
        // The table uses the low bits and the top seven; the shard takes bits from the middle.
        (hash >> 32) as usize % SHARDS
    }

    /// Decides `request`; with `RESERVE`, also says what an allowed request took, for a
    /// refund (callers that never refund skip working it out).
    fn decide_one<const RESERVE: bool>(
        &self,
        request: &LimitRequest<'_>,
        now: u64,
    ) -> (Decision, Option<Reservation>) {
        let LimitRequest {
            key,
            params,
            cost,
            budget,
        } = *request;
        let hash = self.hasher.hash_one(key);
        let mut table = self.shards[self.shard_of(hash)].table.lock();
        if let Some(entry) = table.find_mut(hash, |entry| &*entry.key == key) {
            let decision = decide_in_place(params, &mut entry.state, now, cost);
            let mut taken = None;
            if decision.allowed
                && cost > 0
                && let Some(state) = &entry.state
            {
                entry.forget_at = forget_at(params, state);
                if RESERVE {
                    taken = Some(reservation(state, cost));
                }
            }
            return (decision, taken);
        }
        let (decision, next) = decide(params, None, now, cost);
        let Some(next) = next else {
            // Rejected or a peek: a new key stores nothing.
            return (decision, None);
        };
        let budget = budget.unwrap_or(&self.default_budget);
        let Some(slot) = budget.take(now) else {
            return (self.budget_full(budget, params, decision), None);
        };
        let taken = RESERVE.then(|| reservation(&next, cost));
        let forget = forget_at(params, &next);
        table.insert_unique(
            hash,
            Entry {
                key: key.into(),
                hash,
                state: Some(next),
                forget_at: forget,
                _slot: slot,
            },
            |entry| entry.hash,
        );
        self.keys.fetch_add(1, Ordering::Relaxed);
        (decision, taken)
    }

    /// Decides `requests` together under the locks of every shard they touch: all are
    /// allowed, and then stored, or none changes anything.
    fn decide_all(&self, requests: &[LimitRequest<'_>], now: u64) -> Reserved {
        let hashes: Vec<u64> = requests
            .iter()
            .map(|request| self.hasher.hash_one(request.key))
            .collect();
        let mut guards = self.lock_shards(&hashes);
        let mut working: Vec<Working<'_>> = Vec::with_capacity(requests.len());
        let mut all_allowed = true;
        let mut decisions = Vec::with_capacity(requests.len());
        // Which working key each request decided.
        let mut keys_of = Vec::with_capacity(requests.len());
        for (request, &hash) in requests.iter().zip(&hashes) {
            let index = self.working_index(&mut working, &guards, request.key, hash);
            keys_of.push(index);
            let decision = self.decide_on(&mut working[index], request, now);
            all_allowed &= decision.allowed;
            decisions.push(decision);
        }
        if !all_allowed {
            // The new keys' slots go back with `working`.
            return Reserved {
                reservations: vec![None; decisions.len()],
                decisions,
            };
        }
        let reservations = requests
            .iter()
            .zip(&keys_of)
            .map(|(request, &index)| match &working[index].state {
                Some(state) if request.cost > 0 => Some(reservation(state, request.cost)),
                _ => None,
            })
            .collect();
        self.store_changed(working, &mut guards);
        Reserved {
            decisions,
            reservations,
        }
    }

    /// Locks every shard the keys of `hashes` live in, in shard order (the lock order).
    fn lock_shards(&self, hashes: &[u64]) -> Vec<(usize, MutexGuard<'_, HashTable<Entry>>)> {
        let mut shard_ids: Vec<usize> = hashes.iter().map(|&hash| self.shard_of(hash)).collect();
        shard_ids.sort_unstable();
        shard_ids.dedup();
        shard_ids
            .iter()
            .map(|&id| (id, self.shards[id].table.lock()))
            .collect()
    }

    /// The index in `working` of `key`, read from its shard the first time a request names it.
    #[inline]
    fn working_index<'a>(
        &self,
        working: &mut Vec<Working<'a>>,
        guards: &[(usize, MutexGuard<'_, HashTable<Entry>>)],
        key: &'a str,
        hash: u64,
    ) -> usize {
        if let Some(index) = working.iter().position(|known| known.key == key) {
            return index;
        }
        let table = guard(guards, self.shard_of(hash));
        let state = table
            .find(hash, |entry| &*entry.key == key)
            .and_then(|entry| entry.state.clone());
        working.push(Working {
            key,
            hash,
            existed: state.is_some(),
            state,
            changed: None,
            slot: None,
        });
        working.len() - 1
    }

    /// Decides one request on its key's working state, which it changes when allowed (a new
    /// key first takes a place in its budget, or is refused when the budget is full).
    #[inline]
    fn decide_on<'a>(
        &self,
        known: &mut Working<'a>,
        request: &LimitRequest<'a>,
        now: u64,
    ) -> Decision {
        let (decision, next) = decide(request.params, known.state.as_ref(), now, request.cost);
        let Some(next) = next.filter(|_| decision.allowed) else {
            return decision;
        };
        if !known.existed && known.slot.is_none() {
            let budget = request.budget.unwrap_or(&self.default_budget);
            match budget.take(now) {
                Some(slot) => known.slot = Some(slot),
                None => return self.budget_full(budget, request.params, decision),
            }
        }
        known.state = Some(next);
        known.changed = Some(request.params);
        decision
    }

    /// Writes every changed key of `working` back to its shard.
    fn store_changed(
        &self,
        working: Vec<Working<'_>>,
        guards: &mut [(usize, MutexGuard<'_, HashTable<Entry>>)],
    ) {
        for known in working {
            let (Some(params), Some(state)) = (known.changed, known.state) else {
                continue;
            };
            let forget = forget_at(params, &state);
            let table = guard_mut(guards, self.shard_of(known.hash));
            if let Some(entry) = table.find_mut(known.hash, |entry| &*entry.key == known.key) {
                entry.state = Some(state);
                entry.forget_at = forget;
                continue;
            }
            let Some(slot) = known.slot else {
                // Unreachable: a key that was not there took a slot when it changed.
                continue;
            };
            table.insert_unique(
                known.hash,
                Entry {
                    key: known.key.into(),
                    hash: known.hash,
                    state: Some(state),
                    forget_at: forget,
                    _slot: slot,
                },
                |entry| entry.hash,
            );
            self.keys.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What a request gets that would store a new key in a full `budget`: `fresh` (the
    /// decision of a new key, stored nowhere) when the budget lets such requests through, else
    /// a refusal.
    fn budget_full(&self, budget: &KeyBudget, params: &LimitParams, fresh: Decision) -> Decision {
        match budget.when_full() {
            OnKeysFull::Allow => fresh,
            OnKeysFull::Reject => self.refused(params),
        }
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

/// The locked table of shard `id` (one of `guards`, which are sorted by shard).
fn guard<'a>(
    guards: &'a [(usize, MutexGuard<'_, HashTable<Entry>>)],
    id: usize,
) -> &'a HashTable<Entry> {
    let index = guards.partition_point(|(shard, _)| *shard < id);
    &guards[index].1
}

fn guard_mut<'a>(
    guards: &'a mut [(usize, MutexGuard<'_, HashTable<Entry>>)],
    id: usize,
) -> &'a mut HashTable<Entry> {
    let index = guards.partition_point(|(shard, _)| *shard < id);
    &mut guards[index].1
}

#[async_trait]
impl LimitStore for LocalLimitStore {
    async fn reserve(&self, requests: &[LimitRequest<'_>]) -> Result<Reserved, LimitStoreError> {
        self.reserve_now(requests)
    }

    async fn refund(
        &self,
        requests: &[LimitRequest<'_>],
        reservations: &[Option<Reservation>],
    ) -> Result<(), LimitStoreError> {
        self.refund_now(requests, reservations)
    }

    fn acquire_one_now(
        &self,
        request: &LimitRequest<'_>,
    ) -> Option<Result<Decision, LimitStoreError>> {
        Some(self.acquire_one(request))
    }
}
