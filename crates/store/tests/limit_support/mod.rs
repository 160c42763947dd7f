//! What the rate-limit tests share: parameter helpers.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::time::Duration;

use anteroom_core::ratelimit::{Algorithm, LimitParams};

/// Parameters with no burst, delay or nodelay.
pub fn params(algorithm: Algorithm, limit: u64, period: Duration) -> LimitParams {
    LimitParams {
        algorithm,
        limit,
        period,
        burst: 0,
        delay: 0,
        nodelay: false,
    }
}

/// How many requests of cost 1 each algorithm allows at once from a fresh key: the token
/// bucket and GCRA their capacity, the leaky bucket the one at the rate plus its burst, the
/// windows their limit.
pub fn capacity(params: &LimitParams) -> u64 {
    match params.algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra => params.capacity(),
        Algorithm::LeakyBucket => params.burst + 1,
        Algorithm::FixedWindow | Algorithm::SlidingLog | Algorithm::SlidingWindow => params.limit,
    }
}
