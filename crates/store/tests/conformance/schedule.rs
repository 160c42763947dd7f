//! Scheduled sales (SPEC §5.3) on every backend: idle before the pre-queue, nobody admitted
//! during it, a lottery at `opens_at` that anyone can reproduce from the recorded seed, late
//! joiners after the cohort, the event's limits while it is open, the `after` mode.

use std::collections::HashMap;
use std::time::Duration;

use anteroom_core::engine::{EngineError, Entry, JoinRequest, TicketState};
use anteroom_core::lottery::shuffled_order;
use anteroom_core::room::{Event, IdleMode, Schedule};
use anteroom_core::{TicketId, Timestamp};
use anteroom_store::RoomStore;

use super::{Backend, START, clock, engine_error, join, reference, room, room_id};

/// One event: pre-queue at +10 s, open at +20 s, closed at +60 s; at most 3 active while open.
fn sale(shuffle: bool, before: IdleMode) -> Schedule {
    Schedule {
        events: vec![Event {
            prequeue_at: Timestamp(START.0 + 10_000),
            opens_at: Timestamp(START.0 + 20_000),
            closes_at: Timestamp(START.0 + 60_000),
            shuffle,
            max_active: Some(3),
            admit_per_minute: None,
            admit_burst: None,
        }],
        before,
        after: IdleMode::Closed,
    }
}

fn waiting_opens_at(entry: &Entry) -> Option<Timestamp> {
    match entry {
        Entry::Waiting(view) => view.opens_at,
        Entry::Admitted(_) => panic!("expected a waiting ticket, got {entry:?}"),
    }
}

fn ticket_of(entry: &Entry) -> TicketId {
    match entry {
        Entry::Waiting(view) => view.ticket,
        Entry::Admitted(view) => view.ticket,
    }
}

pub async fn schedules_pass_through_or_close_outside_their_events(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let open = room_id("open");
    let shut = room_id("shut");
    store
        .put_room(room("open", |c| {
            c.schedule = sale(true, IdleMode::Passthrough)
        }))
        .await
        .unwrap();
    store
        .put_room(room("shut", |c| c.schedule = sale(true, IdleMode::Closed)))
        .await
        .unwrap();
    assert!(matches!(join(&*store, &open).await, Entry::Admitted(_)));
    assert_eq!(
        engine_error(store.join(&shut, JoinRequest::default()).await),
        EngineError::RoomClosed
    );
    let snapshot = store.snapshot(&shut).await.unwrap();
    assert_eq!((snapshot.last_position, snapshot.totals.joined), (0, 0));
    // After closes_at the room follows `after` (closed here).
    clock.set(Timestamp(START.0 + 60_000));
    assert_eq!(
        engine_error(store.join(&open, JoinRequest::default()).await),
        EngineError::RoomClosed
    );
}

pub async fn the_prequeue_admits_nobody_before_opens_at(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("sale");
    store
        .put_room(room("sale", |c| c.schedule = sale(false, IdleMode::Closed)))
        .await
        .unwrap();
    clock.set(Timestamp(START.0 + 10_000));
    let mut entries = Vec::new();
    for _ in 0..5 {
        let entry = join(&*store, &id).await;
        assert_eq!(waiting_opens_at(&entry), Some(Timestamp(START.0 + 20_000)));
        entries.push(entry);
    }
    clock.set(Timestamp(START.0 + 19_999));
    assert_eq!(store.tick(&id).await.unwrap().admitted, 0);
    let status = store.status(&id, reference(&entries[4], 1)).await.unwrap();
    assert_eq!(waiting_opens_at(&status), Some(Timestamp(START.0 + 20_000)));
    // Open without shuffle: join order, within the event's max_active of 3.
    clock.set(Timestamp(START.0 + 20_000));
    assert_eq!(store.tick(&id).await.unwrap().admitted, 3);
    for (index, entry) in entries.iter().enumerate() {
        let now = store.status(&id, reference(entry, 1)).await.unwrap();
        assert_eq!(
            matches!(now, Entry::Admitted(_)),
            index < 3,
            "ticket {index}"
        );
        assert_eq!(super::position(&now), index as u64 + 1);
    }
    assert_eq!(store.snapshot(&id).await.unwrap().draw, None);
}

pub async fn the_lottery_is_reproducible_from_its_recorded_seed(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("sale");
    store
        .put_room(room("sale", |c| c.schedule = sale(true, IdleMode::Closed)))
        .await
        .unwrap();
    clock.set(Timestamp(START.0 + 10_000));
    let mut cohort = Vec::new();
    for _ in 0..12 {
        cohort.push(ticket_of(&join(&*store, &id).await));
        clock.advance(Duration::from_millis(10));
    }
    clock.set(Timestamp(START.0 + 20_500));
    // The first operation after opens_at draws; the late joiner comes after the cohort.
    let late = join(&*store, &id).await;
    assert_eq!(super::position(&late), 13);
    assert_eq!(super::ahead(&late), 12);
    let draw = store.snapshot(&id).await.unwrap().draw.expect("drawn");
    assert_eq!(draw.opens_at, Timestamp(START.0 + 20_000));
    assert_eq!(draw.drawn_at, Timestamp(START.0 + 20_500));
    assert_eq!((draw.cohort, draw.through_position), (12, 12));
    let order = shuffled_order(&draw.seed, cohort.len());
    let expected: HashMap<TicketId, u64> = order
        .iter()
        .enumerate()
        .map(|(slot, &member)| (cohort[member], slot as u64 + 1))
        .collect();
    let positions = |records: &anteroom_store::RoomRecords| -> HashMap<TicketId, u64> {
        records
            .tickets
            .iter()
            .filter(|t| t.state == TicketState::Waiting && t.position <= 12)
            .map(|t| (t.id, t.position))
            .collect()
    };
    assert_eq!(positions(&store.records(&id).await.unwrap()), expected);
    if backend.is_durable() {
        drop(store);
        let reopened = backend.open(clock.clone());
        assert_eq!(reopened.snapshot(&id).await.unwrap().draw, Some(draw));
        assert_eq!(positions(&reopened.records(&id).await.unwrap()), expected);
        return check_admission_order(&*reopened, &id, &cohort, &order, draw).await;
    }
    check_admission_order(&*store, &id, &cohort, &order, draw).await;
}

/// The drawn order is the admission order (three at a time: the event's max_active), each
/// waiting member's `ahead` is its drawn place, and the draw happens once.
async fn check_admission_order(
    store: &dyn RoomStore,
    id: &anteroom_core::RoomId,
    cohort: &[TicketId],
    order: &[usize],
    draw: anteroom_core::engine::Draw,
) {
    assert_eq!(store.tick(id).await.unwrap().admitted, 3);
    for (slot, &member) in order.iter().enumerate() {
        let ticket = anteroom_core::engine::TicketRef {
            id: cohort[member],
            generation: 1,
        };
        match store.status(id, ticket).await.unwrap() {
            Entry::Admitted(_) => assert!(slot < 3, "slot {slot} admitted too early"),
            Entry::Waiting(view) => {
                assert!(slot >= 3, "slot {slot} still waits");
                assert_eq!(view.ahead, slot as u64 - 3);
            }
        }
    }
    assert_eq!(store.snapshot(id).await.unwrap().draw, Some(draw));
}
