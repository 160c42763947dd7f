//! The parts of a JWT (a pass, a ticket token) as tests read them: decoded, nothing checked.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The payload of a JWT (`sub`, `exp`, …), decoded without checking anything.
pub fn claims(token: &str) -> serde_json::Value {
    part(token, 1)
}

/// The `sub` claim of a JWT (a pass's session id), decoded without checking anything.
pub fn subject(token: &str) -> String {
    claims(token)["sub"]
        .as_str()
        .expect("the token names its subject")
        .to_owned()
}

/// The header of a JWT (`alg`, `kid`), decoded without checking anything.
pub fn header(token: &str) -> serde_json::Value {
    part(token, 0)
}

fn part(token: &str, index: usize) -> serde_json::Value {
    let part = token.split('.').nth(index).expect("a JWT has three parts");
    let bytes = URL_SAFE_NO_PAD.decode(part).expect("the part is base64url");
    serde_json::from_slice(&bytes).expect("the part is JSON")
}
