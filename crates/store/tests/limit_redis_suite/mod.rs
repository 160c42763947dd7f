//! The Redis rate-limit store's suite, run against a standalone `redis-server`
//! (`limit_redis.rs`) and a 3-master Redis Cluster (`limit_redis_cluster.rs`) by
//! [`limit_redis_suite!`]: identical decisions to the local store (a property test over random
//! requests, costs, times and parameters for every algorithm, refunds included), race-free
//! under concurrent tasks, all or nothing across limits, keys that expire, NOSCRIPT recovery
//! and bounded failures.

#![allow(dead_code, clippy::unwrap_used, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anteroom_core::ratelimit::{Algorithm, LimitParams};
use anteroom_core::{ManualClock, Timestamp};
use anteroom_store::limit::{
    LimitRequest, LimitStore, LimitStoreError, LocalLimitConfig, LocalLimitStore, RedisLimitConfig,
    RedisLimitStore,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis::FromRedisValue;

use crate::limit_support::{capacity, params};

/// A Redis deployment the suite runs against.
pub trait Target {
    /// A store configuration under a key prefix no other test of the process uses, with a
    /// generous timeout (the machine running the tests may be busy).
    fn config(&self) -> RedisLimitConfig;
    /// Runs `command`, routed by its key.
    fn query<V: FromRedisValue>(&self, command: &redis::Cmd) -> V;
    /// Runs `command` on every node (every master of a Cluster).
    fn on_every_node(&self, command: &redis::Cmd);
    /// Every key under [`Target::config`]'s prefix, sorted.
    fn keys(&self) -> Vec<String>;
    /// A configuration of this kind whose servers do not answer.
    fn unreachable(&self) -> RedisLimitConfig;
}

/// Stamps out one `#[test]` per behaviour; `$target` builds the target of each test.
#[macro_export]
macro_rules! limit_redis_suite {
    ($target:expr) => {
        $crate::limit_redis_suite!(@tests $target;
            token_bucket_decides_alike_in_redis_and_locally,
            leaky_bucket_decides_alike_in_redis_and_locally,
            fixed_window_decides_alike_in_redis_and_locally,
            sliding_log_decides_alike_in_redis_and_locally,
            sliding_window_decides_alike_in_redis_and_locally,
            gcra_decides_alike_in_redis_and_locally,
            mixed_algorithms_decide_alike_in_redis_and_locally,
            refunds_decide_alike_in_redis_and_locally,
            tasks_hammering_one_key_never_pass_more_than_the_limit,
            a_rejection_by_one_limit_charges_none,
            keys_carry_a_hash_tag_and_expire,
            scripts_are_reloaded_after_noscript,
            an_unreachable_redis_fails_fast_and_is_counted,
            invalid_parameters_are_refused,
        );
    };
    (@tests $target:expr; $($name:ident),+ $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::limit_redis_suite::$name(&$target);
            }
        )+
    };
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn any_params(algorithms: Vec<Algorithm>) -> impl Strategy<Value = LimitParams> {
    (
        prop::sample::select(algorithms),
        1u64..7,
        prop::sample::select(vec![1u64, 7, 100, 1000, 60_000, 3_600_000]),
        0u64..6,
        0u64..4,
        any::<bool>(),
    )
        .prop_map(
            |(algorithm, limit, period_ms, burst, delay, nodelay)| LimitParams {
                algorithm,
                limit,
                period: Duration::from_millis(period_ms),
                burst,
                delay,
                nodelay,
            },
        )
}

/// Each step: how far the clock moves, then one call of one or two `(key index, cost)`
/// requests (the same key may appear twice).
fn any_steps() -> impl Strategy<Value = Vec<(u64, Vec<(usize, u64)>)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..10, 0u64..400, 0u64..5000, 0u64..200_000],
            prop::collection::vec((0usize..3, 0u64..4), 1..=2),
        ),
        1..50,
    )
}

