//! The Lua room scripts held to the room engine: random operation sequences run side by side
//! on [`MemoryStore`] (the reference) and [`RedisStore`] under one manual clock, and every
//! answer, snapshot (the measured rate to the last bit), record and waiting line must agree.
//!
//! Ids differ between the two (each store draws its own), so answers are compared with ids
//! left out, and each test ticket or session is tracked as a pair of ids. Random-order
//! admission draws differently by design; it is checked on its own in `tests/redis.rs`.

#![allow(clippy::unwrap_used)]

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::Duration;

use anteroom_core::engine::{
    Entry, JoinRequest, RoomSnapshot, Session, SessionEnd, SessionState, Ticket, TicketRef,
    TicketState,
};
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_core::{Clock, ManualClock, RoomId, SessionId, Timestamp};
use anteroom_store::{MemoryStore, RedisConfig, RedisStore, RoomStore, StoreError};
use anteroom_test_support::redis::{shared_server, unique_prefix};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const CASES: u32 = 48;
const STEPS: usize = 120;

#[derive(Debug, Clone)]
struct Limits {
    mode: Mode,
    max_active: u64,
    admit_per_minute: u64,
    admit_burst: u64,
    claim_secs: u64,
    session_secs: u64,
    session_max_secs: Option<u64>,
    idle_secs: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Join {
        identity: Option<u8>,
        return_to: Option<u8>,
        resume: Option<usize>,
        resume_only: bool,
    },
    Status(usize),
    Leave(usize),
    EndSession(usize, u8),
    Renew(usize),
    Issue {
        uid: Option<u8>,
        ttl_secs: u64,
    },
    Touch(Vec<usize>),
    Tick,
    Advance(u64),
    Reset(bool),
    Configure(Limits),
}

fn limits_strategy() -> impl Strategy<Value = Limits> {
    (
        prop_oneof![
            6 => Just(Mode::Queue),
            1 => Just(Mode::QueueAll),
            1 => Just(Mode::Passthrough),
            1 => Just(Mode::Closed),
        ],
        0u64..5,
        prop_oneof![Just(0u64), Just(30), Just(60), Just(600)],
        1u64..4,
        1u64..6,
        2u64..10,
        prop::option::of(0u64..10),
        2u64..10,
    )
        .prop_map(
            |(mode, max_active, admit_per_minute, admit_burst, claim, session, extra, idle)| {
                Limits {
                    mode,
                    max_active,
                    admit_per_minute,
                    admit_burst,
                    claim_secs: claim,
                    session_secs: session,
                    // A valid room never caps a session below its idle lifetime.
                    session_max_secs: extra.map(|extra| session + extra),
                    idle_secs: idle,
                }
            },
        )
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        25 => (prop::option::of(0u8..4), prop::option::of(0u8..3), prop::option::of(any::<usize>()), prop::bool::weighted(0.2))
            .prop_map(|(identity, return_to, resume, resume_only)| Op::Join { identity, return_to, resume, resume_only }),
        20 => any::<usize>().prop_map(Op::Status),
        5 => any::<usize>().prop_map(Op::Leave),
        6 => (any::<usize>(), 0u8..5).prop_map(|(pick, reason)| Op::EndSession(pick, reason)),
        5 => any::<usize>().prop_map(Op::Renew),
        2 => (prop::option::of(0u8..3), 1u64..30).prop_map(|(uid, ttl_secs)| Op::Issue { uid, ttl_secs }),
        4 => prop::collection::vec(any::<usize>(), 0..4).prop_map(Op::Touch),
        15 => Just(Op::Tick),
        12 => (1u64..3_000).prop_map(Op::Advance),
        2 => (600_000u64..4_000_000).prop_map(Op::Advance),
        1 => any::<bool>().prop_map(Op::Reset),
        3 => limits_strategy().prop_map(Op::Configure),
    ]
}

