//! Unit tests of the room engine: each test drives one room by hand with a controlled clock.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::ids::RoomId;
use crate::room::{Event, IdleMode, Schedule};
use rand::SeedableRng;
use rand::rngs::StdRng;

struct Harness {
    room: RoomState,
    now: Timestamp,
    rng: StdRng,
}

impl Harness {
    fn new(edit: impl FnOnce(&mut RoomConfig)) -> Harness {
        let mut config = RoomConfig::with_defaults(RoomId::new("test").unwrap());
        edit(&mut config);
        let now = Timestamp(1_000_000);
        Harness {
            room: RoomState::new(config, now),
            now,
            rng: StdRng::seed_from_u64(42),
        }
    }

    fn advance(&mut self, millis: u64) {
        self.now = Timestamp(self.now.0 + millis);
    }

    fn join(&mut self) -> Entry {
        let mut changes = ChangeSet::default();
        self.room
            .join(
                JoinRequest::default(),
                self.now,
                &mut self.rng,
                &mut changes,
            )
            .unwrap()
    }

    fn status(&mut self, entry: &Entry) -> Result<Entry, EngineError> {
        let mut changes = ChangeSet::default();
        let reference = reference_of(entry, self.room.meta().generation);
        self.room
            .status(reference, self.now, &mut self.rng, &mut changes)
    }

    fn tick(&mut self) -> TickReport {
        let mut changes = ChangeSet::default();
        self.room.tick(self.now, &mut self.rng, &mut changes)
    }
}

fn reference_of(entry: &Entry, generation: u32) -> TicketRef {
    let id = match entry {
        Entry::Waiting(view) => view.ticket,
        Entry::Admitted(view) => view.ticket,
    };
    TicketRef { id, generation }
}

fn waiting(entry: &Entry) -> &WaitingView {
    match entry {
        Entry::Waiting(view) => view,
        Entry::Admitted(_) => panic!("expected waiting, got {entry:?}"),
    }
}

fn is_admitted(entry: &Entry) -> bool {
    matches!(entry, Entry::Admitted(_))
}

#[test]
fn first_visitor_enters_at_once_when_limits_allow() {
    let mut h = Harness::new(|c| {
        c.max_active = 1;
        c.admit_per_minute = 60;
    });
    let first = h.join();
    assert!(is_admitted(&first));
    let second = h.join();
    assert_eq!(waiting(&second).ahead, 0);
    assert_eq!(waiting(&second).position, 2);
    assert_eq!(h.room.snapshot().active, 1);
}

#[test]
fn nobody_jumps_the_line_even_when_a_slot_is_free() {
    let mut h = Harness::new(|c| {
        c.max_active = 10;
        c.admit_per_minute = 60;
        c.admit_burst = 1;
    });
    assert!(is_admitted(&h.join()));
    // The bucket is empty now: the next two wait.
    let second = h.join();
    let third = h.join();
    assert_eq!(waiting(&third).ahead, 1);
    // A slot and a token are free again, but somebody waits: a newcomer queues behind.
    h.advance(1_000);
    let fourth = h.join();
    assert_eq!(waiting(&fourth).ahead, 2);
    assert_eq!(h.tick().admitted, 1);
    assert!(is_admitted(&h.status(&second).unwrap()));
    assert_eq!(waiting(&h.status(&third).unwrap()).ahead, 0);
}

#[test]
fn tick_admits_in_fifo_order_up_to_capacity() {
    let mut h = Harness::new(|c| c.max_active = 3);
    let entries: Vec<Entry> = (0..6).map(|_| h.join()).collect();
    // Unlimited rate: the first three enter at once, one by one, as nobody waits before them.
    assert!(entries[..3].iter().all(is_admitted));
    assert_eq!(h.tick().admitted, 0);
    let mut changes = ChangeSet::default();
    let session = match &entries[0] {
        Entry::Admitted(view) => view.session.id,
        Entry::Waiting(_) => unreachable!(),
    };
    h.room
        .end_session(session, SessionEnd::Completed, h.now, &mut changes)
        .unwrap();
    assert_eq!(h.tick().admitted, 1);
    assert_eq!(h.room.snapshot().serving, 4);
    assert!(is_admitted(&h.status(&entries[3]).unwrap()));
    assert_eq!(waiting(&h.status(&entries[5]).unwrap()).ahead, 1);
}

#[test]
fn claim_is_idempotent_and_takes_one_slot() {
    let mut h = Harness::new(|c| c.max_active = 1);
    let entry = h.join();
    let first = h.status(&entry).unwrap();
    let again = h.status(&entry).unwrap();
    assert_eq!(first, again);
    assert_eq!(h.room.snapshot().active, 1);
    assert_eq!(h.room.meta().totals.passes, 1);
}

