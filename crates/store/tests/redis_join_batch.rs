//! Joins that reach Redis together go as one call of `join.lua` (the store's group commit),
//! and each is answered as if it had run alone: a batch mixing new visitors, one identity
//! joining twice, priority codes used up within the batch, wrong codes, resumes that find
//! nothing and resumes that find a ticket made earlier in the same batch is held to the
//! in-memory engine doing the same joins one at a time; a batch into a closed or missing room
//! is refused for every join and changes nothing; a join that fails in the script fails alone.
//! Behind a stalled Redis (CLIENT PAUSE) a room has several calls in flight, the joins still
//! queued in the node fail at their bound without reaching Redis, and the sent ones are taken
//! back, one cancellation per call. Events switched on reach the calls of a room's batch
//! task that started before. Session ends queued together go as one call of
//! `end_session.lua` with one tick: the freed slots are refilled in line order, the cap holds,
//! an unknown session is refused alone, and the room ends as the in-memory engine's after the
//! same ends one at a time. Statuses queued together go as one call of `status.lua`, each
//! answered as the in-memory engine answers it alone (a claim saved, the same session for a
//! ticket asked twice, unknown and stale tickets refused alone); statuses into a missing room
//! are refused together. Session checks queued together go as one call of `session.lua`, each
//! answered as the same store answers it alone (an ended session, an open one asked twice, one
//! the room never had); checks into a missing room are refused together.
//!
//! The tests run on a current-thread runtime: every join is queued before the store's sending
//! task first runs, so the batch is the whole list, in order. Each test has a redis-server of
//! its own, so `INFO commandstats` counts only its calls.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anteroom_core::engine::{
    EngineError, Entry, JoinRequest, Session, SessionEnd, SessionState, TicketRef,
};
use anteroom_core::room::{Identity, Mode, PriorityCodes, RoomConfig, priority_code_hash};
use anteroom_core::{Clock, ManualClock, RoomId, SessionId, TicketId, Timestamp};
use anteroom_store::{MemoryStore, OutboxLimits, RedisConfig, RedisStore, RoomStore, StoreError};
use anteroom_test_support::redis::RedisServer;
use futures_util::future::join_all;

fn room_id(name: &str) -> RoomId {
    RoomId::new(name).unwrap()
}

/// One slot, taken by the first visitor; an identity per visitor; one priority code with
/// a single use.
fn mixed_room(name: &str) -> RoomConfig {
    let mut config = RoomConfig::with_defaults(room_id(name));
    config.max_active = 1;
    config.admit_per_minute = 60;
    config.identity = Identity::Header("X-User".to_owned());
    config.priority = vec![PriorityCodes {
        hashes: vec![priority_code_hash("vip")],
        uses: 1,
    }];
    config
}

fn visitor(name: &str) -> JoinRequest {
    JoinRequest {
        identity: Some(name.to_owned()),
        ..JoinRequest::default()
    }
}

/// The joins of one batch, in order; see the module docs.
fn mixed_joins() -> Vec<JoinRequest> {
    vec![
        visitor("alice"),
        visitor("bob"),
        // The same user again: resumes alice's ticket, no second place (I1).
        visitor("alice"),
        JoinRequest {
            priority_code: Some("vip".to_owned()),
            ..visitor("carol")
        },
        // The code's only use went to carol, in this same batch.
        JoinRequest {
            priority_code: Some("vip".to_owned()),
            ..visitor("dave")
        },
        JoinRequest {
            priority_code: Some("not-a-code".to_owned()),
            ..visitor("dave")
        },
        // Nothing to resume for erin; bob's ticket, made above, is found.
        JoinRequest {
            resume_only: true,
            ..visitor("erin")
        },
        JoinRequest {
            resume_only: true,
            ..visitor("bob")
        },
        // A held ticket nobody has: a new place.
        JoinRequest {
            resume: Some(TicketRef {
                id: TicketId::from_bytes([7; 16]),
                generation: 1,
            }),
            ..JoinRequest::default()
        },
        visitor("dave"),
        visitor("alice"),
    ]
}

