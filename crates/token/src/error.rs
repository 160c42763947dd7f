//! The error type for key-set and token operations that are not pass verification.

use std::io;
use std::path::PathBuf;

/// Why a key-set operation, signing or token inspection failed.
///
/// Pass verification has its own error, [`PassError`](crate::PassError), because a
/// rejected pass is an expected outcome and not a fault.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// An algorithm name that is not one of `EdDSA`, `ES256`, `RS256`, `HS256`.
    #[error("unknown signing algorithm {0:?} (expected EdDSA, ES256, RS256 or HS256)")]
    UnknownAlgorithm(String),
    /// Reading or writing a file in the key directory failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "reading".
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A file in the key directory has a name the key set owns but content it cannot use.
    #[error("corrupt key file {}: {reason}", path.display())]
    CorruptKeyFile {
        /// The offending file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key directory holds no signing key.
    #[error("no signing key in {}", dir.display())]
    NoSigningKey {
        /// The key directory.
        dir: PathBuf,
    },
    /// The key directory holds signing keys but none of them is marked active.
    #[error("no active signing key in {} (the `active` file is missing and several keys are live)", dir.display())]
    NoActiveKey {
        /// The key directory.
        dir: PathBuf,
    },
    /// The key directory holds signing keys but no ticket secret.
    #[error("missing ticket secret {}", path.display())]
    MissingTicketKey {
        /// Where the ticket secret belongs.
        path: PathBuf,
    },
    /// A key-encryption key that is not 32 bytes in hex or base64.
    #[error("unusable key-encryption key: {0}")]
    KeyEncryptionKey(String),
    /// A sealed key entry that the key-encryption key does not open.
    #[error(
        "the key-encryption key does not open key entry {entry:?}: it was sealed with another key-encryption key, or changed"
    )]
    Unsealable {
        /// The entry's name.
        entry: String,
    },
    /// Generating a new key failed.
    #[error("cannot generate {algorithm} key: {reason}")]
    KeyGeneration {
        /// The algorithm of the key.
        algorithm: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// Signing a token failed.
    #[error("cannot sign token: {0}")]
    Signing(String),
    /// A token that is not a JWS in compact form with JSON header and claims.
    #[error("malformed token: {0}")]
    MalformedToken(String),
}

impl TokenError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        TokenError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        TokenError::CorruptKeyFile {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