#[test]
fn no_show_frees_the_slot_after_claim_ttl() {
    let mut h = Harness::new(|c| {
        c.max_active = 1;
        c.claim_ttl = Duration::from_secs(120);
        c.ticket_idle_ttl = Duration::from_secs(3600);
    });
    let first = h.join();
    let second = h.join();
    let mut changes = ChangeSet::default();
    let session = match &first {
        Entry::Admitted(view) => view.session.id,
        Entry::Waiting(_) => unreachable!(),
    };
    h.room
        .end_session(session, SessionEnd::Completed, h.now, &mut changes)
        .unwrap();
    assert_eq!(h.tick().admitted, 1);
    assert_eq!(h.room.snapshot().admitted_unclaimed, 1);
    let third = h.join();
    h.advance(120_000);
    let report = h.tick();
    assert_eq!(report.no_shows, 1);
    assert_eq!(report.admitted, 1);
    assert_eq!(h.status(&second), Err(EngineError::TicketExpired));
    assert!(is_admitted(&h.status(&third).unwrap()));
}

#[test]
fn idle_tickets_are_abandoned_and_not_counted_ahead() {
    let mut h = Harness::new(|c| {
        c.mode = Mode::QueueAll;
        c.ticket_idle_ttl = Duration::from_secs(300);
    });
    let first = h.join();
    let second = h.join();
    let third = h.join();
    assert_eq!(waiting(&third).ahead, 2);
    h.advance(200_000);
    h.status(&second).unwrap();
    h.status(&third).unwrap();
    h.advance(100_000);
    assert_eq!(h.tick().abandoned, 1);
    assert_eq!(h.status(&first), Err(EngineError::TicketExpired));
    assert_eq!(waiting(&h.status(&third).unwrap()).ahead, 1);
    // A ticket that comes back after being abandoned joins again at the back.
    let mut changes = ChangeSet::default();
    let request = JoinRequest {
        resume: Some(reference_of(&first, 1)),
        ..JoinRequest::default()
    };
    let rejoined = h
        .room
        .join(request, h.now, &mut h.rng, &mut changes)
        .unwrap();
    assert_eq!(waiting(&rejoined).position, 4);
    assert_eq!(waiting(&rejoined).ahead, 2);
}

#[test]
fn admission_rate_bounds_admissions_per_window() {
    let mut h = Harness::new(|c| {
        c.mode = Mode::QueueAll;
        c.admit_per_minute = 120;
        c.admit_burst = 5;
    });
    for _ in 0..100 {
        h.join();
    }
    let mut config = h.room.config().clone();
    config.mode = Mode::Queue;
    h.room.set_config(config, h.now, &mut ChangeSet::default());
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += h.tick().admitted;
        h.advance(1_000);
    }
    // Burst of 5, then 2 per second for the 9 further seconds.
    assert_eq!(admitted, 5 + 18);
}

#[test]
fn sessions_expire_after_their_ttl_and_renew_on_use() {
    let mut h = Harness::new(|c| {
        c.max_active = 1;
        c.session_ttl = Duration::from_secs(600);
        c.session_max = Some(Duration::from_secs(900));
    });
    let entry = h.join();
    let session = match &entry {
        Entry::Admitted(view) => view.session.id,
        Entry::Waiting(_) => unreachable!(),
    };
    let mut changes = ChangeSet::default();
    h.advance(200_000);
    let (_, renewed) = h.room.renew_session(session, h.now, &mut changes).unwrap();
    assert!(!renewed, "not renewed before half the ttl");
    h.advance(200_000);
    let (renewed_session, renewed) = h.room.renew_session(session, h.now, &mut changes).unwrap();
    assert!(renewed);
    // Capped by session_max.
    assert_eq!(renewed_session.expires_at, Timestamp(1_000_000 + 900_000));
    h.advance(500_000);
    assert_eq!(h.tick().expired, 1);
    assert_eq!(h.status(&entry), Err(EngineError::TicketExpired));
    assert!(h.room.is_revoked(session));
}

#[test]
fn leaving_frees_an_admitted_slot_at_once() {
    let mut h = Harness::new(|c| {
        c.max_active = 1;
        c.mode = Mode::QueueAll;
    });
    let first = h.join();
    let second = h.join();
    let mut config = h.room.config().clone();
    config.mode = Mode::Queue;
    h.room.set_config(config, h.now, &mut ChangeSet::default());
    assert_eq!(h.tick().admitted, 1);
    let mut changes = ChangeSet::default();
    let freed = h
        .room
        .leave(reference_of(&first, 1), h.now, &mut h.rng, &mut changes)
        .unwrap();
    assert!(freed);
    assert_eq!(h.tick().admitted, 1);
    assert!(is_admitted(&h.status(&second).unwrap()));
}

