//! The storage conformance suite: one `async fn` per behaviour, run unchanged against every
//! backend by [`conformance_suite!`].
//!
//! Behaviours are grouped by capability: rooms, joining and status, admission (I1-I5, I8),
//! sessions (I7, revocation, renewal), generations, durability (I6, for backends that keep
//! data), concurrency, and a property test that drives random operation sequences against a
//! naive reference model (`model.rs`) and checks every invariant after every step.

#![allow(dead_code, clippy::unwrap_used, unreachable_pub)]

pub mod events;
pub mod model;
pub mod priority;
pub mod properties;
pub mod schedule;

pub use events::{
    event_ids_are_unique_and_each_ticket_in_order, events_are_written_with_each_change,
    the_outbox_keeps_the_newest_events_up_to_its_cap, unacknowledged_events_are_delivered_again,
};
pub use priority::priority_codes_jump_the_line_within_the_limits;
pub use schedule::{
    schedules_pass_through_or_close_outside_their_events,
    the_lottery_is_reproducible_from_its_recorded_seed, the_prequeue_admits_nobody_before_opens_at,
};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anteroom_core::engine::{EngineError, Entry, JoinRequest, SessionEnd, SessionState, TicketRef};
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_core::{ManualClock, RoomId, Timestamp};
use anteroom_store::{ConfigWrite, RoomStore, SessionFilter, SessionQuery, StoreError};

/// A backend under test: opens stores over one data location.
pub trait Backend: Send + Sync {
    /// Opens a store. Durable backends open the same data every time; the caller drops the
    /// previous store first.
    fn open(&self, clock: Arc<ManualClock>) -> Arc<dyn RoomStore>;
    /// Whether data survives [`Backend::open`] again.
    fn is_durable(&self) -> bool;
}

/// Stamps out one `#[test]` per behaviour for a backend expression.
#[macro_export]
macro_rules! conformance_suite {
    ($backend:expr) => {
        $crate::conformance_suite!(@tests $backend;
            rooms_are_created_replaced_listed_and_deleted,
            a_conditional_replace_writes_only_over_the_expected_configuration,
            load_signals_are_kept_per_room_and_replaced,
            unknown_rooms_and_tickets_are_refused,
            first_visitor_enters_at_once_then_others_queue,
            a_resume_only_join_never_makes_a_ticket,
            positions_strictly_increase_under_concurrent_joins,
            ahead_counts_only_live_tickets,
            tick_admits_fifo_within_capacity,
            advance_admits_by_hand_within_the_line_and_capacity,
            passes_by_hand_take_a_slot_and_are_refused_when_full,
            admissions_follow_the_rate_and_burst,
            claiming_twice_returns_the_same_session,
            ending_a_session_refills_its_slot_at_once,
            no_shows_idle_tickets_and_sessions_expire,
            history_is_kept_for_the_room_retention_then_forgotten,
            renewal_extends_a_session_once_half_spent,
            reset_bumps_the_generation,
            closed_rooms_refuse_joins_without_changing_state,
            acknowledged_state_survives_reopening,
            touching_keeps_waiting_tickets_alive_in_one_call,
            waiting_positions_list_the_live_line_in_order,
            line_masks_tell_every_waiting_ticket_its_ahead,
            sessions_are_listed_in_bounded_pages_each_exactly_once,
            schedules_pass_through_or_close_outside_their_events,
            the_prequeue_admits_nobody_before_opens_at,
            the_lottery_is_reproducible_from_its_recorded_seed,
            priority_codes_jump_the_line_within_the_limits,
            events_are_written_with_each_change,
            event_ids_are_unique_and_each_ticket_in_order,
            unacknowledged_events_are_delivered_again,
            the_outbox_keeps_the_newest_events_up_to_its_cap,
        );
        #[test]
        fn invariants_hold_under_random_operations() {
            $crate::conformance::properties::run(&|| $backend);
        }
    };
    (@tests $backend:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::conformance::$name(&$backend).await;
            }
        )*
    };
}

pub const START: Timestamp = Timestamp(1_700_000_000_000);

pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(START))
}

pub fn room_id(name: &str) -> RoomId {
    RoomId::new(name).unwrap()
}

pub fn room(name: &str, edit: impl FnOnce(&mut RoomConfig)) -> RoomConfig {
    let mut config = RoomConfig::with_defaults(room_id(name));
    edit(&mut config);
    config
}

pub fn reference(entry: &Entry, generation: u32) -> TicketRef {
    let id = match entry {
        Entry::Waiting(view) => view.ticket,
        Entry::Admitted(view) => view.ticket,
    };
    TicketRef { id, generation }
}

