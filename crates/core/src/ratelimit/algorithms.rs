//! The six rate-limit algorithms as pure state transitions over integers.
//!
//! Every algorithm is a function
//! `decide(params, state: Option<&State>, now_ms, cost) -> Step<State>`: given a key's
//! current state (`None` for a key never seen, or one whose state has been forgotten), the time
//! in milliseconds and the request's cost, it answers with a [`Decision`] and the state to store.
//! A returned `None` means "store nothing new": the state is unchanged.
//!
//! # Rules shared by every algorithm
//! - **A rejected request never changes state**, whatever the algorithm: its new state is
//!   always `None`. So a client that keeps knocking does not push its own retry time further
//!   out, and a request rejected by one limit can be evaluated against others without
//!   consuming anything (all-or-nothing across several limits is "decide all, then store only
//!   if all allowed").
//! - **Cost 0 is a peek**: always allowed, never changes state, and reports what is left.
//! - **A cost that can never fit** (more than the algorithm's capacity) is rejected with
//!   `retry_after: None`, meaning "never at this cost".
//! - **Time never runs backwards for a key**: a `now` earlier than the latest instant the
//!   key's state records is treated as that instant (clocks of several nodes may disagree by a
//!   little).
//! - **Integers only.** Time is in milliseconds; quantities are in *units* where one request is
//!   worth `period_ms` units and the sustained rate drains or refills `limit` units per
//!   millisecond, so `limit` per `period` is represented exactly, with no rounding of the rate.
//!   [`LimitParams::validate`] bounds every count times `period_ms` by [`MAX_UNITS`] (2^48), so
//!   every intermediate value stays below 2^53 and the Redis Lua scripts, whose numbers are
//!   doubles, compute bit-identical answers.
//! - [`forget_at`] gives the instant from which a state can no longer affect any decision (it
//!   decides exactly like `None`); stores evict by that time and never earlier.
//!
//! # Refunds
//! A store that cannot decide several keys atomically (a Redis Cluster, whose keys live in
//! different slots; or a local and a Redis rule on one request) reserves each request, and when
//! another one is rejected hands back what the allowed ones took: [`reservation`] tells what an
//! allowed request added (its cost, and for the window algorithms and the log *where*: the
//! window or the log entry), and [`refund`] takes it back out of the key's state, whatever
//! happened to the key since. Applied right after the acquire, the refunded state decides
//! every later request (at the acquire's time or later) exactly like the state without the
//! acquire; for the window algorithms and the log it is the same state, for the buckets and
//! GCRA an equivalent one (the same level expressed at another instant). Requests decided
//! between the acquire and the refund saw the reservation, and may make the refunded state
//! differ from what it would have been without it; each algorithm's `refund` documents how.
//!
//! # The algorithms
//! Let `P` be the period in milliseconds and `L` the limit.
//! - [`token_bucket`]: capacity `burst` (0 means `limit`), refilled continuously at `L` per `P`.
//! - [`gcra`]: the generic cell rate algorithm over a theoretical arrival time. For the same
//!   parameters it makes exactly the decisions of the token bucket (the two are known to be
//!   equivalent; a test holds them to it); it stores one instant instead of a level and a time.
//! - [`leaky_bucket`]: nginx `limit_req`: `burst` excess requests beyond the rate, the first
//!   `delay` of them pass at once and the rest are delayed, `nodelay` never delays.
//! - [`fixed_window`]: `L` per window, the window starting at the first request after the
//!   previous window ended (lazy reset, no timer).
//! - [`sliding_log`]: exact: at most `L` in any span of `P` milliseconds.
//! - [`sliding_window`]: the weighted estimate `floor(prev * (P - elapsed) / P) + current` over
//!   windows aligned to multiples of `P`.

pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

mod decisions;

pub use decisions::Step;

#[cfg(test)]
mod tests;

use super::{Algorithm, Decision, LimitParams};
use crate::clock::duration_millis;

/// The bound on every count (`limit`, `burst`, `delay`, plus one) times the period in
/// milliseconds. Keeping units below 2^48 keeps every sum and product the algorithms form below
/// 2^53, where doubles are exact.
pub const MAX_UNITS: u64 = 1 << 48;

/// Why a [`LimitParams`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitParamsError {
    /// `limit` is zero.
    #[error("limit must be at least 1")]
    ZeroLimit,
    /// The period is shorter than a millisecond.
    #[error("period must be at least 1ms")]
    PeriodTooShort,
    /// A count times the period in milliseconds is too large to compute exactly.
    #[error(
        "limit, burst or delay is too large for the period (count x period_ms must stay below 2^48)"
    )]
    TooLarge,
}

