//! [`RedisKeyEntries`]: the entries of a key set shared by every node through Redis, for nodes
//! without a shared disk. The store holds them as it is given them (the caller seals them
//! first: the signing keys are never written in plain text) and only guarantees that changes
//! are applied whole and in order.
//!
//! Keys carry the hash tag `{keys}`, so they live in one Cluster slot:
//! - `<prefix>:{keys}:entries`: a hash of entry name → sealed text;
//! - `<prefix>:{keys}:version`: how many changes were applied, the fingerprint nodes poll.
//!
//! A change is optimistic: the caller reads the entries at some version, works out its change,
//! and [`RedisKeyEntries::apply`] writes it only if the version is still the one read (one
//! script), so two nodes rotating at once cannot interleave their writes; the one that lost
//! reads again and redoes its work.

use std::collections::BTreeMap;

use redis::Script;

use super::connection::LazyRedis;
use crate::{RedisConfig, StoreError};

/// Reads the version and every entry at one instant.
const LOAD: &str = r"
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}
";

/// Applies `set name text` / `del name` triples when the version is still `ARGV[1]`; 1 when
/// applied, 0 when another change came first.
const APPLY: &str = r"
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[1] then
  return 0
end
for i = 2, #ARGV, 3 do
  if ARGV[i] == 'set' then
    redis.call('HSET', KEYS[1], ARGV[i + 1], ARGV[i + 2])
  else
    redis.call('HDEL', KEYS[1], ARGV[i + 1])
  end
end
redis.call('INCR', KEYS[2])
return 1
";

/// Every entry of the shared key set and the version they were read at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyEntries {
    /// Changes applied so far; 0 for a key set never written.
    pub version: u64,
    /// Entry name → text, as written.
    pub entries: BTreeMap<String, String>,
}

/// The shared key set's entries in Redis (standalone or Cluster).
pub struct RedisKeyEntries {
    redis: LazyRedis,
    load: Script,
    apply: Script,
}

impl RedisKeyEntries {
    /// The entries on the Redis of `config` (under its key prefix); connects on first use.
    pub fn new(config: &RedisConfig) -> Result<RedisKeyEntries, StoreError> {
        Ok(RedisKeyEntries {
            redis: LazyRedis::new(config, "the shared key set")?,
            load: Script::new(LOAD),
            apply: Script::new(APPLY),
        })
    }

    /// The Redis key of the hash of entries (for operators and tests).
    pub fn entries_key(&self) -> String {
        self.key("entries")
    }

    /// The current version: it changes whenever an entry does.
    pub async fn version(&self) -> Result<u64, StoreError> {
        self.redis
            .bounded("version read", async {
                let connection = self.redis.connection().await?;
                let version: Option<u64> = connection
                    .query(redis::cmd("GET").arg(self.key("version")))
                    .await
                    .map_err(failed("version read"))?;
                Ok(version.unwrap_or(0))
            })
            .await
    }

    /// Every entry and the version they are at.
    pub async fn load(&self) -> Result<KeyEntries, StoreError> {
        self.redis
            .bounded("read", async {
                let connection = self.redis.connection().await?;
                let mut invocation = self.load.prepare_invoke();
                invocation.key(self.key("entries")).key(self.key("version"));
                let (version, pairs): (String, Vec<(String, String)>) =
                    connection.eval(&invocation).await.map_err(failed("read"))?;
                let version = version.parse().map_err(|error| {
                    StoreError::backend(
                        format!(
                            "the shared key set's version in redis is not a number: {version:?}"
                        ),
                        error,
                    )
                })?;
                Ok(KeyEntries {
                    version,
                    entries: pairs.into_iter().collect(),
                })
            })
            .await
    }

    /// Writes `changes` (name → new text, or `None` to remove) if the entries are still at
    /// `version`; `false` when another change came first (nothing was written).
    pub async fn apply(
        &self,
        version: u64,
        changes: &BTreeMap<String, Option<String>>,
    ) -> Result<bool, StoreError> {
        self.redis
            .bounded("write", async {
                let connection = self.redis.connection().await?;
                let mut invocation = self.apply.prepare_invoke();
                invocation
                    .key(self.key("entries"))
                    .key(self.key("version"))
                    .arg(version);
                for (name, text) in changes {
                    match text {
                        Some(text) => invocation.arg("set").arg(name).arg(text),
                        None => invocation.arg("del").arg(name).arg(""),
                    };
                }
                let applied: u8 = connection
                    .eval(&invocation)
                    .await
                    .map_err(failed("write"))?;
                Ok(applied == 1)
            })
            .await
    }

    fn key(&self, part: &str) -> String {
        format!("{}:{{keys}}:{part}", self.redis.prefix())
    }
}

fn failed(what: &str) -> impl FnOnce(redis::RedisError) -> StoreError + '_ {
    move |error| {
        StoreError::backend(
            format!("the shared key set's {what} failed in redis"),
            error,
        )
    }
}