fn ahead(entry: &Entry) -> u64 {
    match entry {
        Entry::Waiting(view) => view.ahead,
        Entry::Admitted(_) => panic!("expected a waiting ticket, got {entry:?}"),
    }
}

fn position(entry: &Entry) -> u64 {
    match entry {
        Entry::Waiting(view) => view.position,
        Entry::Admitted(view) => view.position,
    }
}

fn session_of(entry: &Entry) -> anteroom_core::SessionId {
    match entry {
        Entry::Admitted(view) => view.session.id,
        Entry::Waiting(_) => panic!("expected an admitted ticket, got {entry:?}"),
    }
}

async fn join(store: &dyn RoomStore, room: &RoomId) -> Entry {
    store.join(room, JoinRequest::default()).await.unwrap()
}

fn engine_error(result: Result<impl std::fmt::Debug, StoreError>) -> EngineError {
    match result {
        Err(StoreError::Engine(error)) => error,
        other => panic!("expected an engine error, got {other:?}"),
    }
}

pub async fn rooms_are_created_replaced_listed_and_deleted(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("alpha");
    store
        .put_room(room("alpha", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    store.put_room(room("beta", |_| {})).await.unwrap();
    let names: Vec<String> = store
        .rooms()
        .await
        .unwrap()
        .iter()
        .map(|r| r.id.to_string())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    join(&*store, &id).await;
    join(&*store, &id).await;
    // Replacing the configuration keeps the queue, and every field (the adaptive and
    // proof-of-work settings included) comes back as written.
    let replacement = room("alpha", |c| {
        c.mode = Mode::QueueAll;
        c.max_active = 7;
        c.adaptive = Some(anteroom_core::adaptive::AdaptiveSettings {
            target_p95_ms: 250,
            max_error_ppm: 12_500,
            min_per_minute: 60,
            max_per_minute: 900,
            interval: Duration::from_secs(5),
        });
        c.challenge = Some(anteroom_core::challenge::ProofOfWork { difficulty: 20 });
    });
    store.put_room(replacement.clone()).await.unwrap();
    assert_eq!(store.room(&id).await.unwrap(), replacement);
    assert_eq!(store.snapshot(&id).await.unwrap().waiting, 2);
    assert!(store.delete_room(&id).await.unwrap());
    assert!(!store.delete_room(&id).await.unwrap());
    assert!(matches!(
        store.snapshot(&id).await,
        Err(StoreError::RoomNotFound(_))
    ));
    assert_eq!(store.rooms().await.unwrap().len(), 1);
}

pub async fn a_conditional_replace_writes_only_over_the_expected_configuration(
    backend: &dyn Backend,
) {
    let store = backend.open(clock());
    let id = room_id("cas");
    let paused = |max_active: u64| {
        room("cas", |c| {
            c.mode = Mode::QueueAll;
            c.max_active = max_active;
        })
    };
    let original = paused(5);
    store.put_room(original.clone()).await.unwrap();
    join(&*store, &id).await;
    join(&*store, &id).await;
    // Writers that all read `original` race: exactly one wins, the others are told what is
    // in force now, and the room holds the winner's configuration with its queue kept.
    let writers: Vec<_> = (0..4u64)
        .map(|n| {
            let (store, expected) = (store.clone(), original.clone());
            tokio::spawn(async move {
                let mine = paused(100 + n);
                let outcome = store.replace_room_if(&expected, mine.clone()).await;
                (mine, outcome.unwrap())
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut told = Vec::new();
    for writer in writers {
        match writer.await.unwrap() {
            (mine, ConfigWrite::Written(snapshot)) => {
                assert_eq!(snapshot.waiting, 2);
                winners.push(mine);
            }
            (_, ConfigWrite::Changed(current)) => told.push(current),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one conditional write wins");
    let in_force = store.room(&id).await.unwrap();
    assert_eq!(in_force, winners[0]);
    assert!(told.iter().all(|current| *current == in_force));
    assert_eq!(store.snapshot(&id).await.unwrap().waiting, 2);
    // A stale expectation changes nothing; a current one writes.
    let stale = store.replace_room_if(&original, paused(1));
    assert_eq!(stale.await.unwrap(), ConfigWrite::Changed(in_force.clone()));
    assert_eq!(store.room(&id).await.unwrap(), in_force);
    let next = paused(9);
    let written = store
        .replace_room_if(&in_force, next.clone())
        .await
        .unwrap();
    assert!(matches!(written, ConfigWrite::Written(_)));
    assert_eq!(store.room(&id).await.unwrap(), next);
    // There is nothing to compare with in a room that does not exist, and none is made.
    let missing = store
        .replace_room_if(&room("nobody", |_| {}), room("nobody", |_| {}))
        .await;
    assert!(matches!(missing, Err(StoreError::RoomNotFound(_))));
    assert!(store.room(&room_id("nobody")).await.is_err());
}

pub async fn load_signals_are_kept_per_room_and_replaced(backend: &dyn Backend) {
    use anteroom_core::adaptive::LoadSignal;
    let store = backend.open(clock());
    let id = room_id("signalled");
    let other = room_id("quiet");
    let missing = room_id("missing");
    store.put_room(room("signalled", |_| {})).await.unwrap();
    store.put_room(room("quiet", |_| {})).await.unwrap();
    assert_eq!(store.load_signal(&id).await.unwrap(), None);
    let first = LoadSignal {
        p95_ms: 312.25,
        error_rate: 0.015,
        in_flight: None,
        received_at: Timestamp(1_700_000_000_123),
    };
    store.put_load_signal(&id, first).await.unwrap();
    assert_eq!(store.load_signal(&id).await.unwrap(), Some(first));
    // The newest signal replaces the last; other rooms keep none.
    let second = LoadSignal {
        p95_ms: 0.1,
        error_rate: 1.0,
        in_flight: Some(42),
        received_at: Timestamp(1_700_000_004_000),
    };
    store.put_load_signal(&id, second).await.unwrap();
    assert_eq!(store.load_signal(&id).await.unwrap(), Some(second));
    assert_eq!(store.load_signal(&other).await.unwrap(), None);
    // Replacing the room's configuration keeps its signal.
    store
        .put_room(room("signalled", |c| c.max_active = 3))
        .await
        .unwrap();
    assert_eq!(store.load_signal(&id).await.unwrap(), Some(second));
    // Unknown rooms are refused and keep nothing; a deleted room's signal goes with it.
    assert!(matches!(
        store.put_load_signal(&missing, first).await,
        Err(StoreError::RoomNotFound(_))
    ));
    assert!(matches!(
        store.load_signal(&missing).await,
        Err(StoreError::RoomNotFound(_))
    ));
    assert!(store.delete_room(&id).await.unwrap());
    assert!(matches!(
        store.load_signal(&id).await,
        Err(StoreError::RoomNotFound(_))
    ));
    store.put_room(room("signalled", |_| {})).await.unwrap();
    assert_eq!(store.load_signal(&id).await.unwrap(), None);
}

pub async fn unknown_rooms_and_tickets_are_refused(backend: &dyn Backend) {
    let store = backend.open(clock());
    let missing = room_id("missing");
    assert!(matches!(
        store.join(&missing, JoinRequest::default()).await,
        Err(StoreError::RoomNotFound(_))
    ));
    store.put_room(room("r", |_| {})).await.unwrap();
    let forged = TicketRef {
        id: anteroom_core::TicketId::from_bytes([9; 16]),
        generation: 1,
    };
    assert_eq!(
        engine_error(store.status(&room_id("r"), forged).await),
        EngineError::TicketUnknown
    );
    let unknown_session = anteroom_core::SessionId::from_bytes([3; 16]);
    assert_eq!(
        engine_error(
            store
                .end_session(&room_id("r"), unknown_session, SessionEnd::Completed)
                .await
        ),
        EngineError::SessionUnknown
    );
    assert_eq!(
        store.snapshot(&room_id("r")).await.unwrap().last_position,
        0
    );
}

pub async fn first_visitor_enters_at_once_then_others_queue(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| {
            c.max_active = 1;
            c.admit_per_minute = 60;
        }))
        .await
        .unwrap();
    let first = join(&*store, &id).await;
    assert!(matches!(first, Entry::Admitted(_)), "{first:?}");
    let second = join(&*store, &id).await;
    assert_eq!((position(&second), ahead(&second)), (2, 0));
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!(
        (snapshot.active, snapshot.waiting, snapshot.serving),
        (1, 1, 1)
    );
    // Resuming with the held ticket returns the same place, no new position.
    let resumed = store
        .join(
            &id,
            JoinRequest {
                resume: Some(reference(&second, 1)),
                ..JoinRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(position(&resumed), 2);
    assert_eq!(store.snapshot(&id).await.unwrap().last_position, 2);
}

/// The join gate (SPEC §14.2) asks to resume only: a live ticket resumes; a left ticket, an
/// unknown one or none at all is refused with `NothingToResume`, and nothing changes.
pub async fn a_resume_only_join_never_makes_a_ticket(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    let live = join(&*store, &id).await;
    let gone = join(&*store, &id).await;
    store.leave(&id, reference(&gone, 1)).await.unwrap();
    let before = store.snapshot(&id).await.unwrap();
    let resume_only = |resume: Option<TicketRef>| JoinRequest {
        resume,
        resume_only: true,
        ..JoinRequest::default()
    };
    for held in [None, Some(reference(&gone, 1))] {
        let refused = store.join(&id, resume_only(held)).await;
        assert!(
            matches!(
                refused,
                Err(StoreError::Engine(EngineError::NothingToResume))
            ),
            "{held:?}: {refused:?}"
        );
    }
    let after = store.snapshot(&id).await.unwrap();
    assert_eq!(
        (after.last_position, after.waiting, after.totals.joined),
        (before.last_position, before.waiting, before.totals.joined)
    );
    let resumed = store
        .join(&id, resume_only(Some(reference(&live, 1))))
        .await
        .unwrap();
    assert_eq!(position(&resumed), position(&live));
}

pub async fn positions_strictly_increase_under_concurrent_joins(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            let mut positions = Vec::new();
            for _ in 0..25 {
                positions.push(position(&join(&*store, &id).await));
            }
            positions
        }));
    }
    let mut all = BTreeSet::new();
    for task in tasks {
        let positions = task.await.unwrap();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "each client sees increasing positions"
        );
        for p in positions {
            assert!(all.insert(p), "duplicate position {p}");
        }
    }
    assert_eq!(all, (1..=400).collect::<BTreeSet<u64>>());
}

pub async fn ahead_counts_only_live_tickets(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("r");
    store
        .put_room(room("r", |c| {
            c.mode = Mode::QueueAll;
            c.ticket_idle_ttl = Duration::from_secs(60);
        }))
        .await
        .unwrap();
    let entries: Vec<Entry> = {
        let mut entries = Vec::new();
        for _ in 0..5 {
            entries.push(join(&*store, &id).await);
        }
        entries
    };
    store.leave(&id, reference(&entries[1], 1)).await.unwrap();
    clock.advance(Duration::from_secs(40));
    for keep in [2, 3, 4] {
        store
            .status(&id, reference(&entries[keep], 1))
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(30));
    let report = store.tick(&id).await.unwrap();
    assert_eq!(report.abandoned, 1, "ticket 1 had no contact for 70 s");
    assert_eq!(
        ahead(&store.status(&id, reference(&entries[4], 1)).await.unwrap()),
        2
    );
    assert_eq!(
        engine_error(store.status(&id, reference(&entries[0], 1)).await),
        EngineError::TicketExpired
    );
    assert_eq!(
        engine_error(store.status(&id, reference(&entries[1], 1)).await),
        EngineError::TicketExpired
    );
    assert_eq!(store.snapshot(&id).await.unwrap().waiting, 3);
}

pub async fn tick_admits_fifo_within_capacity(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    let mut entries = Vec::new();
    for _ in 0..10 {
        entries.push(join(&*store, &id).await);
    }
    store
        .put_room(room("r", |c| c.max_active = 4))
        .await
        .unwrap();
    assert_eq!(store.tick(&id).await.unwrap().admitted, 4);
    assert_eq!(
        store.tick(&id).await.unwrap().admitted,
        0,
        "capacity is full"
    );
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!(
        (
            snapshot.admitted_unclaimed,
            snapshot.serving,
            snapshot.waiting
        ),
        (4, 4, 6)
    );
    for entry in &entries[..4] {
        assert!(matches!(
            store.status(&id, reference(entry, 1)).await.unwrap(),
            Entry::Admitted(_)
        ));
    }
    assert_eq!(
        ahead(&store.status(&id, reference(&entries[4], 1)).await.unwrap()),
        0
    );
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!((snapshot.active, snapshot.admitted_unclaimed), (4, 0));
}

pub async fn advance_admits_by_hand_within_the_line_and_capacity(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| {
            c.mode = Mode::QueueAll;
            c.max_active = 3;
        }))
        .await
        .unwrap();
    let mut entries = Vec::new();
    for _ in 0..5 {
        entries.push(join(&*store, &id).await);
    }
    assert_eq!(store.tick(&id).await.unwrap().admitted, 0, "paused");
    // Paused or not, the operator lets people in, but never past free capacity (I2).
    let (admitted, snapshot) = store.advance(&id, 10).await.unwrap();
    assert_eq!(admitted, 3);
    assert_eq!(
        (
            snapshot.serving,
            snapshot.admitted_unclaimed,
            snapshot.waiting
        ),
        (3, 3, 2)
    );
    for entry in &entries[..3] {
        assert!(matches!(
            store.status(&id, reference(entry, 1)).await.unwrap(),
            Entry::Admitted(_)
        ));
    }
    assert_eq!(
        store.advance(&id, 1).await.unwrap().0,
        0,
        "capacity is full"
    );
    // Without a capacity limit the line bounds it: serving never passes the last position (I8).
    store
        .put_room(room("r", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    assert_eq!(store.advance(&id, 1).await.unwrap().0, 1);
    let (admitted, snapshot) = store.advance(&id, 1_000_000).await.unwrap();
    assert_eq!(admitted, 1);
    assert_eq!(
        (snapshot.serving, snapshot.last_position, snapshot.waiting),
        (5, 5, 0)
    );
    assert_eq!(snapshot.totals.admitted, 5);
    assert!(matches!(
        store.status(&id, reference(&entries[4], 1)).await.unwrap(),
        Entry::Admitted(_)
    ));
    assert!(matches!(
        store.advance(&room_id("nowhere"), 1).await,
        Err(StoreError::RoomNotFound(_))
    ));
}

pub async fn passes_by_hand_take_a_slot_and_are_refused_when_full(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.max_active = 2))
        .await
        .unwrap();
    let ttl = Duration::from_secs(600);
    let vip = store
        .issue_session(&id, Some("vip".to_owned()), ttl)
        .await
        .unwrap();
    assert_eq!(vip.uid.as_deref(), Some("vip"));
    assert!(matches!(join(&*store, &id).await, Entry::Admitted(_)));
    // Both slots are taken: another pass by hand would break I2.
    assert_eq!(
        engine_error(store.issue_session(&id, None, ttl).await),
        EngineError::RoomFull
    );
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!((snapshot.active, snapshot.totals.passes), (2, 2));
    // A freed slot can be given by hand again; a passthrough room only observes.
    store
        .end_session(&id, vip.id, SessionEnd::Completed)
        .await
        .unwrap();
    store.issue_session(&id, None, ttl).await.unwrap();
    store
        .put_room(room("r", |c| {
            c.max_active = 2;
            c.mode = Mode::Passthrough;
        }))
        .await
        .unwrap();
    store.issue_session(&id, None, ttl).await.unwrap();
    assert_eq!(store.snapshot(&id).await.unwrap().active, 3);
}

pub async fn admissions_follow_the_rate_and_burst(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    for _ in 0..50 {
        join(&*store, &id).await;
    }
    store
        .put_room(room("r", |c| {
            c.admit_per_minute = 60;
            c.admit_burst = 3;
        }))
        .await
        .unwrap();
    let mut admitted = Vec::new();
    for _ in 0..10 {
        admitted.push(store.tick(&id).await.unwrap().admitted);
        clock.advance(Duration::from_millis(500));
    }
    // A burst of 3, then one a second: ticks at 1 s, 2 s, 3 s, 4 s.
    assert_eq!(admitted, [3, 0, 1, 0, 1, 0, 1, 0, 1, 0]);
    let rate = store.snapshot(&id).await.unwrap().admission_rate.unwrap();
    assert!(rate > 0.0);
}

pub async fn claiming_twice_returns_the_same_session(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.max_active = 2))
        .await
        .unwrap();
    let entry = join(&*store, &id).await;
    let first = store.status(&id, reference(&entry, 1)).await.unwrap();
    let second = store.status(&id, reference(&entry, 1)).await.unwrap();
    assert_eq!(session_of(&entry), session_of(&first));
    assert_eq!(session_of(&first), session_of(&second));
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!((snapshot.active, snapshot.totals.passes), (1, 1));
}