impl LimitParams {
    /// Checks the parameters can be computed with exactly (see the module docs). Stores refuse
    /// parameters that fail this check.
    #[inline]
    pub fn validate(&self) -> Result<(), LimitParamsError> {
        if self.limit == 0 {
            return Err(LimitParamsError::ZeroLimit);
        }
        let period_ms = duration_millis(self.period);
        if period_ms == 0 {
            return Err(LimitParamsError::PeriodTooShort);
        }
        let largest = self.limit.max(self.burst).max(self.delay);
        match largest
            .checked_add(1)
            .and_then(|n| n.checked_mul(period_ms))
        {
            Some(units) if units <= MAX_UNITS => Ok(()),
            _ => Err(LimitParamsError::TooLarge),
        }
    }

    /// The period in whole milliseconds (at least 1).
    #[inline]
    pub fn period_ms(&self) -> u64 {
        duration_millis(self.period).max(1)
    }

    /// Token bucket and GCRA capacity: `burst`, or `limit` when `burst` is 0.
    #[inline]
    pub fn capacity(&self) -> u64 {
        if self.burst == 0 {
            self.limit
        } else {
            self.burst
        }
    }
}

/// One key's state, whichever algorithm it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitState {
    /// See [`token_bucket::State`].
    TokenBucket(token_bucket::State),
    /// See [`leaky_bucket::State`].
    LeakyBucket(leaky_bucket::State),
    /// See [`fixed_window::State`].
    FixedWindow(fixed_window::State),
    /// See [`sliding_log::State`] (boxed: the log is the one state that grows, and keeping it
    /// out of line keeps every other state, and a store's entry, small).
    SlidingLog(Box<sliding_log::State>),
    /// See [`sliding_window::State`].
    SlidingWindow(sliding_window::State),
    /// See [`gcra::State`].
    Gcra(gcra::State),
}

/// Decides one request with `params.algorithm`. A `state` of another algorithm (the limit was
/// reconfigured) counts as no state. The returned state is `None` when nothing changes.
pub fn decide(
    params: &LimitParams,
    state: Option<&LimitState>,
    now_ms: u64,
    cost: u64,
) -> Step<LimitState> {
    // One algorithm's arm: its own state or none, its verdict wrapped back into `LimitState`.
    macro_rules! with_own_state {
        ($variant:ident, $module:ident) => {{
            let state = match state {
                Some(LimitState::$variant(state)) => Some(state),
                _ => None,
            };
            let (decision, next) = $module::decide(params, state, now_ms, cost);
            (decision, next.map(LimitState::$variant))
        }};
    }
    match params.algorithm {
        Algorithm::TokenBucket => with_own_state!(TokenBucket, token_bucket),
        Algorithm::LeakyBucket => with_own_state!(LeakyBucket, leaky_bucket),
        Algorithm::FixedWindow => with_own_state!(FixedWindow, fixed_window),
        Algorithm::SlidingWindow => with_own_state!(SlidingWindow, sliding_window),
        Algorithm::Gcra => with_own_state!(Gcra, gcra),
        Algorithm::SlidingLog => {
            let state = match state {
                Some(LimitState::SlidingLog(log)) => Some(&**log),
                _ => None,
            };
            let (decision, next) = sliding_log::decide(params, state, now_ms, cost);
            (
                decision,
                next.map(|log| LimitState::SlidingLog(Box::new(log))),
            )
        }
    }
}

/// Like [`decide`], but updates `state` in place (only when the request is allowed and changes
/// something). Saves a copy of the sliding log's entries on the hot path of a local store.
#[inline]
pub fn decide_in_place(
    params: &LimitParams,
    state: &mut Option<LimitState>,
    now_ms: u64,
    cost: u64,
) -> Decision {
    // The state's own algorithm: update its fields where they are.
    macro_rules! in_place {
        ($module:ident, $state:expr) => {{
            let (decision, next) = $module::decide(params, Some(&*$state), now_ms, cost);
            if let Some(next) = next {
                *$state = next;
            }
            return decision;
        }};
    }
    match (params.algorithm, state.as_mut()) {
        (Algorithm::TokenBucket, Some(LimitState::TokenBucket(state))) => {
            in_place!(token_bucket, state)
        }
        (Algorithm::LeakyBucket, Some(LimitState::LeakyBucket(state))) => {
            in_place!(leaky_bucket, state)
        }
        (Algorithm::FixedWindow, Some(LimitState::FixedWindow(state))) => {
            in_place!(fixed_window, state)
        }
        (Algorithm::SlidingWindow, Some(LimitState::SlidingWindow(state))) => {
            in_place!(sliding_window, state)
        }
        (Algorithm::Gcra, Some(LimitState::Gcra(state))) => in_place!(gcra, state),
        (Algorithm::SlidingLog, Some(LimitState::SlidingLog(log))) => {
            return sliding_log::decide_in_place(params, log, now_ms, cost);
        }
        _ => {}
    }
    let (decision, next) = decide(params, state.as_ref(), now_ms, cost);
    if let Some(next) = next {
        *state = Some(next);
    }
    decision
}

