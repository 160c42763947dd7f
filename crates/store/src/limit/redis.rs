//! [`RedisLimitStore`]: rate-limit state in a standalone Redis, shared by every node.
//!
//! - **Scripts.** Each algorithm is one Lua file in `lua/limits/` (a port of the core's
//!   algorithm), loaded with EVALSHA and reloaded on NOSCRIPT (`redis::Script`). A call with
//!   one request runs the script of its algorithm; a call with several runs one script holding
//!   every algorithm, which decides them all and writes only if all are allowed, atomically:
//!   the all-or-nothing rule holds exactly, even between nodes.
//! - **Clock.** Redis `TIME`, the same clock for every node. [`RedisLimitStore::connect_with_clock`]
//!   passes a clock's time instead, for tests and simulations only.
//! - **Keys** are `<prefix>:rl:{<hash>}:<algorithm>:<key>`: the hash tag is a 64-bit FNV-1a
//!   hash of the key, so keys spread over a Cluster's slots. Every key expires
//!   (`PEXPIRE`) when its state stops mattering, so Redis memory is bounded by the active keys.
//! - **Failures.** Every call is bounded by [`RedisLimitConfig::timeout`] (connecting,
//!   reconnecting and a NOSCRIPT reload included); a failure is counted in [`LimitMetrics`] and
//!   returned as [`LimitStoreError::Backend`], for the rule's `on_store_error` to decide.
//!
//! Cluster: the keys are already tagged for it, and a single-request call would route as is;
//! what a Cluster lacks is the atomic multi-key call (a request's limits hash to different
//! slots), which would need a reserve-then-refund protocol. This store takes one standalone
//! server (or a primary behind a proxy) for now.

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::Clock;
use anteroom_core::clock::duration_millis;
use anteroom_core::ratelimit::{Algorithm, Decision};
use async_trait::async_trait;
use redis::Script;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::metrics::LimitMetrics;
use super::{LimitRequest, LimitStore, LimitStoreError, validate};

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisLimitConfig {
    /// The server (`redis://host:port/db`).
    pub url: String,
    /// Bound on every call, connecting included (250 ms by default: a rate limit that waits
    /// longer costs more than it protects).
    pub timeout: Duration,
    /// First part of every key (`anteroom` by default).
    pub key_prefix: String,
}

impl RedisLimitConfig {
    /// A standalone server with the default timeout and prefix.
    pub fn new(url: impl Into<String>) -> RedisLimitConfig {
        RedisLimitConfig {
            url: url.into(),
            timeout: Duration::from_millis(250),
            key_prefix: "anteroom".to_owned(),
        }
    }
}

/// The scripts' Lua source: the prelude, one algorithm (or all), and the shared main part.
macro_rules! limit_script {
    ($($algorithm:literal),+) => {
        concat!(
            include_str!("../../lua/limits/prelude.lua"),
            $(include_str!(concat!("../../lua/limits/", $algorithm, ".lua")),)+
            include_str!("../../lua/limits/main.lua"),
        )
    };
}

/// Source of the script that decides requests of one algorithm.
fn script_source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::TokenBucket => limit_script!("token_bucket"),
        Algorithm::LeakyBucket => limit_script!("leaky_bucket"),
        Algorithm::FixedWindow => limit_script!("fixed_window"),
        Algorithm::SlidingLog => limit_script!("sliding_log"),
        Algorithm::SlidingWindow => limit_script!("sliding_window"),
        Algorithm::Gcra => limit_script!("gcra"),
    }
}

const ALL_ALGORITHMS: &str = limit_script!(
    "token_bucket",
    "leaky_bucket",
    "fixed_window",
    "sliding_log",
    "sliding_window",
    "gcra"
);

/// Rate-limit state in Redis (see the module docs).
pub struct RedisLimitStore {
    connection: ConnectionManager,
    per_algorithm: [Script; 6],
    all: Script,
    config: RedisLimitConfig,
    /// Test clock; `None` uses Redis `TIME`.
    clock: Option<Arc<dyn Clock>>,
    metrics: Arc<LimitMetrics>,
}

/// Keys of a store on a test clock outlive their state by this much, so a test clock that runs
/// slower than real time never loses state Redis would otherwise expire.
const TEST_CLOCK_EXTRA_TTL: Duration = Duration::from_secs(3600);

impl RedisLimitStore {
    /// A store on `config.url`. Connects lazily: a Redis that is down makes calls fail (and
    /// recover by themselves), not startup.
    pub fn connect(config: RedisLimitConfig) -> Result<RedisLimitStore, LimitStoreError> {
        RedisLimitStore::build(config, None)
    }

