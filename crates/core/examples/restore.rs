//! Times `RoomState::restore` of a room with N waiting tickets handed over in id order, as the
//! embedded store reads them (their positions at random), to measure the restart's rebuild
//! apart from the store: `cargo run --release -p anteroom-core --example restore -- 2000000
//! [--expected]`.

use std::time::{Duration, Instant};

use anteroom_core::engine::{RoomState, Ticket, TicketState};
use anteroom_core::room::{Mode, RoomConfig};
use anteroom_core::{RoomId, TicketId, Timestamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// Its output is the measurement.
#[allow(clippy::print_stdout)]
fn main() {
    let count: u64 = match std::env::args().nth(1).map(|arg| arg.parse()) {
        None => 1_000_000,
        Some(Ok(count)) => count,
        Some(Err(error)) => {
            eprintln!("usage: restore [tickets]: {error}");
            std::process::exit(2);
        }
    };
    let now = Timestamp(1_700_000_000_000);
    let Ok(room) = RoomId::new("restore") else {
        unreachable!("a valid room id")
    };
    let mut config = RoomConfig::with_defaults(room);
    config.mode = Mode::QueueAll;
    config.ticket_idle_ttl = Duration::from_secs(24 * 3600);
    let meta = RoomState::new(config, now).meta().clone();
    let mut rng = StdRng::seed_from_u64(7);
    let mut tickets: Vec<Ticket> = (1..=count)
        .map(|position| Ticket {
            id: TicketId::from_bytes(rng.r#gen()),
            position,
            generation: 0,
            joined_at: now,
            last_seen: now,
            identity: None,
            return_to: None,
            priority: false,
            state: TicketState::Waiting,
        })
        .collect();
    tickets.sort_unstable_by_key(|ticket| ticket.id.to_bytes());
    let started = Instant::now();
    // Like the store's stream, without a count up front; `--expected` gives the count as the
    // embedded store does for a node with one room.
    let expected = match std::env::args().nth(2).as_deref() {
        Some("--expected") => tickets.len(),
        _ => 0,
    };
    let stream = tickets.into_iter().filter(|_| true);
    let room = RoomState::restore_expecting(meta, stream, expected, Vec::new(), now);
    let elapsed = started.elapsed();
    println!(
        "restored {} waiting tickets in {:.3} s",
        room.snapshot().waiting,
        elapsed.as_secs_f64()
    );
}
