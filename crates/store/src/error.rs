//! Why a store operation failed: the one error every backend and every store trait returns.

use anteroom_core::RoomId;
use anteroom_core::engine::EngineError;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No room with this id.
    #[error("room {0} not found")]
    RoomNotFound(RoomId),
    /// The room engine refused the operation (closed room, expired ticket, …).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The backend failed; the operation may not have happened.
    #[error("storage backend failed: {message}")]
    Backend {
        /// What failed.
        message: String,
        /// The backend's own error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl StoreError {
    pub(crate) fn backend(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Backend {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}
