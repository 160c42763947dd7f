//! The local rate-limit store: race-free under threads, all or nothing across limits, evicts
//! by time and never early, refuses new keys at its cap.

#![allow(clippy::unwrap_used)]

mod limit_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anteroom_core::ratelimit::{Algorithm, LimitParams, decide_in_place, forget_at};
use anteroom_core::{ManualClock, Timestamp};
use anteroom_store::limit::{
    LimitMetricsSnapshot, LimitRequest, LimitStore, LocalLimitConfig, LocalLimitStore,
};
use limit_support::{capacity, params};

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
        .acquire_now(&[LimitRequest { key, params, cost }])
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
                        },
                        LimitRequest {
                            key: "b",
                            params: narrow,
                            cost: 1,
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
        },
        LimitRequest {
            key: "tight",
            params: &tight,
            cost: 1,
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
            },
            LimitRequest {
                key: "d",
                params: &limit,
                cost: 1,
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
