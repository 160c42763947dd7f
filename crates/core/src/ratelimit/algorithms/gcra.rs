//! GCRA, the generic cell rate algorithm: one theoretical arrival time (TAT) per key.
//!
//! Each request of cost `c` moves the TAT forward by `c` emission intervals of `P / L` ms; a
//! request is allowed when the new TAT lies at most `capacity` intervals ahead of now
//! (capacity = `burst`, or `limit` when `burst` is 0).
//!
//! To stay in integers the TAT is kept as `tat_ms + tat_sub / L` with `0 ≤ tat_sub < L`, and
//! the distance from now to the TAT is measured in units (`L` units per ms, `P` units per
//! request): `debt = max(0, (tat - now) × L)`. Exactly:
//! - allowed iff `debt + c × P ≤ capacity × P`; then `tat = now + (debt + c × P) / L`;
//! - `remaining = floor((capacity × P - debt') / P)`, `reset_after = ceil(debt' / L)`;
//! - when rejected, `retry_after = ceil((debt + c × P - capacity × P) / L)`.
//!
//! With `level = capacity × P - debt` this is the token bucket, decision for decision (a test
//! checks it); GCRA stores one instant where the bucket stores a level and a time.

use super::decisions::{Step, allowed, ceil_div, rejected};
use crate::ratelimit::LimitParams;

/// A GCRA state: the theoretical arrival time `tat_ms + tat_sub / limit` ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// Whole milliseconds of the TAT.
    pub tat_ms: u64,
    /// The fraction of a millisecond, in `1 / limit` ms (`< limit`).
    pub tat_sub: u64,
}

/// Decides one request (see the module docs).
pub fn decide(params: &LimitParams, state: Option<&State>, now_ms: u64, cost: u64) -> Step<State> {
    let period = params.period_ms();
    let rate = params.limit;
    let full = params.capacity() * period;
    // Time never runs backwards for a key: the TAT was set no earlier than `full / rate` ms
    // before it, so `now` is taken to be at least that instant.
    let now = state.map_or(now_ms, |state| {
        // Only a clock that stepped back needs the division.
        if state.tat_ms.saturating_sub(now_ms).saturating_mul(rate) > full {
            now_ms.max(state.tat_ms.saturating_sub(full / rate))
        } else {
            now_ms
        }
    });
    // A TAT stored under other parameters may lie further ahead than the capacity allows.
    let debt = state.map_or(0, |state| debt(state, now, rate).min(full));
    if cost == 0 {
        let decision = allowed(params, (full - debt) / period, ceil_div(debt, rate), 0);
        return (decision, None);
    }
    if cost > params.capacity() {
        return (rejected(params, ceil_div(debt, rate), None), None);
    }
    let debt_after = debt + cost * period;
    if debt_after > full {
        let decision = rejected(
            params,
            ceil_div(debt, rate),
            Some(ceil_div(debt_after - full, rate)),
        );
        return (decision, None);
    }
    let decision = allowed(
        params,
        (full - debt_after) / period,
        ceil_div(debt_after, rate),
        0,
    );
    let next = State {
        tat_ms: now + debt_after / rate,
        tat_sub: debt_after % rate,
    };
    (decision, Some(next))
}

/// Hands back what an allowed request of `cost` took: the TAT moves back by `c × P` units
/// (`c` emission intervals). Right after the acquire this is the TAT the key had without the
/// request when it lay ahead of the acquire's `now`, else `now` itself, where a TAT in the past
/// decides like the older one it replaced (no debt either way): every later decision is
/// identical to never acquiring. `None`: the TAT would fall before the epoch (no debt ever).
pub fn refund(params: &LimitParams, state: &State, cost: u64) -> Option<State> {
    let rate = params.limit;
    let units = cost.saturating_mul(params.period_ms());
    let sub = state.tat_sub.min(rate - 1);
    if sub >= units {
        return Some(State {
            tat_ms: state.tat_ms,
            tat_sub: sub - units,
        });
    }
    // Borrow whole milliseconds: `back × L - short` stays below `L`.
    let short = units - sub;
    let back = ceil_div(short, rate);
    let tat_ms = state.tat_ms.checked_sub(back)?;
    Some(State {
        tat_ms,
        tat_sub: back * rate - short,
    })
}

/// The TAT has passed: no debt is left.
pub fn forget_at(_params: &LimitParams, state: &State) -> u64 {
    state.tat_ms + u64::from(state.tat_sub > 0)
}

/// Units between now and the TAT, zero once the TAT has passed.
fn debt(state: &State, now_ms: u64, rate: u64) -> u64 {
    if state.tat_ms < now_ms {
        // tat_sub < rate, so the TAT lies before now.
        0
    } else {
        (state.tat_ms - now_ms) * rate + state.tat_sub.min(rate - 1)
    }
}