#[test]
fn closed_rooms_refuse_joins_and_passthrough_admits_everybody() {
    let mut closed = Harness::new(|c| c.mode = Mode::Closed);
    let mut changes = ChangeSet::default();
    let refused = closed.room.join(
        JoinRequest::default(),
        closed.now,
        &mut closed.rng,
        &mut changes,
    );
    assert_eq!(refused, Err(EngineError::RoomClosed));
    assert!(changes.is_empty(), "a refused join changes nothing");

    let mut open = Harness::new(|c| {
        c.mode = Mode::Passthrough;
        c.max_active = 1;
    });
    assert!(is_admitted(&open.join()));
    assert!(is_admitted(&open.join()));
    assert_eq!(open.room.snapshot().active, 2);
}

#[test]
fn identity_rooms_give_one_ticket_per_user() {
    let mut h = Harness::new(|c| c.mode = Mode::QueueAll);
    let mut changes = ChangeSet::default();
    let request = JoinRequest {
        identity: Some("user-1".into()),
        ..JoinRequest::default()
    };
    let first = h
        .room
        .join(request.clone(), h.now, &mut h.rng, &mut changes)
        .unwrap();
    let again = h
        .room
        .join(request, h.now, &mut h.rng, &mut changes)
        .unwrap();
    assert_eq!(waiting(&first).ticket, waiting(&again).ticket);
    assert_eq!(h.room.meta().last_position, 1);
}

#[test]
fn reset_starts_a_new_generation() {
    let mut h = Harness::new(|c| c.max_active = 1);
    let admitted = h.join();
    let queued = h.join();
    let mut changes = ChangeSet::default();
    h.room.reset(false, h.now, &mut changes);
    assert_eq!(h.room.meta().generation, 2);
    let old = reference_of(&queued, 1);
    assert_eq!(
        h.room.status(old, h.now, &mut h.rng, &mut changes),
        Err(EngineError::TicketExpired)
    );
    let session = match &admitted {
        Entry::Admitted(view) => view.session.id,
        Entry::Waiting(_) => unreachable!(),
    };
    assert!(h.room.is_revoked(session));
    let snapshot = h.room.snapshot();
    assert_eq!((snapshot.waiting, snapshot.active), (0, 0));
    // Positions go on increasing across generations.
    let fresh = h.join();
    assert!(is_admitted(&fresh));
    assert_eq!(h.room.meta().last_position, 3);
}

#[test]
fn random_order_admits_from_anywhere_in_the_line() {
    let mut h = Harness::new(|c| {
        c.mode = Mode::QueueAll;
        c.order = Order::Random;
        c.ticket_idle_ttl = Duration::from_secs(3600);
    });
    for _ in 0..200 {
        h.join();
    }
    let mut config = h.room.config().clone();
    config.mode = Mode::Queue;
    config.max_active = 20;
    h.room.set_config(config, h.now, &mut ChangeSet::default());
    assert_eq!(h.tick().admitted, 20);
    let admitted_positions: Vec<u64> = h
        .room
        .tickets()
        .filter(|t| matches!(t.state, TicketState::Admitted { .. }))
        .map(|t| t.position)
        .collect();
    assert!(
        admitted_positions.iter().any(|p| *p > 20),
        "{admitted_positions:?}"
    );
    assert_eq!(
        h.room.snapshot().serving,
        *admitted_positions.iter().max().unwrap()
    );
}

#[test]
fn restore_rebuilds_indexes_and_counts() {
    let mut h = Harness::new(|c| {
        c.max_active = 2;
        c.mode = Mode::Queue;
    });
    let entries: Vec<Entry> = (0..5).map(|_| h.join()).collect();
    let tickets: Vec<Ticket> = h.room.tickets().collect();
    let sessions: Vec<Session> = h
        .room
        .sessions()
        .map(std::borrow::Cow::into_owned)
        .collect();
    let restored = RoomState::restore(h.room.meta().clone(), tickets, sessions, h.now);
    assert_eq!(restored.snapshot(), h.room.snapshot());
    let mut restored = Harness {
        room: restored,
        now: h.now,
        rng: StdRng::seed_from_u64(1),
    };
    assert_eq!(waiting(&restored.status(&entries[4]).unwrap()).ahead, 2);
}

