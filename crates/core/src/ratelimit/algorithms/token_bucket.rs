//! Token bucket: a bucket of `C = capacity × P` units (capacity = `burst`, or `limit` when
//! `burst` is 0) that refills continuously by `L` units per millisecond; a request of cost `c`
//! takes `c × P` units.
//!
//! Exactly, with `e = now - last`:
//! - `level = min(C, level + L × e)` (a key without state is full);
//! - allowed iff `level ≥ c × P`; then `level -= c × P` and `last = now`;
//! - `remaining = floor(level / P)` after the request;
//! - `reset_after = ceil((C - level) / L)`, the time until the bucket is full again;
//! - when rejected, `retry_after = ceil((c × P - level) / L)`.

use super::decisions::{Step, allowed, ceil_div, rejected};
use crate::ratelimit::LimitParams;

/// A token bucket's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// Units in the bucket at `last_ms`.
    pub level: u64,
    /// When `level` was computed (ms).
    pub last_ms: u64,
}

/// Decides one request (see the module docs).
pub fn decide(params: &LimitParams, state: Option<&State>, now_ms: u64, cost: u64) -> Step<State> {
    let period = params.period_ms();
    let rate = params.limit;
    let full = params.capacity() * period;
    let (level, now) = match state {
        None => (full, now_ms),
        Some(state) => {
            let now = now_ms.max(state.last_ms);
            (refill(state.level, now - state.last_ms, rate, full), now)
        }
    };
    if cost == 0 {
        let reset = ceil_div(full - level, rate);
        return (allowed(params, level / period, reset, 0), None);
    }
    if cost > params.capacity() {
        return (rejected(params, ceil_div(full - level, rate), None), None);
    }
    let need = cost * period;
    if level < need {
        let decision = rejected(
            params,
            ceil_div(full - level, rate),
            Some(ceil_div(need - level, rate)),
        );
        return (decision, None);
    }
    let level = level - need;
    let decision = allowed(params, level / period, ceil_div(full - level, rate), 0);
    (
        decision,
        Some(State {
            level,
            last_ms: now,
        }),
    )
}

/// Hands back what an allowed request of `cost` took: `level += c × P`, capped at full,
/// `last` unchanged. The refill is linear up to the cap, so a refund right after the acquire
/// leaves exactly the level the key had without the request (at `last`): every later decision
/// is identical to never acquiring.
pub fn refund(params: &LimitParams, state: &State, cost: u64) -> State {
    let period = params.period_ms();
    let full = params.capacity() * period;
    State {
        level: state
            .level
            .saturating_add(cost.saturating_mul(period))
            .min(full),
        last_ms: state.last_ms,
    }
}

/// The bucket is full again: nothing of the state matters any more.
pub fn forget_at(params: &LimitParams, state: &State) -> u64 {
    let full = params.capacity() * params.period_ms();
    state.last_ms + ceil_div(full.saturating_sub(state.level), params.limit)
}

/// `min(full, level + rate × elapsed)`. (The Lua port tests `elapsed ≥ ceil((full - level) /
/// rate)`, the same condition in integers; a saturating product spares a division here.)
fn refill(level: u64, elapsed_ms: u64, rate: u64, full: u64) -> u64 {
    if level >= full {
        return full;
    }
    let refilled = elapsed_ms.saturating_mul(rate);
    if refilled >= full - level {
        full
    } else {
        level + refilled
    }
}
