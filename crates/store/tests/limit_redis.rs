//! The Redis rate-limit store against a real `redis-server`: identical decisions to the local
//! store (a property test over random requests, costs, times and parameters for every
//! algorithm), race-free under concurrent tasks, all or nothing across limits, keys that
//! expire, NOSCRIPT recovery and bounded failures.

#![allow(clippy::unwrap_used)]

mod limit_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anteroom_core::ratelimit::{Algorithm, LimitParams};
use anteroom_core::{ManualClock, Timestamp};
use anteroom_store::limit::{
    LimitRequest, LimitStore, LimitStoreError, LocalLimitConfig, LocalLimitStore, RedisLimitConfig,
    RedisLimitStore,
};
use limit_support::{RedisServer, capacity, params};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Generous: the machine running the tests may be busy.
fn config(server: &RedisServer) -> RedisLimitConfig {
    RedisLimitConfig {
        timeout: Duration::from_secs(10),
        ..RedisLimitConfig::new(server.url())
    }
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
fn hold_redis_to_local(algorithms: &[Algorithm], cases: u32) {
    let server = RedisServer::start();
    let runtime = runtime();
    let clock = Arc::new(ManualClock::new(Timestamp(0)));
    let redis = {
        let _context = runtime.enter();
        RedisLimitStore::connect_with_clock(config(&server), clock.clone()).unwrap()
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

#[test]
fn token_bucket_decides_alike_in_redis_and_locally() {
    hold_redis_to_local(&[Algorithm::TokenBucket], 96);
}

#[test]
fn leaky_bucket_decides_alike_in_redis_and_locally() {
    hold_redis_to_local(&[Algorithm::LeakyBucket], 96);
}

#[test]
fn fixed_window_decides_alike_in_redis_and_locally() {
    hold_redis_to_local(&[Algorithm::FixedWindow], 96);
}

#[test]
fn sliding_log_decides_alike_in_redis_and_locally() {
    hold_redis_to_local(&[Algorithm::SlidingLog], 96);
}

#[test]
fn sliding_window_decides_alike_in_redis_and_locally() {
    hold_redis_to_local(&[Algorithm::SlidingWindow], 96);
}

#[test]
fn gcra_decides_alike_in_redis_and_locally() {
    hold_redis_to_local(&[Algorithm::Gcra], 96);
}

/// Calls mixing algorithms run the combined script; it too decides like the local store.
#[test]
fn mixed_algorithms_decide_alike_in_redis_and_locally() {
    hold_redis_to_local(&Algorithm::ALL, 96);
}

/// 16 tasks × 40 requests on one key through two stores (two nodes, two connections), on
/// Redis's own clock with a one-hour period (nothing refills meanwhile): exactly the capacity
/// passes.
#[test]
fn tasks_hammering_one_key_never_pass_more_than_the_limit() {
    let server = RedisServer::start();
    let runtime = runtime();
    runtime.block_on(async {
        let stores = [
            Arc::new(RedisLimitStore::connect(config(&server)).unwrap()),
            Arc::new(RedisLimitStore::connect(config(&server)).unwrap()),
        ];
        for algorithm in Algorithm::ALL {
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
#[test]
fn a_rejection_by_one_limit_charges_none() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = RedisLimitStore::connect(config(&server)).unwrap();
        let roomy = params(Algorithm::SlidingWindow, 5, Duration::from_secs(3600));
        let tight = params(Algorithm::LeakyBucket, 1, Duration::from_secs(3600));
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
#[test]
fn keys_carry_a_hash_tag_and_expire() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = RedisLimitStore::connect(config(&server)).unwrap();
        let limit = params(Algorithm::FixedWindow, 3, Duration::from_secs(60));
        let request = LimitRequest {
            key: "join-per-ip:203.0.113.7",
            params: &limit,
            cost: 1,
        };
        assert!(store.acquire(&[request]).await.unwrap()[0].allowed);
        let key = store.redis_key(Algorithm::FixedWindow, request.key);
        assert!(key.starts_with("anteroom:rl:{"));
        assert!(key.ends_with("}:fixed_window:join-per-ip:203.0.113.7"));
        assert_ne!(
            key.split('}').next(),
            store
                .redis_key(Algorithm::FixedWindow, "join-per-ip:203.0.113.8")
                .split('}')
                .next()
        );
        let mut connection = server.connection();
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut connection).unwrap();
        assert!((55_000..=60_000).contains(&ttl), "ttl {ttl}");
        // A rejection writes nothing, so it does not extend the expiry.
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut connection).unwrap();
        assert_eq!(keys, vec![key]);
    });
}

/// After `SCRIPT FLUSH` (a restart or failover loses scripts) the next call reloads them.
#[test]
fn scripts_are_reloaded_after_noscript() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = RedisLimitStore::connect(config(&server)).unwrap();
        let limit = params(Algorithm::Gcra, 2, Duration::from_secs(60));
        let request = LimitRequest {
            key: "k",
            params: &limit,
            cost: 1,
        };
        assert!(store.acquire(&[request]).await.unwrap()[0].allowed);
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.connection())
            .unwrap();
        assert!(store.acquire(&[request]).await.unwrap()[0].allowed);
        assert!(!store.acquire(&[request]).await.unwrap()[0].allowed);
        assert_eq!(store.metrics().snapshot().store_errors, 0);
    });
}

/// With Redis gone, a call fails within the timeout and is counted.
#[test]
fn an_unreachable_redis_fails_fast_and_is_counted() {
    let server = RedisServer::start();
    let url = server.url();
    drop(server);
    runtime().block_on(async {
        let store = RedisLimitStore::connect(RedisLimitConfig {
            timeout: Duration::from_millis(200),
            ..RedisLimitConfig::new(url)
        })
        .unwrap();
        let limit = params(Algorithm::TokenBucket, 2, Duration::from_secs(60));
        let request = LimitRequest {
            key: "k",
            params: &limit,
            cost: 1,
        };
        let started = std::time::Instant::now();
        let error = store.acquire(&[request]).await.unwrap_err();
        assert!(matches!(error, LimitStoreError::Backend { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(store.metrics().snapshot().store_errors, 1);
    });
}

/// Parameters the scripts could not compute exactly are refused before anything runs.
#[test]
fn invalid_parameters_are_refused() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = RedisLimitStore::connect(config(&server)).unwrap();
        let limit = params(Algorithm::TokenBucket, 0, Duration::from_secs(60));
        let request = LimitRequest {
            key: "k",
            params: &limit,
            cost: 1,
        };
        let error = store.acquire(&[request]).await.unwrap_err();
        assert!(matches!(error, LimitStoreError::InvalidParams { .. }));
    });
}
