//! The conformance suite against [`RedisStore`] on a standalone `redis-server`, plus checks
//! only Redis needs: the production clock path (`TIME`), bounded calls, reconnection, random
//! order, change notices.

#![allow(clippy::unwrap_used)]

mod conformance;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_core::counters::CounterRecord;
use anteroom_core::engine::{
    EngineError, Entry, JoinRequest, RoomTotals, SessionEnd, TicketEnd, TicketRef, TicketState,
};
use anteroom_core::room::{DEFAULT_HISTORY_RETENTION, Mode, Order, RoomConfig};
use anteroom_core::{Clock, ManualClock, RoomId, TicketId, Timestamp};
use anteroom_store::{Change, Notice, RedisConfig, RedisStore, RoomStore, StoreError};
use anteroom_test_support::redis::{RedisServer, shared_server, unique_prefix};
use conformance::Backend;

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
    let _server = RedisServer::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        // The restarted server is empty: the room has to be put again, and the room functions
        // are loaded again by the first call that finds them missing.
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

/// A cut connection (Redis restarted, a proxy or the network dropped it): a call that may be
/// made twice (a status, a snapshot, a leave, a session's end) is made again on the connection made anew
/// instead of failing as the first call after the cut. Each call below is the first after
/// its own cut.
#[tokio::test]
async fn calls_that_may_be_made_twice_are_made_again_after_a_cut_connection() {
    let server = RedisServer::start();
    let config = RedisConfig::standalone(server.url()).with_key_prefix(unique_prefix());
    let store = RedisStore::new(config, None).unwrap();
    let id = room_id("cut");
    let mut room = RoomConfig::with_defaults(id.clone());
    room.max_active = 1;
    store.put_room(room).await.unwrap();
    let Entry::Admitted(first) = store.join(&id, JoinRequest::default()).await.unwrap() else {
        panic!("the first visitor waits");
    };
    let waiting = waiting_ref(&store.join(&id, JoinRequest::default()).await.unwrap());
    let cut = || server.cli(&["CLIENT", "KILL", "TYPE", "normal"]);

    cut();
    let status = store.status(&id, waiting).await;
    assert!(matches!(status, Ok(Entry::Waiting(_))), "{status:?}");
    cut();
    let snapshot = store.snapshot(&id).await;
    assert_eq!(snapshot.map(|snapshot| snapshot.waiting).ok(), Some(1));
    cut();
    let left = store.leave(&id, waiting).await;
    assert!(left.is_ok(), "{left:?}");
    assert_eq!(store.snapshot(&id).await.unwrap().waiting, 0);
    cut();
    let ended = store
        .end_session(&id, first.session.id, SessionEnd::Completed)
        .await;
    assert!(ended.is_ok(), "{ended:?}");
    assert_eq!(store.snapshot(&id).await.unwrap().active, 0);
}

/// The room library's names on `server` (`FUNCTION LIST`).
fn room_libraries(server: &RedisServer) -> Vec<String> {
    let listed = server.cli(&["FUNCTION", "LIST"]);
    let lines: Vec<&str> = listed.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|pair| pair[0] == "library_name")
        .map(|pair| pair[1].to_owned())
        .collect()
}

/// One count of `command` in `server`'s `INFO commandstats` (`calls`, `failed_calls`, …),
/// commands run by scripts included; 0 before its first call.
fn command_stat(server: &RedisServer, command: &str, count: &str) -> u64 {
    let line_prefix = format!("cmdstat_{command}:");
    let field_prefix = format!("{count}=");
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|line| line.strip_prefix(line_prefix.as_str()))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|field| field.strip_prefix(field_prefix.as_str()))
        })
        .map_or(0, |value| value.trim().parse().unwrap())
}

/// How many `FCALL`s `server` answered with an error since it started.
fn failed_function_calls(server: &RedisServer) -> u64 {
    command_stat(server, "fcall", "failed_calls")
}

