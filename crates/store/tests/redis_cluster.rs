//! The conformance suite against [`RedisStore`] on a 3-master Redis Cluster: every room's keys
//! share one slot (hash tag), the room list lives in another; change notices reach another
//! node from whichever shard holds the room.

#![allow(clippy::unwrap_used)]

mod conformance;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_core::engine::{Entry, JoinRequest, SessionEnd, TicketEnd, TicketState};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, ManualClock, RoomId};
use anteroom_store::{Change, Notice, RedisConfig, RedisStore, RoomStore, StoreError};
use anteroom_test_support::redis::{RedisCluster as Cluster, shared_cluster, unique_prefix};
use conformance::Backend;

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

#[tokio::test]
async fn a_join_that_outlives_the_timeout_leaves_no_ticket_in_a_cluster() {
    // As on a standalone server (tests/redis.rs): the join runs after the store gave up on it
    // (every master paused), and is taken back. A cluster of its own, since it is paused.
    let cluster = Cluster::start();
    let config = RedisConfig::cluster(cluster.urls())
        .with_key_prefix(unique_prefix())
        .with_timeout(Duration::from_millis(300));
    let store = RedisStore::new(config, None).unwrap();
    let id = RoomId::new("late-join").unwrap();
    let mut room = RoomConfig::with_defaults(id.clone());
    room.max_active = 1;
    store.put_room(room).await.unwrap();
    let first = store.join(&id, JoinRequest::default()).await.unwrap();
    assert!(matches!(first, Entry::Admitted(_)), "{first:?}");

    for node in cluster.nodes() {
        node.cli(&["CLIENT", "PAUSE", "1200", "ALL"]);
    }
    let late = store.join(&id, JoinRequest::default()).await;
    assert!(matches!(late, Err(StoreError::Backend { .. })), "{late:?}");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let outcome = async {
            let snapshot = store.snapshot(&id).await?;
            let records = store.records(&id).await?;
            Ok::<_, StoreError>((snapshot, records))
        }
        .await;
        if let Ok((snapshot, records)) = outcome {
            let taken_back = records.tickets.iter().any(|ticket| {
                matches!(
                    ticket.state,
                    TicketState::Ended {
                        reason: TicketEnd::Left,
                        ..
                    }
                )
            });
            if snapshot.totals.joined == 1 || taken_back {
                eprintln!(
                    "the late join {}",
                    if taken_back {
                        "ran and was taken back"
                    } else {
                        "was refused"
                    }
                );
                assert_eq!(snapshot.waiting, 0, "{snapshot:?}");
                assert_eq!(snapshot.active, 1);
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the late join was not taken back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The room library is loaded on every primary when the store connects, and again on a primary
/// that lost it (`FUNCTION FLUSH` here) by the first call routed there. A cluster of its own,
/// since its functions are flushed.
#[tokio::test]
async fn room_functions_are_loaded_on_every_primary() {
    let cluster = Cluster::start();
    let config = RedisConfig::cluster(cluster.urls()).with_key_prefix(unique_prefix());
    let store = RedisStore::new(config, None).unwrap();
    let has_library = |node: &anteroom_test_support::redis::RedisServer| {
        node.cli(&["FUNCTION", "LIST", "LIBRARYNAME", "anteroom_*"])
            .contains("library_name")
    };
    // Enough rooms that every primary holds some (a primary holding none of 40 random slots:
    // about 3 in 10 million).
    let rooms: Vec<RoomId> = (0..40)
        .map(|i| RoomId::new(&format!("room-{i}")).unwrap())
        .collect();
    store
        .put_room(RoomConfig::with_defaults(rooms[0].clone()))
        .await
        .unwrap();
    for node in cluster.nodes() {
        assert!(has_library(node), "loaded on {}", node.url());
        node.cli(&["FUNCTION", "FLUSH"]);
    }
    for room in &rooms {
        store
            .put_room(RoomConfig::with_defaults(room.clone()))
            .await
            .unwrap();
        let entry = store.join(room, JoinRequest::default()).await.unwrap();
        assert!(matches!(entry, Entry::Admitted(_)), "{entry:?}");
    }
    for node in cluster.nodes() {
        assert!(has_library(node), "loaded again on {}", node.url());
    }
}
