//! [`RedisLimitStore`]: rate-limit state in Redis, standalone or Cluster, shared by every node.
//!
//! - **Scripts.** Each algorithm is one Lua file in `lua/limits/` (a port of the core's
//!   algorithm, its refund included), loaded with EVALSHA and reloaded on NOSCRIPT
//!   (`redis::Script`). A call with one request runs the script of its algorithm; a call with
//!   several keys in one slot runs one script holding every algorithm, which decides them all
//!   and writes only if all are allowed, atomically: the all-or-nothing rule holds exactly,
//!   even between nodes.
//! - **Cluster.** Configured as seed nodes ([`RedisLimitConfig::cluster`], or
//!   [`RedisLimitConfig::for_store`] to share the room store's `[store]`); single-request calls
//!   route to their key's slot as they are. The limits of one request usually hash to
//!   different slots, where no script can reach them all: such a call is **reserved then
//!   refunded**. Its requests are grouped by hash tag (a key named twice is in one group, in
//!   call order) and every group runs the combined script at once (in parallel), which also
//!   answers where each allowed request was counted (a reservation). When every group allowed
//!   its requests, that is the answer. Otherwise the groups that allowed theirs are refunded
//!   (`lua/limits/refund.lua`, the core's `refund` per algorithm), so nothing is left consumed,
//!   and the decisions are the ones one atomic script would have made. Between a group's
//!   acquire and its refund (until the slowest group has answered, then the refund's round
//!   trip; each bounded by the timeout) other requests on those keys see the reservation and may be refused for it; that window is the price of spreading
//!   keys over slots. A refund that fails leaves the reservation consumed (counted as a refund
//!   error): the store errs towards limiting, never towards letting more through.
//! - **Clock.** Redis `TIME`, the same clock for every node (on a Cluster, the clock of the
//!   shard holding the key). [`RedisLimitStore::connect_with_clock`] passes a clock's time
//!   instead, for tests and simulations only.
//! - **Keys** are `<prefix>:rl:{<hash>}:<algorithm>:<key>`: the hash tag is a 64-bit FNV-1a
//!   hash of the key, so keys spread over a Cluster's slots. Every key expires
//!   (`PEXPIRE`) when its state stops mattering, so Redis memory is bounded by the active keys;
//!   a refund keeps the expiry its reservation set (a refunded state never matters longer, so
//!   the key may outlive its state a little, never the other way round).
//! - **Failures.** Every call is bounded by [`RedisLimitConfig::timeout`] (connecting,
//!   reconnecting and a NOSCRIPT reload included; on a Cluster, each group); a failure is
//!   counted in [`LimitMetrics`] and returned as [`LimitStoreError::Backend`], for the rule's
//!   `on_store_error` to decide. When some groups of a call answered and another failed, the
//!   answered ones are refunded before the error is returned.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anteroom_core::Clock;
use anteroom_core::clock::duration_millis;
use anteroom_core::ratelimit::{Algorithm, Decision, Reservation};
use async_trait::async_trait;
use futures_util::future::join_all;
use redis::Script;
use tokio::sync::OnceCell;

use super::metrics::LimitMetrics;
use super::{LimitRequest, LimitStore, LimitStoreError, Reserved, check_refund, validate};
use crate::RedisConfig;
use crate::redis_store::connection::{Client, Connection};

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisLimitConfig {
    /// One standalone server's URL (`redis://host:port/db`), or a Cluster's seed nodes.
    pub urls: Vec<String>,
    /// Whether `urls` are Redis Cluster nodes.
    pub cluster: bool,
    /// Bound on every call, connecting included (250 ms by default: a rate limit that waits
    /// longer costs more than it protects).
    pub timeout: Duration,
    /// First part of every key (`anteroom` by default).
    pub key_prefix: String,
}

/// The default bound on a rate-limit call.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

impl RedisLimitConfig {
    /// A standalone server with the default timeout and prefix.
    pub fn new(url: impl Into<String>) -> RedisLimitConfig {
        RedisLimitConfig {
            urls: vec![url.into()],
            cluster: false,
            timeout: DEFAULT_TIMEOUT,
            key_prefix: crate::redis_store::DEFAULT_KEY_PREFIX.to_owned(),
        }
    }

    /// A Redis Cluster, reached through any of its `nodes`, with the default timeout and prefix.
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> RedisLimitConfig {
        RedisLimitConfig {
            urls: nodes.into_iter().map(Into::into).collect(),
            cluster: true,
            ..RedisLimitConfig::new("")
        }
    }

