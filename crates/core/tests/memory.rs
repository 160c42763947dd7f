//! Bytes the engine holds per waiting ticket and per ended ticket (issue 20, targets 3 and 5),
//! counted by a global allocator that tracks live heap bytes, so a layout change that brings
//! the memory back fails here before it shows in a node's RSS.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use anteroom_core::engine::{ChangeSet, JoinRequest, RoomState};
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_core::{RoomId, Timestamp};
use rand::SeedableRng;
use rand::rngs::StdRng;

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

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
fn a_waiting_ticket_costs_at_most_224_bytes_of_heap() {
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
    assert!(per_ticket <= 224, "{per_ticket} bytes per waiting ticket");
}