pub async fn ending_a_session_refills_its_slot_at_once(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.max_active = 1))
        .await
        .unwrap();
    let first = join(&*store, &id).await;
    let second = join(&*store, &id).await;
    let ended = store
        .end_session(&id, session_of(&first), SessionEnd::Completed)
        .await
        .unwrap();
    assert!(matches!(
        ended.state,
        SessionState::Ended {
            reason: SessionEnd::Completed,
            ..
        }
    ));
    // One in, one out: the waiting ticket was admitted by the same operation.
    assert!(matches!(
        store.status(&id, reference(&second, 1)).await.unwrap(),
        Entry::Admitted(_)
    ));
    let session = store
        .session(&id, session_of(&first))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(
        session.state,
        SessionState::Active,
        "the ended pass is revoked"
    );
    // Ending again changes nothing.
    store
        .end_session(&id, session_of(&first), SessionEnd::Abandoned)
        .await
        .unwrap();
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!((snapshot.active, snapshot.totals.completed), (1, 1));
}

pub async fn no_shows_idle_tickets_and_sessions_expire(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("r");
    store
        .put_room(room("r", |c| {
            c.max_active = 1;
            c.claim_ttl = Duration::from_secs(30);
            c.session_ttl = Duration::from_secs(60);
            c.ticket_idle_ttl = Duration::from_secs(600);
        }))
        .await
        .unwrap();
    let holder = join(&*store, &id).await;
    let no_show = join(&*store, &id).await;
    let patient = join(&*store, &id).await;
    clock.advance(Duration::from_secs(60));
    let report = store.tick(&id).await.unwrap();
    assert_eq!((report.expired, report.admitted), (1, 1));
    assert_eq!(
        engine_error(store.status(&id, reference(&holder, 1)).await),
        EngineError::TicketExpired
    );
    clock.advance(Duration::from_secs(30));
    let report = store.tick(&id).await.unwrap();
    assert_eq!((report.no_shows, report.admitted), (1, 1));
    assert_eq!(
        engine_error(store.status(&id, reference(&no_show, 1)).await),
        EngineError::TicketExpired
    );
    assert!(matches!(
        store.status(&id, reference(&patient, 1)).await.unwrap(),
        Entry::Admitted(_)
    ));
    let totals = store.snapshot(&id).await.unwrap().totals;
    assert_eq!((totals.expired, totals.no_show, totals.passes), (1, 1, 2));
}

