//! [`RedisOutbox`]: the event outbox as Redis Streams, shared by every node (SPEC §8.4: the
//! Redis Stream of events in Redis mode, capped; §14.9).
//!
//! Partitions, each a stream whose entry ids are `<sequence>-1` with one field `e` holding the
//! event JSON (other consumers may read them with XREAD), a counter and a hash of each sink's
//! highest delivered sequence:
//! - `""`, the node's own events ([`EventOutbox::append`]): `<prefix>:{events}:stream`,
//!   `:seq`, `:acked` (hash tag `{events}`, one Cluster slot);
//! - one per room, the room's ticket and session events, written by the room's scripts in the
//!   same script as the change (`room.lua`, `emit`): `<prefix>:{<room>}:outbox`,
//!   `:outbox_seq`, `:outbox_acked`, in the room's slot. The room partitions are the rooms of
//!   `<prefix>:rooms` and `<prefix>:outbox-rooms` (rooms ever created by this version; a
//!   deleted room's partition is read until it is delivered, then forgotten).
//!
//! Streams are trimmed to about the cap on every append. Reading a partition is one script
//! (its sink's mark and the entries after it); acknowledging is one script (the mark never
//! moves back). The sinks of every node share their progress, so a delivery made by one node
//! is not repeated by another unless it failed midway or two nodes read at once
//! (at-least-once; receivers deduplicate on the event id).

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use redis::Script;

use super::connection::{Connection, LazyRedis};
use super::node_keys::{outbox_rooms_key, rooms_key};
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

/// KEYS[1] stream, KEYS[2] acked; ARGV[1] sink, ARGV[2] count: the entries after the
/// sink's mark.
const PENDING: &str = r"
local after = redis.call('HGET', KEYS[2], ARGV[1]) or '0'
return redis.call('XRANGE', KEYS[1], '(' .. after .. '-1', '+', 'COUNT', ARGV[2])
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
    redis: LazyRedis,
    limits: OutboxLimits,
    append: Script,
    pending: Script,
    acknowledge: Script,
    /// Where the next read starts among the partitions.
    next_start: AtomicUsize,
}

/// A stream entry as XRANGE answers it: its id and its fields.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// One partition's keys.
struct PartitionKeys {
    stream: String,
    acked: String,
}

impl RedisOutbox {
    /// An outbox on the Redis of `config` (under its key prefix); connects on first use.
    pub fn new(config: &RedisConfig, limits: OutboxLimits) -> Result<RedisOutbox, StoreError> {
        Ok(RedisOutbox {
            redis: LazyRedis::new(config, "the event outbox")?,
            limits,
            append: Script::new(APPEND),
            pending: Script::new(PENDING),
            acknowledge: Script::new(ACKNOWLEDGE),
            next_start: AtomicUsize::new(0),
        })
    }

    /// How much each partition keeps.
    pub(crate) fn limits(&self) -> OutboxLimits {
        self.limits
    }

    fn key(&self, part: &str) -> String {
        format!("{}:{{events}}:{part}", self.redis.prefix())
    }

    fn partition_keys(&self, partition: &str) -> PartitionKeys {
        if partition.is_empty() {
            return PartitionKeys {
                stream: self.key("stream"),
                acked: self.key("acked"),
            };
        }
        PartitionKeys {
            stream: format!("{}:{{{partition}}}:outbox", self.redis.prefix()),
            acked: format!("{}:{{{partition}}}:outbox_acked", self.redis.prefix()),
        }
    }

    /// Every partition: `""`, then the rooms, in order.
    async fn partitions(&self, connection: &Connection) -> Result<Vec<String>, StoreError> {
        let mut rooms = std::collections::BTreeSet::new();
        for set in [
            rooms_key(self.redis.prefix()),
            outbox_rooms_key(self.redis.prefix()),
        ] {
            let members: Vec<String> = connection
                .query(redis::cmd("SMEMBERS").arg(set))
                .await
                .map_err(failed("read"))?;
            rooms.extend(members);
        }
        Ok(std::iter::once(String::new()).chain(rooms).collect())
    }

