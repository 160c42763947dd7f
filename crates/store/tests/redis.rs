//! The conformance suite against [`RedisStore`] on a standalone `redis-server`, plus checks
//! only Redis needs: the production clock path (`TIME`), bounded calls, reconnection, random
//! order, change notices.

#![allow(clippy::unwrap_used)]

mod conformance;
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_core::engine::{Entry, JoinRequest, SessionEnd, TicketState};
use anteroom_core::room::{Mode, Order, RoomConfig};
use anteroom_core::{Clock, ManualClock, RoomId};
use anteroom_store::{Change, Notice, RedisConfig, RedisStore, RoomStore, StoreError};
use conformance::Backend;
use support::redis::{RedisServer, shared_server, unique_prefix};

/// Stores under a key prefix of their own on the shared server; reopening sees the same keys.
struct Redis {
    prefix: String,
}

impl Redis {
    fn new() -> Redis {
        Redis {
            prefix: unique_prefix(),
        }
    }
}

impl Backend for Redis {
    fn open(&self, clock: Arc<ManualClock>) -> Arc<dyn RoomStore> {
        let clock: Arc<dyn Clock> = clock;
        let config =
            RedisConfig::standalone(shared_server().url()).with_key_prefix(self.prefix.as_str());
        Arc::new(RedisStore::new(config, Some(clock)).expect("redis store"))
    }

    fn is_durable(&self) -> bool {
        true
    }
}

conformance_suite!(Redis::new());

fn room_id(name: &str) -> RoomId {
    RoomId::new(name).unwrap()
}

#[tokio::test]
async fn production_stores_read_the_servers_clock() {
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(unique_prefix());
    let store = RedisStore::new(config, None).unwrap();
    let id = room_id("timed");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 1;
    store.put_room(config).await.unwrap();
    let first = store.join(&id, JoinRequest::default()).await.unwrap();
    let Entry::Admitted(view) = first else {
        panic!("expected an admitted visitor, got {first:?}");
    };
    let server_secs: u64 = shared_server()
        .cli(&["TIME"])
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let issued_secs = view.session.issued_at.as_secs();
    assert!(
        issued_secs.abs_diff(server_secs) <= 5,
        "issued at {issued_secs}, server time {server_secs}"
    );
    assert!(matches!(
        store.join(&id, JoinRequest::default()).await.unwrap(),
        Entry::Waiting(_)
    ));
}

