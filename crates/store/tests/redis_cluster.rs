//! The conformance suite against [`RedisStore`] on a 3-master Redis Cluster: every room's keys
//! share one slot (hash tag), the room list lives in another.

mod conformance;
mod support;

use std::sync::Arc;

use anteroom_core::{Clock, ManualClock};
use anteroom_store::{RedisConfig, RedisStore, RoomStore};
use conformance::Backend;
use support::redis::{shared_cluster, unique_prefix};

/// Stores under a key prefix of their own on the shared cluster.
struct RedisCluster {
    prefix: String,
}

impl RedisCluster {
    fn new() -> RedisCluster {
        RedisCluster {
            prefix: unique_prefix(),
        }
    }
}

impl Backend for RedisCluster {
    fn open(&self, clock: Arc<ManualClock>) -> Arc<dyn RoomStore> {
        let clock: Arc<dyn Clock> = clock;
        let config =
            RedisConfig::cluster(shared_cluster().urls()).with_key_prefix(self.prefix.as_str());
        Arc::new(RedisStore::new(config, Some(clock)).expect("redis cluster store"))
    }

    fn is_durable(&self) -> bool {
        true
    }
}

conformance_suite!(RedisCluster::new());
