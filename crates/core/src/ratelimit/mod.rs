//! Rate limiting (SPEC §10): the algorithms as pure state transitions, and the rule model.
//!
//! Every algorithm is a function `(state, now, cost, params) -> (decision, new state)` over
//! integer state (milliseconds and scaled units), so the Redis Lua scripts can compute exactly
//! the same answers and property tests can hold the two to identical decisions.

pub mod algorithms;
pub mod client_ip;
pub mod rules;

use std::time::Duration;

pub use algorithms::{
    LimitParamsError, LimitState, MAX_UNITS, Reservation, decide, decide_in_place, forget_at,
    refund, reservation,
};

/// Which algorithm a limit uses (SPEC §10.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Token bucket: `burst` tokens, refilled at `limit` per `period`.
    TokenBucket,
    /// Leaky bucket with nginx `limit_req` semantics (`burst`, `delay`, `nodelay`).
    LeakyBucket,
    /// Fixed window counter with lazy reset.
    FixedWindow,
    /// Sliding window log (exact).
    SlidingLog,
    /// Sliding window counter (weighted previous window).
    SlidingWindow,
    /// Generic cell rate algorithm.
    Gcra,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ];

    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Reads the config spelling.
    pub fn parse(text: &str) -> Option<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|algorithm| algorithm.as_str() == text)
    }
}

/// The parameters of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitParams {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Requests allowed per `period` (the sustained rate).
    pub limit: u64,
    /// The period `limit` is counted over.
    pub period: Duration,
    /// Token bucket and GCRA: requests allowed at once (default `limit`). Leaky bucket: excess
    /// requests allowed beyond the rate (nginx `burst`). Ignored by the window algorithms.
    pub burst: u64,
    /// Leaky bucket: the first `delay` excess requests pass at once, the rest of the burst is
    /// delayed (nginx `delay=N`).
    pub delay: u64,
    /// Leaky bucket: never delay; excess within the burst passes at once (nginx `nodelay`).
    pub nodelay: bool,
}

/// The answer to one request against one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may proceed (possibly after `delay`).
    pub allowed: bool,
    /// The limit's `limit` (for the `RateLimit` headers).
    pub limit: u64,
    /// Requests still allowed right now after this one (0 when rejected).
    pub remaining: u64,
    /// Time until the limit is fully available again (quota reset).
    pub reset_after: Duration,
    /// When rejected: time until a request of the same cost would be allowed.
    pub retry_after: Option<Duration>,
    /// When allowed: how long the request must wait before it proceeds (leaky bucket within
    /// the burst); zero otherwise.
    pub delay: Duration,
}