/// What a join's answer says, without the ids each store draws for itself.
fn shape(answer: &Result<Entry, StoreError>) -> String {
    match answer {
        Ok(Entry::Waiting(view)) => format!(
            "waiting at {} with {} ahead of {} (generation {})",
            view.position, view.ahead, view.waiting, view.generation
        ),
        Ok(Entry::Admitted(view)) => format!("admitted at {}", view.position),
        Err(StoreError::Engine(error)) => format!("refused: {error:?}"),
        Err(error) => format!("failed: {error}"),
    }
}

fn ticket(answer: &Result<Entry, StoreError>) -> TicketId {
    match answer {
        Ok(Entry::Waiting(view)) => view.ticket,
        Ok(Entry::Admitted(view)) => view.ticket,
        Err(error) => panic!("no ticket: {error}"),
    }
}

/// How many times the server ran a room function (FCALL) or a script (EVALSHA, EVAL) so far,
/// not counting calls it answered with an error (a script's first call, before it is loaded).
fn script_calls(server: &RedisServer) -> u64 {
    let stat = |line: &str, name: &str| -> u64 {
        line.split([':', ','])
            .find_map(|field| field.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .unwrap_or(0)
    };
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|line| {
            ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                .iter()
                .any(|name| line.starts_with(name))
        })
        .map(|line| stat(line, "calls") - stat(line, "failed_calls"))
        .sum()
}

fn stores(server: &RedisServer) -> (Arc<ManualClock>, RedisStore, MemoryStore) {
    let clock = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
    let shared: Arc<dyn Clock> = clock.clone();
    let redis = RedisStore::new(RedisConfig::standalone(server.url()), Some(shared.clone()))
        .expect("redis store");
    (clock, redis, MemoryStore::new(shared))
}

