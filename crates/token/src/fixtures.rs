//! Shared test fixtures: key sets in temporary directories, sample claims and hand-built
//! tokens.

use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use tempfile::TempDir;

use crate::{
    KeySet, KeyStorage as _, PassClaims, PassExpectations, SigningAlgorithm, key_dir, keys,
};

/// The time the fixtures pretend it is.
pub(crate) const NOW: u64 = 1_700_000_000;
/// Pass lifetime in the sample claims.
pub(crate) const TTL: u64 = 600;
pub(crate) const ROOM: &str = "launch";
pub(crate) const ISSUER: &str = "https://shop.example";
pub(crate) const GENERATION: u32 = 3;

pub(crate) const EXPECT: PassExpectations<'static> = PassExpectations {
    room: ROOM,
    issuer: ISSUER,
    generation: GENERATION,
};

/// A key set with one fresh key of `algorithm`, in its own temporary directory.
///
/// RSA keys take seconds to generate in debug builds, so one RSA key is made per test binary
/// and written into each directory that needs one.
pub(crate) fn key_set(algorithm: SigningAlgorithm) -> (TempDir, KeySet) {
    let dir = tempfile::tempdir().expect("temporary directory");
    if algorithm == SigningAlgorithm::Rs256 {
        static RSA_PEM: OnceLock<String> = OnceLock::new();
        let pem = RSA_PEM.get_or_init(|| keys::generate(algorithm).expect("rsa key"));
        let kid = "rsa-fixture";
        let path = dir.path();
        path.write(&key_dir::key_file_name(kid, algorithm), pem)
            .expect("write key");
        path.write(key_dir::ACTIVE_FILE, kid).expect("write active");
    }
    let keys = KeySet::load_or_generate(dir.path(), algorithm, NOW).expect("key set");
    assert_eq!(keys.algorithm(), algorithm);
    (dir, keys)
}

/// Claims that pass [`EXPECT`] at [`NOW`].
pub(crate) fn claims() -> PassClaims {
    PassClaims {
        iss: ISSUER.into(),
        aud: ROOM.into(),
        sub: "session-1".into(),
        jti: "session-1".into(),
        iat: NOW,
        nbf: NOW,
        exp: NOW + TTL,
        pos: 1234,
        r#gen: GENERATION,
        uid: None,
        scope: "room".into(),
    }
}

/// A compact JWS from a header, claims and signature given as they are.
pub(crate) fn assemble(header: &Value, claims: &Value, signature: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode(signature)
    )
}

/// The three parts of a compact token.
pub(crate) fn parts(token: &str) -> [String; 3] {
    let parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    parts.try_into().expect("three parts")
}

/// Decodes one base64url JSON part of a token.
pub(crate) fn decode_part(part: &str) -> Value {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64url")).expect("json")
}