/// The idle index a restore builds from the lines holds what one built ticket by ticket would:
/// every waiting ticket of both lanes at its last contact, `now` at the earliest.
#[test]
fn restore_keys_idle_tickets_by_last_contact_also_when_seen_after_the_restart() {
    let mut h = Harness::new(|c| {
        c.max_active = 1;
        c.mode = Mode::Queue;
    });
    for _ in 0..40 {
        h.join();
    }
    let restarted = Timestamp(h.now.0 + 1_000);
    let seen_later = Timestamp(h.now.0 + 60_000);
    let tickets: Vec<Ticket> = h
        .room
        .tickets()
        .enumerate()
        .map(|(index, mut ticket)| {
            if ticket.state == TicketState::Waiting {
                ticket.priority = index % 3 == 0;
                if index % 5 == 0 {
                    ticket.last_seen = seen_later;
                }
            }
            ticket
        })
        .collect();
    let expected: BTreeSet<(Timestamp, u64)> = tickets
        .iter()
        .filter(|ticket| ticket.state == TicketState::Waiting)
        .map(|ticket| (ticket.last_seen.max(restarted), ticket.position))
        .collect();
    assert_eq!(expected.len(), 39);
    assert!(expected.iter().any(|(at, _)| *at == seen_later));
    assert!(tickets.iter().any(|ticket| ticket.priority));
    let restored = RoomState::restore(h.room.meta().clone(), tickets, Vec::new(), restarted);
    assert_eq!(restored.idle, expected);
}

#[test]
fn history_is_forgotten_after_the_configured_retention_not_before() {
    let retention = Duration::from_secs(120);
    let mut h = Harness::new(|c| {
        c.mode = Mode::QueueAll;
        c.history_retention = retention;
    });
    let entry = h.join();
    let mut changes = ChangeSet::default();
    h.room
        .leave(reference_of(&entry, 1), h.now, &mut h.rng, &mut changes)
        .unwrap();
    h.advance(duration_ms(retention) - 1);
    let mut changes = ChangeSet::default();
    h.room.tick(h.now, &mut h.rng, &mut changes);
    assert_eq!(
        h.room.tickets().count(),
        1,
        "kept until the retention is over"
    );
    assert_eq!(
        h.status(&entry),
        Err(EngineError::TicketExpired),
        "ended: gone"
    );

    h.advance(1);
    let mut changes = ChangeSet::default();
    h.room.tick(h.now, &mut h.rng, &mut changes);
    assert_eq!(h.room.tickets().count(), 0);
    assert!(changes.tickets.contains(&reference_of(&entry, 1).id));
    assert_eq!(h.status(&entry), Err(EngineError::TicketUnknown));
}

#[test]
fn ended_sessions_are_forgotten_after_the_configured_retention() {
    let retention = Duration::from_secs(90);
    let mut h = Harness::new(|c| {
        c.session_ttl = Duration::from_secs(60);
        c.history_retention = retention;
    });
    let session = match h.join() {
        Entry::Admitted(view) => view.session.id,
        Entry::Waiting(_) => unreachable!("an open room admits at once"),
    };
    let mut changes = ChangeSet::default();
    h.room
        .end_session(session, SessionEnd::Completed, h.now, &mut changes)
        .unwrap();
    h.advance(duration_ms(retention) - 1);
    h.tick();
    assert_eq!(
        h.room.sessions().count(),
        1,
        "kept until the retention is over"
    );
    h.advance(1);
    h.tick();
    assert_eq!(h.room.sessions().count(), 0);
}

fn duration_ms(duration: Duration) -> u64 {
    crate::clock::duration_millis(duration)
}

#[test]
fn advance_admits_by_hand_within_the_line_and_capacity() {
    let mut h = Harness::new(|c| {
        c.mode = Mode::QueueAll;
        c.max_active = 3;
    });
    let entries: Vec<Entry> = (0..5).map(|_| h.join()).collect();
    assert_eq!(h.tick().admitted, 0, "paused: the admitter lets nobody in");
    let mut changes = ChangeSet::default();
    // Bounded by capacity (I2): three slots, although ten were asked for.
    assert_eq!(h.room.advance(10, h.now, &mut h.rng, &mut changes), 3);
    assert!(changes.meta && changes.tickets.len() == 3);
    let snapshot = h.room.snapshot();
    assert_eq!((snapshot.serving, snapshot.admitted_unclaimed), (3, 3));
    assert!(is_admitted(&h.status(&entries[0]).unwrap()));
    assert_eq!(waiting(&h.status(&entries[3]).unwrap()).ahead, 0);
    // No free slot: nothing moves, and nothing is written.
    let mut changes = ChangeSet::default();
    assert_eq!(h.room.advance(1, h.now, &mut h.rng, &mut changes), 0);
    assert!(changes.is_empty());
    // Unlimited capacity: bounded by the line, so serving never passes the last position (I8).
    h.room.set_config(
        RoomConfig {
            max_active: 0,
            ..h.room.config().clone()
        },
        h.now,
        &mut ChangeSet::default(),
    );
    assert_eq!(
        h.room
            .advance(100, h.now, &mut h.rng, &mut ChangeSet::default()),
        2
    );
    let snapshot = h.room.snapshot();
    assert_eq!((snapshot.serving, snapshot.last_position), (5, 5));
    assert_eq!(snapshot.waiting, 0);
}

