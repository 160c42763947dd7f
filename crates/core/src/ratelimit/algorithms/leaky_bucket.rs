//! Leaky bucket with the semantics of nginx's `limit_req` (`burst`, `delay=N`, `nodelay`).
//!
//! nginx keeps, per key, the time of the last accounted request and its *excess* in
//! milli-requests, and computes for each request
//! `excess = max(0, excess - rate × elapsed_ms / 1000 + 1000)`: the bucket leaks at the rate, and
//! the request adds one. Here one request is `P` units and the bucket leaks `L` units per
//! millisecond, so for a rate per second (`P = 1000`) the units *are* nginx's milli-requests and
//! every number below equals nginx's; for other periods the rate is exact where nginx rounds
//! `rate × 1000 / 60` down.
//!
//! Exactly, with `e = now - last`, for a request of cost `c ≥ 1`:
//! - `excess = max(0, excess + P - L × e) + (c - 1) × P` (a key without state has drained:
//!   `excess = (c - 1) × P`, so the first of a burst of simultaneous requests has excess 0);
//! - rejected iff `excess > burst × P`; **a rejected request changes nothing**;
//! - otherwise `excess` and `last = now` are stored, and the request is delayed by
//!   `floor((excess - delay × P) / L)` ms when `excess > delay × P` (never with `nodelay`), as
//!   nginx computes `(excess - delay) × 1000 / rate`;
//! - `remaining = floor((burst × P - excess) / P)`: further cost-1 requests that would be
//!   allowed (some possibly delayed) right now;
//! - `reset_after = ceil((excess + P) / L)`: the time until the bucket has fully drained, after
//!   which a request finds it as if new;
//! - when rejected, `retry_after` is the time until the leak brings `excess` within the burst.
//!
//! nginx's two-stage example (`rate=5r/s burst=12 delay=8`, 20 requests at once): #1 has
//! excess 0, #2–#9 have 1000–8000 and pass at once, #10–#13 (9000–12000) are delayed by 200,
//! 400, 600 and 800 ms, #14–#20 (13000) are rejected.

use super::decisions::{Step, allowed, ceil_div, rejected};
use crate::ratelimit::LimitParams;

/// A leaky bucket's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// The excess (units, `P` per request) at `last_ms`.
    pub excess: u64,
    /// When the last allowed request was accounted (ms).
    pub last_ms: u64,
}

/// Decides one request (see the module docs).
pub fn decide(params: &LimitParams, state: Option<&State>, now_ms: u64, cost: u64) -> Step<State> {
    let period = params.period_ms();
    let rate = params.limit;
    let burst = params.burst * period;
    // `first`: the excess one more request would have now (nginx's formula).
    let (first, now) = match state {
        None => (0, now_ms),
        Some(state) => {
            let now = now_ms.max(state.last_ms);
            (leak(state.excess + period, now - state.last_ms, rate), now)
        }
    };
    let reset_now = state.map_or(0, |state| {
        ceil_div(state.excess + period, rate).saturating_sub(now - state.last_ms)
    });
    if cost == 0 {
        let remaining = if first <= burst {
            (burst - first) / period + 1
        } else {
            0
        };
        return (allowed(params, remaining, reset_now, 0), None);
    }
    if cost > params.burst + 1 {
        return (rejected(params, reset_now, None), None);
    }
    let excess = first + (cost - 1) * period;
    if excess > burst {
        // Allowed once `excess + P - L × e ≤ (burst - c + 1) × P`.
        let allowed_from = state.map_or(0, |state| {
            let target = (params.burst + 1 - cost) * period;
            ceil_div(state.excess + period - target, rate)
        });
        let elapsed = state.map_or(0, |state| now - state.last_ms);
        let retry = allowed_from.saturating_sub(elapsed);
        return (rejected(params, reset_now, Some(retry)), None);
    }
    let delay_units = params.delay * period;
    let delay_ms = if params.nodelay || excess <= delay_units {
        0
    } else {
        (excess - delay_units) / rate
    };
    let decision = allowed(
        params,
        (burst - excess) / period,
        ceil_div(excess + period, rate),
        delay_ms,
    );
    (
        decision,
        Some(State {
            excess,
            last_ms: now,
        }),
    )
}

/// Hands back what an allowed request of `cost` added: `c × P` units of excess.
///
/// Every decision depends on the state only through `excess + L × last` (the level the bucket
/// would have at time 0 if it leaked forever) and, for a clock running backwards, on `last`.
/// So the refund lowers that sum by `c × P`: from `excess` while it holds enough, else by
/// moving `last` back by `k = ceil(short / L)` ms and keeping `k × L - short` (`< L`) as the
/// excess. Right after the acquire this is the level the key had without the request, or
/// (when the bucket had drained) one that is drained too: every later decision is identical
/// to never acquiring. Only a request from a clock *behind* the acquire's (another node's) may
/// see the earlier `last`, where the original state would have had it treated as `last`.
/// `None`: the level would lie before the epoch (drained at any time).
pub fn refund(params: &LimitParams, state: &State, cost: u64) -> Option<State> {
    let units = cost.saturating_mul(params.period_ms());
    if state.excess >= units {
        return Some(State {
            excess: state.excess - units,
            last_ms: state.last_ms,
        });
    }
    let rate = params.limit;
    let short = units - state.excess;
    let back = ceil_div(short, rate);
    let last_ms = state.last_ms.checked_sub(back)?;
    Some(State {
        excess: back * rate - short,
        last_ms,
    })
}

/// The bucket has drained so far that the next request finds it empty.
pub fn forget_at(params: &LimitParams, state: &State) -> u64 {
    state.last_ms + ceil_div(state.excess + params.period_ms(), params.limit)
}

/// `max(0, units - rate × elapsed)`. (The Lua port tests `elapsed ≥ ceil(units / rate)`, the
/// same condition in integers; a saturating product spares a division here.)
fn leak(units: u64, elapsed_ms: u64, rate: u64) -> u64 {
    units.saturating_sub(elapsed_ms.saturating_mul(rate))
}
