//! What one call of each room operation costs Redis, as Redis measures it: `INFO
//! commandstats` (`usec` over `calls` of the script command) reset before each operation, in a
//! room with a line of 6,000 waiting. It checks that each operation is one call (a batch of
//! 128 joins one call, as a batch of 128 statuses or of 128 session checks), so the figures it
//! prints are per call of that operation:
//!
//! ```sh
//! cargo test -p anteroom-store --test redis_script_cost -- --nocapture
//! ```
//!
//! It also measures what one waiting ticket costs Redis's memory in a line of 200,000: the
//! `used_memory` the joins added, and `MEMORY USAGE` of each kind of key, per ticket; and what
//! a node's SSE view reads of that line (`line_masks`) costs a call. Session ends that refill
//! their slots from a line are measured one per call and as a node sends them when they queue
//! together (two calls for 72 ends).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::engine::{Entry, JoinRequest, SessionEnd, TicketRef};
use anteroom_core::room::RoomConfig;
use anteroom_core::{Clock, ManualClock, RoomId, Timestamp};
use anteroom_store::{RedisConfig, RedisStore, RoomStore};
use anteroom_test_support::redis::RedisServer;
use futures_util::future::join_all;

const LINE: usize = 6_000;
const BATCH: usize = 128;

/// What Redis counted since the last reset: the script calls it answered (not those it
/// answered with an error: a script's first call, before it is loaded), the microseconds they
/// took, and the microseconds the commands run inside them took.
fn script_stats(server: &RedisServer) -> (u64, u64, u64) {
    let stat = |line: &str, name: &str| -> u64 {
        line.split([':', ','])
            .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    let scripts = ["cmdstat_evalsha:", "cmdstat_eval:", "cmdstat_fcall:"];
    let (mut calls, mut usec, mut inside) = (0, 0, 0);
    for line in server.cli(&["INFO", "commandstats"]).lines() {
        if scripts.iter().any(|name| line.starts_with(name)) {
            calls += stat(line, "calls") - stat(line, "failed_calls");
            usec += stat(line, "usec");
        } else if line.starts_with("cmdstat_") && !line.starts_with("cmdstat_script|") {
            inside += stat(line, "usec");
        }
    }
    (calls, usec, inside)
}

/// Prints and checks one operation's figures: `expected_calls` script calls.
fn report(server: &RedisServer, operation: &str, expected_calls: u64) {
    let (calls, usec, inside) = script_stats(server);
    assert_eq!(calls, expected_calls, "{operation}: script calls");
    println!(
        "{operation:<22} {calls:>6} calls {:>9.1} us per call, {:>9.1} of them in commands",
        usec as f64 / calls as f64,
        inside as f64 / calls as f64
    );
    server.cli(&["CONFIG", "RESETSTAT"]);
}

/// The ticket a join left waiting, if it waits.
fn waiting_ticket(entry: &Entry) -> Option<TicketRef> {
    match entry {
        Entry::Waiting(view) => Some(TicketRef {
            id: view.ticket,
            generation: view.generation,
        }),
        Entry::Admitted(_) => None,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn cost_of_one_call_of_each_room_operation() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
    let shared: Arc<dyn Clock> = clock.clone();
    let store = RedisStore::new(RedisConfig::standalone(server.url()), Some(shared)).unwrap();
    let room = RoomId::new("cost").unwrap();
    let mut config = RoomConfig::with_defaults(room.clone());
    config.max_active = 1;
    config.ticket_idle_ttl = Duration::from_secs(3600);
    store.put_room(config).await.unwrap();
    // The line: batches of joins, as a busy node sends them.
    let mut tickets = Vec::new();
    while tickets.len() < LINE {
        let joins = (0..BATCH).map(|_| store.join(&room, JoinRequest::default()));
        for answer in join_all(joins).await {
            tickets.extend(waiting_ticket(&answer.unwrap()));
        }
    }
    server.cli(&["CONFIG", "RESETSTAT"]);

    for _ in 0..500 {
        store.join(&room, JoinRequest::default()).await.unwrap();
    }
    report(&server, "join, 1 per call", 500);
    for _ in 0..20 {
        let joins = (0..BATCH).map(|_| store.join(&room, JoinRequest::default()));
        for answer in join_all(joins).await {
            answer.unwrap();
        }
    }
    report(&server, "join, 128 per call", 20);
    for ticket in &tickets[..1_000] {
        store.status(&room, *ticket).await.unwrap();
    }
    report(&server, "status, 1 per call", 1_000);
    // Polls as a busy node sends them: 128 in a call.
    for asked in tickets[1_000..1_000 + 7 * BATCH].chunks(BATCH) {
        for answer in join_all(asked.iter().map(|ticket| store.status(&room, *ticket))).await {
            answer.unwrap();
        }
    }
    report(&server, "status, 128 per call", 7);
    for _ in 0..100 {
        clock.advance(Duration::from_millis(500));
        store.tick(&room).await.unwrap();
    }
    report(&server, "tick", 100);
    for ticket in &tickets[2_000..2_500] {
        store.leave(&room, *ticket).await.unwrap();
    }
    report(&server, "leave", 500);
    // Sessions issued directly need free slots: a room of their own.
    let room = RoomId::new("sessions").unwrap();
    let mut config = RoomConfig::with_defaults(room.clone());
    config.max_active = 1_000;
    store.put_room(config).await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let mut sessions = Vec::new();
    for _ in 0..200 {
        let session = store
            .issue_session(&room, None, Duration::from_secs(600))
            .await
            .unwrap();
        sessions.push(session.id);
    }
    report(&server, "issue_session", 200);
    for session in &sessions {
        store.session(&room, *session).await.unwrap().unwrap();
    }
    report(&server, "session, 1 per call", 200);
    // Checks as a busy node sends them (the gateway's, `session_batch.rs`): 128 in a call.
    let checked: Vec<_> = sessions.iter().cycle().take(7 * BATCH).collect();
    for asked in checked.chunks(BATCH) {
        for answer in join_all(asked.iter().map(|session| store.session(&room, **session))).await {
            answer.unwrap().unwrap();
        }
    }
    report(&server, "session, 128 per call", 7);
    clock.advance(Duration::from_secs(400));
    for session in &sessions {
        store.renew_session(&room, *session).await.unwrap();
    }
    report(&server, "renew_session", 200);
    for session in &sessions {
        store
            .end_session(&room, *session, SessionEnd::Completed)
            .await
            .unwrap();
    }
    report(&server, "end_session", 200);

    // Ends that refill their slots from a line, one call per end and then a node's ends sent
    // together (`end_batch.rs`: at most 64 a call, one tick for them all).
    let room = RoomId::new("ends").unwrap();
    let mut config = RoomConfig::with_defaults(room.clone());
    config.max_active = 200;
    config.admit_per_minute = 600_000;
    config.admit_burst = 10_000;
    config.ticket_idle_ttl = Duration::from_secs(3600);
    store.put_room(config).await.unwrap();
    let mut sessions = Vec::new();
    for _ in 0..10 {
        let joins = (0..BATCH).map(|_| store.join(&room, JoinRequest::default()));
        for answer in join_all(joins).await {
            if let Entry::Admitted(view) = answer.unwrap() {
                sessions.push(view.session.id);
            }
        }
    }
    assert_eq!(sessions.len(), 200, "the first 200 hold the slots");
    server.cli(&["CONFIG", "RESETSTAT"]);
    for session in &sessions[..128] {
        store
            .end_session(&room, *session, SessionEnd::Completed)
            .await
            .unwrap();
    }
    report(&server, "end_session, refills", 128);
    let ends = sessions[128..]
        .iter()
        .map(|session| store.end_session(&room, *session, SessionEnd::Completed));
    for answer in join_all(ends).await {
        answer.unwrap();
    }
    report(&server, "end_session, 72 queued", 2);
    assert_eq!(store.snapshot(&room).await.unwrap().admitted_unclaimed, 200);
}

/// `INFO memory`'s `used_memory`.
fn used_memory(server: &RedisServer) -> u64 {
    server
        .cli(&["INFO", "memory"])
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap()
}

/// `MEMORY USAGE` of every key of `room`, summed by kind (the key's last part, a bucket's
/// number dropped), and how many keys of each kind there are.
fn memory_by_key_kind(server: &RedisServer, room: &str) -> Vec<(String, u64, usize)> {
    let keys = server.cli(&["--scan", "--pattern", &format!("*{{{room}}}*")]);
    let mut kinds: Vec<(String, u64, usize)> = Vec::new();
    for key in keys.lines().filter(|key| !key.is_empty()) {
        let bytes: u64 = server
            .cli(&["MEMORY", "USAGE", key, "SAMPLES", "0"])
            .trim()
            .parse()
            .unwrap();
        let (_, part) = key.split_once("}:").unwrap();
        let kind = part
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .to_owned();
        match kinds.iter_mut().find(|(known, _, _)| *known == kind) {
            Some(entry) => {
                entry.1 += bytes;
                entry.2 += 1;
            }
            None => kinds.push((kind, bytes, 1)),
        }
    }
    kinds.sort();
    kinds
}

#[tokio::test(flavor = "current_thread")]
async fn bytes_per_waiting_ticket_in_a_line_of_200_000() {
    const WAITING: u64 = 200_000;
    let server = RedisServer::start();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
    let store = RedisStore::new(RedisConfig::standalone(server.url()), Some(clock)).unwrap();
    let room = RoomId::new("memory").unwrap();
    let mut config = RoomConfig::with_defaults(room.clone());
    config.max_active = 1;
    store.put_room(config).await.unwrap();
    // The first join takes the slot; every later one waits.
    store.join(&room, JoinRequest::default()).await.unwrap();
    let before = used_memory(&server);
    let mut joined = 0;
    while joined < WAITING {
        let batch = BATCH.min((WAITING - joined) as usize);
        let joins = (0..batch).map(|_| store.join(&room, JoinRequest::default()));
        for answer in join_all(joins).await {
            assert!(waiting_ticket(&answer.unwrap()).is_some());
        }
        joined += batch as u64;
    }
    let added = used_memory(&server) - before;
    assert_eq!(store.snapshot(&room).await.unwrap().waiting, WAITING);
    // What a node's SSE view reads of this line on every refresh.
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..20 {
        assert_eq!(store.line_masks(&room).await.unwrap().len(), WAITING);
    }
    report(&server, "line_masks, 200,000 waiting", 20);
    let per_ticket = added as f64 / WAITING as f64;
    println!("{WAITING} waiting: used_memory +{added} bytes, {per_ticket:.1} bytes per ticket");
    for (kind, bytes, keys) in memory_by_key_kind(&server, "memory") {
        println!(
            "  {kind:<12} {:>7.1} bytes per ticket ({keys} keys)",
            bytes as f64 / WAITING as f64
        );
    }
    assert!(
        per_ticket <= 100.0,
        "{per_ticket:.1} bytes per waiting ticket"
    );
}