    /// A store whose scripts take the time from `clock` instead of Redis `TIME`. For tests and
    /// simulations: several nodes on different clocks would disagree.
    pub fn connect_with_clock(
        config: RedisLimitConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<RedisLimitStore, LimitStoreError> {
        RedisLimitStore::build(config, Some(clock))
    }

    fn build(
        config: RedisLimitConfig,
        clock: Option<Arc<dyn Clock>>,
    ) -> Result<RedisLimitStore, LimitStoreError> {
        let client = redis::Client::open(config.url.as_str())
            .map_err(|error| backend("invalid redis url", error))?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.timeout))
            .set_response_timeout(Some(config.timeout))
            .set_max_delay(Duration::from_secs(1));
        let connection = ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|error| backend("cannot set up the redis connection", error))?;
        Ok(RedisLimitStore {
            connection,
            per_algorithm: Algorithm::ALL.map(|algorithm| Script::new(script_source(algorithm))),
            all: Script::new(ALL_ALGORITHMS),
            config,
            clock,
            metrics: Arc::new(LimitMetrics::default()),
        })
    }

    /// The store's counters.
    pub fn metrics(&self) -> Arc<LimitMetrics> {
        self.metrics.clone()
    }

    /// The Lua source of the script a single-request call of `algorithm` runs (for tools that
    /// run it themselves, like the benchmark next to `redis-benchmark`). Its arguments are
    /// described at the top of `lua/limits/main.lua`.
    pub fn script_source(algorithm: Algorithm) -> &'static str {
        script_source(algorithm)
    }

    /// The Redis key holding `key`'s state under `algorithm`.
    pub fn redis_key(&self, algorithm: Algorithm, key: &str) -> String {
        format!(
            "{}:rl:{{{:016x}}}:{}:{}",
            self.config.key_prefix,
            fnv1a(key.as_bytes()),
            algorithm.as_str(),
            key
        )
    }

    async fn run(&self, requests: &[LimitRequest<'_>]) -> Result<Vec<Decision>, LimitStoreError> {
        let script = match requests {
            [request] => {
                let index = Algorithm::ALL
                    .iter()
                    .position(|algorithm| *algorithm == request.params.algorithm)
                    .unwrap_or_default();
                &self.per_algorithm[index]
            }
            _ => &self.all,
        };
        let mut invocation = script.prepare_invoke();
        match &self.clock {
            Some(clock) => invocation
                .arg(clock.now().as_millis())
                .arg(duration_millis(TEST_CLOCK_EXTRA_TTL)),
            None => invocation.arg("").arg(0),
        };
        for request in requests {
            let params = request.params;
            invocation
                .key(self.redis_key(params.algorithm, request.key))
                .arg(params.algorithm.as_str())
                .arg(request.cost)
                .arg(params.limit)
                .arg(params.period_ms())
                .arg(params.burst)
                .arg(params.delay)
                .arg(u8::from(params.nodelay));
        }
        let mut connection = self.connection.clone();
        let reply: Vec<i64> = tokio::time::timeout(
            self.config.timeout,
            invocation.invoke_async(&mut connection),
        )
        .await
        .map_err(|elapsed| backend("redis did not answer in time", elapsed))?
        .map_err(|error| backend("redis rate-limit script failed", error))?;
        decisions(&reply, requests.len())
    }
}

#[async_trait]
impl LimitStore for RedisLimitStore {
    async fn acquire(
        &self,
        requests: &[LimitRequest<'_>],
    ) -> Result<Vec<Decision>, LimitStoreError> {
        validate(requests)?;
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let result = self.run(requests).await;
        if result.is_err() {
            self.metrics.store_error();
        }
        result
    }
}

/// Reads the script's flat reply: six integers per request.
fn decisions(reply: &[i64], requests: usize) -> Result<Vec<Decision>, LimitStoreError> {
    if reply.len() != requests * 6 {
        return Err(LimitStoreError::Backend {
            message: format!(
                "redis rate-limit script answered {} values for {requests} requests",
                reply.len()
            ),
            source: None,
        });
    }
    let unsigned = |value: i64| u64::try_from(value).unwrap_or(0);
    let millis = |value: i64| Duration::from_millis(unsigned(value));
    Ok(reply
        .chunks_exact(6)
        .map(|fields| Decision {
            allowed: fields[0] == 1,
            limit: unsigned(fields[1]),
            remaining: unsigned(fields[2]),
            reset_after: millis(fields[3]),
            retry_after: (fields[4] >= 0).then(|| millis(fields[4])),
            delay: millis(fields[5]),
        })
        .collect())
}

fn backend(
    message: &str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> LimitStoreError {
    LimitStoreError::Backend {
        message: message.to_owned(),
        source: Some(Box::new(error)),
    }
}

/// 64-bit FNV-1a: stable across processes and versions, unlike the standard hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
