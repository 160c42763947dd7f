//! Bytes the engine holds per waiting ticket and per ended ticket (issue 20, targets 3 and 5),
//! counted by a global allocator that tracks live heap bytes, so a layout change that brings
//! the memory back fails here before it shows in a node's RSS.

#![allow(clippy::unwrap_used)]

use std::sync::Mutex;
use std::time::Duration;

use anteroom_core::engine::{ChangeSet, Entry, JoinRequest, RoomState, SessionEnd};
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_core::{RoomId, Timestamp};
use rand::SeedableRng;
use rand::rngs::StdRng;

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// dhat counts for one profiler at a time: the tests take turns.
static PROFILING: Mutex<()> = Mutex::new(());

fn live_bytes() -> u64 {
    dhat::HeapStats::get().curr_bytes as u64
}

/// Enough tickets that the tables' fixed parts do not matter, few enough for a debug build.
const TICKETS: u64 = 300_000;

fn room(mode: Mode) -> RoomState {
    let mut config = RoomConfig::with_defaults(RoomId::new("memory").unwrap());
    config.mode = mode;
    config.ticket_idle_ttl = Duration::from_secs(24 * 3600);
    RoomState::new(config, Timestamp(1_000_000))
}

/// Live heap bytes per waiting ticket, as the room grows from empty to `TICKETS` waiting.
#[test]
fn a_waiting_ticket_costs_at_most_180_bytes_of_heap() {
    let _turn = PROFILING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let _profiler = dhat::Profiler::builder().testing().build();
    let mut rng = StdRng::seed_from_u64(1);
    let mut state = room(Mode::QueueAll);
    let before = live_bytes();
    let mut changes = ChangeSet::default();
    for n in 0..TICKETS {
        state
            .join(
                JoinRequest::default(),
                Timestamp(1_000_000 + n),
                &mut rng,
                &mut changes,
            )
            .unwrap();
        changes = ChangeSet::default();
    }
    let per_ticket = (live_bytes() - before) / TICKETS;
    eprintln!("heap per waiting ticket: {per_ticket} bytes");
    assert_eq!(state.snapshot().waiting, TICKETS);
    assert!(per_ticket <= 180, "{per_ticket} bytes per waiting ticket");
}

/// Live heap bytes per ended visitor (its ticket and its session, both kept for the room's
/// `history_retention`, as one compact record: `engine/history.rs`), as `TICKETS` visitors
/// are admitted at once and then complete.
#[test]
fn an_ended_ticket_and_session_cost_at_most_115_bytes_of_heap() {
    let _turn = PROFILING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let _profiler = dhat::Profiler::builder().testing().build();
    let mut rng = StdRng::seed_from_u64(2);
    let mut state = room(Mode::Queue);
    let before = live_bytes();
    for n in 0..TICKETS {
        let now = Timestamp(1_000_000 + n);
        let mut changes = ChangeSet::default();
        let entry = state
            .join(JoinRequest::default(), now, &mut rng, &mut changes)
            .unwrap();
        let Entry::Admitted(view) = entry else {
            panic!("an open room admits at once");
        };
        state
            .end_session(view.session.id, SessionEnd::Completed, now, &mut changes)
            .unwrap();
    }
    let per_visitor = (live_bytes() - before) / TICKETS;
    eprintln!("heap per ended ticket and its session: {per_visitor} bytes");
    let snapshot = state.snapshot();
    assert_eq!((snapshot.active, snapshot.totals.completed), (0, TICKETS));
    assert_eq!(
        state.tickets().count() as u64,
        TICKETS,
        "all kept as history"
    );
    assert!(per_visitor <= 115, "{per_visitor} bytes per ended visitor");
}