/// Runs random calls through both stores on the same controlled clock and asserts every
/// decision is identical, field for field.
fn hold_redis_to_local<T: Target>(target: &T, algorithms: &[Algorithm], cases: u32) {
    let runtime = runtime();
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let redis = {
        let _context = runtime.enter();
        RedisLimitStore::connect_with_clock(target.config(), clock.clone()).unwrap()
    };
    let case = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let strategy = (
        prop::collection::vec(any_params(algorithms.to_vec()), 3),
        any_steps(),
        // Today's epoch milliseconds and beyond, so the scripts see realistic magnitudes.
        1_700_000_000_000u64..4_000_000_000_000,
    );
    runner
        .run(&strategy, |(limits, steps, start)| {
            let case = case.fetch_add(1, Ordering::Relaxed);
            let keys: Vec<String> = (0..3).map(|index| format!("case{case}:k{index}")).collect();
            clock.set(Timestamp(start));
            let local = LocalLimitStore::new(clock.clone(), LocalLimitConfig::default());
            for (step, (gap, calls)) in steps.iter().enumerate() {
                clock.advance(Duration::from_millis(*gap));
                let requests: Vec<LimitRequest<'_>> = calls
                    .iter()
                    .map(|&(index, cost)| LimitRequest {
                        key: &keys[index],
                        params: &limits[index],
                        cost,
                        budget: None,
                    })
                    .collect();
                let expected = local.acquire_now(&requests).unwrap();
                let got = runtime.block_on(redis.acquire(&requests)).unwrap();
                prop_assert_eq!(got, expected, "step {} ({:?})", step, calls);
            }
            Ok(())
        })
        .unwrap();
}

pub fn token_bucket_decides_alike_in_redis_and_locally<T: Target>(target: &T) {
    hold_redis_to_local(target, &[Algorithm::TokenBucket], 96);
}

pub fn leaky_bucket_decides_alike_in_redis_and_locally<T: Target>(target: &T) {
    hold_redis_to_local(target, &[Algorithm::LeakyBucket], 96);
}

pub fn fixed_window_decides_alike_in_redis_and_locally<T: Target>(target: &T) {
    hold_redis_to_local(target, &[Algorithm::FixedWindow], 96);
}

pub fn sliding_log_decides_alike_in_redis_and_locally<T: Target>(target: &T) {
    hold_redis_to_local(target, &[Algorithm::SlidingLog], 96);
}

pub fn sliding_window_decides_alike_in_redis_and_locally<T: Target>(target: &T) {
    hold_redis_to_local(target, &[Algorithm::SlidingWindow], 96);
}

pub fn gcra_decides_alike_in_redis_and_locally<T: Target>(target: &T) {
    hold_redis_to_local(target, &[Algorithm::Gcra], 96);
}

/// Calls mixing algorithms run the combined script; it too decides like the local store.
pub fn mixed_algorithms_decide_alike_in_redis_and_locally<T: Target>(target: &T) {
    hold_redis_to_local(target, &Algorithm::ALL, 96);
}

