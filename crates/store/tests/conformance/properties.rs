//! Random operation sequences against a backend and the reference model, with I1-I8 checked
//! after every step. 64 cases of 160 steps: over 10,000 generated steps per run. Some joins
//! present a priority code (SPEC §12), some a wrong one: the lane goes first, within I2/I3.

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::engine::{EngineError, Entry, JoinRequest, SessionEnd, TicketRef, TicketState};
use anteroom_core::room::{Mode, PriorityCodes, RoomConfig, priority_code_hash};
use anteroom_core::{ManualClock, RoomId, SessionId};
use anteroom_store::{RoomStore, StoreError};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::model::{ModelLimits, ModelRoom, ModelStatus};
use super::{Backend, START, reference, room_id};

const CASES: u32 = 64;
const STEPS: usize = 160;

#[derive(Debug, Clone)]
enum Op {
    Join,
    PriorityJoin,
    WrongCode,
    Status(usize),
    Leave(usize),
    Complete(usize),
    Tick,
    Advance(u64),
    Reopen,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => Just(Op::Join),
        6 => Just(Op::PriorityJoin),
        2 => Just(Op::WrongCode),
        25 => any::<usize>().prop_map(Op::Status),
        5 => any::<usize>().prop_map(Op::Leave),
        7 => any::<usize>().prop_map(Op::Complete),
        15 => Just(Op::Tick),
        15 => (1u64..3_000).prop_map(Op::Advance),
        3 => Just(Op::Reopen),
    ]
}

fn limits_strategy() -> impl Strategy<Value = ModelLimits> {
    (
        0u64..5,
        prop_oneof![Just(0u64), Just(30), Just(60), Just(600)],
        1u64..4,
        1u64..6,
        2u64..10,
        2u64..10,
    )
        .prop_map(
            |(max_active, admit_per_minute, admit_burst, claim, session, idle)| ModelLimits {
                max_active,
                admit_per_minute,
                admit_burst,
                claim_ttl_ms: claim * 1_000,
                session_ttl_ms: session * 1_000,
                idle_ttl_ms: idle * 1_000,
            },
        )
}

