//! The decisions every algorithm answers with (allowed, rejected), and the rounding they share.

use std::time::Duration;

use crate::ratelimit::{Decision, LimitParams};

/// One step of an algorithm's state machine: the decision, and the state to store (`None`: store
/// nothing new, the state is unchanged; always `None` for a rejection).
pub type Step<State> = (Decision, Option<State>);

/// `ceil(numerator / denominator)` for a positive denominator.
pub(crate) fn ceil_div(numerator: u64, denominator: u64) -> u64 {
    numerator.div_ceil(denominator)
}

/// An allowed decision.
pub(crate) fn allowed(
    params: &LimitParams,
    remaining: u64,
    reset_after_ms: u64,
    delay_ms: u64,
) -> Decision {
    Decision {
        allowed: true,
        limit: params.limit,
        remaining,
        reset_after: Duration::from_millis(reset_after_ms),
        retry_after: None,
        delay: Duration::from_millis(delay_ms),
    }
}

/// A rejection; `retry_after_ms: None` means the cost can never be allowed.
pub(crate) fn rejected(
    params: &LimitParams,
    reset_after_ms: u64,
    retry_after_ms: Option<u64>,
) -> Decision {
    Decision {
        allowed: false,
        limit: params.limit,
        remaining: 0,
        reset_after: Duration::from_millis(reset_after_ms),
        retry_after: retry_after_ms.map(Duration::from_millis),
        delay: Duration::ZERO,
    }
}