/// 16 tasks × 40 requests on one key through two stores (two nodes, two connections), on
/// Redis's own clock with a one-hour period (nothing refills meanwhile): exactly the capacity
/// passes.
pub fn tasks_hammering_one_key_never_pass_more_than_the_limit<T: Target>(target: &T) {
    let runtime = runtime();
    runtime.block_on(async {
        let stores = [
            Arc::new(RedisLimitStore::connect(target.config()).unwrap()),
            Arc::new(RedisLimitStore::connect(target.config()).unwrap()),
        ];
        for algorithm in Algorithm::ALL {
            wait_out_a_window_boundary(target, Duration::from_secs(3600)).await;
            let limit = LimitParams {
                burst: if algorithm == Algorithm::LeakyBucket {
                    29
                } else {
                    0
                },
                ..params(algorithm, 30, Duration::from_secs(3600))
            };
            let passed = Arc::new(AtomicU64::new(0));
            let tasks: Vec<_> = (0..16)
                .map(|task| {
                    let (store, passed) = (stores[task % 2].clone(), passed.clone());
                    tokio::spawn(async move {
                        for _ in 0..40 {
                            let request = LimitRequest {
                                key: "hot",
                                params: &limit,
                                cost: 1,
                                budget: None,
                            };
                            if store.acquire(&[request]).await.unwrap()[0].allowed {
                                passed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            assert_eq!(
                passed.load(Ordering::Relaxed),
                capacity(&limit),
                "{algorithm:?}"
            );
        }
    });
}

/// A request rejected by one limit consumes nothing from the others.
pub fn a_rejection_by_one_limit_charges_none<T: Target>(target: &T) {
    runtime().block_on(async {
        let store = RedisLimitStore::connect(target.config()).unwrap();
        let roomy = params(Algorithm::SlidingWindow, 5, Duration::from_secs(3600));
        let tight = params(Algorithm::LeakyBucket, 1, Duration::from_secs(3600));
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
        assert!(
            store
                .acquire(&both)
                .await
                .unwrap()
                .iter()
                .all(|decision| decision.allowed)
        );
        for _ in 0..3 {
            let again = store.acquire(&both).await.unwrap();
            assert!(again[0].allowed && !again[1].allowed);
        }
        let peek = LimitRequest { cost: 0, ..both[0] };
        assert_eq!(store.acquire(&[peek]).await.unwrap()[0].remaining, 4);
    });
}

/// Keys are spread over hash tags and expire when their state stops mattering.
pub fn keys_carry_a_hash_tag_and_expire<T: Target>(target: &T) {
    runtime().block_on(async {
        let store = RedisLimitStore::connect(target.config()).unwrap();
        let limit = params(Algorithm::FixedWindow, 3, Duration::from_secs(60));
        let request = LimitRequest {
            key: "join-per-ip:203.0.113.7",
            params: &limit,
            cost: 1,
            budget: None,
        };
        assert!(store.acquire(&[request]).await.unwrap()[0].allowed);
        let key = store.redis_key(Algorithm::FixedWindow, request.key);
        assert!(key.starts_with(&format!("{}:rl:{{", target.config().key_prefix)));
        assert!(key.ends_with("}:fixed_window:join-per-ip:203.0.113.7"));
        assert_ne!(
            key.split('}').next(),
            store
                .redis_key(Algorithm::FixedWindow, "join-per-ip:203.0.113.8")
                .split('}')
                .next()
        );
        let ttl: i64 = target.query(redis::cmd("PTTL").arg(&key));
        assert!((55_000..=60_000).contains(&ttl), "ttl {ttl}");
        // A rejection writes nothing, so it does not extend the expiry.
        assert_eq!(target.keys(), vec![key]);
    });
}

/// After `SCRIPT FLUSH` (a restart or failover loses scripts) the next call reloads them.
pub fn scripts_are_reloaded_after_noscript<T: Target>(target: &T) {
    runtime().block_on(async {
        let store = RedisLimitStore::connect(target.config()).unwrap();
        let limit = params(Algorithm::Gcra, 2, Duration::from_secs(60));
        let request = LimitRequest {
            key: "k",
            params: &limit,
            cost: 1,
            budget: None,
        };
        assert!(store.acquire(&[request]).await.unwrap()[0].allowed);
        target.on_every_node(redis::cmd("SCRIPT").arg("FLUSH"));
        assert!(store.acquire(&[request]).await.unwrap()[0].allowed);
        assert!(!store.acquire(&[request]).await.unwrap()[0].allowed);
        assert_eq!(store.metrics().snapshot().store_errors, 0);
    });
}

/// With Redis gone, a call fails within the timeout and is counted.
pub fn an_unreachable_redis_fails_fast_and_is_counted<T: Target>(target: &T) {
    runtime().block_on(async {
        let store = RedisLimitStore::connect(RedisLimitConfig {
            timeout: Duration::from_millis(200),
            ..target.unreachable()
        })
        .unwrap();
        let limit = params(Algorithm::TokenBucket, 2, Duration::from_secs(60));
        let request = LimitRequest {
            key: "k",
            params: &limit,
            cost: 1,
            budget: None,
        };
        let started = std::time::Instant::now();
        let error = store.acquire(&[request]).await.unwrap_err();
        assert!(matches!(error, LimitStoreError::Backend { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(store.metrics().snapshot().store_errors, 1);
    });
}

/// Parameters the scripts could not compute exactly are refused before anything runs.
pub fn invalid_parameters_are_refused<T: Target>(target: &T) {
    runtime().block_on(async {
        let store = RedisLimitStore::connect(target.config()).unwrap();
        let limit = params(Algorithm::TokenBucket, 0, Duration::from_secs(60));
        let request = LimitRequest {
            key: "k",
            params: &limit,
            cost: 1,
            budget: None,
        };
        let error = store.acquire(&[request]).await.unwrap_err();
        assert!(matches!(error, LimitStoreError::InvalidParams { .. }));
    });
}

/// Reserves random calls in both stores and refunds some of them at once: the Lua refunds
/// leave Redis deciding every later call exactly as the core's refunds leave the local store.
pub fn refunds_decide_alike_in_redis_and_locally<T: Target>(target: &T) {
    let runtime = runtime();
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let redis = {
        let _context = runtime.enter();
        RedisLimitStore::connect_with_clock(target.config(), clock.clone()).unwrap()
    };
    let case = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 96,
        ..Config::default()
    });
    let strategy = (
        prop::collection::vec(any_params(Algorithm::ALL.to_vec()), 3),
        prop::collection::vec((any_steps(), any::<bool>()), 1..4),
        1_700_000_000_000u64..4_000_000_000_000,
    );
    runner
        .run(&strategy, |(limits, runs, start)| {
            let case = case.fetch_add(1, Ordering::Relaxed);
            let keys: Vec<String> = (0..3)
                .map(|index| format!("refund{case}:k{index}"))
                .collect();
            clock.set(Timestamp(start));
            let local = LocalLimitStore::new(clock.clone(), LocalLimitConfig::default());
            for (steps, refunding) in &runs {
                for (step, (gap, calls)) in steps.iter().enumerate() {
                    clock.advance(Duration::from_millis(*gap));
                    let requests: Vec<LimitRequest<'_>> = calls
                        .iter()
                        .map(|&(index, cost)| LimitRequest {
                            key: &keys[index],
                            params: &limits[index],
                            cost,
                            budget: None,
                        })
                        .collect();
                    let expected = local.reserve_now(&requests).unwrap();
                    let got = runtime.block_on(redis.reserve(&requests)).unwrap();
                    prop_assert_eq!(
                        &got.decisions,
                        &expected.decisions,
                        "step {} ({:?})",
                        step,
                        calls
                    );
                    prop_assert_eq!(&got.reservations, &expected.reservations);
                    if *refunding && step % 2 == 0 {
                        local.refund_now(&requests, &expected.reservations).unwrap();
                        runtime
                            .block_on(redis.refund(&requests, &got.reservations))
                            .unwrap();
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Sleeps past the next multiple of `period` on Redis's clock when it is under a minute away.
/// Windows are aligned to multiples of the period, so a test that expects them not to roll in
/// its few seconds would otherwise fail when run across the top of an hour.
pub async fn wait_out_a_window_boundary<T: Target>(target: &T, period: Duration) {
    let (seconds, micros): (u64, u64) = target.query(&redis::cmd("TIME"));
    let now = Duration::from_secs(seconds) + Duration::from_micros(micros);
    let into_window =
        Duration::from_nanos(u64::try_from(now.as_nanos() % period.as_nanos()).unwrap());
    let to_boundary = period - into_window;
    if to_boundary < Duration::from_secs(60) {
        tokio::time::sleep(to_boundary + Duration::from_secs(1)).await;
    }
}