    /// The servers and key prefix of the room store's `config` (so Redis is configured once),
    /// with the rate limits' own default timeout.
    pub fn for_store(config: &RedisConfig) -> RedisLimitConfig {
        RedisLimitConfig {
            urls: config.urls.clone(),
            cluster: config.cluster,
            timeout: DEFAULT_TIMEOUT,
            key_prefix: config.key_prefix.clone(),
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

/// The refund script: the prelude, every algorithm, and `refund.lua`.
const REFUND: &str = concat!(
    include_str!("../../lua/limits/prelude.lua"),
    include_str!("../../lua/limits/token_bucket.lua"),
    include_str!("../../lua/limits/leaky_bucket.lua"),
    include_str!("../../lua/limits/fixed_window.lua"),
    include_str!("../../lua/limits/sliding_log.lua"),
    include_str!("../../lua/limits/sliding_window.lua"),
    include_str!("../../lua/limits/gcra.lua"),
    include_str!("../../lua/limits/refund.lua"),
);

/// Values the scripts answer per request.
const REPLY_FIELDS: usize = 7;

/// Rate-limit state in Redis (see the module docs).
pub struct RedisLimitStore {
    client: Client,
    connection: OnceCell<Connection>,
    per_algorithm: [Script; 6],
    all: Script,
    refund: Script,
    config: RedisLimitConfig,
    /// Test clock; `None` uses Redis `TIME`.
    clock: Option<Arc<dyn Clock>>,
    metrics: Arc<LimitMetrics>,
}

/// Keys of a store on a test clock outlive their state by this much, so a test clock that runs
/// slower than real time never loses state Redis would otherwise expire.
const TEST_CLOCK_EXTRA_TTL: Duration = Duration::from_secs(3600);

/// The outcome of one group of a call (the requests of one hash tag), by request index.
type GroupResult = Result<Vec<(usize, Decision, Option<Reservation>)>, LimitStoreError>;

impl RedisLimitStore {
    /// A store on `config`. Connects lazily: a Redis that is down makes calls fail (and
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
        let client = Client::new(&config.urls, config.cluster, config.timeout)
            .map_err(|error| backend("invalid redis configuration", error))?;
        Ok(RedisLimitStore {
            client,
            connection: OnceCell::new(),
            per_algorithm: Algorithm::ALL.map(|algorithm| Script::new(script_source(algorithm))),
            all: Script::new(ALL_ALGORITHMS),
            refund: Script::new(REFUND),
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

    async fn connection(&self) -> Result<Connection, LimitStoreError> {
        self.connection
            .get_or_try_init(|| async {
                self.client
                    .connect(self.config.timeout)
                    .await
                    .map_err(|error| backend("cannot connect to redis", error))
            })
            .await
            .cloned()
    }

    /// Runs `call` within the timeout.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, LimitStoreError>>,
    ) -> Result<T, LimitStoreError> {
        tokio::time::timeout(self.config.timeout, call)
            .await
            .map_err(|elapsed| backend("redis did not answer in time", elapsed))?
    }

    /// The requests of a call grouped so that each group can be one script: everything in
    /// one group on a standalone server; on a Cluster one group per hash tag (call order kept
    /// within a group).
    fn groups(&self, requests: &[LimitRequest<'_>]) -> Vec<Vec<usize>> {
        if !matches!(self.client, Client::Cluster(_)) {
            return vec![(0..requests.len()).collect()];
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut by_tag: HashMap<u64, usize> = HashMap::new();
        for (index, request) in requests.iter().enumerate() {
            let group = *by_tag
                .entry(fnv1a(request.key.as_bytes()))
                .or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
            groups[group].push(index);
        }
        groups
    }

    /// Decides one group atomically (one script): its decisions and reservations by request
    /// index.
    async fn decide_group(&self, requests: &[LimitRequest<'_>], group: &[usize]) -> GroupResult {
        let script = match group {
            [only] => {
                let algorithm = requests[*only].params.algorithm;
                let index = Algorithm::ALL
                    .iter()
                    .position(|known| *known == algorithm)
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
        for &index in group {
            let request = &requests[index];
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
        let reply: Vec<i64> = self
            .bounded(async {
                let connection = self.connection().await?;
                connection
                    .eval(&invocation)
                    .await
                    .map_err(|error| backend("redis rate-limit script failed", error))
            })
            .await?;
        let answers = answers(&reply, group.len())?;
        Ok(group
            .iter()
            .zip(answers)
            .map(|(&index, (decision, mark))| {
                let reservation = mark.map(|mark| Reservation {
                    cost: requests[index].cost,
                    mark,
                });
                (index, decision, reservation)
            })
            .collect())
    }

    /// Refunds the requests of one group (indexes into `requests`) that reserved something.
    async fn refund_group(
        &self,
        requests: &[LimitRequest<'_>],
        reservations: &[(usize, Reservation)],
    ) -> Result<(), LimitStoreError> {
        if reservations.is_empty() {
            return Ok(());
        }
        let mut invocation = self.refund.prepare_invoke();
        for (index, reservation) in reservations {
            let request = &requests[*index];
            let params = request.params;
            invocation
                .key(self.redis_key(params.algorithm, request.key))
                .arg(params.algorithm.as_str())
                .arg(reservation.cost)
                .arg(params.limit)
                .arg(params.period_ms())
                .arg(params.burst)
                .arg(params.delay)
                .arg(u8::from(params.nodelay))
                .arg(reservation.mark);
        }
        let _: i64 = self
            .bounded(async {
                let connection = self.connection().await?;
                connection
                    .eval(&invocation)
                    .await
                    .map_err(|error| backend("redis rate-limit refund failed", error))
            })
            .await?;
        Ok(())
    }

    /// Refunds `reservations` (by request index), each group in parallel.
    async fn refund_all(
        &self,
        requests: &[LimitRequest<'_>],
        reservations: &[(usize, Reservation)],
    ) -> Result<(), LimitStoreError> {
        let groups = self.groups(requests);
        let results = join_all(groups.iter().map(|group| {
            let mine: Vec<(usize, Reservation)> = reservations
                .iter()
                .filter(|(index, _)| group.contains(index))
                .copied()
                .collect();
            async move { self.refund_group(requests, &mine).await }
        }))
        .await;
        let mut outcome = Ok(());
        for result in results {
            if let Err(error) = result {
                self.metrics.refund_error();
                tracing::warn!(%error, "a rate-limit refund failed; its reservation stays consumed");
                outcome = Err(error);
            }
        }
        outcome
    }

    async fn run(&self, requests: &[LimitRequest<'_>]) -> Result<Reserved, LimitStoreError> {
        let groups = self.groups(requests);
        let results: Vec<GroupResult> = match groups.as_slice() {
            [group] => vec![self.decide_group(requests, group).await],
            _ => {
                join_all(
                    groups
                        .iter()
                        .map(|group| self.decide_group(requests, group)),
                )
                .await
            }
        };
        let mut decided: Vec<Option<(Decision, Option<Reservation>)>> = vec![None; requests.len()];
        let mut failure = None;
        for result in results {
            match result {
                Ok(answers) => {
                    for (index, decision, reservation) in answers {
                        decided[index] = Some((decision, reservation));
                    }
                }
                Err(error) => failure = Some(error),
            }
        }
        let taken: Vec<(usize, Reservation)> = decided
            .iter()
            .enumerate()
            .filter_map(|(index, answer)| Some((index, answer.as_ref()?.1?)))
            .collect();
        let refused = decided
            .iter()
            .flatten()
            .any(|(decision, _)| !decision.allowed);
        if let Some(error) = failure {
            // What the answered groups took goes back; the error decides the request.
            let _ = self.refund_all(requests, &taken).await;
            return Err(error);
        }
        let (decisions, reservations): (Vec<Decision>, Vec<Option<Reservation>>) = decided
            .into_iter()
            .flatten()
            .map(|(decision, reservation)| (decision, reservation.filter(|_| !refused)))
            .unzip();
        if decisions.len() != requests.len() {
            let _ = self.refund_all(requests, &taken).await;
            return Err(LimitStoreError::Backend {
                message: "redis rate-limit scripts left a request undecided".to_owned(),
                source: None,
            });
        }
        if refused && !taken.is_empty() {
            // A refund failure is counted and logged; the refusal stands either way.
            let _ = self.refund_all(requests, &taken).await;
        }
        Ok(Reserved {
            decisions,
            reservations,
        })
    }
}

#[async_trait]
impl LimitStore for RedisLimitStore {
    async fn reserve(&self, requests: &[LimitRequest<'_>]) -> Result<Reserved, LimitStoreError> {
        validate(requests)?;
        if requests.is_empty() {
            return Ok(Reserved {
                decisions: Vec::new(),
                reservations: Vec::new(),
            });
        }
        let result = self.run(requests).await;
        if result.is_err() {
            self.metrics.store_error();
        }
        result
    }

    async fn refund(
        &self,
        requests: &[LimitRequest<'_>],
        reservations: &[Option<Reservation>],
    ) -> Result<(), LimitStoreError> {
        check_refund(requests, reservations)?;
        let taken: Vec<(usize, Reservation)> = reservations
            .iter()
            .enumerate()
            .filter_map(|(index, reservation)| Some((index, (*reservation)?)))
            .collect();
        if taken.is_empty() {
            return Ok(());
        }
        self.refund_all(requests, &taken).await
    }
}

/// Reads the script's flat reply: seven integers per request, the decision and the
/// reservation mark (negative: nothing taken).
fn answers(
    reply: &[i64],
    requests: usize,
) -> Result<Vec<(Decision, Option<u64>)>, LimitStoreError> {
    if reply.len() != requests * REPLY_FIELDS {
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
        .chunks_exact(REPLY_FIELDS)
        .map(|fields| {
            let decision = Decision {
                allowed: fields[0] == 1,
                limit: unsigned(fields[1]),
                remaining: unsigned(fields[2]),
                reset_after: millis(fields[3]),
                retry_after: (fields[4] >= 0).then(|| millis(fields[4])),
                delay: millis(fields[5]),
            };
            (decision, u64::try_from(fields[6]).ok())
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
