//! Sliding window log, exact: at most `L` (in cost) within any span of `P` ms.
//!
//! The state is the log of allowed requests, `(time, cost)` in time order (requests of the same
//! millisecond share one entry). An entry made at `t` counts while `now < t + P`. Exactly:
//! - `count` = the cost of the entries that still count;
//! - allowed iff `count + c ≤ L`; then expired entries are dropped and `(now, c)` is appended;
//! - `remaining = L - count` after the request; `reset_after = newest + P - now`, the time until
//!   every entry has expired;
//! - when rejected, `retry_after` is the time until enough of the oldest entries expire for
//!   `c` to fit.
//!
//! Memory is one entry per allowed millisecond: at most `L` entries per key. Rejected requests
//! are not logged (they change nothing), unlike the textbook variant that logs them too.

use std::collections::VecDeque;

use super::decisions::{Step, allowed, rejected};
use crate::ratelimit::{Decision, LimitParams};

/// A sliding log's state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// `(time ms, cost)` of allowed requests, oldest first, times strictly increasing.
    pub entries: VecDeque<(u64, u64)>,
}

/// Decides one request (see the module docs).
pub fn decide(params: &LimitParams, state: Option<&State>, now_ms: u64, cost: u64) -> Step<State> {
    let empty = State::default();
    let log = state.unwrap_or(&empty);
    let decision = evaluate(params, log, now_ms, cost);
    if !decision.allowed || cost == 0 {
        return (decision, None);
    }
    let mut next = log.clone();
    append(params, &mut next, now_ms, cost);
    (decision, Some(next))
}

/// [`decide`] updating the log in place when the request is allowed.
pub fn decide_in_place(params: &LimitParams, log: &mut State, now_ms: u64, cost: u64) -> Decision {
    let decision = evaluate(params, log, now_ms, cost);
    if decision.allowed && cost > 0 {
        append(params, log, now_ms, cost);
    }
    decision
}

/// Hands back an allowed request of `cost` logged at `time_ms`: its entry loses `c` (and is
/// removed at 0; it may hold other requests of the same millisecond). The acquire also dropped
/// entries that had expired, which no later decision counts: every later decision is
/// identical to never acquiring. An empty log is dropped (`None`).
pub fn refund(state: &State, time_ms: u64, cost: u64) -> Option<State> {
    let mut next = state.clone();
    if let Some(index) = next.entries.iter().rposition(|&(time, _)| time == time_ms) {
        let left = next.entries[index].1.saturating_sub(cost);
        if left == 0 {
            next.entries.remove(index);
        } else {
            next.entries[index].1 = left;
        }
    }
    (!next.entries.is_empty()).then_some(next)
}

/// Every entry has expired.
pub fn forget_at(params: &LimitParams, state: &State) -> u64 {
    state
        .entries
        .back()
        .map_or(0, |&(time, _)| time + params.period_ms())
}

fn evaluate(params: &LimitParams, log: &State, now_ms: u64, cost: u64) -> Decision {
    let period = params.period_ms();
    let now = now_ms.max(log.entries.back().map_or(0, |&(time, _)| time));
    let live = || {
        log.entries
            .iter()
            .filter(move |&&(time, _)| now < time + period)
    };
    let count: u64 = live().map(|&(_, cost)| cost).sum();
    let reset = if count == 0 {
        0
    } else {
        forget_at(params, log) - now
    };
    if cost == 0 {
        return allowed(params, params.limit.saturating_sub(count), reset, 0);
    }
    if cost > params.limit {
        return rejected(params, reset, None);
    }
    if count + cost <= params.limit {
        return allowed(params, params.limit - count - cost, period, 0);
    }
    // Expire the oldest live entries until the request fits.
    let mut left = count;
    let mut retry = 0;
    for &(time, entry_cost) in live() {
        left -= entry_cost;
        if left + cost <= params.limit {
            retry = time + period - now;
            break;
        }
    }
    rejected(params, reset, Some(retry))
}

fn append(params: &LimitParams, log: &mut State, now_ms: u64, cost: u64) {
    let period = params.period_ms();
    let now = now_ms.max(log.entries.back().map_or(0, |&(time, _)| time));
    while log
        .entries
        .front()
        .is_some_and(|&(time, _)| time + period <= now)
    {
        log.entries.pop_front();
    }
    match log.entries.back_mut() {
        Some((time, entry_cost)) if *time == now => *entry_cost += cost,
        _ => log.entries.push_back((now, cost)),
    }
}
