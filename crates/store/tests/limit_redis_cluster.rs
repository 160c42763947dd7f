//! The Redis rate-limit store on a 3-master Redis Cluster: the suite of `limit_redis_suite/`
//! (whose multi-key calls spread over slots, so they are reserved then refunded), and what is
//! particular to a Cluster: a call across slots that is refused leaves every key as it was,
//! and tasks hammering one such call never pass more than any key's limit, leaking nothing.

#![allow(clippy::unwrap_used)]

mod limit_redis_suite;
mod limit_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anteroom_core::ratelimit::{Algorithm, LimitParams};
use anteroom_core::{ManualClock, Timestamp};
use anteroom_store::limit::{LimitRequest, LimitStore, RedisLimitConfig, RedisLimitStore};
use anteroom_test_support::ports::free_port;
use anteroom_test_support::redis::{shared_cluster, unique_prefix};
use limit_redis_suite::{Target, runtime, wait_out_a_window_boundary};
use limit_support::params;
use redis::FromRedisValue;

/// The shared cluster, under a key prefix of its own.
struct Cluster {
    prefix: String,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster {
            prefix: unique_prefix(),
        }
    }

    fn connection(&self) -> redis::cluster::ClusterConnection {
        redis::cluster::ClusterClient::new(shared_cluster().urls())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Target for Cluster {
    fn config(&self) -> RedisLimitConfig {
        RedisLimitConfig {
            timeout: Duration::from_secs(10),
            key_prefix: self.prefix.clone(),
            ..RedisLimitConfig::cluster(shared_cluster().urls())
        }
    }

    fn query<V: FromRedisValue>(&self, command: &redis::Cmd) -> V {
        command.query(&mut self.connection()).unwrap()
    }

    fn on_every_node(&self, command: &redis::Cmd) {
        for url in shared_cluster().urls() {
            let mut node = redis::Client::open(url).unwrap().get_connection().unwrap();
            let _: redis::Value = command.query(&mut node).unwrap();
        }
    }

    fn keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        for url in shared_cluster().urls() {
            let mut node = redis::Client::open(url).unwrap().get_connection().unwrap();
            let found: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{}:*", self.prefix))
                .query(&mut node)
                .unwrap();
            keys.extend(found);
        }
        keys.sort();
        keys
    }

    fn unreachable(&self) -> RedisLimitConfig {
        RedisLimitConfig::cluster([format!("redis://127.0.0.1:{}", free_port())])
    }
}

limit_redis_suite!(Cluster::new());

/// What a key holds, whatever its type: a hash's fields, a log's entries.
fn stored(cluster: &Cluster, key: &str) -> Vec<String> {
    let kind: String = cluster.query(redis::cmd("TYPE").arg(key));
    match kind.as_str() {
        "hash" => {
            let fields: Vec<String> = cluster.query(redis::cmd("HGETALL").arg(key));
            // Pairs in a stable order.
            let mut pairs: Vec<String> = fields.chunks(2).map(|pair| pair.join("=")).collect();
            pairs.sort();
            pairs
        }
        "list" => cluster.query(redis::cmd("LRANGE").arg(key).arg(0).arg(-1)),
        other => vec![other.to_owned()],
    }
}

