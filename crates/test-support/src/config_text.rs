//! Pieces of config files as tests write them.

use std::fmt::Write as _;
use std::path::Path;

use sha2::{Digest, Sha256};

/// `sha256:<hex>` of `key`, the form `[auth]` takes.
pub fn key_hash(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    format!("sha256:{hex}")
}

/// A TOML string literal for a path.
pub fn toml_string(path: &Path) -> String {
    let text = path.to_str().expect("utf-8 path");
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}
