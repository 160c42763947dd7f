//! What `[store]` names, opened: the room store (and, when it is shared, where OIDC codes are
//! redeemed), and the Redis servers every Redis user of the node connects to.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use anteroom_core::Clock;
use anteroom_core::config::{Config, StoreConfig};
use anteroom_store::{CodeRedemptions, MemoryStore, RedbOptions, RedbStore, RoomStore};

use crate::BadConfig;

/// The configured store, opened.
pub(crate) struct OpenedStore {
    pub(crate) store: Arc<dyn RoomStore>,
    /// A shared store also records redeemed OIDC codes, so every node sees them (SPEC §11); a
    /// store of one process leaves that to the node's memory (`None`).
    pub(crate) code_redemptions: Option<Arc<dyn CodeRedemptions>>,
}

/// Opens the configured store.
pub(crate) fn open_store(config: &Config, clock: &Arc<dyn Clock>) -> anyhow::Result<OpenedStore> {
    let (store, code_redemptions): (Arc<dyn RoomStore>, _) = match &config.store {
        StoreConfig::Embedded {
            path,
            checkpoint_bytes,
        } => {
            let options = RedbOptions {
                seed: None,
                checkpoint_bytes: *checkpoint_bytes,
                ..RedbOptions::default()
            };
            let store: Arc<dyn RoomStore> = Arc::new(
                RedbStore::open_with(path, clock.clone(), options)
                    .with_context(|| format!("opening the store at {}", path.display()))?,
            );
            (store, None)
        }
        StoreConfig::Memory => {
            tracing::warn!("memory store: every queue and session is lost when the process stops");
            let store: Arc<dyn RoomStore> = Arc::new(MemoryStore::new(clock.clone()));
            (store, None)
        }
        StoreConfig::Redis {
            urls,
            cluster,
            timeout,
        } => {
            // Scripts read the server's TIME (no clock passed): every node shares one clock.
            let redis = redis_config(urls, *cluster, *timeout);
            tracing::info!(
                nodes = urls.len(),
                cluster = *cluster,
                timeout_ms = timeout.as_millis() as u64,
                "redis store"
            );
            let redis = Arc::new(
                anteroom_store::RedisStore::new(redis, None)
                    .map_err(|error| BadConfig(format!("[store] redis: {error}")))?,
            );
            let codes: Arc<dyn CodeRedemptions> = redis.clone();
            (redis, Some(codes))
        }
    };
    Ok(OpenedStore {
        store,
        code_redemptions,
    })
}

/// The redis `[store]` names: one server or a Cluster's seed nodes, and the bound on each call
/// (`timeout`). The room store and the redis rate-limit store both connect with it (the rate
/// limits keep their own, shorter bound).
pub(crate) fn redis_config(
    urls: &[String],
    cluster: bool,
    timeout: Duration,
) -> anteroom_store::RedisConfig {
    let config = if cluster {
        anteroom_store::RedisConfig::cluster(urls.iter().cloned())
    } else {
        anteroom_store::RedisConfig::standalone(urls.first().cloned().unwrap_or_default())
    };
    config.with_timeout(timeout)
}
