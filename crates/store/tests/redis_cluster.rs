//! The conformance suite against [`RedisStore`] on a 3-master Redis Cluster: every room's keys
//! share one slot (hash tag), the room list lives in another; change notices reach another
//! node from whichever shard holds the room.

#![allow(clippy::unwrap_used)]

mod conformance;
mod support;

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::engine::{Entry, JoinRequest, SessionEnd};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, ManualClock, RoomId};
use anteroom_store::{Change, Notice, RedisConfig, RedisStore, RoomStore};
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

#[tokio::test]
async fn notices_reach_another_node_from_every_shard() {
    let prefix = unique_prefix();
    let open = || {
        let config = RedisConfig::cluster(shared_cluster().urls()).with_key_prefix(prefix.as_str());
        RedisStore::new(config, None).unwrap()
    };
    let (node_a, node_b) = (open(), open());
    let notices = node_b.notices().unwrap();
    let mut receiver = notices.subscribe();
    // Enough rooms that their slots fall on every master.
    let rooms: Vec<RoomId> = (0..12)
        .map(|index| RoomId::new(&format!("shard-{index}")).unwrap())
        .collect();
    for room in &rooms {
        let mut config = RoomConfig::with_defaults(room.clone());
        config.max_active = 1;
        node_a.put_room(config).await.unwrap();
        notices.follow(room);
    }
    // Each subscription is confirmed before anything is announced.
    let mut confirmed = 0;
    while confirmed < rooms.len() {
        let notice = tokio::time::timeout(Duration::from_secs(10), receiver.recv())
            .await
            .expect("subscriptions confirmed")
            .unwrap();
        if notice == Notice::Resync {
            confirmed += 1;
        }
    }
    for room in &rooms {
        let Entry::Admitted(admitted) = node_a.join(room, JoinRequest::default()).await.unwrap()
        else {
            panic!("admitted at once");
        };
        node_a
            .end_session(room, admitted.session.id, SessionEnd::Revoked)
            .await
            .unwrap();
    }
    let mut heard = std::collections::HashSet::new();
    while heard.len() < rooms.len() {
        let notice = tokio::time::timeout(Duration::from_secs(10), receiver.recv())
            .await
            .expect("every room's notices arrive")
            .unwrap();
        if let Notice::Changed(change) = notice
            && change.change == Change::EndSession
        {
            assert!(change.ended_session.is_some());
            heard.insert(change.room);
        }
    }
}
