//! [`RedisOutbox`]: the event outbox as a Redis Stream, shared by every node (SPEC §8.4: the
//! Redis Stream of events in Redis mode, capped).
//!
//! Keys carry the hash tag `{events}`, so they live in one Cluster slot:
//! - `<prefix>:{events}:stream`: a stream whose entry ids are `<sequence>-1`, one field `e`
//!   holding the event JSON; trimmed to the cap on every append (other consumers may read it
//!   with XREAD);
//! - `<prefix>:{events}:seq`: the last sequence handed out;
//! - `<prefix>:{events}:acked`: a hash of each sink's highest delivered sequence.
//!
//! Appending is one script (sequence and entries together); acknowledging is one script (the
//! mark never moves back). The sinks of every node share their progress, so a delivery made by
//! one node is not repeated by another unless it failed midway (at-least-once).

use std::time::Duration;

use async_trait::async_trait;
use redis::Script;
use tokio::sync::OnceCell;

use super::connection::{Client, Connection};
use super::{DEFAULT_KEY_PREFIX, DEFAULT_TIMEOUT};
use crate::outbox::{EventOutbox, OutboxEntry, OutboxLimits};
use crate::{RedisConfig, StoreError};

const APPEND: &str = r"
local count = #ARGV - 1
local last = redis.call('INCRBY', KEYS[2], count)
local first = last - count + 1
for i = 2, #ARGV do
  redis.call('XADD', KEYS[1], string.format('%.0f-1', first + i - 2), 'e', ARGV[i])
end
local cap = tonumber(ARGV[1])
if count > 0 and cap > 0 then
  redis.call('XTRIM', KEYS[1], 'MAXLEN', cap)
end
return last
";

const ACKNOWLEDGE: &str = r"
local current = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local sequence = tonumber(ARGV[2])
if sequence > current then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
";

/// The event outbox in Redis (standalone or Cluster).
pub struct RedisOutbox {
    client: Client,
    connection: OnceCell<Connection>,
    timeout: Duration,
    prefix: String,
    limits: OutboxLimits,
    append: Script,
    acknowledge: Script,
}

impl RedisOutbox {
    /// An outbox on the Redis of `config` (under its key prefix); connects on first use.
    pub fn new(config: &RedisConfig, limits: OutboxLimits) -> Result<RedisOutbox, StoreError> {
        let client =
            Client::new(&config.urls, config.cluster, config.timeout).map_err(|error| {
                StoreError::backend(format!("invalid redis configuration: {error}"), error)
            })?;
        let prefix = if config.key_prefix.is_empty() {
            DEFAULT_KEY_PREFIX.to_owned()
        } else {
            config.key_prefix.clone()
        };
        Ok(RedisOutbox {
            client,
            connection: OnceCell::new(),
            timeout: if config.timeout.is_zero() {
                DEFAULT_TIMEOUT
            } else {
                config.timeout
            },
            prefix,
            limits,
            append: Script::new(APPEND),
            acknowledge: Script::new(ACKNOWLEDGE),
        })
    }

    fn key(&self, part: &str) -> String {
        format!("{}:{{events}}:{part}", self.prefix)
    }

    async fn connection(&self) -> Result<Connection, StoreError> {
        self.connection
            .get_or_try_init(|| async {
                self.client
                    .connect(self.timeout)
                    .await
                    .map_err(|error| StoreError::backend("cannot connect to redis", error))
            })
            .await
            .cloned()
    }

    async fn bounded<T>(
        &self,
        what: &str,
        operation: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, operation).await {
            Ok(result) => result,
            Err(elapsed) => Err(StoreError::backend(
                format!(
                    "redis did not complete the outbox's {what} within {:?}",
                    self.timeout
                ),
                elapsed,
            )),
        }
    }
}

fn failed(what: &str) -> impl FnOnce(redis::RedisError) -> StoreError + '_ {
    move |error| StoreError::backend(format!("the event outbox's {what} failed in redis"), error)
}

#[async_trait]
impl EventOutbox for RedisOutbox {
    async fn append(&self, payloads: Vec<Vec<u8>>) -> Result<u64, StoreError> {
        self.bounded("append", async {
            let connection = self.connection().await?;
            let mut invocation = self.append.prepare_invoke();
            invocation
                .key(self.key("stream"))
                .key(self.key("seq"))
                .arg(self.limits.max_entries);
            for payload in &payloads {
                invocation.arg(payload.as_slice());
            }
            connection.eval(&invocation).await.map_err(failed("append"))
        })
        .await
    }

    async fn pending(&self, sink: &str, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.bounded("read", async {
            let connection = self.connection().await?;
            let after: Option<u64> = connection
                .query(redis::cmd("HGET").arg(self.key("acked")).arg(sink))
                .await
                .map_err(failed("read"))?;
            let entries: Vec<(String, Vec<(String, Vec<u8>)>)> = connection
                .query(
                    redis::cmd("XRANGE")
                        .arg(self.key("stream"))
                        .arg(format!("({}-1", after.unwrap_or(0)))
                        .arg("+")
                        .arg("COUNT")
                        .arg(limit),
                )
                .await
                .map_err(failed("read"))?;
            Ok(entries
                .into_iter()
                .filter_map(|(id, fields)| {
                    let sequence = id.split_once('-')?.0.parse().ok()?;
                    let payload = fields.into_iter().find(|(name, _)| name == "e")?.1;
                    Some(OutboxEntry { sequence, payload })
                })
                .collect())
        })
        .await
    }

    async fn acknowledge(&self, sink: &str, sequence: u64) -> Result<(), StoreError> {
        self.bounded("acknowledge", async {
            let connection = self.connection().await?;
            let mut invocation = self.acknowledge.prepare_invoke();
            invocation.key(self.key("acked")).arg(sink).arg(sequence);
            let _: i64 = connection
                .eval(&invocation)
                .await
                .map_err(failed("acknowledge"))?;
            Ok(())
        })
        .await
    }

    async fn prune(&self, sinks: &[&str]) -> Result<u64, StoreError> {
        if sinks.is_empty() {
            return Ok(0);
        }
        self.bounded("prune", async {
            let connection = self.connection().await?;
            let marks: Vec<Option<u64>> = connection
                .query(redis::cmd("HMGET").arg(self.key("acked")).arg(sinks))
                .await
                .map_err(failed("prune"))?;
            let through = marks
                .into_iter()
                .map(Option::unwrap_or_default)
                .min()
                .unwrap_or(0);
            if through == 0 {
                return Ok(0);
            }
            connection
                .query(
                    redis::cmd("XTRIM")
                        .arg(self.key("stream"))
                        .arg("MINID")
                        .arg(format!("{}-0", through + 1)),
                )
                .await
                .map_err(failed("prune"))
        })
        .await
    }
}