pub async fn history_is_kept_for_the_room_retention_then_forgotten(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("r");
    let retention = Duration::from_secs(120);
    store
        .put_room(room("r", |c| {
            c.session_ttl = Duration::from_secs(60);
            c.history_retention = retention;
        }))
        .await
        .unwrap();
    assert_eq!(store.room(&id).await.unwrap().history_retention, retention);
    let served = join(&*store, &id).await;
    let session = session_of(&served);
    store
        .end_session(&id, session, SessionEnd::Completed)
        .await
        .unwrap();

    clock.advance(retention - Duration::from_millis(1));
    store.tick(&id).await.unwrap();
    assert_eq!(
        engine_error(store.status(&id, reference(&served, 1)).await),
        EngineError::TicketExpired,
        "an ended ticket answers gone while its history is kept"
    );
    assert!(store.session(&id, session).await.unwrap().is_some());

    clock.advance(Duration::from_millis(1));
    store.tick(&id).await.unwrap();
    assert_eq!(
        engine_error(store.status(&id, reference(&served, 1)).await),
        EngineError::TicketUnknown,
        "forgotten once the retention is over"
    );
    assert!(store.session(&id, session).await.unwrap().is_none());
}

pub async fn renewal_extends_a_session_once_half_spent(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.session_ttl = Duration::from_secs(100)))
        .await
        .unwrap();
    let session = session_of(&join(&*store, &id).await);
    clock.advance(Duration::from_secs(40));
    let (_, renewed) = store.renew_session(&id, session).await.unwrap();
    assert!(!renewed);
    clock.advance(Duration::from_secs(20));
    let (renewed_session, renewed) = store.renew_session(&id, session).await.unwrap();
    assert!(renewed);
    assert_eq!(
        renewed_session.expires_at,
        START.after(Duration::from_secs(160))
    );
    clock.advance(Duration::from_secs(150));
    store.tick(&id).await.unwrap();
    assert_eq!(
        engine_error(store.renew_session(&id, session).await),
        EngineError::SessionEnded
    );
}

