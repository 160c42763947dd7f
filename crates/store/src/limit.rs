//! Rate-limit state (SPEC §10.1-§10.2): the [`LimitStore`] trait the rule engine calls, and its
//! two backends.
//!
//! - [`LocalLimitStore`]: state in this process, in a sharded concurrent map, bounded in memory
//!   (evicted by time, a [`KeyBudget`] of keys per rule).
//! - [`RedisLimitStore`]: state in Redis, shared by every node, one Lua script per algorithm.
//!
//! Both run the algorithms of `anteroom_core::ratelimit::algorithms` (the Lua scripts are
//! ports held to the Rust by a property test) and both decide the requests of one call all or
//! nothing: when any request is rejected, no key changes (on a Redis Cluster, whose keys live
//! in different slots, by reserving each and refunding the allowed ones).
//!
//! [`LimitStore::reserve`] also tells what each allowed request took, and
//! [`LimitStore::refund`] hands it back: that is how one HTTP request decided on two stores
//! (local and Redis rules) stays all or nothing.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use anteroom_core::{ManualClock, Timestamp};
//! use anteroom_core::ratelimit::{Algorithm, LimitParams};
//! use anteroom_store::limit::{LimitRequest, LimitStore, LocalLimitConfig, LocalLimitStore};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let clock = Arc::new(ManualClock::new(Timestamp(0)));
//! let store = LocalLimitStore::new(clock.clone(), LocalLimitConfig::default());
//! let params = LimitParams {
//!     algorithm: Algorithm::TokenBucket,
//!     limit: 2,
//!     period: Duration::from_secs(1),
//!     burst: 0,
//!     delay: 0,
//!     nodelay: false,
//! };
//! let request = LimitRequest {
//!     key: "join-per-ip:203.0.113.7",
//!     params: &params,
//!     cost: 1,
//!     budget: None,
//! };
//! let allowed: Vec<bool> = {
//!     let mut allowed = Vec::new();
//!     for _ in 0..3 {
//!         allowed.push(store.acquire(&[request]).await.unwrap()[0].allowed);
//!     }
//!     allowed
//! };
//! assert_eq!(allowed, [true, true, false]);
//! clock.advance(Duration::from_millis(500)); // one request's worth refills
//! assert!(store.acquire(&[request]).await.unwrap()[0].allowed);
//! # });
//! ```

mod budget;
mod local;
mod metrics;
mod redis;

use std::sync::Arc;

use anteroom_core::ratelimit::{Decision, LimitParams, LimitParamsError};
use async_trait::async_trait;

pub use budget::{FULL_LOG_INTERVAL, KeyBudget};
pub use local::{LocalLimitConfig, LocalLimitStore};
pub use metrics::{LimitMetrics, LimitMetricsSnapshot};
pub use redis::{RedisLimitConfig, RedisLimitStore};

pub use anteroom_core::ratelimit::Reservation;

/// One request against one limit.
#[derive(Debug, Clone, Copy)]
pub struct LimitRequest<'a> {
    /// The limit's key (rule name and the request's key parts).
    pub key: &'a str,
    /// The limit.
    pub params: &'a LimitParams,
    /// What the request costs (usually 1).
    pub cost: u64,
    /// The budget a new key of this limit is counted in by a local store (its rule's); `None`:
    /// the store's shared default budget. Redis keys expire by themselves and take none.
    pub budget: Option<&'a Arc<KeyBudget>>,
}

/// Why a limit could not be decided.
#[derive(Debug, thiserror::Error)]
pub enum LimitStoreError {
    /// The backend failed or did not answer in time.
    #[error("rate-limit store failed: {message}")]
    Backend {
        /// What failed.
        message: String,
        /// The backend's own error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A refund did not name one reservation per request (a caller's mistake).
    #[error("a refund of {requests} requests named {reservations} reservations")]
    MismatchedRefund {
        /// How many requests.
        requests: usize,
        /// How many reservations.
        reservations: usize,
    },
    /// A limit's parameters cannot be computed exactly (see `LimitParams::validate`); the
    /// configuration should have refused them.
    #[error("rate limit for key {key:?} is invalid: {source}")]
    InvalidParams {
        /// The request's key.
        key: String,
        /// What is wrong.
        #[source]
        source: LimitParamsError,
    },
}

/// The decisions of one call, and what the call took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// One per request, in order.
    pub decisions: Vec<Decision>,
    /// One per request: what it took, for [`LimitStore::refund`]. All `None` when the call was
    /// refused (it took nothing); `None` too for a peek (cost 0).
    pub reservations: Vec<Option<Reservation>>,
}

impl Reserved {
    /// Whether every request was allowed.
    pub fn all_allowed(&self) -> bool {
        self.decisions.iter().all(|decision| decision.allowed)
    }
}

/// Where rate-limit state lives: in process or in Redis.
#[async_trait]
pub trait LimitStore: Send + Sync + 'static {
    /// Decides every request of one HTTP request at once, in order. All or nothing: when any
    /// decision is a rejection, no limit's state changes (a request rejected by one rule
    /// consumes nothing from the others). A request naming a key twice sees the first
    /// request's effect in the second.
    async fn reserve(&self, requests: &[LimitRequest<'_>]) -> Result<Reserved, LimitStoreError>;

    /// Hands back what an earlier [`LimitStore::reserve`] of the same `requests` took
    /// (`reservations` as it answered them), as if those requests had never been allowed (see
    /// `anteroom_core::ratelimit::algorithms` on refunds: requests decided in between saw
    /// them).
    async fn refund(
        &self,
        requests: &[LimitRequest<'_>],
        reservations: &[Option<Reservation>],
    ) -> Result<(), LimitStoreError>;

    /// [`LimitStore::reserve`], for callers that never refund.
    async fn acquire(
        &self,
        requests: &[LimitRequest<'_>],
    ) -> Result<Vec<Decision>, LimitStoreError> {
        Ok(self.reserve(requests).await?.decisions)
    }

    /// Decides one request at once, with no future and no allocation, when this store keeps
    /// its state in this process: the decision, and the effect on the key's state, that
    /// [`LimitStore::acquire`] of that one request would have. `None` when the store must be
    /// asked through [`LimitStore::reserve`] (the default: a store elsewhere).
    fn acquire_one_now(
        &self,
        _request: &LimitRequest<'_>,
    ) -> Option<Result<Decision, LimitStoreError>> {
        None
    }
}

/// A refund names one reservation (or none) per request.
fn check_refund(
    requests: &[LimitRequest<'_>],
    reservations: &[Option<Reservation>],
) -> Result<(), LimitStoreError> {
    validate(requests)?;
    if requests.len() != reservations.len() {
        return Err(LimitStoreError::MismatchedRefund {
            requests: requests.len(),
            reservations: reservations.len(),
        });
    }
    Ok(())
}

/// Checks every request's parameters before anything is decided.
fn validate(requests: &[LimitRequest<'_>]) -> Result<(), LimitStoreError> {
    for request in requests {
        request
            .params
            .validate()
            .map_err(|source| LimitStoreError::InvalidParams {
                key: request.key.to_owned(),
                source,
            })?;
    }
    Ok(())
}
