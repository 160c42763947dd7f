//! The clock skew a verifier allows on a token's times: passes are verified with it, and the
//! key set keeps a retired key long enough for it.

/// Clock skew tolerated on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: u64 = 30;