pub async fn reset_bumps_the_generation(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.max_active = 1))
        .await
        .unwrap();
    let admitted = join(&*store, &id).await;
    let waiting = join(&*store, &id).await;
    let snapshot = store.reset(&id, false).await.unwrap();
    assert_eq!(
        (snapshot.generation, snapshot.waiting, snapshot.active),
        (2, 0, 0)
    );
    assert_eq!(
        engine_error(store.status(&id, reference(&waiting, 1)).await),
        EngineError::TicketExpired
    );
    let session = store
        .session(&id, session_of(&admitted))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(session.state, SessionState::Active);
    let fresh = join(&*store, &id).await;
    assert_eq!(position(&fresh), 3);
    let purged = store.reset(&id, true).await.unwrap();
    assert_eq!(purged.generation, 3);
    let records = store.records(&id).await.unwrap();
    assert!(records.tickets.is_empty() && records.sessions.is_empty());
}

pub async fn closed_rooms_refuse_joins_without_changing_state(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.mode = Mode::Closed))
        .await
        .unwrap();
    assert_eq!(
        engine_error(store.join(&id, JoinRequest::default()).await),
        EngineError::RoomClosed
    );
    let snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!((snapshot.last_position, snapshot.totals.joined), (0, 0));
}

pub async fn acknowledged_state_survives_reopening(backend: &dyn Backend) {
    if !backend.is_durable() {
        return;
    }
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("r");
    store
        .put_room(room("r", |c| {
            c.max_active = 2;
            c.admit_per_minute = 600;
        }))
        .await
        .unwrap();
    let mut entries = Vec::new();
    for _ in 0..6 {
        entries.push(join(&*store, &id).await);
    }
    store.leave(&id, reference(&entries[3], 1)).await.unwrap();
    let before_snapshot = store.snapshot(&id).await.unwrap();
    let before_records = store.records(&id).await.unwrap();
    drop(store);
    let store = backend.open(clock.clone());
    assert_eq!(store.room(&id).await.unwrap().max_active, 2);
    let after_snapshot = store.snapshot(&id).await.unwrap();
    assert_eq!(after_snapshot, before_snapshot);
    let mut before: Vec<_> = before_records
        .tickets
        .iter()
        .map(|t| (t.id, t.position, t.state))
        .collect();
    let mut after: Vec<_> = store
        .records(&id)
        .await
        .unwrap()
        .tickets
        .iter()
        .map(|t| (t.id, t.position, t.state))
        .collect();
    before.sort_by_key(|t| t.1);
    after.sort_by_key(|t| t.1);
    assert_eq!(before, after);
    // The same sessions come back for the same tickets, and positions go on from where they were.
    assert_eq!(
        session_of(&store.status(&id, reference(&entries[0], 1)).await.unwrap()),
        session_of(&entries[0])
    );
    assert_eq!(position(&join(&*store, &id).await), 7);
}