#[test]
fn passes_by_hand_are_refused_when_every_slot_is_taken() {
    let mut h = Harness::new(|c| c.max_active = 1);
    let ttl = Duration::from_secs(60);
    let mut changes = ChangeSet::default();
    h.room
        .issue_session(None, ttl, h.now, &mut h.rng, &mut changes)
        .unwrap();
    let mut changes = ChangeSet::default();
    assert_eq!(
        h.room
            .issue_session(None, ttl, h.now, &mut h.rng, &mut changes),
        Err(EngineError::RoomFull)
    );
    assert!(changes.is_empty(), "a refusal changes nothing");
    assert_eq!(h.room.snapshot().active, 1);
}

/// A room whose one event pre-queues at +10 s, opens at +20 s and closes at +60 s (the
/// harness starts at 1 000 000 ms).
fn scheduled(shuffle: bool, before: IdleMode) -> impl FnOnce(&mut RoomConfig) {
    move |c| {
        c.max_active = 100;
        c.schedule = Schedule {
            events: vec![Event {
                prequeue_at: Timestamp(1_010_000),
                opens_at: Timestamp(1_020_000),
                closes_at: Timestamp(1_060_000),
                shuffle,
                max_active: Some(2),
                admit_per_minute: None,
                admit_burst: None,
            }],
            before,
            after: IdleMode::Closed,
        };
    }
}

#[test]
fn a_schedule_is_idle_then_prequeues_then_opens_then_follows_after() {
    let mut h = Harness::new(scheduled(false, IdleMode::Passthrough));
    assert!(is_admitted(&h.join()), "idle and passthrough: in at once");
    h.advance(10_000);
    let entries: Vec<Entry> = (0..3).map(|_| h.join()).collect();
    let view = waiting(&entries[2]);
    assert_eq!(view.opens_at, Some(Timestamp(1_020_000)));
    assert!(!view.paused);
    h.advance(9_999);
    assert_eq!(h.tick().admitted, 0, "nobody is admitted in the pre-queue");
    h.advance(1);
    // Open: the event's max_active (2) replaces the room's (100); one slot is already held
    // by the visitor let through while idle.
    assert_eq!(h.tick().admitted, 1);
    assert!(is_admitted(&h.status(&entries[0]).unwrap()));
    assert_eq!(waiting(&h.status(&entries[2]).unwrap()).opens_at, None);
    assert_eq!(h.room.meta().draw, None, "no shuffle, no draw");
    h.advance(40_000);
    let mut changes = ChangeSet::default();
    let refused = h
        .room
        .join(JoinRequest::default(), h.now, &mut h.rng, &mut changes);
    assert_eq!(refused, Err(EngineError::RoomClosed), "after = closed");
    assert!(changes.is_empty());
}

#[test]
fn before_closed_refuses_joins_and_changes_nothing() {
    let mut h = Harness::new(scheduled(true, IdleMode::Closed));
    let mut changes = ChangeSet::default();
    let refused = h
        .room
        .join(JoinRequest::default(), h.now, &mut h.rng, &mut changes);
    assert_eq!(refused, Err(EngineError::RoomClosed));
    assert!(changes.is_empty());
    assert_eq!(h.room.snapshot().last_position, 0);
}

#[test]
fn the_draw_orders_the_cohort_by_its_seed_and_late_joiners_come_after() {
    let mut h = Harness::new(scheduled(true, IdleMode::Closed));
    h.advance(10_000);
    let cohort: Vec<TicketId> = (0..8).map(|_| waiting(&h.join()).ticket).collect();
    h.advance(10_000);
    let late = h.join();
    assert_eq!(
        waiting(&late).position,
        9,
        "a late joiner follows the cohort"
    );
    assert_eq!(waiting(&late).ahead, 8);
    let draw = h
        .room
        .meta()
        .draw
        .expect("drawn at the first operation after opens_at");
    assert_eq!((draw.cohort, draw.through_position), (8, 8));
    assert_eq!(draw.opens_at, Timestamp(1_020_000));
    // Reproduce the order from the recorded seed alone.
    let order = crate::lottery::shuffled_order(&draw.seed, cohort.len());
    for (slot, &member) in order.iter().enumerate() {
        let ticket = h.room.ticket(cohort[member]).unwrap();
        assert_eq!(ticket.position, slot as u64 + 1);
    }
    // The drawn order is the admission order, two at a time (the event's max_active).
    let mut admitted: Vec<TicketId> = Vec::new();
    while admitted.len() < 8 {
        assert!(h.tick().admitted <= 2);
        let mut batch = Vec::new();
        for &ticket in &cohort {
            let reference = TicketRef {
                id: ticket,
                generation: 1,
            };
            let entry = h
                .room
                .status(reference, h.now, &mut h.rng, &mut ChangeSet::default());
            if !admitted.contains(&ticket) && is_admitted(&entry.unwrap()) {
                batch.push(ticket);
                let session = match h.room.ticket(ticket).unwrap().state {
                    TicketState::Claimed { session } => session,
                    other => panic!("expected a claimed ticket, got {other:?}"),
                };
                h.room
                    .end_session(
                        session,
                        SessionEnd::Completed,
                        h.now,
                        &mut ChangeSet::default(),
                    )
                    .unwrap();
            }
        }
        batch.sort_by_key(|t| h.room.ticket(*t).unwrap().position);
        admitted.extend(batch);
        h.advance(100);
    }
    let expected: Vec<TicketId> = order.iter().map(|&member| cohort[member]).collect();
    let positions: Vec<u64> = admitted
        .iter()
        .map(|t| h.room.ticket(*t).unwrap().position)
        .collect();
    assert_eq!(positions, (1..=8).collect::<Vec<u64>>());
    assert_eq!(admitted, expected, "admitted in the drawn order");
    // Nobody draws twice for the same event.
    h.tick();
    assert_eq!(h.room.meta().draw, Some(draw));
}

