//! Fixed window counter with lazy reset: at most `L` per window of `P` ms, where a window
//! starts with the first request after the previous window ended. No timer resets anything: the
//! reset happens when a request arrives and finds its window over.
//!
//! Exactly:
//! - the window `[start, start + P)` is current while `now - start < P`; otherwise (or without
//!   state) a request finds a fresh window starting at `now` with count 0;
//! - allowed iff `count + c ≤ L`; then `count += c` (and a fresh window is stored);
//! - `remaining = L - count` after the request, `reset_after = start + P - now`;
//! - when rejected, `retry_after = start + P - now`: the window's end.
//!
//! The known weakness is kept on purpose (it is what the algorithm is): requests at the end of
//! one window and the start of the next can pass twice the limit within a short span.

use super::decisions::{Step, allowed, rejected};
use crate::ratelimit::LimitParams;

/// A fixed window's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// When the window started (ms).
    pub start_ms: u64,
    /// What has been allowed in it.
    pub count: u64,
}

/// Decides one request (see the module docs).
pub fn decide(params: &LimitParams, state: Option<&State>, now_ms: u64, cost: u64) -> Step<State> {
    let period = params.period_ms();
    let (start, count, now) = match state {
        Some(state) if now_ms < state.start_ms + period => {
            (state.start_ms, state.count, now_ms.max(state.start_ms))
        }
        _ => (now_ms, 0, now_ms),
    };
    let reset = if count == 0 { 0 } else { start + period - now };
    if cost == 0 {
        return (
            allowed(params, params.limit.saturating_sub(count), reset, 0),
            None,
        );
    }
    if cost > params.limit {
        return (rejected(params, reset, None), None);
    }
    if count + cost > params.limit {
        return (rejected(params, reset, Some(start + period - now)), None);
    }
    let count = count + cost;
    let decision = allowed(params, params.limit - count, start + period - now, 0);
    (
        decision,
        Some(State {
            start_ms: start,
            count,
        }),
    )
}

/// Hands back an allowed request of `cost` counted in the window that started at `start_ms`:
/// `count -= c` when the key is still in that window (a later window never held it). A window
/// left with count 0 is dropped (`None`): the request may have opened it, and without it the
/// next request opens a window of its own. Right after the acquire every later decision is
/// identical to never acquiring; if another request joined a window the refunded request
/// opened, the window keeps the refunded request's start (equivalent count, earlier end).
pub fn refund(state: &State, start_ms: u64, cost: u64) -> Option<State> {
    if state.start_ms != start_ms {
        return Some(*state);
    }
    let count = state.count.saturating_sub(cost);
    (count > 0).then_some(State { start_ms, count })
}

/// The window has ended.
pub fn forget_at(params: &LimitParams, state: &State) -> u64 {
    state.start_ms + params.period_ms()
}