/// Runs the property test against fresh backends made by `make`.
pub fn run<B: Backend>(make: &dyn Fn() -> B) {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        limits_strategy(),
        proptest::collection::vec(op_strategy(), STEPS),
    );
    let result = runner.run(&strategy, |(limits, ops)| {
        let backend = make();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime
            .block_on(run_case(&backend, limits, ops))
            .map_err(TestCaseError::fail)
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

struct Tracked {
    ticket: TicketRef,
    session: Option<SessionId>,
    last_ahead: Option<u64>,
}

async fn run_case(backend: &dyn Backend, limits: ModelLimits, ops: Vec<Op>) -> Result<(), String> {
    let clock = Arc::new(ManualClock::new(START));
    let mut store = backend.open(clock.clone());
    let id = room_id("prop");
    let mut config = RoomConfig::with_defaults(id.clone());
    config.mode = Mode::Queue;
    config.max_active = limits.max_active;
    config.admit_per_minute = limits.admit_per_minute;
    config.admit_burst = limits.admit_burst;
    config.claim_ttl = Duration::from_millis(limits.claim_ttl_ms);
    config.session_ttl = Duration::from_millis(limits.session_ttl_ms);
    config.ticket_idle_ttl = Duration::from_millis(limits.idle_ttl_ms);
    config.priority = vec![PriorityCodes {
        hashes: vec![priority_code_hash(PRIORITY_CODE)],
        uses: 1 << 40,
    }];
    store.put_room(config).await.map_err(|e| e.to_string())?;
    let mut model = ModelRoom::new(limits, START.0);
    let mut tracked: Vec<Tracked> = Vec::new();
    let mut admissions: Vec<(u64, u64)> = Vec::new();
    let mut previous_admitted_total = 0u64;

    for (step, op) in ops.into_iter().enumerate() {
        let now = clock.now_millis();
        let states_before = ticket_states(&*store, &id).await?;
        let context = format!("step {step} {op:?}");
        match op {
            Op::WrongCode => {
                let refused = store
                    .join(
                        &id,
                        JoinRequest {
                            priority_code: Some("not-the-code".to_owned()),
                            ..JoinRequest::default()
                        },
                    )
                    .await;
                check(
                    matches!(
                        refused,
                        Err(StoreError::Engine(EngineError::InvalidPriorityCode))
                    ),
                    &context,
                    format!("a wrong code was taken: {refused:?}"),
                )?;
            }
            Op::Join | Op::PriorityJoin => {
                let priority = matches!(op, Op::PriorityJoin);
                let request = JoinRequest {
                    priority_code: priority.then(|| PRIORITY_CODE.to_owned()),
                    ..JoinRequest::default()
                };
                let entry = store.join(&id, request).await.map_err(|e| e.to_string())?;
                let (expected_position, at_once) = model.join(now, priority);
                let (position, session) = match &entry {
                    Entry::Waiting(view) => (view.position, None),
                    Entry::Admitted(view) => (view.position, Some(view.session.id)),
                };
                check(
                    position == expected_position,
                    &context,
                    format!("I1: position {position}, expected {expected_position}"),
                )?;
                check(
                    session.is_some() == at_once,
                    &context,
                    format!(
                        "entered at once: {}, model says {at_once}",
                        session.is_some()
                    ),
                )?;
                let last_ahead = match &entry {
                    Entry::Waiting(view) => Some(view.ahead),
                    Entry::Admitted(_) => None,
                };
                tracked.push(Tracked {
                    ticket: reference(&entry, 1),
                    session,
                    last_ahead,
                });
            }
            Op::Status(pick) if !tracked.is_empty() => {
                let index = pick % tracked.len();
                let result = store.status(&id, tracked[index].ticket).await;
                let expected = model.status(index, now);
                match (result, expected) {
                    (Ok(Entry::Waiting(view)), ModelStatus::Waiting { ahead }) => {
                        check(
                            view.ahead == ahead,
                            &context,
                            format!("ahead {}, model {ahead}", view.ahead),
                        )?;
                        if let Some(last) = tracked[index].last_ahead {
                            check(
                                view.ahead <= last,
                                &context,
                                format!("I5: ahead rose from {last} to {}", view.ahead),
                            )?;
                        }
                        tracked[index].last_ahead = Some(view.ahead);
                    }
                    (Ok(Entry::Admitted(view)), ModelStatus::Admitted) => {
                        if let Some(previous) = tracked[index].session {
                            check(
                                previous == view.session.id,
                                &context,
                                "I7: a second session for one ticket".to_owned(),
                            )?;
                        }
                        tracked[index].session = Some(view.session.id);
                    }
                    (Err(StoreError::Engine(_)), ModelStatus::Gone) => {}
                    (got, expected) => {
                        return Err(format!("{context}: store {got:?}, model {expected:?}"));
                    }
                }
            }
            Op::Leave(pick) if !tracked.is_empty() => {
                let index = pick % tracked.len();
                store
                    .leave(&id, tracked[index].ticket)
                    .await
                    .map_err(|e| format!("{context}: {e}"))?;
                model.leave(index, now);
            }
            Op::Complete(pick) if !tracked.is_empty() => {
                let index = pick % tracked.len();
                if let Some(session) = tracked[index].session {
                    store
                        .end_session(&id, session, SessionEnd::Completed)
                        .await
                        .map_err(|e| format!("{context}: {e}"))?;
                    check(
                        model.complete(index, now),
                        &context,
                        "model has no session".to_owned(),
                    )?;
                }
            }
            Op::Tick => {
                let report = store.tick(&id).await.map_err(|e| e.to_string())?;
                let expected = model.tick(now);
                check(
                    report.admitted == expected,
                    &context,
                    format!("admitted {}, model {expected}", report.admitted),
                )?;
            }
            Op::Advance(millis) => clock.advance(Duration::from_millis(millis)),
            Op::Reopen if backend.is_durable() => {
                let before = store.snapshot(&id).await.map_err(|e| e.to_string())?;
                let before_states = ticket_states(&*store, &id).await?;
                drop(store);
                store = backend.open(clock.clone());
                model.reopen(now);
                let after = store.snapshot(&id).await.map_err(|e| e.to_string())?;
                let comparable = |s: &anteroom_core::engine::RoomSnapshot| {
                    (
                        s.generation,
                        s.serving,
                        s.last_position,
                        s.waiting,
                        s.active,
                        s.admitted_unclaimed,
                        s.totals,
                    )
                };
                check(
                    comparable(&before) == comparable(&after),
                    &context,
                    format!("I6: {before:?} became {after:?}"),
                )?;
                let after_states = ticket_states(&*store, &id).await?;
                check(
                    before_states == after_states,
                    &context,
                    "I6: tickets changed across reopening".to_owned(),
                )?;
            }
            Op::Status(_) | Op::Leave(_) | Op::Complete(_) | Op::Reopen => {}
        }

        let snapshot = store.snapshot(&id).await.map_err(|e| e.to_string())?;
        let states_after = ticket_states(&*store, &id).await?;
        // The model and the store agree on the room's figures.
        let figures = (
            snapshot.waiting,
            snapshot.active,
            snapshot.admitted_unclaimed,
            snapshot.serving,
        );
        let expected = (
            model.waiting(),
            model.active(),
            model.admitted_unclaimed(),
            model.serving,
        );
        check(
            figures == expected,
            &context,
            format!("(waiting, active, unclaimed, serving) {figures:?}, model {expected:?}"),
        )?;
        // I2
        if limits.max_active > 0 {
            let held = snapshot.active + snapshot.admitted_unclaimed;
            check(
                held <= limits.max_active,
                &context,
                format!("I2: {held} held > {}", limits.max_active),
            )?;
        }
        // I3: admissions in every window ending now.
        let admitted_total = snapshot.totals.admitted;
        if admitted_total > previous_admitted_total {
            admissions.push((clock.now_millis(), admitted_total - previous_admitted_total));
            previous_admitted_total = admitted_total;
        }
        if limits.admit_per_minute > 0 {
            let end = clock.now_millis();
            let mut in_window = 0;
            for &(at, count) in admissions.iter().rev() {
                in_window += count;
                let bound = limits.admit_per_minute * (end - at) / 60_000 + limits.admit_burst;
                check(
                    in_window <= bound,
                    &context,
                    format!("I3: {in_window} admissions in {} ms", end - at),
                )?;
            }
        }
        // I4: whoever was admitted in this step stood before everybody still waiting in its
        // lane, and nobody of the regular line went while the priority lane waited.
        let lowest_waiting = |lane: bool| {
            states_after
                .iter()
                .filter(|(_, s, p)| *s == "waiting" && *p == lane)
                .map(|(position, _, _)| *position)
                .min()
        };
        for (position, state, lane) in &states_after {
            let was_waiting = states_before
                .iter()
                .any(|(p, s, _)| p == position && *s == "waiting");
            if !was_waiting || !(*state == "admitted" || *state == "claimed") {
                continue;
            }
            if let Some(lowest) = lowest_waiting(*lane) {
                check(
                    *position < lowest,
                    &context,
                    format!("I4: {position} admitted while {lowest} waits"),
                )?;
            }
            if !lane && let Some(waiting) = lowest_waiting(true) {
                return Err(format!(
                    "{context}: {position} admitted while priority {waiting} waits"
                ));
            }
        }
        // I7: one session per claimed ticket.
        let records = store.records(&id).await.map_err(|e| e.to_string())?;
        check(
            snapshot.totals.passes == records.sessions.len() as u64,
            &context,
            format!(
                "I7: {} passes but {} sessions",
                snapshot.totals.passes,
                records.sessions.len()
            ),
        )?;
        // I8
        check(
            snapshot.serving <= snapshot.last_position,
            &context,
            "I8: serving beyond the last position".to_owned(),
        )?;
        // I1: positions unique.
        let mut positions: Vec<u64> = records.tickets.iter().map(|t| t.position).collect();
        positions.sort_unstable();
        check(
            positions.windows(2).all(|w| w[0] < w[1]),
            &context,
            "I1: duplicate positions".to_owned(),
        )?;
    }
    Ok(())
}

fn check(condition: bool, context: &str, message: String) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(format!("{context}: {message}"))
    }
}

/// The priority code every property room accepts (with uses enough for any run).
const PRIORITY_CODE: &str = "prop-code";

async fn ticket_states(
    store: &dyn RoomStore,
    room: &RoomId,
) -> Result<Vec<(u64, &'static str, bool)>, String> {
    let records = store.records(room).await.map_err(|e| e.to_string())?;
    let mut states: Vec<(u64, &'static str, bool)> = records
        .tickets
        .iter()
        .map(|t| {
            let state = match t.state {
                TicketState::Waiting => "waiting",
                TicketState::Admitted { .. } => "admitted",
                TicketState::Claimed { .. } => "claimed",
                TicketState::Ended { .. } => "ended",
            };
            (t.position, state, t.priority)
        })
        .collect();
    states.sort_unstable();
    Ok(states)
}

trait NowMillis {
    fn now_millis(&self) -> u64;
}

impl NowMillis for ManualClock {
    fn now_millis(&self) -> u64 {
        anteroom_core::Clock::now(self).0
    }
}
