//! `[server] tick_interval` and `sse_touch_interval`: how often the admission ticker runs
//! (SPEC §5.1) and how often it keeps the tickets of connected event streams alive (§6.2).
//!
//! Both trade store load against promptness, so an operator with many rooms or a slow store
//! may want them changed; the bounds keep the §5.1 promise (every room ticked at least once a
//! second) and keep a mistyped value from turning the ticker into a busy loop.

use std::ops::RangeInclusive;
use std::time::Duration;

use super::gateway::read_positive_duration;
use super::tree::{Problems, Table};

/// The ticker's two periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickerIntervals {
    /// `tick_interval`: every room is ticked this often (expiries, no-shows, the admission
    /// bucket refilling).
    pub tick: Duration,
    /// `sse_touch_interval`: the tickets of a room's connected event streams are touched at
    /// least this often, and at least three times per the room's `ticket_idle_ttl`.
    pub touch: Duration,
}

impl Default for TickerIntervals {
    fn default() -> Self {
        TickerIntervals {
            tick: Duration::from_millis(500),
            touch: Duration::from_secs(10),
        }
    }
}

/// `tick_interval` may not exceed a second (§5.1: no room waits longer for a tick) nor go
/// below 50 ms (each pass reads every room from the store).
const TICK_INTERVAL_BOUNDS: RangeInclusive<Duration> =
    Duration::from_millis(50)..=Duration::from_secs(1);

/// `sse_touch_interval`: from a touch a second per room (a store call each) up to five
/// minutes, the default `ticket_idle_ttl`; a room's own `ticket_idle_ttl / 3` applies below
/// it anyway, so no connected ticket idles out whatever this is.
const SSE_TOUCH_INTERVAL_BOUNDS: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(300);

/// Reads both periods from the `[server]` table, reporting a value out of its bounds.
pub(super) fn read(table: &Table, problems: &mut Problems) -> TickerIntervals {
    let defaults = TickerIntervals::default();
    let bounded = |key: &str, bounds: RangeInclusive<Duration>, problems: &mut Problems| {
        let entry = table.get(key)?;
        let duration = read_positive_duration(entry, problems)?;
        if bounds.contains(&duration) {
            Some(duration)
        } else {
            problems.add(
                &entry.key_origin,
                format!(
                    "`{key}` must be between {:?} and {:?}, found {duration:?}",
                    bounds.start(),
                    bounds.end()
                ),
            );
            None
        }
    };
    TickerIntervals {
        tick: bounded("tick_interval", TICK_INTERVAL_BOUNDS, problems).unwrap_or(defaults.tick),
        touch: bounded("sse_touch_interval", SSE_TOUCH_INTERVAL_BOUNDS, problems)
            .unwrap_or(defaults.touch),
    }
}
