//! The local rate-limit store: race-free under threads, all or nothing across limits, evicts
//! by time and never early, refuses new keys at its cap, keeps each rule within its own budget
//! of keys.

#![allow(clippy::unwrap_used)]

mod limit_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anteroom_core::ratelimit::rules::OnKeysFull;
use anteroom_core::ratelimit::{Algorithm, Decision, LimitParams, decide_in_place, forget_at};
use anteroom_core::{ManualClock, Timestamp};
use anteroom_store::limit::{
    KeyBudget, LimitMetricsSnapshot, LimitRequest, LimitStore, LocalLimitConfig, LocalLimitStore,
};
use limit_support::{capacity, params};
use proptest::prelude::*;

fn store(max_keys: usize) -> (Arc<ManualClock>, Arc<LocalLimitStore>) {
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
    let config = LocalLimitConfig {
        max_keys,
        ..LocalLimitConfig::default()
    };
    (clock.clone(), Arc::new(LocalLimitStore::new(clock, config)))
}

fn one(store: &LocalLimitStore, key: &str, params: &LimitParams, cost: u64) -> bool {
    store
        .acquire_now(&[LimitRequest {
            key,
            params,
            cost,
            budget: None,
        }])
        .unwrap()[0]
        .allowed
}

fn every_algorithm() -> Vec<LimitParams> {
    Algorithm::ALL
        .into_iter()
        .map(|algorithm| LimitParams {
            burst: if algorithm == Algorithm::LeakyBucket {
                49
            } else {
                0
            },
            ..params(algorithm, 50, Duration::from_secs(60))
        })
        .collect()
}

