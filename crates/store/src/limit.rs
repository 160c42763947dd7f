//! Rate-limit state (SPEC §10.1-§10.2): the [`LimitStore`] trait the rule engine calls.

use anteroom_core::ratelimit::{Decision, LimitParams};
use async_trait::async_trait;

/// One request against one limit.
#[derive(Debug, Clone, Copy)]
pub struct LimitRequest<'a> {
    /// The limit's key (rule name and the request's key parts).
    pub key: &'a str,
    /// The limit.
    pub params: &'a LimitParams,
    /// What the request costs (usually 1).
    pub cost: u64,
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
}

/// Where rate-limit state lives: in process or in Redis.
#[async_trait]
pub trait LimitStore: Send + Sync + 'static {
    /// Decides every request of one HTTP request at once, in order. All or nothing: when any
    /// decision is a rejection, no limit's state changes (a request rejected by one rule
    /// consumes nothing from the others).
    async fn acquire(&self, requests: &[LimitRequest<'_>]) -> Result<Vec<Decision>, LimitStoreError>;
}