/// The events one operation recorded, as (kind, ticket, session).
fn recorded(changes: &ChangeSet) -> Vec<(&'static str, Option<TicketId>, Option<SessionId>)> {
    changes
        .events
        .iter()
        .map(|event| (event.kind.name(), event.ticket, event.session))
        .collect()
}

#[test]
fn every_ticket_and_session_change_records_its_event() {
    let mut h = Harness::new(|c| c.max_active = 1);
    let mut changes = ChangeSet::default();
    let first = h
        .room
        .join(JoinRequest::default(), h.now, &mut h.rng, &mut changes)
        .unwrap();
    let Entry::Admitted(admitted) = &first else {
        panic!("the first visitor enters at once");
    };
    let (ticket, session) = (Some(admitted.ticket), Some(admitted.session.id));
    assert_eq!(
        recorded(&changes),
        [
            ("ticket.joined", ticket, None),
            ("ticket.admitted", ticket, None),
            ("pass.issued", ticket, session),
        ]
    );
    assert_eq!(changes.events[0].position, 1);
    assert_eq!(changes.events[0].at, h.now);

    // Asking again changes nothing and records nothing.
    let mut changes = ChangeSet::default();
    let reference = reference_of(&first, 1);
    h.room
        .status(reference, h.now, &mut h.rng, &mut changes)
        .unwrap();
    assert!(changes.events.is_empty());

    let second = h.join();
    let mut changes = ChangeSet::default();
    h.room
        .leave(reference_of(&second, 1), h.now, &mut h.rng, &mut changes)
        .unwrap();
    assert_eq!(
        recorded(&changes),
        [("ticket.left", Some(waiting(&second).ticket), None)]
    );

    let mut changes = ChangeSet::default();
    h.room
        .end_session(
            admitted.session.id,
            SessionEnd::Revoked,
            h.now,
            &mut changes,
        )
        .unwrap();
    assert_eq!(recorded(&changes), [("session.revoked", ticket, session)]);
}

/// The idle index holds exactly the waiting tickets, each under its last contact and position.
fn assert_idle_index_matches(room: &RoomState) {
    let expected: BTreeSet<(Timestamp, u64)> = room
        .tickets
        .values()
        .filter(|ticket| ticket.state() == TicketState::Waiting)
        .map(|ticket| (ticket.last_seen, ticket.position))
        .collect();
    assert_eq!(room.idle, expected);
}

#[test]
fn the_draw_moves_each_ticket_in_the_idle_index_with_its_position() {
    let mut h = Harness::new(|c| {
        scheduled(true, IdleMode::Closed)(c);
        c.ticket_idle_ttl = Duration::from_secs(60);
    });
    h.advance(10_000);
    // Contacts a second apart, so a ticket's last contact tells it apart from its position.
    let cohort: Vec<Entry> = (0..8)
        .map(|_| {
            h.advance(1_000);
            h.join()
        })
        .collect();
    h.advance(10_000);
    let late = h.join();
    assert!(h.room.meta().draw.is_some(), "drawn");
    assert_idle_index_matches(&h.room);
    // Only the cohort's first ticket (by join) stays silent; the rest keep in contact, so it
    // alone is abandoned, wherever the draw put it.
    h.advance(50_000);
    for entry in cohort[1..].iter().chain([&late]) {
        h.status(entry).unwrap();
    }
    h.advance(10_000);
    let silent = reference_of(&cohort[0], 1).id;
    let before = h.room.snapshot().totals.abandoned;
    h.tick();
    assert_eq!(h.room.snapshot().totals.abandoned, before + 1);
    assert!(matches!(
        h.room.ticket(silent).unwrap().state,
        TicketState::Ended {
            reason: TicketEnd::Abandoned,
            ..
        }
    ));
    assert_idle_index_matches(&h.room);
}