pub async fn touching_keeps_waiting_tickets_alive_in_one_call(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("r");
    store
        .put_room(room("r", |c| {
            c.mode = Mode::QueueAll;
            c.ticket_idle_ttl = Duration::from_secs(60);
        }))
        .await
        .unwrap();
    let mut references = Vec::new();
    for _ in 0..4 {
        references.push(reference(&join(&*store, &id).await, 1));
    }
    store.leave(&id, references[3]).await.unwrap();
    clock.advance(Duration::from_secs(45));
    let stale = TicketRef {
        generation: 9,
        ..references[2]
    };
    let touched = store
        .touch(&id, &[references[0], references[1], stale, references[3]])
        .await
        .unwrap();
    assert_eq!(
        touched, 2,
        "only the live waiting tickets of this generation count"
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        store.tick(&id).await.unwrap().abandoned,
        1,
        "the untouched ticket was abandoned"
    );
    assert_eq!(ahead(&store.status(&id, references[1]).await.unwrap()), 1);
}

/// A paused room `r` with `joins` tickets waiting at positions 1 ..= `joins`.
async fn paused_line(
    backend: &dyn Backend,
    joins: usize,
) -> (Arc<dyn RoomStore>, RoomId, Vec<TicketRef>) {
    let store = backend.open(clock());
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    let mut references = Vec::new();
    for _ in 0..joins {
        references.push(reference(&join(&*store, &id).await, 1));
    }
    (store, id, references)
}