#[test]
fn scripts_agree_with_the_engine() {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        limits_strategy(),
        prop::collection::vec(op_strategy(), STEPS),
    );
    let result = runner.run(&strategy, |(limits, ops)| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime
            .block_on(run_case(limits, ops))
            .map_err(TestCaseError::fail)
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

const START: Timestamp = Timestamp(1_700_000_000_000);

fn config(id: &RoomId, limits: &Limits) -> RoomConfig {
    let mut config = RoomConfig::with_defaults(id.clone());
    config.mode = limits.mode;
    config.max_active = limits.max_active;
    config.admit_per_minute = limits.admit_per_minute;
    config.admit_burst = limits.admit_burst;
    config.claim_ttl = Duration::from_secs(limits.claim_secs);
    config.session_ttl = Duration::from_secs(limits.session_secs);
    config.session_max = limits.session_max_secs.map(Duration::from_secs);
    config.ticket_idle_ttl = Duration::from_secs(limits.idle_secs);
    config
}

/// A ticket or session as the reference and the Redis store each named it.
#[derive(Debug, Clone, Copy)]
struct Pair<T> {
    reference: T,
    redis: T,
}

struct Tracked {
    tickets: Vec<Pair<TicketRef>>,
    sessions: Vec<Pair<SessionId>>,
}

impl Tracked {
    fn ticket(&self, pick: usize) -> Option<Pair<TicketRef>> {
        (!self.tickets.is_empty()).then(|| self.tickets[pick % self.tickets.len()])
    }

    fn session(&self, pick: usize) -> Option<Pair<SessionId>> {
        (!self.sessions.is_empty()).then(|| self.sessions[pick % self.sessions.len()])
    }

    /// Records the ticket (and the session, if new) behind a pair of equal answers.
    fn note(&mut self, reference: &Entry, redis: &Entry) {
        self.tickets.push(Pair {
            reference: ticket_ref(reference),
            redis: ticket_ref(redis),
        });
        if let (Entry::Admitted(a), Entry::Admitted(b)) = (reference, redis) {
            let known = self
                .sessions
                .iter()
                .any(|pair| pair.reference == a.session.id);
            if !known {
                self.sessions.push(Pair {
                    reference: a.session.id,
                    redis: b.session.id,
                });
            }
        }
    }
}

fn ticket_ref(entry: &Entry) -> TicketRef {
    match entry {
        Entry::Waiting(view) => TicketRef {
            id: view.ticket,
            generation: view.generation,
        },
        Entry::Admitted(view) => TicketRef {
            id: view.ticket,
            generation: view.session.generation,
        },
    }
}

async fn run_case(limits: Limits, ops: Vec<Op>) -> Result<(), String> {
    let clock = Arc::new(ManualClock::new(START));
    let shared: Arc<dyn Clock> = clock.clone();
    let reference = MemoryStore::with_seed(shared.clone(), 11);
    let redis_config =
        RedisConfig::standalone(shared_server().url()).with_key_prefix(unique_prefix());
    let redis = RedisStore::new(redis_config, Some(shared)).map_err(|e| e.to_string())?;
    let id = RoomId::new("parity").unwrap();
    let room = config(&id, &limits);
    same(
        "put_room",
        reference.put_room(room.clone()).await,
        redis.put_room(room).await,
    )?;
    let mut tracked = Tracked {
        tickets: Vec::new(),
        sessions: Vec::new(),
    };

    for (step, op) in ops.into_iter().enumerate() {
        let context = format!("step {step} {op:?}");
        match op {
            Op::Join {
                identity,
                return_to,
                resume,
                resume_only,
            } => {
                let held = resume.and_then(|pick| tracked.ticket(pick));
                let request = |held: Option<TicketRef>| JoinRequest {
                    resume: held,
                    identity: identity.map(|n| format!("user|{n}%")),
                    return_to: return_to.map(|n| format!("/back/{n}?a=1|b=%7C")),
                    priority_code: None,
                    resume_only,
                };
                let a = reference
                    .join(&id, request(held.map(|p| p.reference)))
                    .await;
                let b = redis.join(&id, request(held.map(|p| p.redis))).await;
                same(&context, a.as_ref().map(entry), b.as_ref().map(entry))?;
                if let (Ok(a), Ok(b)) = (&a, &b) {
                    tracked.note(a, b);
                }
            }
            Op::Status(pick) => {
                if let Some(pair) = tracked.ticket(pick) {
                    let a = reference.status(&id, pair.reference).await;
                    let b = redis.status(&id, pair.redis).await;
                    same(&context, a.as_ref().map(entry), b.as_ref().map(entry))?;
                    if let (Ok(a), Ok(b)) = (&a, &b) {
                        tracked.note(a, b);
                    }
                }
            }
            Op::Leave(pick) => {
                if let Some(pair) = tracked.ticket(pick) {
                    same(
                        &context,
                        reference.leave(&id, pair.reference).await,
                        redis.leave(&id, pair.redis).await,
                    )?;
                }
            }
            Op::EndSession(pick, reason) => {
                if let Some(pair) = tracked.session(pick) {
                    let reason = [
                        SessionEnd::Completed,
                        SessionEnd::Abandoned,
                        SessionEnd::Expired,
                        SessionEnd::Revoked,
                        SessionEnd::Reset,
                    ][usize::from(reason)];
                    let a = reference.end_session(&id, pair.reference, reason).await;
                    let b = redis.end_session(&id, pair.redis, reason).await;
                    same(&context, a.as_ref().map(session), b.as_ref().map(session))?;
                }
            }
            Op::Renew(pick) => {
                if let Some(pair) = tracked.session(pick) {
                    let a = reference.renew_session(&id, pair.reference).await;
                    let b = redis.renew_session(&id, pair.redis).await;
                    same(
                        &context,
                        a.as_ref().map(|(s, renewed)| (session(s), *renewed)),
                        b.as_ref().map(|(s, renewed)| (session(s), *renewed)),
                    )?;
                    let a = reference.session(&id, pair.reference).await;
                    let b = redis.session(&id, pair.redis).await;
                    same(
                        &context,
                        a.map(|s| s.as_ref().map(session)),
                        b.map(|s| s.as_ref().map(session)),
                    )?;
                }
            }
            Op::Issue { uid, ttl_secs } => {
                let uid = uid.map(|n| format!("vip|{n}"));
                let ttl = Duration::from_secs(ttl_secs);
                let a = reference.issue_session(&id, uid.clone(), ttl).await;
                let b = redis.issue_session(&id, uid, ttl).await;
                same(&context, a.as_ref().map(session), b.as_ref().map(session))?;
                if let (Ok(a), Ok(b)) = (a, b) {
                    tracked.sessions.push(Pair {
                        reference: a.id,
                        redis: b.id,
                    });
                }
            }
            Op::Touch(picks) => {
                let pairs: Vec<Pair<TicketRef>> = picks
                    .iter()
                    .filter_map(|&pick| tracked.ticket(pick))
                    .collect();
                let a: Vec<TicketRef> = pairs.iter().map(|p| p.reference).collect();
                let b: Vec<TicketRef> = pairs.iter().map(|p| p.redis).collect();
                same(
                    &context,
                    reference.touch(&id, &a).await,
                    redis.touch(&id, &b).await,
                )?;
            }
            Op::Tick => same(&context, reference.tick(&id).await, redis.tick(&id).await)?,
            Op::Advance(millis) => clock.advance(Duration::from_millis(millis)),
            Op::Reset(purge) => same(
                &context,
                reference.reset(&id, purge).await,
                redis.reset(&id, purge).await,
            )?,
            Op::Configure(limits) => {
                let room = config(&id, &limits);
                same(
                    &context,
                    reference.put_room(room.clone()).await,
                    redis.put_room(room).await,
                )?;
                same(&context, reference.room(&id).await, redis.room(&id).await)?;
            }
        }
        compare_rooms(&context, &reference, &redis, &id).await?;
    }
    Ok(())
}

async fn compare_rooms(
    context: &str,
    reference: &dyn RoomStore,
    redis: &dyn RoomStore,
    id: &RoomId,
) -> Result<(), String> {
    let a: Result<RoomSnapshot, StoreError> = reference.snapshot(id).await;
    let b = redis.snapshot(id).await;
    same(&format!("{context}: snapshot"), a, b)?;
    same(
        &format!("{context}: line masks"),
        reference.line_masks(id).await,
        redis.line_masks(id).await,
    )?;
    let a = reference.records(id).await.map_err(|e| e.to_string())?;
    let b = redis.records(id).await.map_err(|e| e.to_string())?;
    same(
        &format!("{context}: tickets"),
        Ok::<_, StoreError>(tickets(&a.tickets)),
        Ok::<_, StoreError>(tickets(&b.tickets)),
    )?;
    same(
        &format!("{context}: sessions"),
        Ok::<_, StoreError>(sessions(&a.sessions)),
        Ok::<_, StoreError>(sessions(&b.sessions)),
    )
}

/// Both stores answered alike (errors by message; a backend failure is never alike).
fn same<T, A, B>(context: &str, reference: Result<T, A>, redis: Result<T, B>) -> Result<(), String>
where
    T: PartialEq + std::fmt::Debug,
    A: Borrow<StoreError>,
    B: Borrow<StoreError>,
{
    fn describe<T: std::fmt::Debug>(result: Result<&T, &StoreError>) -> Result<String, String> {
        match result {
            Ok(value) => Ok(format!("{value:?}")),
            Err(StoreError::Backend { message, source }) => {
                Err(format!("backend failure: {message}: {source:?}"))
            }
            Err(error) => Ok(format!("error: {error}")),
        }
    }
    let redis_text = describe(redis.as_ref().map_err(Borrow::borrow))
        .map_err(|failure| format!("{context}: {failure}"))?;
    let reference_text = describe(reference.as_ref().map_err(Borrow::borrow))?;
    let agree = match (&reference, &redis) {
        (Ok(a), Ok(b)) => a == b,
        (Err(_), Err(_)) => reference_text == redis_text,
        _ => false,
    };
    if agree {
        Ok(())
    } else {
        Err(format!(
            "{context}\n  engine: {reference_text}\n  redis:  {redis_text}"
        ))
    }
}

/// An answer without ids.
#[derive(Debug, PartialEq)]
enum EntryWithoutIds {
    Waiting {
        position: u64,
        generation: u32,
        ahead: u64,
        serving: u64,
        waiting: u64,
        eta_seconds: Option<u64>,
        paused: bool,
        return_to: Option<String>,
    },
    Admitted {
        position: u64,
        serving: u64,
        waiting: u64,
        session: SessionWithoutIds,
        return_to: Option<String>,
    },
}

fn entry(entry: &Entry) -> EntryWithoutIds {
    match entry {
        Entry::Waiting(view) => EntryWithoutIds::Waiting {
            position: view.position,
            generation: view.generation,
            ahead: view.ahead,
            serving: view.serving,
            waiting: view.waiting,
            eta_seconds: view.eta_seconds,
            paused: view.paused,
            return_to: view.return_to.clone(),
        },
        Entry::Admitted(view) => EntryWithoutIds::Admitted {
            position: view.position,
            serving: view.serving,
            waiting: view.waiting,
            session: session(&view.session),
            return_to: view.return_to.clone(),
        },
    }
}

#[derive(Debug, PartialEq, PartialOrd)]
struct SessionWithoutIds {
    issued_at: Timestamp,
    position: u64,
    has_ticket: bool,
    generation: u32,
    uid: Option<String>,
    renewed_at: Timestamp,
    expires_at: Timestamp,
    hard_expires_at: Option<Timestamp>,
    state: String,
}

fn session(session: &Session) -> SessionWithoutIds {
    SessionWithoutIds {
        issued_at: session.issued_at,
        position: session.position,
        has_ticket: session.ticket.is_some(),
        generation: session.generation,
        uid: session.uid.clone(),
        renewed_at: session.renewed_at,
        expires_at: session.expires_at,
        hard_expires_at: session.hard_expires_at,
        state: match session.state {
            SessionState::Active => "active".to_owned(),
            SessionState::Ended { reason, at } => format!("{} at {}", reason.as_str(), at.0),
        },
    }
}

fn sessions(sessions: &[Session]) -> Vec<SessionWithoutIds> {
    let mut all: Vec<SessionWithoutIds> = sessions.iter().map(session).collect();
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    all
}

fn tickets(tickets: &[Ticket]) -> Vec<String> {
    let mut all: Vec<(u64, String)> = tickets
        .iter()
        .map(|ticket| {
            let state = match ticket.state {
                TicketState::Claimed { .. } => "claimed".to_owned(),
                other => format!("{other:?}"),
            };
            (
                ticket.position,
                format!(
                    "#{} gen {} joined {} seen {} {:?} {:?} {state}",
                    ticket.position,
                    ticket.generation,
                    ticket.joined_at.0,
                    ticket.last_seen.0,
                    ticket.identity,
                    ticket.return_to
                ),
            )
        })
        .collect();
    all.sort();
    all.into_iter().map(|(_, text)| text).collect()
}
