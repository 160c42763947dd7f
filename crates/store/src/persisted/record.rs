//! What every stored record shares: the version byte it starts with, and why it could not be
//! read.

/// Why a stored record could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("malformed record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("malformed record: {0}")]
    Binary(&'static str),
    #[error("unsupported record version {0}")]
    Version(u8),
    #[error("invalid stored value: {0}")]
    Invalid(String),
}

/// The JSON record version (read only).
pub(super) const JSON_VERSION: u8 = 1;
/// The binary record version, the first byte of every record written now.
pub(super) const BINARY_VERSION: u8 = 2;