/// Loads the join script and opens the connection, so the calls counted are the batch's.
async fn warm_up(store: &RedisStore) {
    store.put_room(mixed_room("warm-up")).await.unwrap();
    store
        .join(&room_id("warm-up"), JoinRequest::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_answers_each_join_as_one_at_a_time() {
    let server = RedisServer::start();
    let (_clock, redis, memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("mixed");
    redis.put_room(mixed_room("mixed")).await.unwrap();
    memory.put_room(mixed_room("mixed")).await.unwrap();

    let calls_before = script_calls(&server);
    let batched = join_all(mixed_joins().into_iter().map(|join| redis.join(&id, join))).await;
    assert_eq!(
        script_calls(&server) - calls_before,
        1,
        "the joins went as one call"
    );
    let mut one_at_a_time = Vec::new();
    for join in mixed_joins() {
        one_at_a_time.push(memory.join(&id, join).await);
    }

    let batched_shapes: Vec<String> = batched.iter().map(shape).collect();
    let reference: Vec<String> = one_at_a_time.iter().map(shape).collect();
    assert_eq!(batched_shapes, reference);
    // The refusals the batch had to get right from what earlier joins of it did.
    assert_eq!(
        batched_shapes[4],
        format!("refused: {:?}", EngineError::InvalidPriorityCode)
    );
    assert_eq!(
        batched_shapes[6],
        format!("refused: {:?}", EngineError::NothingToResume)
    );
    // One place per user: alice's three joins and bob's two name one ticket each.
    assert_eq!(ticket(&batched[0]), ticket(&batched[2]));
    assert_eq!(ticket(&batched[0]), ticket(&batched[10]));
    assert_eq!(ticket(&batched[1]), ticket(&batched[7]));
    assert_eq!(
        redis.snapshot(&id).await.unwrap(),
        memory.snapshot(&id).await.unwrap(),
        "the room after the batch"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_into_a_closed_or_missing_room_is_refused_for_every_join() {
    let server = RedisServer::start();
    let (_clock, redis, _memory) = stores(&server);
    warm_up(&redis).await;
    let closed = room_id("closed");
    let mut config = mixed_room("closed");
    config.mode = Mode::Closed;
    redis.put_room(config).await.unwrap();
    let before = redis.snapshot(&closed).await.unwrap();

    let calls_before = script_calls(&server);
    let answers = join_all(
        mixed_joins()
            .into_iter()
            .map(|join| redis.join(&closed, join)),
    )
    .await;
    assert_eq!(script_calls(&server) - calls_before, 1);
    for answer in &answers {
        assert_eq!(
            shape(answer),
            format!("refused: {:?}", EngineError::RoomClosed)
        );
    }
    assert_eq!(redis.snapshot(&closed).await.unwrap(), before);

    let missing = room_id("missing");
    let answers = join_all(
        mixed_joins()
            .into_iter()
            .map(|join| redis.join(&missing, join)),
    )
    .await;
    for answer in &answers {
        assert!(
            matches!(answer, Err(StoreError::RoomNotFound(room)) if *room == missing),
            "{answer:?}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn joins_queued_behind_a_call_in_flight_go_together() {
    let server = RedisServer::start();
    let (_clock, redis, _memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("crowd");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 1;
    redis.put_room(config).await.unwrap();

    let calls_before = script_calls(&server);
    let answers = join_all((0..300).map(|_| redis.join(&id, JoinRequest::default()))).await;
    let calls = script_calls(&server) - calls_before;
    // At most 128 joins per call: 300 joins queued at once take three calls.
    assert_eq!(calls, 3, "script calls for 300 joins");
    let mut positions: Vec<u64> = answers
        .iter()
        .map(|answer| match answer {
            Ok(Entry::Waiting(view)) => view.position,
            Ok(Entry::Admitted(view)) => view.position,
            Err(error) => panic!("{error}"),
        })
        .collect();
    // In the order they were queued, each its own place.
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]));
    positions.dedup();
    assert_eq!(positions.len(), 300);
    assert_eq!(redis.snapshot(&id).await.unwrap().waiting, 299);
}

/// Waits (up to ten seconds) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within ten seconds");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_join_that_fails_in_the_script_fails_alone() {
    let server = RedisServer::start();
    let (_clock, redis, _memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("confined");
    redis.put_room(mixed_room("confined")).await.unwrap();
    // Any join with an identity now fails inside the script (WRONGTYPE on the identity
    // index); joins without one never touch it.
    server.cli(&["SET", "anteroom:{confined}:identities", "not a hash"]);

    let calls_before = script_calls(&server);
    let answers = join_all(
        [
            JoinRequest::default(),
            visitor("alice"),
            JoinRequest::default(),
        ]
        .into_iter()
        .map(|join| redis.join(&id, join)),
    )
    .await;
    assert!(
        matches!(answers[0], Ok(Entry::Admitted(_))),
        "{:?}",
        answers[0]
    );
    assert!(
        matches!(answers[2], Ok(Entry::Waiting(_))),
        "{:?}",
        answers[2]
    );
    match &answers[1] {
        Err(StoreError::Backend { message, .. }) => {
            assert!(message.contains("failed for this request"), "{message}");
            assert!(message.contains("WRONGTYPE"), "{message}");
        }
        other => panic!("alice's join: {other:?}"),
    }
    let snapshot = redis.snapshot(&id).await.unwrap();
    assert_eq!(
        snapshot.totals.joined, 2,
        "the joins around the failed one were kept"
    );
    assert_eq!(snapshot.waiting, 1);
    // One call for the three joins, then one cancellation for alice's: it made no ticket, so
    // its id is remembered and a late run of it would be refused.
    eventually("alice's join cancelled", || {
        server
            .cli(&["ZCARD", "anteroom:{confined}:cancelled"])
            .trim()
            == "1"
    })
    .await;
    assert_eq!(
        script_calls(&server) - calls_before,
        3,
        "join, snapshot, cancel"
    );
}

/// Redis stops answering (CLIENT PAUSE for three seconds; the store's bound is two) while
/// 600 joins come in at once: the room's task sends four calls of 128 (the calls a room may
/// have in flight) and keeps the other 88 queued. At the bound every caller is answered an
/// error; the 88 never reach Redis, and the 512 sent are taken back by one cancellation per
/// call. Whether Redis then runs the stalled joins (their tickets leave again) or not (their
/// ids are remembered as cancelled), each sent join is undone exactly once, no ticket is left
/// waiting, and the next join is answered.
#[tokio::test(flavor = "current_thread")]
async fn joins_behind_a_stalled_redis_fail_at_their_bound_and_only_sent_ones_are_cancelled() {
    let server = RedisServer::start();
    let (_clock, redis, _memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("stalled");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 1;
    redis.put_room(config).await.unwrap();
    let calls_before = script_calls(&server);

    server.cli(&["CLIENT", "PAUSE", "3000", "ALL"]);
    let started = Instant::now();
    let answers = join_all((0..600).map(|_| redis.join(&id, JoinRequest::default()))).await;
    let answered_after = started.elapsed();
    let (mut unsent, mut taken_back) = (0, 0);
    for answer in &answers {
        match answer {
            Err(StoreError::Backend { message, .. }) if message.contains("never sent") => {
                unsent += 1;
            }
            Err(StoreError::Backend { message, .. }) if message.contains("taken back") => {
                taken_back += 1;
            }
            other => panic!("a join behind a stalled redis: {other:?}"),
        }
    }
    assert_eq!(
        (taken_back, unsent),
        (512, 88),
        "sent, and left in the node's queue"
    );
    assert!(
        answered_after < Duration::from_millis(2900),
        "answered at the bound, not when redis woke up: {answered_after:?}"
    );

    // Every sent join undone once: it made a ticket, which was taken back (the first, admitted
    // at once, by abandoning its session), or its id is remembered as cancelled.
    let undone = || {
        let field = |key: &str, command: &[&str]| -> u64 {
            let mut args = command.to_vec();
            args.insert(1, key);
            server.cli(&args).trim().parse().unwrap_or(0)
        };
        let remembered = field("anteroom:{stalled}:cancelled", &["ZCARD"]);
        let meta = |name: &str| field("anteroom:{stalled}:meta", &["HGET", name]);
        let taken_back = meta("left") + meta("sessions_abandoned");
        (meta("joined"), taken_back, remembered)
    };
    // Redis may run the stalled joins before the cancellations reach it: `joined` then counts
    // all of them at once, and the tickets leave only when the cancellations run.
    eventually("the sent joins undone", || {
        let (joined, taken_back, remembered) = undone();
        joined + remembered == 512 && taken_back == joined
    })
    .await;
    let snapshot = redis.snapshot(&id).await.unwrap();
    let totals = snapshot.totals;
    assert_eq!(
        (
            snapshot.waiting,
            snapshot.active,
            snapshot.admitted_unclaimed
        ),
        (0, 0, 0),
        "{snapshot:?}"
    );
    assert_eq!(
        totals.joined,
        totals.left + totals.sessions_abandoned,
        "{snapshot:?}"
    );
    assert!(totals.joined <= 512, "{snapshot:?}");
    // At most the four join calls and four cancellations, and the snapshot.
    let calls = script_calls(&server) - calls_before;
    eprintln!(
        "behind the stall: {taken_back} joins sent, {unsent} not, answered after \
         {answered_after:?}; {} tickets made and taken back, {} ids remembered as cancelled, \
         {calls} script calls",
        totals.joined,
        512 - totals.joined
    );
    assert!((5..=9).contains(&calls), "{calls} script calls");

    let after = redis.join(&id, JoinRequest::default()).await;
    assert!(matches!(after, Ok(Entry::Admitted(_))), "{after:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn events_switched_on_reach_a_batch_task_started_before() {
    let server = RedisServer::start();
    let (_clock, redis, _memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("events");
    redis.put_room(mixed_room("events")).await.unwrap();

    // The join is queued (and the room's task made) first; the events go on before the task
    // makes its call.
    let (answer, ()) = futures_util::future::join(redis.join(&id, visitor("alice")), async {
        redis.event_outbox(OutboxLimits::default()).unwrap();
    })
    .await;
    answer.unwrap();
    let events: u64 = server
        .cli(&["XLEN", "anteroom:{events}:outbox"])
        .trim()
        .parse()
        .unwrap();
    assert!(events >= 1, "the join's events were written: {events}");
}

/// Three slots, a line of seven behind them; the three sessions end together, with one unknown
/// session among them.
#[tokio::test(flavor = "current_thread")]
async fn ends_queued_together_go_as_one_call_refill_in_line_order_and_keep_the_cap() {
    let server = RedisServer::start();
    let (_clock, redis, memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("ends");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 3;
    config.admit_per_minute = 60_000;
    config.admit_burst = 10;
    redis.put_room(config.clone()).await.unwrap();
    memory.put_room(config).await.unwrap();
    let mut entries = Vec::new();
    let mut memory_entries = Vec::new();
    for _ in 0..10 {
        entries.push(redis.join(&id, JoinRequest::default()).await.unwrap());
        memory_entries.push(memory.join(&id, JoinRequest::default()).await.unwrap());
    }
    let sessions = |entries: &[Entry]| -> Vec<SessionId> {
        entries
            .iter()
            .filter_map(|entry| match entry {
                Entry::Admitted(view) => Some(view.session.id),
                Entry::Waiting(_) => None,
            })
            .collect()
    };
    let admitted = sessions(&entries);
    assert_eq!(admitted.len(), 3, "the first three hold the slots");
    let unknown = SessionId::from_bytes([9; 16]);
    let mut ends = admitted.clone();
    ends.insert(1, unknown);

    let calls_before = script_calls(&server);
    let answers = join_all(
        ends.iter()
            .map(|session| redis.end_session(&id, *session, SessionEnd::Completed)),
    )
    .await;
    assert_eq!(
        script_calls(&server) - calls_before,
        1,
        "the four ends went as one call"
    );
    for (session, answer) in ends.iter().zip(&answers) {
        if *session == unknown {
            assert!(
                matches!(answer, Err(StoreError::Engine(EngineError::SessionUnknown))),
                "{answer:?}"
            );
            continue;
        }
        let ended = answer.as_ref().expect("an ended session");
        assert_eq!(ended.id, *session);
        assert!(matches!(
            ended.state,
            SessionState::Ended {
                reason: SessionEnd::Completed,
                ..
            }
        ));
    }
    for session in sessions(&memory_entries) {
        memory
            .end_session(&id, session, SessionEnd::Completed)
            .await
            .unwrap_or_else(|error| panic!("memory end: {error}"));
    }

    // The next three in line were admitted by that call, nobody behind them (I1, I2).
    let mut statuses = Vec::new();
    for entry in &entries[3..] {
        let ticket = match entry {
            Entry::Waiting(view) => view.ticket,
            Entry::Admitted(_) => panic!("only three were admitted at once"),
        };
        statuses.push(
            redis
                .status(
                    &id,
                    TicketRef {
                        id: ticket,
                        generation: 1,
                    },
                )
                .await
                .unwrap(),
        );
    }
    let admitted_now: Vec<bool> = statuses
        .iter()
        .map(|status| matches!(status, Entry::Admitted(_)))
        .collect();
    assert_eq!(
        admitted_now,
        [true, true, true, false, false, false, false],
        "the freed slots went to the front of the line"
    );
    let snapshot = redis.snapshot(&id).await.unwrap();
    assert_eq!(snapshot.active, 3, "the cap holds");
    assert_eq!(snapshot.totals.completed, 3);
    assert_eq!(snapshot.waiting, 4);
    for session in &admitted {
        let stored = redis.session(&id, *session).await.unwrap().unwrap();
        assert_ne!(
            stored.state,
            SessionState::Active,
            "the ended pass is revoked"
        );
    }
    // Ending them again, together, changes nothing.
    let again = join_all(
        admitted
            .iter()
            .map(|session| redis.end_session(&id, *session, SessionEnd::Abandoned)),
    )
    .await;
    assert!(again.iter().all(Result::is_ok));
    let after = redis.snapshot(&id).await.unwrap();
    assert_eq!((after.active, after.totals.completed), (3, 3));
    assert_eq!(after.totals.sessions_abandoned, 0);

    // The in-memory engine, ending the same sessions one at a time, admitted as many.
    let memory_snapshot = memory.snapshot(&id).await.unwrap();
    assert_eq!(
        (
            memory_snapshot.admitted_unclaimed + memory_snapshot.active,
            memory_snapshot.waiting
        ),
        (
            snapshot.admitted_unclaimed + snapshot.active,
            snapshot.waiting
        ),
        "the room after the ends, against ending one at a time"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn statuses_queued_together_go_as_one_call_each_answered_as_alone() {
    let server = RedisServer::start();
    let (_clock, redis, memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("polls");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 2;
    config.admit_per_minute = 60_000;
    config.admit_burst = 10;
    let mut redis_tickets = Vec::new();
    let mut memory_tickets = Vec::new();
    let mut first_sessions = Vec::new();
    for (store, tickets) in [
        (&redis as &dyn RoomStore, &mut redis_tickets),
        (&memory as &dyn RoomStore, &mut memory_tickets),
    ] {
        store.put_room(config.clone()).await.unwrap();
        for _ in 0..6 {
            let entry = store.join(&id, JoinRequest::default()).await;
            tickets.push(TicketRef {
                id: ticket(&entry),
                generation: 1,
            });
        }
        // The first visitor leaves: the tick of its end admits the third, who has not claimed.
        let Ok(Entry::Admitted(first)) = store.status(&id, tickets[0]).await else {
            panic!("the first visitor holds a slot");
        };
        first_sessions.push(first.session.id);
        store
            .end_session(&id, first.session.id, SessionEnd::Completed)
            .await
            .unwrap();
    }
    // Per store: the second (claimed at its join), the third (admitted, claims now, and asks
    // again in the same call), two waiting, an unknown ticket and a stale generation.
    let asks = |tickets: &[TicketRef]| {
        vec![
            tickets[1],
            tickets[2],
            tickets[3],
            tickets[2],
            tickets[5],
            TicketRef {
                id: TicketId::from_bytes([7; 16]),
                generation: 1,
            },
            TicketRef {
                id: tickets[4].id,
                generation: 2,
            },
        ]
    };

    let calls_before = script_calls(&server);
    let answers = join_all(
        asks(&redis_tickets)
            .into_iter()
            .map(|asked| redis.status(&id, asked)),
    )
    .await;
    assert_eq!(
        script_calls(&server) - calls_before,
        1,
        "the seven statuses went as one call"
    );
    let mut alone = Vec::new();
    for asked in asks(&memory_tickets) {
        alone.push(memory.status(&id, asked).await);
    }
    let shapes = |answers: &[Result<Entry, StoreError>]| -> Vec<String> {
        answers.iter().map(shape).collect()
    };
    assert_eq!(
        shapes(&answers),
        shapes(&alone),
        "each status as the in-memory engine answers it alone"
    );
    let session = |answer: &Result<Entry, StoreError>| match answer {
        Ok(Entry::Admitted(view)) => view.session.id,
        other => panic!("not admitted: {other:?}"),
    };
    assert_eq!(
        session(&answers[1]),
        session(&answers[3]),
        "asked twice in one call, the claimed session is the same (I7)"
    );
    assert!(matches!(
        answers[5],
        Err(StoreError::Engine(EngineError::TicketUnknown))
    ));
    assert!(matches!(
        answers[6],
        Err(StoreError::Engine(EngineError::TicketExpired))
    ));
    let snapshot = redis.snapshot(&id).await.unwrap();
    assert_eq!(
        (
            snapshot.active,
            snapshot.admitted_unclaimed,
            snapshot.waiting
        ),
        (2, 0, 3),
        "the claim was made"
    );
    assert_eq!(
        snapshot.totals.passes,
        memory.snapshot(&id).await.unwrap().totals.passes,
        "the room's totals were saved with the claim"
    );
    assert_eq!(
        redis
            .session(&id, session(&answers[1]))
            .await
            .unwrap()
            .map(|s| s.state),
        Some(SessionState::Active)
    );

    // Statuses into a missing room are refused together, in one call.
    let missing = room_id("missing");
    let calls_before = script_calls(&server);
    let refused = join_all(
        redis_tickets[..2]
            .iter()
            .map(|asked| redis.status(&missing, *asked)),
    )
    .await;
    assert_eq!(script_calls(&server) - calls_before, 1);
    for answer in refused {
        assert!(
            matches!(answer, Err(StoreError::RoomNotFound(ref room)) if *room == missing),
            "{answer:?}"
        );
    }
}

/// The tickets of `entries`, as a status asks for them.
fn tickets_of(entries: &[Result<Entry, StoreError>]) -> Vec<TicketRef> {
    entries
        .iter()
        .map(|entry| TicketRef {
            id: ticket(entry),
            generation: 1,
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_status_that_fails_in_the_script_fails_alone_and_a_failed_call_fails_every_status() {
    let server = RedisServer::start();
    let (_clock, redis, _memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("broken");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 2;
    config.admit_per_minute = 60_000;
    config.admit_burst = 10;
    redis.put_room(config).await.unwrap();
    let mut entries = Vec::new();
    for _ in 0..4 {
        entries.push(redis.join(&id, JoinRequest::default()).await);
    }
    let first_session = match &entries[0] {
        Ok(Entry::Admitted(view)) => view.session.id,
        other => panic!("the first holds a slot: {other:?}"),
    };
    let tickets = tickets_of(&entries);
    // The first leaves: the third is admitted and has not claimed yet.
    redis
        .end_session(&id, first_session, SessionEnd::Completed)
        .await
        .unwrap();
    let passes_before = redis.snapshot(&id).await.unwrap().totals.passes;
    // The fourth's record in the line is broken (no columns): its status fails in the script.
    let Ok(Entry::Waiting(fourth)) = &entries[3] else {
        panic!("the fourth waits: {:?}", entries[3]);
    };
    server.cli(&[
        "HSET",
        &format!("anteroom:{{{id}}}:line:0"),
        &fourth.position.to_string(),
        &format!("{}|", fourth.ticket),
    ]);
    let calls_before = script_calls(&server);
    let answers = join_all([tickets[3], tickets[2]].map(|asked| redis.status(&id, asked))).await;
    assert_eq!(script_calls(&server) - calls_before, 1, "one call for both");
    match &answers[0] {
        Err(StoreError::Backend { message, .. }) => {
            assert!(message.contains("failed for this request"), "{message}");
        }
        other => panic!("the broken status: {other:?}"),
    }
    assert!(
        matches!(answers[1], Ok(Entry::Admitted(_))),
        "{:?}",
        answers[1]
    );
    assert_eq!(
        redis.snapshot(&id).await.unwrap().totals.passes,
        passes_before + 1,
        "the claim beside the failed status was saved with the room"
    );

    // A call that fails as a whole (the room's meta is not a hash) fails every status of it.
    let id = room_id("wrong-type");
    redis
        .put_room(RoomConfig::with_defaults(id.clone()))
        .await
        .unwrap();
    let waiting = tickets_of(&[
        redis.join(&id, JoinRequest::default()).await,
        redis.join(&id, JoinRequest::default()).await,
    ]);
    let meta = format!("anteroom:{{{id}}}:meta");
    server.cli(&["DEL", &meta]);
    server.cli(&["SET", &meta, "not a hash"]);
    let failed = join_all(waiting.into_iter().map(|asked| redis.status(&id, asked))).await;
    for answer in failed {
        match answer {
            Err(StoreError::Backend { message, .. }) => {
                assert!(message.contains("status"), "{message}");
            }
            other => panic!("a status of the failed call: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn more_statuses_than_a_call_carries_go_in_two_calls_each_answered_its_own() {
    let server = RedisServer::start();
    let (_clock, redis, _memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("many");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 1;
    redis.put_room(config).await.unwrap();
    let mut entries = Vec::new();
    for _ in 0..140 {
        entries.push(redis.join(&id, JoinRequest::default()).await);
    }
    // The first holds the slot; the other 139 wait, in order.
    let asked = &tickets_of(&entries)[1..];
    let calls_before = script_calls(&server);
    let answers = join_all(asked.iter().map(|ticket| redis.status(&id, *ticket))).await;
    assert_eq!(
        script_calls(&server) - calls_before,
        2,
        "139 statuses: a call of 128, then one of 11"
    );
    for (index, (ticket, answer)) in asked.iter().zip(&answers).enumerate() {
        match answer {
            Ok(Entry::Waiting(view)) => {
                assert_eq!(
                    view.ticket, ticket.id,
                    "each caller hears of its own ticket"
                );
                assert_eq!(view.ahead, index as u64);
            }
            other => panic!("status {index}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn session_checks_queued_together_go_as_one_call_each_answered_as_alone() {
    let server = RedisServer::start();
    let (_clock, redis, memory) = stores(&server);
    warm_up(&redis).await;
    let id = room_id("checks");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.max_active = 3;
    config.admit_per_minute = 60_000;
    config.admit_burst = 10;
    // Per store: three visitors admitted at their joins, the first of them ended since.
    let mut sessions = Vec::new();
    for store in [&redis as &dyn RoomStore, &memory as &dyn RoomStore] {
        store.put_room(config.clone()).await.unwrap();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let entry = store.join(&id, JoinRequest::default()).await;
            let Ok(Entry::Admitted(admitted)) = entry else {
                panic!("admitted at the join: {entry:?}");
            };
            ids.push(admitted.session);
        }
        store
            .end_session(&id, ids[0].id, SessionEnd::Completed)
            .await
            .unwrap();
        sessions.push(ids);
    }
    let unknown = SessionId::from_bytes([9; 16]);
    // The ended one, the two open ones (one asked twice) and one the room never had.
    let asks = |opened: &[Session]| {
        vec![
            opened[0].id,
            opened[1].id,
            opened[2].id,
            unknown,
            opened[1].id,
        ]
    };

    let calls_before = script_calls(&server);
    let answers = join_all(
        asks(&sessions[0])
            .into_iter()
            .map(|session| redis.session(&id, session)),
    )
    .await;
    assert_eq!(
        script_calls(&server) - calls_before,
        1,
        "the five checks went as one call"
    );
    let mut alone = Vec::new();
    for session in asks(&sessions[0]) {
        alone.push(redis.session(&id, session).await.unwrap());
    }
    let answers: Vec<Option<Session>> = answers.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        answers, alone,
        "each check as the same store answers it alone"
    );
    // What each answer says, held to the in-memory engine's.
    let states = |answers: Vec<Option<Session>>| -> Vec<Option<SessionState>> {
        answers
            .into_iter()
            .map(|session| session.map(|session| session.state))
            .collect()
    };
    let mut in_memory = Vec::new();
    for session in asks(&sessions[1]) {
        in_memory.push(memory.session(&id, session).await.unwrap());
    }
    assert_eq!(states(answers.clone()), states(in_memory));
    assert!(matches!(
        answers[0].as_ref().map(|session| session.state),
        Some(SessionState::Ended { .. })
    ));
    assert_eq!(
        answers[1].as_ref(),
        Some(&sessions[0][1]),
        "an open session's record as its join made it"
    );
    assert_eq!(answers[3], None, "a session the room never had");

    // Checks into a room that does not exist are refused together, in one call.
    let missing = room_id("no-such-room");
    let calls_before = script_calls(&server);
    let refused = join_all((0..3).map(|_| redis.session(&missing, unknown))).await;
    assert_eq!(script_calls(&server) - calls_before, 1);
    for answer in refused {
        assert!(
            matches!(answer, Err(StoreError::RoomNotFound(ref room)) if *room == missing),
            "{answer:?}"
        );
    }
}