/// 8 threads × 200 requests on one key with the clock standing still: exactly the capacity
/// passes, never one more.
#[test]
fn threads_hammering_one_key_never_pass_more_than_the_limit() {
    for params in every_algorithm() {
        let (_, store) = store(1000);
        let passed = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..200 {
                        if one(&store, "hot", &params, 1) {
                            passed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(
            passed.into_inner(),
            capacity(&params),
            "{:?}",
            params.algorithm
        );
    }
}

/// The same with two limits per call (the multi-key path): each limit's capacity holds, and
/// the pair passes only as often as the smaller one allows.
#[test]
fn threads_acquiring_two_limits_at_once_stay_within_both() {
    let (_, store) = store(1000);
    let wide = params(Algorithm::FixedWindow, 30, Duration::from_secs(60));
    let narrow = params(Algorithm::TokenBucket, 10, Duration::from_secs(60));
    let passed = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for thread in 0..8 {
            let (store, passed, wide, narrow) = (&store, &passed, &wide, &narrow);
            scope.spawn(move || {
                for _ in 0..100 {
                    // Half the threads name the keys in the other order.
                    let mut requests = [
                        LimitRequest {
                            key: "a",
                            params: wide,
                            cost: 1,
                            budget: None,
                        },
                        LimitRequest {
                            key: "b",
                            params: narrow,
                            cost: 1,
                            budget: None,
                        },
                    ];
                    if thread % 2 == 1 {
                        requests.reverse();
                    }
                    let decisions = store.acquire_now(&requests).unwrap();
                    if decisions.iter().all(|decision| decision.allowed) {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(passed.into_inner(), 10);
    // The wide limit was charged only for the ten that passed both.
    let peek = store
        .acquire_now(&[LimitRequest {
            key: "a",
            params: &wide,
            cost: 0,
            budget: None,
        }])
        .unwrap();
    assert_eq!(peek[0].remaining, 20);
}

/// A request rejected by one limit consumes nothing from the others.
#[tokio::test]
async fn a_rejection_by_one_limit_charges_none() {
    let (_, store) = store(1000);
    let roomy = params(Algorithm::SlidingLog, 5, Duration::from_secs(60));
    let tight = params(Algorithm::Gcra, 1, Duration::from_secs(60));
    let both = [
        LimitRequest {
            key: "roomy",
            params: &roomy,
            cost: 1,
            budget: None,
        },
        LimitRequest {
            key: "tight",
            params: &tight,
            cost: 1,
            budget: None,
        },
    ];
    let first = store.acquire(&both).await.unwrap();
    assert!(first.iter().all(|decision| decision.allowed));
    for _ in 0..3 {
        let again = store.acquire(&both).await.unwrap();
        assert!(again[0].allowed && !again[1].allowed);
    }
    // Only the first call was charged to `roomy`: 4 of 5 are left.
    let peek = LimitRequest { cost: 0, ..both[0] };
    assert_eq!(store.acquire(&[peek]).await.unwrap()[0].remaining, 4);
}

/// A key is dropped exactly when its state stops mattering: not one millisecond before.
#[test]
fn keys_are_evicted_by_time_and_never_early() {
    for params in every_algorithm() {
        let (clock, store) = store(1000);
        assert!(one(&store, "k", &params, 1));
        assert!(one(&store, "k", &params, 1));
        // The same two requests decided by the core tell when the state stops mattering.
        let mut state = None;
        decide_in_place(&params, &mut state, 1_000_000, 1);
        decide_in_place(&params, &mut state, 1_000_000, 1);
        let state = state.unwrap();
        let forget = forget_at(&params, &state);
        assert!(forget > 1_000_000);

        clock.set(Timestamp(forget - 1));
        assert_eq!(store.sweep(), 0, "{:?} evicted early", params.algorithm);
        assert_eq!(store.len(), 1);
        clock.set(Timestamp(forget));
        assert_eq!(store.sweep(), 1, "{:?} not evicted", params.algorithm);
        assert!(store.is_empty());
        assert_eq!(store.metrics().snapshot().keys_evicted, 1);
        // The key starts afresh, exactly as its old state would have decided.
        assert!(one(&store, "k", &params, 1));
    }
}

/// At the cap a new key is refused (fail closed) and counted; known keys still work; once
/// time frees room, new keys are admitted again.
#[test]
fn new_keys_are_refused_at_the_cap() {
    let (clock, store) = store(2);
    let limit = params(Algorithm::FixedWindow, 3, Duration::from_secs(1));
    assert!(one(&store, "a", &limit, 1));
    assert!(one(&store, "b", &limit, 1));
    let refused = store
        .acquire_now(&[LimitRequest {
            key: "c",
            params: &limit,
            cost: 1,
            budget: None,
        }])
        .unwrap();
    assert!(!refused[0].allowed);
    assert_eq!(refused[0].retry_after, Some(Duration::from_secs(1)));
    // Also inside a multi-limit call, which then charges nothing.
    let mixed = store
        .acquire_now(&[
            LimitRequest {
                key: "a",
                params: &limit,
                cost: 1,
                budget: None,
            },
            LimitRequest {
                key: "d",
                params: &limit,
                cost: 1,
                budget: None,
            },
        ])
        .unwrap();
    assert!(mixed[0].allowed && !mixed[1].allowed);
    assert!(one(&store, "a", &limit, 1));
    assert!(one(&store, "a", &limit, 1));
    assert!(!one(&store, "a", &limit, 1));
    assert_eq!(
        store.metrics().snapshot(),
        LimitMetricsSnapshot {
            keys_evicted: 0,
            keys_refused: 2,
            store_errors: 0,
            refund_errors: 0
        }
    );
    // Peeks and rejections of new keys store nothing, so they are not refused.
    assert!(one(&store, "e", &limit, 0));
    assert_eq!(store.len(), 2);

    clock.advance(Duration::from_secs(1));
    assert_eq!(store.sweep(), 2);
    assert!(one(&store, "c", &limit, 1));
}

/// The sweeper task drops forgettable keys on its own and stops with the store.
#[tokio::test]
async fn the_sweeper_task_evicts_periodically() {
    let (clock, store) = store(10);
    let limit = params(Algorithm::TokenBucket, 10, Duration::from_millis(100));
    for key in ["a", "b", "c"] {
        assert!(one(&store, key, &limit, 1));
    }
    let sweeper = store.spawn_sweeper(Duration::from_millis(5));
    clock.advance(Duration::from_millis(10));
    tokio::time::timeout(Duration::from_secs(5), async {
        while !store.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(store.metrics().snapshot().keys_evicted, 3);
    drop(store);
    tokio::time::timeout(Duration::from_secs(5), sweeper)
        .await
        .unwrap()
        .unwrap();
}

fn budgeted(
    store: &LocalLimitStore,
    key: &str,
    params: &LimitParams,
    budget: &Arc<KeyBudget>,
) -> Decision {
    store
        .acquire_now(&[LimitRequest {
            key,
            params,
            cost: 1,
            budget: Some(budget),
        }])
        .unwrap()[0]
}

/// A rule keyed on something the client picks (a header) is flooded with fresh keys: its own
/// budget fills and refuses new keys, while another rule's new clients, and the requests that
/// name no budget, are decided as before. Time gives the places back.
#[test]
fn a_full_budget_refuses_only_its_own_new_keys() {
    let (clock, store) = store(1000);
    let limit = params(Algorithm::TokenBucket, 3, Duration::from_secs(1));
    let flooded = Arc::new(KeyBudget::new("api-key", 10, OnKeysFull::Reject));
    let other = Arc::new(KeyBudget::new("per-ip", 10, OnKeysFull::Reject));
    for n in 0..10 {
        assert!(budgeted(&store, &format!("api-key|{n}"), &limit, &flooded).allowed);
    }
    let refused = budgeted(&store, "api-key|fresh", &limit, &flooded);
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(Duration::from_secs(1)));
    assert_eq!((flooded.held(), flooded.full_total()), (10, 1));
    // A known key of the full rule still counts; the other rule and the unbudgeted keys are
    // untouched.
    assert!(budgeted(&store, "api-key|0", &limit, &flooded).allowed);
    assert!(budgeted(&store, "per-ip|203.0.113.7", &limit, &other).allowed);
    assert!(one(&store, "mark", &limit, 1));
    assert_eq!((other.held(), other.full_total()), (1, 0));
    // Inside a multi-limit call the full rule refuses, and the call charges nothing.
    let both = store
        .acquire_now(&[
            LimitRequest {
                key: "per-ip|203.0.113.8",
                params: &limit,
                cost: 1,
                budget: Some(&other),
            },
            LimitRequest {
                key: "api-key|fresh",
                params: &limit,
                cost: 1,
                budget: Some(&flooded),
            },
        ])
        .unwrap();
    assert!(both[0].allowed && !both[1].allowed);
    assert_eq!(other.held(), 1, "a refused call stores no new key");

    clock.advance(Duration::from_secs(1));
    store.sweep();
    assert_eq!(flooded.held(), 0, "swept keys give their places back");
    assert!(budgeted(&store, "api-key|fresh", &limit, &flooded).allowed);
}

/// `on_keys_full = "allow"`: a new key in a full budget is decided as a new key and stored
/// nowhere, so the budget stays full and nothing else changes.
#[test]
fn a_full_budget_that_allows_lets_new_keys_through_uncounted() {
    let (_, store) = store(1000);
    let limit = params(Algorithm::FixedWindow, 1, Duration::from_secs(60));
    let budget = Arc::new(KeyBudget::new("open", 1, OnKeysFull::Allow));
    assert!(budgeted(&store, "open|a", &limit, &budget).allowed);
    assert!(!budgeted(&store, "open|a", &limit, &budget).allowed);
    for _ in 0..3 {
        assert!(budgeted(&store, "open|b", &limit, &budget).allowed);
    }
    assert_eq!((store.len(), budget.held(), budget.full_total()), (1, 1, 3));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever a flood does to one rule (its budget filled, then more fresh keys every step),
    /// another rule's decisions are exactly those of a store that never saw the flood.
    #[test]
    fn one_rule_filled_leaves_another_rules_decisions_unchanged(
        steps in proptest::collection::vec((0usize..6, 0u64..400, 0usize..4), 1..60),
        algorithm in proptest::sample::select(Algorithm::ALL.to_vec()),
    ) {
        let limit = LimitParams {
            burst: if algorithm == Algorithm::LeakyBucket { 2 } else { 0 },
            ..params(algorithm, 3, Duration::from_secs(1))
        };
        let (quiet_clock, quiet) = store(1000);
        let (flooded_clock, flooded) = store(1000);
        let quiet_budget = Arc::new(KeyBudget::new("per-ip", 4, OnKeysFull::Reject));
        let flooded_budget = Arc::new(KeyBudget::new("per-ip", 4, OnKeysFull::Reject));
        let flood = Arc::new(KeyBudget::new("api-key", 8, OnKeysFull::Reject));
        let mut fresh = 0u64;
        for (client, advance_ms, flood_requests) in steps {
            for clock in [&quiet_clock, &flooded_clock] {
                clock.advance(Duration::from_millis(advance_ms));
            }
            // One more fresh key than the budget holds, so the first step already fills it.
            for _ in 0..flood_requests + 9 {
                fresh += 1;
                budgeted(&flooded, &format!("api-key|{fresh}"), &limit, &flood);
            }
            let key = format!("per-ip|{client}");
            let expected = budgeted(&quiet, &key, &limit, &quiet_budget);
            let found = budgeted(&flooded, &key, &limit, &flooded_budget);
            prop_assert_eq!(found, expected);
            if advance_ms % 7 == 0 {
                quiet.sweep();
                flooded.sweep();
            }
        }
        prop_assert!(flood.full_total() > 0, "the flood filled its budget");
    }

    /// The trait's synchronous decision of one request (the lone rule's way) is what
    /// `acquire` of that one request decides, step by step, with costs, peeks, a budget of
    /// keys and time passing: on two stores seeing the same requests, the same decisions.
    #[test]
    fn one_request_decided_at_once_is_decided_as_acquire_does(
        steps in proptest::collection::vec((0usize..5, 0u64..700, 0u64..3), 1..80),
        algorithm in proptest::sample::select(Algorithm::ALL.to_vec()),
    ) {
        let limit = LimitParams {
            burst: if algorithm == Algorithm::LeakyBucket { 2 } else { 0 },
            ..params(algorithm, 3, Duration::from_secs(1))
        };
        let (async_clock, asked) = store(1000);
        let (sync_clock, at_once) = store(1000);
        let async_budget = Arc::new(KeyBudget::new("per-ip", 3, OnKeysFull::Reject));
        let sync_budget = Arc::new(KeyBudget::new("per-ip", 3, OnKeysFull::Reject));
        let at_once: Arc<dyn LimitStore> = at_once;
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (client, advance_ms, cost) in steps {
            for clock in [&async_clock, &sync_clock] {
                clock.advance(Duration::from_millis(advance_ms));
            }
            let key = format!("per-ip|{client}");
            let request = |budget| LimitRequest { key: &key, params: &limit, cost, budget };
            let expected = runtime
                .block_on(asked.acquire(&[request(Some(&async_budget))]))
                .unwrap()[0];
            let found = at_once
                .acquire_one_now(&request(Some(&sync_budget)))
                .expect("a local store decides at once")
                .unwrap();
            prop_assert_eq!(found, expected);
        }
    }
}