#[tokio::test]
async fn calls_fail_within_the_timeout_and_recover_after_a_restart() {
    let server = RedisServer::start();
    let port = server.port();
    let timeout = Duration::from_millis(500);
    let config = RedisConfig::standalone(server.url())
        .with_key_prefix(unique_prefix())
        .with_timeout(timeout);
    let store = RedisStore::new(config, None).unwrap();
    let id = room_id("r");
    store
        .put_room(RoomConfig::with_defaults(id.clone()))
        .await
        .unwrap();

    // A server that stops answering: the call gives up in time.
    server.cli(&["CLIENT", "PAUSE", "1500", "ALL"]);
    let started = Instant::now();
    let paused = store.snapshot(&id).await;
    assert!(
        matches!(paused, Err(StoreError::Backend { .. })),
        "{paused:?}"
    );
    assert!(started.elapsed() < timeout * 3, "{:?}", started.elapsed());

    // A server that is gone: calls fail in time, then work again once it is back.
    drop(server);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let started = Instant::now();
    let gone = store.snapshot(&id).await;
    assert!(matches!(gone, Err(StoreError::Backend { .. })), "{gone:?}");
    assert!(started.elapsed() < timeout * 3, "{:?}", started.elapsed());
    let _server = RedisServer::restart_on(port);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        // The restarted server is empty: the room has to be put again.
        match store.put_room(RoomConfig::with_defaults(id.clone())).await {
            Ok(snapshot) => {
                assert_eq!(snapshot.last_position, 0);
                break;
            }
            Err(error) => {
                assert!(Instant::now() < deadline, "no recovery: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let entry = store.join(&id, JoinRequest::default()).await.unwrap();
    assert!(matches!(entry, Entry::Admitted(_)));
    let mut closed = RoomConfig::with_defaults(id.clone());
    closed.mode = Mode::Closed;
    store.put_room(closed).await.unwrap();
}

#[tokio::test]
async fn random_order_admits_among_all_the_waiting() {
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(unique_prefix());
    let store = RedisStore::new(config, None).unwrap();
    let mut lowest_only = 0;
    for trial in 0..3 {
        let id = room_id(&format!("lottery-{trial}"));
        let mut config = RoomConfig::with_defaults(id.clone());
        config.mode = Mode::QueueAll;
        config.order = Order::Random;
        store.put_room(config.clone()).await.unwrap();
        for _ in 0..40 {
            store.join(&id, JoinRequest::default()).await.unwrap();
        }
        config.mode = Mode::Queue;
        config.max_active = 10;
        store.put_room(config).await.unwrap();
        assert_eq!(store.tick(&id).await.unwrap().admitted, 10);
        let records = store.records(&id).await.unwrap();
        let mut admitted: Vec<u64> = records
            .tickets
            .iter()
            .filter(|ticket| matches!(ticket.state, TicketState::Admitted { .. }))
            .map(|ticket| ticket.position)
            .collect();
        admitted.sort_unstable();
        assert_eq!(admitted.len(), 10);
        let snapshot = store.snapshot(&id).await.unwrap();
        assert_eq!((snapshot.waiting, snapshot.admitted_unclaimed), (30, 10));
        assert_eq!(snapshot.serving, *admitted.last().unwrap());
        if admitted == (1..=10).collect::<Vec<u64>>() {
            lowest_only += 1;
        }
    }
    // Drawing exactly the ten lowest of forty by chance: about one in a billion, three times.
    assert!(
        lowest_only < 3,
        "random order admitted the lowest positions every time"
    );
}

#[tokio::test]
async fn changed_rooms_are_announced_on_their_shard_channel() {
    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    let store = RedisStore::new(config, None).unwrap();
    let id = room_id("announced");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 1;
    store.put_room(config).await.unwrap();

    let channel = format!("{prefix}:{{announced}}:events");
    let mut subscriber = Command::new("redis-cli")
        .args([
            "-p",
            &shared_server().port().to_string(),
            "SSUBSCRIBE",
            &channel,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    let stdout = subscriber.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let next_line = || received.recv_timeout(Duration::from_secs(5)).unwrap();
    while next_line() != channel {}
    assert_eq!(next_line(), "1", "subscribed");

    store.join(&id, JoinRequest::default()).await.unwrap();
    store.join(&id, JoinRequest::default()).await.unwrap();
    let mut notices = Vec::new();
    while notices.len() < 2 {
        if next_line() == "smessage" {
            assert_eq!(next_line(), channel);
            notices.push(next_line());
        }
    }
    // operation|generation|serving|last position|waiting
    assert_eq!(notices, ["join|1|1|1|0", "join|1|1|2|1"]);
    subscriber.kill().unwrap();
    subscriber.wait().unwrap();
}

/// The next notice about a room (skipping resyncs), within five seconds.
async fn next_change(
    receiver: &mut tokio::sync::broadcast::Receiver<Notice>,
) -> anteroom_store::RoomNotice {
    loop {
        let notice = tokio::time::timeout(Duration::from_secs(5), receiver.recv())
            .await
            .expect("a notice within five seconds")
            .unwrap();
        if let Notice::Changed(change) = notice {
            return change;
        }
    }
}

/// Waits for the subscription to be confirmed (its first `Resync`).
async fn subscribed(receiver: &mut tokio::sync::broadcast::Receiver<Notice>) {
    loop {
        let notice = tokio::time::timeout(Duration::from_secs(5), receiver.recv())
            .await
            .expect("the subscription is confirmed within five seconds")
            .unwrap();
        if notice == Notice::Resync {
            return;
        }
    }
}

#[tokio::test]
async fn another_node_hears_of_changes_and_ended_sessions() {
    let prefix = unique_prefix();
    let open = || {
        let config =
            RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
        RedisStore::new(config, None).unwrap()
    };
    let (node_a, node_b) = (open(), open());
    let id = room_id("heard");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 1;
    node_a.put_room(config).await.unwrap();

    let notices = node_b.notices().expect("redis stores have notices");
    let mut receiver = notices.subscribe();
    notices.follow(&id);
    subscribed(&mut receiver).await;

    // Admitted at once and claimed: one notice with the figures after the join.
    let Entry::Admitted(first) = node_a.join(&id, JoinRequest::default()).await.unwrap() else {
        panic!("the first visitor gets in at once");
    };
    let heard = next_change(&mut receiver).await;
    assert_eq!(heard.room, id);
    assert_eq!(heard.change, Change::Join);
    let figures = heard.figures.unwrap();
    assert_eq!(
        (figures.serving, figures.last_position, figures.waiting),
        (1, 1, 0)
    );
    assert_eq!(heard.ended_session, None);

    node_a.join(&id, JoinRequest::default()).await.unwrap();
    assert_eq!(next_change(&mut receiver).await.figures.unwrap().waiting, 1);

    // Completing the session names it (its pass is revoked) and admits the next visitor.
    node_a
        .end_session(&id, first.session.id, SessionEnd::Completed)
        .await
        .unwrap();
    let ended = next_change(&mut receiver).await;
    assert_eq!(ended.change, Change::EndSession);
    assert_eq!(ended.ended_session, Some(first.session.id));
    assert_eq!(ended.figures.unwrap().serving, 2);

    // Unfollowed rooms are not heard of; deleting a followed one is.
    notices.unfollow(&id);
    let other = room_id("unheard");
    node_a
        .put_room(RoomConfig::with_defaults(other.clone()))
        .await
        .unwrap();
    notices.follow(&other);
    subscribed(&mut receiver).await;
    node_a.join(&id, JoinRequest::default()).await.unwrap();
    node_a.delete_room(&other).await.unwrap();
    let deleted = next_change(&mut receiver).await;
    assert_eq!((deleted.room, deleted.change), (other, Change::Deleted));
}

#[tokio::test]
async fn notices_come_back_after_the_server_restarts() {
    let server = RedisServer::start();
    let port = server.port();
    let config = RedisConfig::standalone(server.url()).with_timeout(Duration::from_millis(500));
    let store = RedisStore::new(config, None).unwrap();
    let id = room_id("restarted");
    store
        .put_room(RoomConfig::with_defaults(id.clone()))
        .await
        .unwrap();
    let notices = store.notices().unwrap();
    let mut receiver = notices.subscribe();
    notices.follow(&id);
    subscribed(&mut receiver).await;

    drop(server);
    let server = RedisServer::restart_on(port);
    // The subscriber notices the loss, subscribes again and says something may be missed.
    subscribed(&mut receiver).await;
    let started = Instant::now();
    loop {
        match store.put_room(RoomConfig::with_defaults(id.clone())).await {
            Ok(_) => break,
            Err(_) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the store reconnects: {error}"),
        }
    }
    assert_eq!(next_change(&mut receiver).await.change, Change::Config);
    drop(server);
}

/// A session listing examines a bounded number of sessions per call: with a filter that
/// matches none of many sessions, the first page is empty yet says where to go on, and the
/// walk ends. A room whose id index is missing (sessions from before it existed) has it
/// rebuilt by the first listing.
#[tokio::test]
async fn session_pages_examine_a_bounded_number_and_rebuild_a_missing_index() {
    use anteroom_store::{MAX_SESSIONS_EXAMINED, SessionFilter, SessionQuery};
    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    let store = Arc::new(RedisStore::new(config, None).unwrap());
    let id = room_id("many");
    store
        .put_room(RoomConfig::with_defaults(id.clone()))
        .await
        .unwrap();
    let count = MAX_SESSIONS_EXAMINED + 100;
    // In rounds of 100 at once, so no call waits behind thousands of others.
    let mut issued = Vec::new();
    for round in (0..count).collect::<Vec<_>>().chunks(100) {
        let mut issuing = tokio::task::JoinSet::new();
        for _ in round {
            let store = store.clone();
            let id = id.clone();
            issuing.spawn(async move {
                store
                    .issue_session(&id, None, Duration::from_secs(600))
                    .await
                    .unwrap()
            });
        }
        issued.extend(issuing.join_all().await);
    }
    assert_eq!(issued.len(), count);
    shared_server().cli(&["DEL", &format!("{prefix}:{{many}}:session_ids")]);

    let query = |after: Option<String>, filter| SessionQuery {
        after,
        filter,
        limit: 100,
    };
    let expired = SessionFilter::Ended(SessionEnd::Expired);
    let first = store
        .session_page(&id, &query(None, expired))
        .await
        .unwrap();
    assert!(first.sessions.is_empty());
    let next = first.next_after.expect("more sessions to examine");
    let second = store
        .session_page(&id, &query(Some(next), expired))
        .await
        .unwrap();
    assert!(second.sessions.is_empty() && second.next_after.is_none());

    let mut after = None;
    let mut listed = 0;
    loop {
        let page = store
            .session_page(&id, &query(after, SessionFilter::Active))
            .await
            .unwrap();
        assert!(page.sessions.len() <= 100);
        listed += page.sessions.len();
        match page.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(listed, count, "every session once, from the rebuilt index");
}

/// A lease is held by one node at a time, kept by renewing it, and taken over once its
/// holder stops renewing.
#[tokio::test]
async fn a_lease_has_one_holder_until_it_lapses() {
    let prefix = unique_prefix();
    let open = || {
        let config =
            RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
        RedisStore::new(config, None).unwrap()
    };
    let (node_a, node_b) = (open(), open());
    let ttl = Duration::from_millis(300);
    assert!(node_a.hold_lease("duty", "a", ttl).await.unwrap());
    assert!(!node_b.hold_lease("duty", "b", ttl).await.unwrap());
    assert!(
        node_b.hold_lease("other", "b", ttl).await.unwrap(),
        "leases are by name"
    );
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            node_a.hold_lease("duty", "a", ttl).await.unwrap(),
            "renewed"
        );
        assert!(!node_b.hold_lease("duty", "b", ttl).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        node_b.hold_lease("duty", "b", ttl).await.unwrap(),
        "taken over"
    );
    assert!(!node_a.hold_lease("duty", "a", ttl).await.unwrap());
}