/// Ends the session of a visitor admitted at once, checking that the ticket and session the
/// room gives back once the visitor is held as history are the very ones it had, ended.
fn end_and_compare(h: &mut Harness, reason: SessionEnd) -> (TicketId, SessionId) {
    let Entry::Admitted(view) = h.join() else {
        panic!("an open room admits at once");
    };
    let before_ticket = h.room.ticket(view.ticket).unwrap();
    let before_session = h.room.session(view.session.id).unwrap();
    h.advance(1_500);
    let mut changes = ChangeSet::default();
    let ended = h
        .room
        .end_session(view.session.id, reason, h.now, &mut changes)
        .unwrap();
    let expected_session = Session {
        state: SessionState::Ended { reason, at: h.now },
        ..before_session
    };
    assert_eq!(ended, expected_session);
    assert_eq!(h.room.session(view.session.id), Some(expected_session));
    assert_eq!(h.room.ticket(view.ticket), Some(before_ticket));
    assert!(changes.tickets.is_empty() && changes.sessions.contains(&view.session.id));
    (view.ticket, view.session.id)
}

#[test]
fn an_ended_visitor_held_as_history_answers_as_before() {
    let mut h = Harness::new(|c| {
        c.session_max = Some(Duration::from_secs(7200));
    });
    let (ticket, session) = end_and_compare(&mut h, SessionEnd::Revoked);
    assert!(h.room.history.holds_session(session), "held compactly");
    assert!(h.room.sessions.is_empty() && h.room.tickets.is_empty());
    let reference = TicketRef {
        id: ticket,
        generation: 1,
    };
    let mut changes = ChangeSet::default();
    let (now, rng) = (h.now, &mut h.rng);
    assert_eq!(
        h.room.status(reference, now, rng, &mut changes),
        Err(EngineError::TicketExpired)
    );
    assert_eq!(h.room.leave(reference, now, rng, &mut changes), Ok(false));
    assert_eq!(
        h.room.renew_session(session, now, &mut changes),
        Err(EngineError::SessionEnded)
    );
    assert!(changes.is_empty(), "asking about history changes nothing");
    assert!(h.room.is_revoked(session));
    let expires_at = h.room.session(session).unwrap().expires_at;
    assert_eq!(h.room.revoked_sessions(h.now), vec![(session, expires_at)]);
    assert_eq!(h.room.tickets().count(), 1);
    assert_eq!(h.room.sessions().count(), 1);
}

#[test]
fn a_revoked_pass_outlives_the_retention_until_it_expires() {
    let mut h = Harness::new(|c| {
        c.session_ttl = Duration::from_secs(600);
        c.history_retention = Duration::from_secs(60);
    });
    let (ticket, session) = end_and_compare(&mut h, SessionEnd::Revoked);
    let before = h.room.session(session).unwrap();
    h.advance(61_000);
    let mut changes = ChangeSet::default();
    h.room.tick(h.now, &mut h.rng, &mut changes);
    assert!(!changes.sessions.contains(&session), "still revoked");
    assert_eq!(h.room.session(session), Some(before.clone()));
    assert_eq!(
        h.room.revoked_sessions(h.now),
        vec![(session, before.expires_at)]
    );
    h.now = before.expires_at;
    let mut changes = ChangeSet::default();
    h.room.tick(h.now, &mut h.rng, &mut changes);
    assert!(changes.sessions.contains(&session) && changes.tickets.contains(&ticket));
    assert_eq!(h.room.session(session), None);
    assert_eq!(h.room.ticket(ticket), None);
}

#[test]
fn a_ticket_whose_times_do_not_fit_is_kept_whole() {
    let mut h = Harness::new(|c| {
        c.mode = Mode::QueueAll;
        c.ticket_idle_ttl = Duration::from_secs(90 * 24 * 3600);
    });
    let entry = h.join();
    h.advance(60 * 24 * 3600 * 1000);
    let mut changes = ChangeSet::default();
    h.room
        .leave(reference_of(&entry, 1), h.now, &mut h.rng, &mut changes)
        .unwrap();
    let ticket = h.room.ticket(reference_of(&entry, 1).id).unwrap();
    assert_eq!(
        ticket.state,
        TicketState::Ended {
            reason: TicketEnd::Left,
            at: h.now
        }
    );
    assert_eq!(h.room.tickets.len(), 1, "sixty days do not fit 32 bits");
    assert_eq!(h.status(&entry), Err(EngineError::TicketExpired));
}