pub async fn waiting_positions_list_the_live_line_in_order(backend: &dyn Backend) {
    let (store, id, references) = paused_line(backend, 5).await;
    store.leave(&id, references[1]).await.unwrap();
    store
        .put_room(room("r", |c| c.max_active = 1))
        .await
        .unwrap();
    store.tick(&id).await.unwrap();
    let line = store.line_masks(&id).await.unwrap();
    assert_eq!(line.positions().collect::<Vec<_>>(), [3, 4, 5]);
    assert_eq!(line.len(), 3);
}

/// Over several of the line's buckets of 128 positions, with gaps and a whole bucket left
/// empty: every waiting ticket's `ahead` from the masks is the one its status tells, and a
/// position out of the line has none.
pub async fn line_masks_tell_every_waiting_ticket_its_ahead(backend: &dyn Backend) {
    let (store, id, references) = paused_line(backend, 400).await;
    // Positions 1..=400: leave every third, and all of the bucket 128..256.
    for (index, reference) in references.iter().enumerate() {
        let position = index as u64 + 1;
        if position.is_multiple_of(3) || (128..256).contains(&position) {
            store.leave(&id, *reference).await.unwrap();
        }
    }
    let line = store.line_masks(&id).await.unwrap();
    let mut waiting = 0;
    for (index, reference) in references.iter().enumerate() {
        let position = index as u64 + 1;
        match store.status(&id, *reference).await {
            Ok(entry) => {
                assert_eq!(line.ahead_of(position), Some(ahead(&entry)), "{position}");
                waiting += 1;
            }
            Err(_) => assert_eq!(line.ahead_of(position), None, "{position} left"),
        }
    }
    assert_eq!(line.len(), waiting);
    assert_eq!(line.ahead_of(0), None);
    assert_eq!(line.ahead_of(401), None);
    let empty = store.line_masks(&room_id("none")).await;
    assert!(empty.is_err(), "no room, no line: {empty:?}");
}