/// The instant (ms) from which `state` can no longer affect a decision under `params`: from
/// then on every request decides exactly as with no state, so the state may be dropped. A state
/// of another algorithm can be dropped at once.
#[inline]
pub fn forget_at(params: &LimitParams, state: &LimitState) -> u64 {
    match (params.algorithm, state) {
        (Algorithm::TokenBucket, LimitState::TokenBucket(state)) => {
            token_bucket::forget_at(params, state)
        }
        (Algorithm::LeakyBucket, LimitState::LeakyBucket(state)) => {
            leaky_bucket::forget_at(params, state)
        }
        (Algorithm::FixedWindow, LimitState::FixedWindow(state)) => {
            fixed_window::forget_at(params, state)
        }
        (Algorithm::SlidingLog, LimitState::SlidingLog(state)) => {
            sliding_log::forget_at(params, state)
        }
        (Algorithm::SlidingWindow, LimitState::SlidingWindow(state)) => {
            sliding_window::forget_at(params, state)
        }
        (Algorithm::Gcra, LimitState::Gcra(state)) => gcra::forget_at(params, state),
        _ => 0,
    }
}

/// What an allowed request added to its key's state, so that [`refund`] can take it back out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// The request's cost.
    pub cost: u64,
    /// Where it was counted: the window's start (fixed window), the window's index (sliding
    /// window), the log entry's time (sliding log); 0 for the buckets and GCRA.
    pub mark: u64,
}

/// The reservation of an allowed request of `cost` after which the key's state is `written`
/// (the state the store wrote: with several requests on one key in one call, the state after
/// the last of them, which counts each of them at the same mark).
pub fn reservation(written: &LimitState, cost: u64) -> Reservation {
    let mark = match written {
        LimitState::FixedWindow(state) => state.start_ms,
        LimitState::SlidingWindow(state) => state.window,
        LimitState::SlidingLog(log) => log.entries.back().map_or(0, |&(time, _)| time),
        LimitState::TokenBucket(_) | LimitState::LeakyBucket(_) | LimitState::Gcra(_) => 0,
    };
    Reservation { cost, mark }
}

/// Takes `reservation` back out of `state` (see the module docs and each algorithm's
/// `refund`). Returns the state to store, `None` to drop the key. A key without state, or with
/// the state of another algorithm (the limit was reconfigured), no longer holds the
/// reservation and is left as it is.
pub fn refund(
    params: &LimitParams,
    state: Option<&LimitState>,
    reservation: &Reservation,
) -> Option<LimitState> {
    let state = state?;
    let Reservation { cost, mark } = *reservation;
    match (params.algorithm, state) {
        (Algorithm::TokenBucket, LimitState::TokenBucket(state)) => Some(LimitState::TokenBucket(
            token_bucket::refund(params, state, cost),
        )),
        (Algorithm::LeakyBucket, LimitState::LeakyBucket(state)) => {
            leaky_bucket::refund(params, state, cost).map(LimitState::LeakyBucket)
        }
        (Algorithm::FixedWindow, LimitState::FixedWindow(state)) => {
            fixed_window::refund(state, mark, cost).map(LimitState::FixedWindow)
        }
        (Algorithm::SlidingLog, LimitState::SlidingLog(log)) => {
            sliding_log::refund(log, mark, cost).map(|log| LimitState::SlidingLog(Box::new(log)))
        }
        (Algorithm::SlidingWindow, LimitState::SlidingWindow(state)) => {
            sliding_window::refund(state, mark, cost).map(LimitState::SlidingWindow)
        }
        (Algorithm::Gcra, LimitState::Gcra(state)) => {
            gcra::refund(params, state, cost).map(LimitState::Gcra)
        }
        _ => Some(state.clone()),
    }
}
