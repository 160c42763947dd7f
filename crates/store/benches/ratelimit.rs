//! Nanoseconds per rate-limit decision of the local store, for every algorithm, next to the
//! `governor` crate's keyed GCRA (`DashMapStateStore`) on the same workload, in the same run.
//!
//! Workload: limit 100 per second (burst 100), keys `rule:<ip>` visited round-robin, one key or
//! 100,000, on one thread or two. Both limiters read a manual clock that moves 1 ms every 1,000
//! decisions, so what is measured is the limiter (map lookup, lock, arithmetic), not a clock
//! read. On one key nearly every decision is a rejection; on 100,000 keys each key is visited
//! every 100 ms of clock and nearly every decision is allowed. With two threads the figure is
//! wall time per decision for both threads together.
//!
//! `cargo bench -p anteroom-store --bench ratelimit` (see docs/benchmarks.md).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_core::ratelimit::{Algorithm, LimitParams};
use anteroom_core::{ManualClock, Timestamp};
use anteroom_store::limit::{LimitRequest, LocalLimitConfig, LocalLimitStore};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

const LIMIT: u32 = 100;
const DECISIONS_PER_MS: u64 = 1000;

/// A limiter under test.
// `&String`: governor's keyed limiter takes `&K`, and both sides get the same key.
#[allow(clippy::ptr_arg)]
trait Limiter: Sync {
    fn allow(&self, key: &String) -> bool;
    fn tick(&self);
}

struct Local {
    store: LocalLimitStore,
    clock: Arc<ManualClock>,
    params: LimitParams,
}

impl Local {
    fn new(algorithm: Algorithm) -> Local {
        let clock = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
        Local {
            store: LocalLimitStore::new(clock.clone(), LocalLimitConfig::default()),
            clock,
            params: LimitParams {
                algorithm,
                limit: u64::from(LIMIT),
                period: Duration::from_secs(1),
                // The leaky bucket's burst counts beyond the first request.
                burst: if algorithm == Algorithm::LeakyBucket {
                    u64::from(LIMIT) - 1
                } else {
                    0
                },
                delay: 0,
                nodelay: true,
            },
        }
    }
}

impl Limiter for Local {
    fn allow(&self, key: &String) -> bool {
        let request = LimitRequest {
            key,
            params: &self.params,
            cost: 1,
            budget: None,
        };
        self.store
            .acquire_one(&request)
            .is_ok_and(|decision| decision.allowed)
    }

    fn tick(&self) {
        self.clock.advance(Duration::from_millis(1));
    }
}

struct Governor {
    limiter:
        RateLimiter<String, DashMapStateStore<String>, FakeRelativeClock, NoOpMiddleware<Nanos>>,
    clock: FakeRelativeClock,
}

impl Governor {
    fn new() -> Governor {
        let clock = FakeRelativeClock::default();
        let quota = Quota::per_second(NonZeroU32::new(LIMIT).unwrap_or(NonZeroU32::MIN));
        Governor {
            limiter: RateLimiter::dashmap_with_clock(quota, clock.clone()),
            clock,
        }
    }
}

impl Limiter for Governor {
    fn allow(&self, key: &String) -> bool {
        self.limiter.check_key(key).is_ok()
    }

    fn tick(&self) {
        self.clock.advance(Duration::from_millis(1));
    }
}

fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("join-per-ip:10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255))
        .collect()
}

/// Runs `iterations` decisions split over `threads`, returning the wall time.
fn run(limiter: &dyn Limiter, keys: &[String], iterations: u64, threads: usize) -> Duration {
    let per_thread = iterations.div_ceil(threads as u64);
    let work = |thread: usize| {
        let mut index = (thread * keys.len()) / threads;
        for n in 0..per_thread {
            if thread == 0 && n % DECISIONS_PER_MS == 0 {
                limiter.tick();
            }
            black_box(limiter.allow(&keys[index]));
            index += 1;
            if index == keys.len() {
                index = 0;
            }
        }
    };
    let started = Instant::now();
    if threads == 1 {
        work(0);
    } else {
        std::thread::scope(|scope| {
            for thread in 0..threads {
                scope.spawn(move || work(thread));
            }
        });
    }
    started.elapsed()
}

fn decisions(c: &mut Criterion) {
    let mut limiters: Vec<(String, Box<dyn Limiter>)> =
        vec![("governor_gcra".to_owned(), Box::new(Governor::new()))];
    for algorithm in Algorithm::ALL {
        limiters.push((
            algorithm.as_str().to_owned(),
            Box::new(Local::new(algorithm)),
        ));
    }
    for (n_keys, threads) in [(1, 1), (1, 2), (100_000, 1), (100_000, 2)] {
        let keys = keys(n_keys);
        let mut group = c.benchmark_group(format!("keys_{n_keys}/threads_{threads}"));
        group.throughput(Throughput::Elements(1));
        for (name, limiter) in &limiters {
            // Every key exists before measuring: the steady state, not map growth.
            run(limiter.as_ref(), &keys, keys.len() as u64, 1);
            group.bench_function(BenchmarkId::from_parameter(name), |bencher| {
                bencher.iter_custom(|iterations| run(limiter.as_ref(), &keys, iterations, threads))
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = decisions
}

/// `RATELIMIT_BENCH_ONLY=<limiter>:<keys>:<decisions>` runs just that many decisions on one
/// thread after filling the keys, and nothing else: for counting instructions with callgrind
/// (`bench/ratelimit-instructions`), which a loaded machine cannot disturb.
fn main() {
    if let Ok(only) = std::env::var("RATELIMIT_BENCH_ONLY") {
        let mut parts = only.split(':');
        let (Some(name), Some(n_keys), Some(n)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("RATELIMIT_BENCH_ONLY=<limiter>:<keys>:<decisions>");
        };
        let limiter: Box<dyn Limiter> = match Algorithm::parse(name) {
            Some(algorithm) => Box::new(Local::new(algorithm)),
            None => Box::new(Governor::new()),
        };
        let keys = keys(n_keys.parse().unwrap_or(1));
        run(limiter.as_ref(), &keys, keys.len() as u64, 1);
        run(limiter.as_ref(), &keys, n.parse().unwrap_or(0), 1);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