    async fn pending_in(
        &self,
        connection: &Connection,
        partition: &str,
        sink: &str,
        limit: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let keys = self.partition_keys(partition);
        let mut invocation = self.pending.prepare_invoke();
        invocation
            .key(&keys.stream)
            .key(&keys.acked)
            .arg(sink)
            .arg(limit);
        let entries: Vec<StreamEntry> =
            connection.eval(&invocation).await.map_err(failed("read"))?;
        Ok(entries
            .into_iter()
            .filter_map(|(id, fields)| {
                let sequence = id.split_once('-')?.0.parse().ok()?;
                let payload = fields.into_iter().find(|(name, _)| name == "e")?.1;
                Some(OutboxEntry {
                    partition: partition.to_owned(),
                    sequence,
                    payload,
                })
            })
            .collect())
    }

    /// Drops what every sink delivered from one partition; forgets the partition of a deleted
    /// room once it is empty.
    async fn prune_partition(
        &self,
        connection: &Connection,
        partition: &str,
        sinks: &[&str],
    ) -> Result<u64, StoreError> {
        let keys = self.partition_keys(partition);
        let marks: Vec<Option<u64>> = connection
            .query(redis::cmd("HMGET").arg(&keys.acked).arg(sinks))
            .await
            .map_err(failed("prune"))?;
        let through = marks
            .into_iter()
            .map(Option::unwrap_or_default)
            .min()
            .unwrap_or(0);
        let pruned: u64 = if through == 0 {
            0
        } else {
            connection
                .query(
                    redis::cmd("XTRIM")
                        .arg(&keys.stream)
                        .arg("MINID")
                        .arg(format!("{}-0", through + 1)),
                )
                .await
                .map_err(failed("prune"))?
        };
        if !partition.is_empty() {
            let listed: bool = connection
                .query(
                    redis::cmd("SISMEMBER")
                        .arg(rooms_key(self.redis.prefix()))
                        .arg(partition),
                )
                .await
                .map_err(failed("prune"))?;
            let left: u64 = connection
                .query(redis::cmd("XLEN").arg(&keys.stream))
                .await
                .map_err(failed("prune"))?;
            if !listed && left == 0 {
                let _: i64 = connection
                    .query(
                        redis::cmd("SREM")
                            .arg(outbox_rooms_key(self.redis.prefix()))
                            .arg(partition),
                    )
                    .await
                    .map_err(failed("prune"))?;
            }
        }
        Ok(pruned)
    }
}

fn failed(what: &str) -> impl FnOnce(redis::RedisError) -> StoreError + '_ {
    move |error| StoreError::backend(format!("the event outbox's {what} failed in redis"), error)
}

#[async_trait]
impl EventOutbox for RedisOutbox {
    async fn append(&self, payloads: Vec<Vec<u8>>) -> Result<u64, StoreError> {
        self.redis
            .bounded("append", async {
                let connection = self.redis.connection().await?;
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
        self.redis
            .bounded("read", async {
                let connection = self.redis.connection().await?;
                let mut partitions = self.partitions(&connection).await?;
                // Each read starts at another partition, so one busy room cannot hold the
                // others' events back.
                let start = self.next_start.fetch_add(1, Ordering::Relaxed) % partitions.len();
                partitions.rotate_left(start);
                let mut found = Vec::new();
                for partition in partitions {
                    let wanted = limit.saturating_sub(found.len());
                    if wanted == 0 {
                        break;
                    }
                    found.extend(
                        self.pending_in(&connection, &partition, sink, wanted)
                            .await?,
                    );
                }
                Ok(found)
            })
            .await
    }

    async fn acknowledge(
        &self,
        sink: &str,
        partition: &str,
        sequence: u64,
    ) -> Result<(), StoreError> {
        self.redis
            .bounded("acknowledge", async {
                let connection = self.redis.connection().await?;
                let mut invocation = self.acknowledge.prepare_invoke();
                invocation
                    .key(self.partition_keys(partition).acked)
                    .arg(sink)
                    .arg(sequence);
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
        self.redis
            .bounded("prune", async {
                let connection = self.redis.connection().await?;
                let mut pruned = 0;
                for partition in self.partitions(&connection).await? {
                    pruned += self.prune_partition(&connection, &partition, sinks).await?;
                }
                Ok(pruned)
            })
            .await
    }
}