/// Follows `next_after` from the start, checking every page's bound and order.
async fn walk_sessions(
    store: &dyn RoomStore,
    room: &RoomId,
    filter: SessionFilter,
    limit: usize,
) -> Vec<String> {
    let mut listed = Vec::new();
    let mut after = None;
    for _ in 0..1_000 {
        let page = store
            .session_page(
                room,
                &SessionQuery {
                    after: after.clone(),
                    filter,
                    limit,
                },
            )
            .await
            .unwrap();
        assert!(
            page.sessions.len() <= limit,
            "a page holds at most the limit"
        );
        for session in &page.sessions {
            assert!(
                filter.matches(session.state),
                "{filter:?} listed {session:?}"
            );
            listed.push(session.id.to_string());
        }
        match page.next_after {
            None => {
                let mut sorted = listed.clone();
                sorted.sort();
                assert_eq!(listed, sorted, "pages follow the ids' order");
                return listed;
            }
            Some(next) => after = Some(next),
        }
    }
    panic!("the listing never ends");
}

pub async fn sessions_are_listed_in_bounded_pages_each_exactly_once(backend: &dyn Backend) {
    let store = backend.open(clock());
    let id = room_id("r");
    store.put_room(room("r", |_| {})).await.unwrap();
    let ttl = Duration::from_secs(600);
    let mut sessions = Vec::new();
    for _ in 0..23 {
        sessions.push(store.issue_session(&id, None, ttl).await.unwrap().id);
    }
    let ends = [
        SessionEnd::Completed,
        SessionEnd::Revoked,
        SessionEnd::Abandoned,
    ];
    for (index, session) in sessions.iter().take(9).enumerate() {
        store
            .end_session(&id, *session, ends[index % ends.len()])
            .await
            .unwrap();
    }
    let every: BTreeSet<String> = sessions.iter().map(ToString::to_string).collect();
    let ended_as = |end: SessionEnd| -> BTreeSet<String> {
        sessions
            .iter()
            .take(9)
            .enumerate()
            .filter(|(index, _)| ends[index % ends.len()] == end)
            .map(|(_, session)| session.to_string())
            .collect()
    };
    let active: BTreeSet<String> = sessions.iter().skip(9).map(ToString::to_string).collect();
    for limit in [1, 4, 23, 100] {
        let all = walk_sessions(&*store, &id, SessionFilter::Any, limit).await;
        assert_eq!(
            all.len(),
            every.len(),
            "each session exactly once (limit {limit})"
        );
        assert_eq!(all.iter().cloned().collect::<BTreeSet<_>>(), every);
        let listed = walk_sessions(&*store, &id, SessionFilter::Active, limit).await;
        assert_eq!(listed.len(), active.len());
        assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), active);
        for end in ends {
            let listed = walk_sessions(&*store, &id, SessionFilter::Ended(end), limit).await;
            assert_eq!(listed.into_iter().collect::<BTreeSet<_>>(), ended_as(end));
        }
        let expired = walk_sessions(
            &*store,
            &id,
            SessionFilter::Ended(SessionEnd::Expired),
            limit,
        )
        .await;
        assert!(expired.is_empty());
    }
    // A page starting after the last id is empty and final.
    let last = every.iter().next_back().cloned();
    let page = store
        .session_page(
            &id,
            &SessionQuery {
                after: last,
                filter: SessionFilter::Any,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert!(page.sessions.is_empty() && page.next_after.is_none());
    // An unknown room is refused.
    assert!(matches!(
        store
            .session_page(
                &room_id("missing"),
                &SessionQuery {
                    after: None,
                    filter: SessionFilter::Any,
                    limit: 10
                }
            )
            .await,
        Err(StoreError::RoomNotFound(_))
    ));
}
