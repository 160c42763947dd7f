//! Redis-backed rate-limit decisions per second through `RedisLimitStore`, for
//! `bench/redis-ratelimit`, which runs `redis-benchmark` with the same script (EVALSHA) against
//! the same server in the same run and prints the ratio.
//!
//! Reads `ANTEROOM_BENCH_REDIS_URL` (without it, says so and does nothing, so a plain
//! `cargo bench` passes), `BENCH_REQUESTS` (200000), `BENCH_CONCURRENCY` (50 tasks sharing the
//! store's one multiplexed connection) and `BENCH_ALGORITHM` (token_bucket). The limit is large
//! enough that every decision is allowed and writes its key: the full cost of a decision. One
//! single-threaded runtime drives the client, as `redis-benchmark` is single-threaded.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anteroom_core::ratelimit::{Algorithm, LimitParams};
use anteroom_store::limit::{LimitRequest, LimitStore, RedisLimitConfig, RedisLimitStore};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The limit every decision is made under: large enough that each is allowed and writes.
fn bench_params() -> LimitParams {
    let algorithm = std::env::var("BENCH_ALGORITHM")
        .ok()
        .and_then(|name| Algorithm::parse(&name))
        .unwrap_or(Algorithm::TokenBucket);
    LimitParams {
        algorithm,
        limit: 1_000_000,
        period: Duration::from_secs(1),
        burst: 0,
        delay: 0,
        nodelay: true,
    }
}

fn main() {
    let Ok(url) = std::env::var("ANTEROOM_BENCH_REDIS_URL") else {
        println!("redis_load: ANTEROOM_BENCH_REDIS_URL is not set; run bench/redis-ratelimit");
        return;
    };
    let requests = setting("BENCH_REQUESTS", 200_000);
    let concurrency = setting("BENCH_CONCURRENCY", 50);
    let params = bench_params();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = Arc::new(
            RedisLimitStore::connect(RedisLimitConfig {
                timeout: Duration::from_secs(5),
                ..RedisLimitConfig::new(url)
            })
            .unwrap(),
        );
        // Warm up: the script is loaded and the connection made before the clock starts.
        for _ in 0..1000 {
            store.acquire(&[bench_request(&params)]).await.unwrap();
        }
        let started = Instant::now();
        decide_concurrently(&store, params, requests, concurrency).await;
        let elapsed = started.elapsed();
        println!(
            "redis_load: algorithm={} requests={requests} concurrency={concurrency} key={} seconds={:.3} decisions_per_second={:.0}",
            params.algorithm.as_str(),
            store.redis_key(params.algorithm, "bench"),
            elapsed.as_secs_f64(),
            requests as f64 / elapsed.as_secs_f64()
        );
    });
}

/// The one request every decision is for.
fn bench_request(params: &LimitParams) -> LimitRequest<'_> {
    LimitRequest {
        key: "bench",
        params,
        cost: 1,
        budget: None,
    }
}

/// `requests` decisions made by `concurrency` tasks sharing `store`; each must be allowed.
async fn decide_concurrently(
    store: &Arc<RedisLimitStore>,
    params: LimitParams,
    requests: u64,
    concurrency: u64,
) {
    let left = Arc::new(AtomicU64::new(requests));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (store, left) = (store.clone(), left.clone());
            tokio::spawn(async move {
                let request = bench_request(&params);
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let decision = store.acquire(&[request]).await.unwrap();
                    assert!(decision[0].allowed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}
