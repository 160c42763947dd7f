//! Sliding window counter: fixed windows aligned to multiples of `P` since the Unix epoch, and
//! the estimate `floor(prev × (P - elapsed) / P) + current`, where `elapsed` is the time since
//! the current window began and `prev` the count of the window before (seed 001's example:
//! 5 in the previous minute, 30% into the current one with 3 so far: `floor(3.5) + 3 = 6`).
//!
//! Exactly, with window index `w = floor(now / P)`:
//! - the state's counts roll forward: same window, unchanged; next window, `prev = current`,
//!   `current = 0`; later, both 0;
//! - allowed iff `estimate + c ≤ L`; then `current += c`;
//! - `remaining = L - estimate - c` after the request;
//! - `reset_after` is the time until the estimate, left alone, falls to 0;
//! - when rejected, `retry_after` is the earliest time the estimate leaves room for `c`
//!   (as the previous window's weight falls, or in the next window).
//!
//! It approximates the sliding log with two counters and can let through a little more than
//! `L` per span of `P` (the estimate assumes the previous window's requests were spread evenly).

use super::decisions::{Step, allowed, rejected};
use crate::ratelimit::LimitParams;

/// A sliding window counter's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// The index of the current window (`start / P`).
    pub window: u64,
    /// What was allowed in the window before.
    pub prev: u64,
    /// What has been allowed in this window.
    pub current: u64,
}

/// Decides one request (see the module docs).
pub fn decide(params: &LimitParams, state: Option<&State>, now_ms: u64, cost: u64) -> Step<State> {
    let period = params.period_ms();
    let limit = params.limit;
    let now = state.map_or(now_ms, |state| now_ms.max(state.window * period));
    let window = now / period;
    let (prev, current) = match state {
        Some(state) if state.window == window => (state.prev, state.current),
        Some(state) if state.window + 1 == window => (state.current, 0),
        _ => (0, 0),
    };
    let elapsed = now - window * period;
    let estimate = prev * (period - elapsed) / period + current;
    let rolled = State {
        window,
        prev,
        current,
    };
    let reset = zero_at(period, &rolled).saturating_sub(now);
    if cost == 0 {
        return (
            allowed(params, limit.saturating_sub(estimate), reset, 0),
            None,
        );
    }
    if cost > limit {
        return (rejected(params, reset, None), None);
    }
    if estimate + cost > limit {
        let retry = retry_at(period, limit, &rolled, cost) - now;
        return (rejected(params, reset, Some(retry)), None);
    }
    let next = State {
        current: current + cost,
        ..rolled
    };
    let decision = allowed(
        params,
        limit - estimate - cost,
        zero_at(period, &next).saturating_sub(now),
        0,
    );
    (decision, Some(next))
}

/// Hands back an allowed request of `cost` counted in window `window`: from `current` while the
/// key is in that window, from `prev` once it has rolled into the next one, and not at all
/// later (it no longer counts). Counts are a pure function of the window index, so every later
/// decision is identical to never acquiring. A state left with both counts 0 decides like no
/// state and is dropped (`None`).
pub fn refund(state: &State, window: u64, cost: u64) -> Option<State> {
    let mut next = *state;
    if state.window == window {
        next.current = next.current.saturating_sub(cost);
    } else if state.window == window + 1 {
        next.prev = next.prev.saturating_sub(cost);
    } else {
        return Some(next);
    }
    (next.prev > 0 || next.current > 0).then_some(next)
}

/// Two windows later both counts have rolled out.
pub fn forget_at(params: &LimitParams, state: &State) -> u64 {
    (state.window + 2) * params.period_ms()
}

/// The first offset `x` into a window (`0 ≤ x ≤ P`) at which `floor(count × (P - x) / P) ≤ room`.
fn first_offset(period: u64, count: u64, room: u64) -> u64 {
    if count == 0 {
        return 0;
    }
    // floor(count (P - x) / P) ≤ room  ⇔  count (P - x) ≤ (room + 1) P - 1.
    period.saturating_sub(((room + 1) * period - 1) / count)
}

/// When the estimate falls to 0 if nothing more is allowed.
fn zero_at(period: u64, state: &State) -> u64 {
    let start = state.window * period;
    if state.current > 0 {
        start + period + first_offset(period, state.current, 0)
    } else {
        start + first_offset(period, state.prev, 0)
    }
}

/// The earliest time the estimate leaves room for `cost` (`cost ≤ limit`).
fn retry_at(period: u64, limit: u64, state: &State, cost: u64) -> u64 {
    let start = state.window * period;
    if let Some(room) = limit.checked_sub(state.current + cost) {
        let offset = first_offset(period, state.prev, room);
        if offset < period {
            return start + offset;
        }
    }
    start + period + first_offset(period, state.current, limit - cost)
}