/// For every algorithm: a call of a roomy and a tight limit whose keys are in different slots.
/// Once the tight one refuses, the call is reserved on the roomy key and refunded: the roomy
/// key holds exactly what it held before, and later decisions see nothing of the refused calls.
#[test]
fn a_call_across_slots_refused_by_one_limit_leaves_the_others_as_they_were() {
    let cluster = Cluster::new();
    let runtime = runtime();
    let clock = Arc::new(ManualClock::new(Timestamp(1_763_000_000_000)));
    let store = {
        let _context = runtime.enter();
        RedisLimitStore::connect_with_clock(cluster.config(), clock.clone()).unwrap()
    };
    runtime.block_on(async {
        for algorithm in Algorithm::ALL {
            let roomy = LimitParams {
                burst: if algorithm == Algorithm::LeakyBucket {
                    4
                } else {
                    0
                },
                ..params(algorithm, 5, Duration::from_secs(3600))
            };
            let tight = params(Algorithm::FixedWindow, 1, Duration::from_secs(3600));
            let roomy_key = format!("roomy-{}", algorithm.as_str());
            let tight_key = format!("tight-{}", algorithm.as_str());
            let both = [
                LimitRequest {
                    key: &roomy_key,
                    params: &roomy,
                    cost: 1,
                    budget: None,
                },
                LimitRequest {
                    key: &tight_key,
                    params: &tight,
                    cost: 1,
                    budget: None,
                },
            ];
            let redis_roomy = store.redis_key(algorithm, &roomy_key);
            let redis_tight = store.redis_key(Algorithm::FixedWindow, &tight_key);
            let slot =
                |key: &str| -> i64 { cluster.query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)) };
            assert_ne!(slot(&redis_roomy), slot(&redis_tight), "{algorithm:?}");

            let first = store.reserve(&both).await.unwrap();
            assert!(first.all_allowed(), "{algorithm:?}");
            assert!(first.reservations.iter().all(Option::is_some));
            let before = stored(&cluster, &redis_roomy);
            for _ in 0..3 {
                let again = store.reserve(&both).await.unwrap();
                assert!(
                    again.decisions[0].allowed && !again.decisions[1].allowed,
                    "{algorithm:?}"
                );
                assert!(again.reservations.iter().all(Option::is_none));
                assert_eq!(stored(&cluster, &redis_roomy), before, "{algorithm:?}");
            }
            // The refund keeps the expiry the reservation set: the key may outlive its state
            // a little, never the other way round.
            let ttl: i64 = cluster.query(redis::cmd("PTTL").arg(&redis_roomy));
            assert!(ttl > 0, "{algorithm:?}");
            // Later decisions: the roomy key has room for exactly the four requests the first
            // call left.
            let alone = [both[0]];
            let mut passed = 0;
            while store.acquire(&alone).await.unwrap()[0].allowed {
                passed += 1;
                assert!(passed <= 10, "{algorithm:?} never refuses");
            }
            assert_eq!(passed, 4, "{algorithm:?}");
        }
        assert_eq!(store.metrics().snapshot().refund_errors, 0);
    });
}

/// 16 tasks × 40 calls of one three-limit request whose keys are in three slots, through two
/// stores, on Redis's own clock with a one-hour period: no key passes more than its limit, the
/// tightest passes exactly its limit, and when the dust settles every key has counted exactly
/// the calls that passed (no refund was lost, none was given twice).
#[test]
fn tasks_hammering_one_call_across_slots_never_pass_more_than_any_limit() {
    let cluster = Cluster::new();
    let runtime = runtime();
    runtime.block_on(async {
        let stores = [
            Arc::new(RedisLimitStore::connect(cluster.config()).unwrap()),
            Arc::new(RedisLimitStore::connect(cluster.config()).unwrap()),
        ];
        let hour = Duration::from_secs(3600);
        // Windows are aligned to multiples of the period on Redis's clock: a run crossing the
        // top of an hour would see the fixed and sliding windows roll and count less.
        wait_out_a_window_boundary(&cluster, hour).await;
        let limits = Arc::new([
            params(Algorithm::SlidingLog, 30, hour),
            params(Algorithm::FixedWindow, 40, hour),
            params(Algorithm::SlidingWindow, 50, hour),
        ]);
        let keys = Arc::new(["hot-a".to_owned(), "hot-b".to_owned(), "hot-c".to_owned()]);
        let slots: std::collections::BTreeSet<i64> = limits
            .iter()
            .zip(keys.iter())
            .map(|(limit, key)| {
                cluster.query(
                    redis::cmd("CLUSTER")
                        .arg("KEYSLOT")
                        .arg(stores[0].redis_key(limit.algorithm, key)),
                )
            })
            .collect();
        assert_eq!(slots.len(), 3);
        let passed = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..16)
            .map(|task| {
                let (store, passed) = (stores[task % 2].clone(), passed.clone());
                let (limits, keys) = (limits.clone(), keys.clone());
                tokio::spawn(async move {
                    for _ in 0..40 {
                        let requests: Vec<LimitRequest<'_>> = (0..3)
                            .map(|index| LimitRequest {
                                key: &keys[index],
                                params: &limits[index],
                                cost: 1,
                                budget: None,
                            })
                            .collect();
                        let decisions = store.acquire(&requests).await.unwrap();
                        if decisions.iter().all(|decision| decision.allowed) {
                            passed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let passed = passed.load(Ordering::Relaxed);
        assert_eq!(passed, 30);
        for (index, limit) in limits.iter().enumerate() {
            let peek = LimitRequest {
                key: &keys[index],
                params: limit,
                cost: 0,
                budget: None,
            };
            let remaining = stores[0].acquire(&[peek]).await.unwrap()[0].remaining;
            assert_eq!(remaining, limit.limit - passed, "{:?}", limit.algorithm);
        }
        for store in &stores {
            assert_eq!(store.metrics().snapshot().refund_errors, 0);
            assert_eq!(store.metrics().snapshot().store_errors, 0);
        }
    });
}