/// The room operations are one library of Redis functions, loaded once when the store
/// connects; a Redis that lost it (`FUNCTION FLUSH` here; a restart without persistence in
/// `calls_fail_within_the_timeout_and_recover_after_a_restart`) gets it again from the first
/// call that finds its function missing, and that call is answered.
#[tokio::test]
async fn room_functions_lost_by_redis_are_loaded_again() {
    let server = RedisServer::start();
    let store = RedisStore::new(RedisConfig::standalone(server.url()), None).unwrap();
    let id = room_id("flushed");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 1;
    store.put_room(config).await.unwrap();
    let loaded = room_libraries(&server);
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert_eq!(
        failed_function_calls(&server),
        0,
        "loaded before the first call"
    );

    server.cli(&["FUNCTION", "FLUSH"]);
    assert!(room_libraries(&server).is_empty());
    let first = store.join(&id, JoinRequest::default()).await.unwrap();
    assert!(matches!(first, Entry::Admitted(_)), "{first:?}");
    assert_eq!(room_libraries(&server), loaded, "the same library again");
    assert_eq!(
        failed_function_calls(&server),
        1,
        "one call found it missing"
    );
    let second = store.join(&id, JoinRequest::default()).await.unwrap();
    assert!(matches!(second, Entry::Waiting(_)), "{second:?}");
    assert_eq!(failed_function_calls(&server), 1);
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
    let server = RedisServer::start_on(port);
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

#[tokio::test]
async fn an_oidc_code_is_redeemed_once_among_concurrent_redemptions() {
    use anteroom_core::Timestamp;
    use anteroom_store::{CodeRedemptions, CodeUse, Redemption};

    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    // Two stores: two nodes on one server.
    let nodes: Vec<Arc<RedisStore>> = (0..2)
        .map(|_| Arc::new(RedisStore::new(config.clone(), None).unwrap()))
        .collect();
    let now = Timestamp(1_700_000_000_000);
    let redeem = |node: Arc<RedisStore>, id: &'static str| async move {
        node.redeem(CodeUse {
            code_id: id,
            issued_at: now,
            expires_at: Timestamp(now.as_millis() + 60_000),
            now,
        })
        .await
        .unwrap()
    };
    let attempts: Vec<_> = (0..16)
        .map(|index| tokio::spawn(redeem(nodes[index % 2].clone(), "code-a")))
        .collect();
    let mut firsts = 0;
    for attempt in attempts {
        match attempt.await.unwrap() {
            Redemption::First => firsts += 1,
            Redemption::Again => {}
            Redemption::Unknown => panic!("redis always knows"),
        }
    }
    assert_eq!(firsts, 1);
    assert_eq!(redeem(nodes[1].clone(), "code-b").await, Redemption::First);
    // The record expires a little after the code.
    let ttl: i64 = shared_server()
        .cli(&["PTTL", &format!("{prefix}:oidc-code:code-a")])
        .trim()
        .parse()
        .unwrap();
    assert!((60_000..=65_000).contains(&ttl), "{ttl}");
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

fn waiting_ref(entry: &Entry) -> TicketRef {
    match entry {
        Entry::Waiting(view) => TicketRef {
            id: view.ticket,
            generation: view.generation,
        },
        Entry::Admitted(view) => panic!("admitted at once: {view:?}"),
    }
}

/// A room whose one slot is taken by its first visitor, so every later join waits.
async fn full_room(store: &RedisStore, id: &RoomId, idle: Duration) {
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 1;
    config.ticket_idle_ttl = idle;
    store.put_room(config).await.unwrap();
    let first = store.join(id, JoinRequest::default()).await.unwrap();
    assert!(matches!(first, Entry::Admitted(_)), "{first:?}");
}

/// How many `HGETALL`s `server` ran since it started, from scripts included.
fn hgetall_calls(server: &RedisServer) -> u64 {
    command_stat(server, "hgetall", "calls")
}

#[tokio::test]
async fn the_idle_sweep_reads_nothing_until_its_bound_is_passed() {
    // A pass over the whole line leaves the earliest contact it kept; until the cutoff reaches
    // it no ticket can be idle, so a tick (or the refill after an ended session, hundreds a
    // second in a crowd) reads no line bucket. Once passed, the idle tickets go as before.
    const TICKETS: usize = 300;
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let store = RedisStore::new(RedisConfig::standalone(server.url()), Some(dyn_clock)).unwrap();
    let id = room_id("idle-bound");
    full_room(&store, &id, Duration::from_secs(60)).await;
    // Past the room's seen floor, so that only the tickets' own contacts count.
    clock.advance(Duration::from_secs(100));
    let joins = (0..TICKETS).map(|_| store.join(&id, JoinRequest::default()));
    for entry in futures_util::future::join_all(joins).await {
        waiting_ref(&entry.unwrap());
    }
    let report = store.tick(&id).await.unwrap();
    assert_eq!((report.abandoned, report.admitted), (0, 0));

    clock.advance(Duration::from_secs(59));
    let before = hgetall_calls(&server);
    let report = store.tick(&id).await.unwrap();
    assert_eq!((report.abandoned, report.admitted), (0, 0));
    assert_eq!(
        hgetall_calls(&server),
        before,
        "a sweep read the line within its bound"
    );

    clock.advance(Duration::from_secs(2));
    let report = store.tick(&id).await.unwrap();
    assert_eq!(report.abandoned, TICKETS as u64);
    assert!(hgetall_calls(&server) > before);
    assert_eq!(store.snapshot(&id).await.unwrap().waiting, 0);
}

#[tokio::test]
async fn idle_tickets_in_a_line_longer_than_one_sweep_are_all_abandoned() {
    // A tick examines about 1,024 waiting records for idleness (room.lua, SWEEP_BUDGET), where
    // the engine looks at every ticket: in a line of 3,000 idle tickets the sweep takes a few
    // ticks, each bounded, and tickets still in contact are never abandoned.
    const TICKETS: usize = 3_000;
    const SWEEP: u64 = 1_024 + 127;
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(unique_prefix());
    let store = RedisStore::new(config, Some(dyn_clock)).unwrap();
    let id = room_id("long-idle");
    full_room(&store, &id, Duration::from_secs(60)).await;
    let mut tickets = Vec::new();
    for chunk in 0..TICKETS / 100 {
        let joins = (0..100).map(|_| store.join(&id, JoinRequest::default()));
        for entry in futures_util::future::join_all(joins).await {
            tickets.push(waiting_ref(&entry.unwrap()));
        }
        assert_eq!(tickets.len(), (chunk + 1) * 100);
    }
    // Every 100th ticket keeps in contact (positions spread along the whole line).
    let kept: Vec<TicketRef> = tickets.iter().step_by(100).copied().collect();
    clock.advance(Duration::from_secs(61));
    assert_eq!(store.touch(&id, &kept).await.unwrap(), kept.len() as u64);

    let mut ticks = 0;
    let mut abandoned = 0;
    loop {
        let report = store.tick(&id).await.unwrap();
        ticks += 1;
        assert!(report.abandoned <= SWEEP, "tick {ticks}: {report:?}");
        assert_eq!(report.admitted, 0);
        abandoned += report.abandoned;
        if abandoned == (TICKETS - kept.len()) as u64 {
            break;
        }
        assert!(ticks < 10, "only {abandoned} abandoned after {ticks} ticks");
    }
    assert!(
        ticks >= 3,
        "one sweep examined more than its budget: {ticks} ticks"
    );
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!(snapshot.waiting, kept.len() as u64);
    assert_eq!(snapshot.totals.abandoned, abandoned);
    // The kept tickets still wait, each with exactly the kept tickets before it ahead.
    for (index, ticket) in kept.iter().enumerate() {
        match store.status(&id, *ticket).await.unwrap() {
            Entry::Waiting(view) => assert_eq!(view.ahead, index as u64),
            other => panic!("{other:?}"),
        }
    }
    // Once idle in turn, they go within one more tick (the line is now short).
    clock.advance(Duration::from_secs(61));
    let report = store.tick(&id).await.unwrap();
    assert_eq!(report.abandoned, kept.len() as u64);
    assert_eq!(store.snapshot(&id).await.unwrap().waiting, 0);
}

#[tokio::test]
async fn idle_tickets_are_not_admitted_before_the_sweep_reaches_them() {
    // A line longer than one sweep, idle at its front: the tick that frees a slot abandons the
    // idle tickets it meets and admits the first one still in contact.
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(unique_prefix());
    let store = RedisStore::new(config, Some(dyn_clock)).unwrap();
    let id = room_id("idle-front");
    full_room(&store, &id, Duration::from_secs(60)).await;
    let mut tickets = Vec::new();
    for _ in 0..25 {
        let joins = (0..100).map(|_| store.join(&id, JoinRequest::default()));
        for entry in futures_util::future::join_all(joins).await {
            tickets.push(waiting_ref(&entry.unwrap()));
        }
    }
    let records = store.records(&id).await.unwrap();
    let mut by_position: Vec<(u64, TicketRef)> = records
        .tickets
        .iter()
        .filter(|ticket| ticket.state == TicketState::Waiting)
        .map(|ticket| {
            (
                ticket.position,
                TicketRef {
                    id: ticket.id,
                    generation: ticket.generation,
                },
            )
        })
        .collect();
    by_position.sort_by_key(|(position, _)| *position);
    assert_eq!(by_position.len(), 2_500);
    // A tick while nobody is idle moves the sweep past the front of the line.
    store.tick(&id).await.unwrap();
    // The 2,000 at the back keep in contact; the first 500 go idle.
    let back: Vec<TicketRef> = by_position[500..].iter().map(|(_, t)| *t).collect();
    clock.advance(Duration::from_secs(61));
    store.touch(&id, &back).await.unwrap();
    // Ending the session frees the slot and ticks: the sweep examines the middle of the line,
    // the admission meets the idle front.
    let session = store
        .records(&id)
        .await
        .unwrap()
        .sessions
        .first()
        .map(|session| session.id)
        .unwrap();
    store
        .end_session(&id, session, SessionEnd::Completed)
        .await
        .unwrap();
    let records = store.records(&id).await.unwrap();
    let admitted: Vec<_> = records
        .tickets
        .iter()
        .filter(|ticket| {
            // (the first visitor's ticket stays claimed after its session ended)
            ticket.position > 1
                && matches!(
                    ticket.state,
                    TicketState::Admitted { .. } | TicketState::Claimed { .. }
                )
        })
        .collect();
    assert_eq!(admitted.len(), 1);
    assert_eq!(admitted[0].position, by_position[500].0);
    for (position, _) in &by_position[..500] {
        let ticket = records
            .tickets
            .iter()
            .find(|ticket| ticket.position == *position)
            .unwrap();
        assert!(
            matches!(
                ticket.state,
                TicketState::Ended {
                    reason: TicketEnd::Abandoned,
                    ..
                }
            ),
            "{ticket:?}"
        );
    }
}

#[tokio::test]
async fn a_join_that_outlives_the_timeout_leaves_no_ticket() {
    // SPEC §9.4 bounds every call; a join the server runs after the node gave up must not
    // leave a ticket in line that no visitor holds.
    let server = RedisServer::start();
    let timeout = Duration::from_millis(300);
    let config = RedisConfig::standalone(server.url())
        .with_key_prefix(unique_prefix())
        .with_timeout(timeout);
    let store = RedisStore::new(config, None).unwrap();
    let id = room_id("late-join");
    full_room(&store, &id, Duration::from_secs(300)).await;

    server.cli(&["CLIENT", "PAUSE", "1200", "ALL"]);
    let late = store.join(&id, JoinRequest::default()).await;
    assert!(matches!(late, Err(StoreError::Backend { .. })), "{late:?}");

    // After the pause the join runs (or is refused), and its ticket is taken back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let snapshot = loop {
        let snapshot = store.snapshot(&id).await.unwrap();
        let records = store.records(&id).await.unwrap();
        let undone = snapshot.totals.joined == 1
            || records.tickets.iter().any(|ticket| {
                matches!(
                    ticket.state,
                    TicketState::Ended {
                        reason: TicketEnd::Left,
                        ..
                    }
                )
            });
        if undone {
            eprintln!(
                "the late join {}",
                if snapshot.totals.joined == 1 {
                    "was refused"
                } else {
                    "ran and was taken back"
                }
            );
            break snapshot;
        }
        assert!(Instant::now() < deadline, "still {snapshot:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(snapshot.waiting, 0, "{snapshot:?}");
    assert_eq!(snapshot.active, 1);
    // The room goes on as if the late join had never been asked for.
    let next = store.join(&id, JoinRequest::default()).await.unwrap();
    match next {
        Entry::Waiting(view) => assert_eq!(view.ahead, 0),
        other => panic!("{other:?}"),
    }
}

/// A full room of its own (at 5,000 s on a manual clock) with `count` tickets waiting, to be
/// rewritten as an older layout had it: its clock, store, id, key prefix and waiting tickets.
async fn room_to_rewrite(
    name: &str,
    count: usize,
) -> (Arc<ManualClock>, RedisStore, RoomId, String, Vec<TicketRef>) {
    let clock = Arc::new(ManualClock::new(Timestamp(5_000_000)));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    let store = RedisStore::new(config, Some(dyn_clock)).unwrap();
    let id = room_id(name);
    full_room(&store, &id, Duration::from_secs(60)).await;
    let mut waiting = Vec::new();
    for _ in 0..count {
        waiting.push(waiting_ref(
            &store.join(&id, JoinRequest::default()).await.unwrap(),
        ));
    }
    (clock, store, id, prefix, waiting)
}

#[tokio::test]
async fn rooms_written_in_the_first_layout_are_migrated() {
    // Layout 1 kept waiting records in `tickets` and last contacts in the zset `idle`: a room
    // written that way is rewritten on first use, its line and contacts intact.
    let (clock, store, id, prefix, waiting) = room_to_rewrite("old-layout", 3).await;
    let server = shared_server();
    let key = |part: &str| format!("{prefix}:{{{id}}}:{part}");
    // Rewrite the line as layout 1 had it: positions 2, 3, 4; the first one joined and was
    // last seen long ago.
    for (index, ticket) in waiting.iter().enumerate() {
        let position = index + 2;
        let (joined, seen) = if index == 0 {
            (3_000_000, 4_000_000)
        } else {
            (5_000_000, 5_000_000)
        };
        server.cli(&[
            "HSET",
            &key("tickets"),
            &ticket.id.to_string(),
            &format!("w|{position}|1|{joined}|{joined}||||"),
        ]);
        server.cli(&[
            "ZADD",
            &key("idle"),
            &seen.to_string(),
            &ticket.id.to_string(),
        ]);
    }
    drop_layout_3_line(server, &key);
    for (index, ticket) in waiting.iter().enumerate() {
        let position = (index + 2).to_string();
        server.cli(&["ZADD", &key("waiting"), &position, &ticket.id.to_string()]);
    }
    server.cli(&["HSET", &key("meta"), "layout", "1"]);

    match store.status(&id, waiting[2]).await.unwrap() {
        Entry::Waiting(view) => assert_eq!((view.position, view.ahead), (4, 2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.cli(&["HGET", &key("meta"), "layout"]).trim(), "3");
    assert_eq!(server.cli(&["EXISTS", &key("idle")]).trim(), "0");
    assert_eq!(server.cli(&["HLEN", &key("line:0")]).trim(), "3");
    let records = store.records(&id).await.unwrap();
    let first = records
        .tickets
        .iter()
        .find(|ticket| ticket.id == waiting[0].id)
        .unwrap();
    assert_eq!(first.joined_at, Timestamp(3_000_000));
    assert_eq!(first.last_seen, Timestamp(4_000_000));
    // Its old last contact counts: idle since 4,000 s, it is abandoned; the others are not.
    clock.advance(Duration::from_secs(1));
    let report = store.tick(&id).await.unwrap();
    assert_eq!(report.abandoned, 1);
    assert_eq!(store.snapshot(&id).await.unwrap().waiting, 2);

    // A layout this version does not know is refused, naming the key.
    server.cli(&["HSET", &key("meta"), "layout", "9"]);
    let error = store.tick(&id).await.unwrap_err();
    let source = std::error::Error::source(&error).map(ToString::to_string);
    let refused = format!("{error}: {}", source.unwrap_or_default());
    assert!(refused.contains(&key("meta")), "{refused}");
    assert!(refused.contains("layout 9"), "{refused}");
    server.cli(&["HSET", &key("meta"), "layout", "3"]);
}

/// Takes a room's waiting line back to what layouts 1 and 2 had besides their lanes' zsets:
/// no count hashes (`waiting`, `priority`) and no counts in meta, no id index (`line:id:*`),
/// no line buckets.
fn drop_layout_3_line(server: &RedisServer, key: &dyn Fn(&str) -> String) {
    let buckets = server.cli(&["--scan", "--pattern", &key("line:*")]);
    for bucket in buckets.lines().filter(|bucket| !bucket.is_empty()) {
        server.cli(&["DEL", bucket]);
    }
    server.cli(&["DEL", &key("waiting"), &key("priority")]);
    let lane_fields = [
        "waiting_n",
        "waiting_size",
        "priority_n",
        "priority_size",
        "index_level",
        "index_split",
    ];
    server.cli(&[&["HDEL", &key("meta")][..], &lane_fields[..]].concat());
}

#[tokio::test]
async fn rooms_written_in_the_second_layout_are_migrated() {
    // Layout 2 kept each lane as a zset of ids by position, and each waiting record without
    // its id in its line bucket: a room written that way (its exact keys, as the layout 2 form
    // of `ticket_and_session_records_keep_their_layout_3_form` pinned them) is rewritten on
    // first use, its line, its lanes and its contacts intact.
    let (_clock, store, id, prefix, waiting) = room_to_rewrite("layout-two", 200).await;
    let server = shared_server();
    let key = |part: &str| format!("{prefix}:{{{id}}}:{part}");
    drop_layout_3_line(server, &key);
    // Positions 2 .. 201 over two buckets; position 3 in the priority lane, position 5 seen
    // long ago, position 4 with an identity.
    for (index, ticket) in waiting.iter().enumerate() {
        let position = index + 2;
        let (lane, record) = match position {
            3 => ("priority", "5000000|0|||p".to_owned()),
            4 => ("waiting", "5000000|0|=ann||".to_owned()),
            5 => ("waiting", "1000000|0||".to_owned()),
            _ => ("waiting", "5000000|0||".to_owned()),
        };
        let (position, id) = (position.to_string(), ticket.id.to_string());
        server.cli(&["ZADD", &key(lane), &position, &id]);
        let bucket = format!("line:{}", (index + 2) / 128);
        server.cli(&["HSET", &key(&bucket), &position, &record]);
    }
    server.cli(&["HSET", &key("meta"), "layout", "2"]);

    // The last one: 198 of the regular line ahead (the priority ticket is in its own lane).
    match store.status(&id, waiting[199]).await.unwrap() {
        Entry::Waiting(view) => {
            assert_eq!((view.position, view.ahead, view.waiting), (201, 198, 200))
        }
        other => panic!("{other:?}"),
    }
    match store.status(&id, waiting[1]).await.unwrap() {
        Entry::Waiting(view) => assert_eq!((view.position, view.ahead), (3, 0)),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.cli(&["HGET", &key("meta"), "layout"]).trim(), "3");
    assert_eq!(server.cli(&["TYPE", &key("waiting")]).trim(), "hash");
    let value = server.cli(&["HGET", &key("line:0"), "4"]);
    assert_eq!(value.trim(), format!("{}|5000000|0|=ann||", waiting[2].id));
    let records = store.records(&id).await.unwrap();
    let record = |ticket: TicketRef| records.tickets.iter().find(|t| t.id == ticket.id).unwrap();
    assert!(record(waiting[1]).priority);
    assert_eq!(record(waiting[2]).identity.as_deref(), Some("ann"));
    assert_eq!(record(waiting[3]).last_seen, Timestamp(1_000_000));
    // The idle one is abandoned, the priority one admitted first, the line goes on in order.
    let report = store.tick(&id).await.unwrap();
    assert_eq!((report.abandoned, report.admitted), (1, 0));
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 3;
    config.ticket_idle_ttl = Duration::from_secs(60);
    store.put_room(config).await.unwrap();
    assert_eq!(store.advance(&id, 2).await.unwrap().0, 2);
    assert!(matches!(
        store.status(&id, waiting[1]).await.unwrap(),
        Entry::Admitted(_)
    ));
    assert!(matches!(
        store.status(&id, waiting[0]).await.unwrap(),
        Entry::Admitted(_)
    ));
    match store.status(&id, waiting[199]).await.unwrap() {
        Entry::Waiting(view) => assert_eq!((view.ahead, view.waiting), (196, 197)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn deleting_a_room_leaves_none_of_its_keys_but_the_outbox() {
    // delete_room names the line buckets from the lanes' masks and the index buckets from the
    // index's state: a line of several buckets, with gaps where tickets left, goes whole.
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp(5_000_000)));
    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    let store = RedisStore::new(config, Some(clock)).unwrap();
    let id = room_id("deleted");
    full_room(&store, &id, Duration::from_secs(600)).await;
    let mut waiting = Vec::new();
    for _ in 0..400 {
        if let Entry::Waiting(view) = store.join(&id, JoinRequest::default()).await.unwrap() {
            waiting.push(TicketRef {
                id: view.ticket,
                generation: view.generation,
            });
        }
    }
    assert_eq!(waiting.len(), 400);
    for ticket in waiting.iter().skip(100).take(150) {
        store.leave(&id, *ticket).await.unwrap();
    }
    let server = shared_server();
    let pattern = format!("{prefix}:*");
    let keys = server.cli(&["KEYS", &pattern]);
    assert!(
        keys.lines().filter(|key| key.contains(":line:id:")).count() > 4,
        "{keys}"
    );
    assert!(
        keys.lines().filter(|key| key.contains(":line:")).count() > 8,
        "{keys}"
    );

    assert!(store.delete_room(&id).await.unwrap());
    let left: Vec<String> = server
        .cli(&["KEYS", &pattern])
        .lines()
        .filter(|key| !key.trim().is_empty() && !key.contains("outbox"))
        .map(str::to_owned)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn every_room_total_is_read_and_kept_by_the_scripts() {
    // The scripts name the totals from RoomTotals' field list: each one stored in the meta hash
    // comes back in the snapshot, and an operation writes each one back.
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp(5_000_000)));
    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    let store = RedisStore::new(config, Some(clock)).unwrap();
    let id = room_id("totals");
    full_room(&store, &id, Duration::from_secs(60)).await;
    let server = shared_server();
    let meta = format!("{prefix}:{{{id}}}:meta");
    let mut stored = RoomTotals::default();
    for (index, field) in RoomTotals::FIELDS.iter().enumerate() {
        let value = 1_000 * (index as u64 + 1) + index as u64;
        *(field.slot)(&mut stored) = value;
        server.cli(&["HSET", &meta, field.name, &value.to_string()]);
    }
    assert_eq!(store.snapshot(&id).await.unwrap().totals, stored);

    store.join(&id, JoinRequest::default()).await.unwrap();
    let totals = store.snapshot(&id).await.unwrap().totals;
    assert_eq!(totals.joined, stored.joined + 1);
    for (name, value) in totals.fields() {
        assert_eq!(server.cli(&["HGET", &meta, name]).trim(), value.to_string());
    }

    // A total the room was written without (a field added since) starts at zero.
    server.cli(&["HDEL", &meta, "expired"]);
    assert_eq!(store.snapshot(&id).await.unwrap().totals.expired, 0);
}

#[tokio::test]
async fn the_room_configuration_is_stored_in_meta_field_by_field() {
    // put_room takes the fields by name and stores them as given; load_room reads them back.
    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    let store = RedisStore::new(config, None).unwrap();
    let id = room_id("fields");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 7;
    config.admit_per_minute = 30;
    config.admit_burst = 4;
    config.session_ttl = Duration::from_secs(600);
    config.session_max = Some(Duration::from_secs(3_600));
    config.claim_ttl = Duration::from_secs(45);
    config.ticket_idle_ttl = Duration::from_secs(90);
    config.history_retention = Duration::from_secs(300);
    config.mode = Mode::QueueAll;
    config.order = Order::Random;
    config.priority = vec![anteroom_core::room::PriorityCodes {
        hashes: vec![[0xab; 32]],
        uses: 3,
    }];
    store.put_room(config.clone()).await.unwrap();
    let meta = format!("{prefix}:{{{id}}}:meta");
    let field = |name: &str| {
        shared_server()
            .cli(&["HGET", &meta, name])
            .trim()
            .to_owned()
    };
    let expected = [
        ("mode", "queue_all".to_owned()),
        ("order", "random".to_owned()),
        ("max_active", "7".to_owned()),
        ("per_minute", "30".to_owned()),
        ("capacity", "240000".to_owned()),
        ("session_ttl", "600000".to_owned()),
        ("session_max", "3600000".to_owned()),
        ("claim_ttl", "45000".to_owned()),
        ("idle_ttl", "90000".to_owned()),
        ("retention", "300000".to_owned()),
        ("renew_after", "300000".to_owned()),
        ("before", "passthrough".to_owned()),
        ("after", "passthrough".to_owned()),
        ("priority_codes", format!("{}=3", "ab".repeat(32))),
    ];
    for (name, value) in expected {
        assert_eq!(field(name), value, "{name}");
    }
    assert_eq!(store.room(&id).await.unwrap(), config);
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!(snapshot.mode, Mode::QueueAll);
}

#[tokio::test]
async fn a_room_stored_without_its_retention_keeps_history_for_the_default() {
    // Rooms written before `history_retention` existed have no `retention` meta field: their
    // history is kept for the default hour, as it always was.
    let clock = Arc::new(ManualClock::new(Timestamp(5_000_000)));
    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    let store = RedisStore::new(config, Some(clock.clone() as Arc<dyn Clock>)).unwrap();
    let id = room_id("legacy");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.mode = Mode::QueueAll;
    config.history_retention = Duration::from_secs(60);
    store.put_room(config).await.unwrap();
    let meta = format!("{prefix}:{{{id}}}:meta");
    shared_server().cli(&["HDEL", &meta, "retention"]);
    let entry = store.join(&id, JoinRequest::default()).await.unwrap();
    let ticket = match entry {
        Entry::Waiting(view) => TicketRef {
            id: view.ticket,
            generation: 1,
        },
        Entry::Admitted(_) => panic!("a queue_all room admits nobody at once"),
    };
    store.leave(&id, ticket).await.unwrap();

    clock.advance(DEFAULT_HISTORY_RETENTION - Duration::from_millis(1));
    store.tick(&id).await.unwrap();
    assert!(matches!(
        store.status(&id, ticket).await,
        Err(StoreError::Engine(EngineError::TicketExpired))
    ));
    clock.advance(Duration::from_millis(1));
    store.tick(&id).await.unwrap();
    assert!(matches!(
        store.status(&id, ticket).await,
        Err(StoreError::Engine(EngineError::TicketUnknown))
    ));
}

#[tokio::test]
async fn ticket_and_session_records_keep_their_layout_3_form() {
    // The scripts write tickets and sessions from the store's field lists; rooms written before
    // must read the same, so the records an operation writes are pinned here, ids by name.
    let clock = Arc::new(ManualClock::new(Timestamp(5_000_000)));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let prefix = unique_prefix();
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix.as_str());
    let store = RedisStore::new(config, Some(dyn_clock)).unwrap();
    let id = room_id("records");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 2;
    config.session_max = Some(Duration::from_secs(3_600));
    config.priority = vec![anteroom_core::room::PriorityCodes {
        hashes: vec![anteroom_core::room::priority_code_hash("vip")],
        uses: 1,
    }];
    store.put_room(config).await.unwrap();
    let issued = store
        .issue_session(&id, Some("op|x".to_owned()), Duration::from_secs(60))
        .await
        .unwrap();
    let mut names = vec![(issued.id.to_string(), "S0")];
    let Entry::Admitted(first) = store.join(&id, JoinRequest::default()).await.unwrap() else {
        panic!("nobody waits: in at once");
    };
    names.push((first.ticket.to_string(), "T1"));
    names.push((first.session.id.to_string(), "S1"));
    clock.advance(Duration::from_secs(1));
    let second = waiting_ref(
        &store
            .join(
                &id,
                JoinRequest {
                    identity: Some("ann|100%".to_owned()),
                    return_to: Some("/back?x=1".to_owned()),
                    ..JoinRequest::default()
                },
            )
            .await
            .unwrap(),
    );
    names.push((second.id.to_string(), "T2"));
    let third = waiting_ref(
        &store
            .join(
                &id,
                JoinRequest {
                    priority_code: Some("vip".to_owned()),
                    ..JoinRequest::default()
                },
            )
            .await
            .unwrap(),
    );
    names.push((third.id.to_string(), "T3"));
    let fourth = waiting_ref(&store.join(&id, JoinRequest::default()).await.unwrap());
    names.push((fourth.id.to_string(), "T4"));
    clock.advance(Duration::from_secs(1));
    store.status(&id, second).await.unwrap();
    let server = shared_server();
    let key = |part: &str| format!("{prefix}:{{{id}}}:{part}");
    let dump = |keys: &[&str], names: &[(String, &str)]| {
        let mut entries = Vec::new();
        for part in keys {
            let text = server.cli(&["HGETALL", &key(part)]);
            let lines: Vec<&str> = text.lines().filter(|line| !line.is_empty()).collect();
            for pair in lines.chunks(2) {
                let mut entry = format!("{part} {} {}", pair[0], pair.get(1).unwrap_or(&""));
                for (id, name) in names {
                    entry = entry.replace(id.as_str(), name);
                }
                entries.push(entry);
            }
        }
        entries.sort();
        entries
    };
    let waiting = dump(&["line:0", "tickets", "sessions"], &names);

    store
        .end_session(&id, first.session.id, SessionEnd::Completed)
        .await
        .unwrap();
    store.tick(&id).await.unwrap();
    store.leave(&id, second).await.unwrap();
    clock.advance(Duration::from_secs(1));
    let Entry::Admitted(claimed) = store.status(&id, third).await.unwrap() else {
        panic!("the priority ticket was admitted first");
    };
    names.push((claimed.session.id.to_string(), "S3"));
    store
        .end_session(&id, claimed.session.id, SessionEnd::Revoked)
        .await
        .unwrap();
    assert_eq!(
        waiting,
        [
            "line:0 2 T2|5001000|1000|=ann%7C100%25|=/back?x=1",
            "line:0 3 T3|5001000|0|||p",
            "line:0 4 T4|5001000|0||",
            "sessions S0 a||0|1|5000000|5000000|5060000|5060000|||=op%7Cx",
            "sessions S1 a|T1|1|1|5000000|5000000|5600000|8600000|||",
            "tickets T1 c|1|1|5000000|5000000|S1|||",
        ]
    );
    let mut changed = dump(&["line:0", "tickets", "sessions"], &names);
    changed.retain(|entry| !waiting.contains(entry));
    assert_eq!(
        changed,
        [
            "sessions S1 e|T1|1|1|5000000|5000000|5600000|8600000|5002000|completed|",
            "sessions S3 e|T3|3|1|5003000|5003000|5603000|8603000|5003000|revoked|",
            "tickets T2 e|2|1|5001000|5002000|5002000|left|=ann%7C100%25|=/back?x=1",
            "tickets T3 c|3|1|5001000|5001000|S3||||p",
            "tickets T4 a|4|1|5001000|5001000|5003000|5123000||",
        ]
    );
    // And the store reads them back into the records it wrote.
    let records = store.records(&id).await.unwrap();
    let ticket = |id: TicketId| records.tickets.iter().find(|t| t.id == id).unwrap();
    assert_eq!(ticket(second.id).identity.as_deref(), Some("ann|100%"));
    assert_eq!(ticket(second.id).return_to.as_deref(), Some("/back?x=1"));
    assert!(ticket(third.id).priority && !ticket(fourth.id).priority);
    let session = records.sessions.iter().find(|s| s.id == issued.id).unwrap();
    assert_eq!(
        (session.uid.as_deref(), session.ticket),
        (Some("op|x"), None)
    );
}