#[test]
fn restore_holds_ended_visitors_as_history_in_end_order() {
    let mut h = Harness::new(|c| {
        c.session_ttl = Duration::from_secs(30);
        c.history_retention = Duration::from_secs(60);
    });
    let first = end_and_compare(&mut h, SessionEnd::Completed);
    let first_ended = h.now;
    h.advance(10_000);
    let second = end_and_compare(&mut h, SessionEnd::Abandoned);
    let tickets: Vec<Ticket> = h.room.tickets().collect();
    let sessions: Vec<Session> = h.room.sessions().map(Cow::into_owned).collect();
    let mut restored = RoomState::restore(h.room.meta().clone(), tickets, sessions, h.now);
    assert!(restored.tickets.is_empty() && restored.sessions.is_empty());
    for (ticket, session) in [first, second] {
        assert_eq!(restored.ticket(ticket), h.room.ticket(ticket));
        assert_eq!(restored.session(session), h.room.session(session));
    }
    let mut changes = ChangeSet::default();
    restored.tick(
        first_ended.after(Duration::from_secs(60)),
        &mut h.rng,
        &mut changes,
    );
    assert!(changes.sessions.contains(&first.1) && changes.tickets.contains(&first.0));
    assert!(!changes.sessions.contains(&second.1));
    assert_eq!(restored.session(second.1), h.room.session(second.1));
}

/// A room with `line` people waiting, no cap, the given rate and burst, its first tick made.
fn rate_bound_room(per_minute: u64, burst: u64, line: u64) -> (Harness, u64) {
    let mut h = Harness::new(|c| {
        c.mode = Mode::QueueAll;
        c.max_active = 0;
        c.admit_per_minute = per_minute;
        c.admit_burst = burst;
        // Slow rooms' ticks may be minutes apart: nobody in this line goes idle meanwhile.
        c.ticket_idle_ttl = Duration::from_secs(365 * 24 * 3_600);
    });
    for _ in 0..line {
        h.join();
    }
    let mut config = h.room.config().clone();
    config.mode = Mode::Queue;
    h.room.set_config(config, h.now, &mut ChangeSet::default());
    let first = h.tick().admitted;
    (h, first)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// No token is lost to tick spacing while ticks come within `admit_burst - 1` tokens'
    /// time of each other: with people waiting and free slots, the room admits its burst and
    /// then exactly `admit_per_minute` over the elapsed time (in whole admissions, the
    /// fraction carried to the next tick), however irregular the ticks.
    #[test]
    fn ticks_within_the_burst_admit_exactly_the_rate(
        per_minute in 1u64..6_000,
        burst in 2u64..200,
        shares in proptest::collection::vec(1u64..=1_000, 1..30),
    ) {
        // The longest spacing that earns no more than burst - 1 tokens.
        let longest = (burst - 1) * 60_000 / per_minute;
        proptest::prop_assume!(longest >= 1);
        let spacings: Vec<u64> = shares.iter().map(|share| (longest * share / 1_000).max(1)).collect();
        let elapsed: u64 = spacings.iter().sum();
        let due = burst + per_minute * elapsed / 60_000;
        let (mut h, mut admitted) = rate_bound_room(per_minute, burst, due + 1);
        proptest::prop_assert_eq!(admitted, burst);
        for spacing in spacings {
            h.advance(spacing);
            admitted += h.tick().admitted;
        }
        proptest::prop_assert_eq!(admitted, due);
    }

    /// Over any tick spacing, late ticks included, the admissions never exceed I3's bound
    /// (the rate over the elapsed time plus the burst), and a tick admits at least what
    /// passed since the last one, up to `admit_burst - 1`: a late tick loses only what
    /// exceeds the burst (SPEC §5.1 step 2).
    #[test]
    fn ticks_at_any_spacing_admit_within_the_burst(
        per_minute in 1u64..6_000,
        burst in 2u64..200,
        spacings in proptest::collection::vec(1u64..3_000, 1..30),
    ) {
        let elapsed: u64 = spacings.iter().sum();
        let bound = burst + per_minute * elapsed / 60_000;
        let (mut h, mut admitted) = rate_bound_room(per_minute, burst, bound + 1);
        let mut floor = admitted;
        for spacing in spacings {
            h.advance(spacing);
            let now = h.tick().admitted;
            proptest::prop_assert!(now >= (per_minute * spacing).min((burst - 1) * 60_000) / 60_000);
            admitted += now;
            floor += (per_minute * spacing).min((burst - 1) * 60_000) / 60_000;
        }
        proptest::prop_assert!(admitted <= bound, "{} admitted, I3 allows {}", admitted, bound);
        proptest::prop_assert!(admitted >= floor);
    }
}
