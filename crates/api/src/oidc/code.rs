//! The two sealed values of the adapter: the pending authorization request (carried in the
//! waiting page's `return` while the visitor queues) and the authorization code.
//!
//! Both are JSON sealed with [`TicketSigner::seal`](anteroom_token::TicketSigner::seal):
//! authentic (nobody can forge or alter one without the ticket secret, which every node
//! shares), readable by whoever holds them, and held by nobody but the visitor's browser and
//! the client. A code's purpose names its room, so a code of one client never redeems for
//! another.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use anteroom_core::{RoomId, Timestamp};
use anteroom_token::TicketSigner;

/// How long a pending request may wait in the queue before the visitor must start again.
pub(crate) const PENDING_TTL_MS: u64 = 24 * 3600 * 1000;

/// An authorization request that passed every check, waiting for its visitor's admission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PendingRequest {
    /// The client: the room.
    pub(crate) room: String,
    /// A digest of the redirect URI, which is looked up again among the registered ones.
    pub(crate) redirect: String,
    /// The client's `state`.
    pub(crate) state: String,
    /// The client's `nonce`.
    pub(crate) nonce: String,
    /// The S256 code challenge, if the client sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) challenge: Option<String>,
    /// When the request was made (ms).
    pub(crate) at: u64,
}

/// An authorization code's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Code {
    /// The code's random id (128 bits, base64url): what its redemption is recorded under.
    pub(crate) id: String,
    /// The session the visitor holds (the ID token's `sub`).
    pub(crate) session: String,
    /// The room generation of the session.
    pub(crate) generation: u32,
    /// When the session started (the ID token's `auth_time`, seconds).
    pub(crate) auth_time: u64,
    /// The redirect URI of the request, which the token request must repeat.
    pub(crate) redirect_uri: String,
    /// The request's nonce.
    pub(crate) nonce: String,
    /// The S256 code challenge, if the request had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) challenge: Option<String>,
    /// Issued at (ms).
    pub(crate) issued_at: u64,
    /// Redeemable until (ms, exclusive).
    pub(crate) expires_at: u64,
}

/// How far apart the clocks of nodes may be.
const CLOCK_SKEW_MS: u64 = 60_000;

const REQUEST_PURPOSE: &str = "oidc-request";

fn code_purpose(room: &RoomId) -> String {
    format!("oidc-code:{room}")
}

impl PendingRequest {
    pub(crate) fn seal(&self, signer: &TicketSigner) -> String {
        signer.seal(REQUEST_PURPOSE, &to_json(self))
    }

    /// The request sealed in `sealed`, if genuine and not older than [`PENDING_TTL_MS`].
    pub(crate) fn open(signer: &TicketSigner, sealed: &str, now: Timestamp) -> Option<Self> {
        let payload = signer.unseal(REQUEST_PURPOSE, sealed, now.as_secs()).ok()?;
        let request: PendingRequest = serde_json::from_slice(&payload).ok()?;
        // Nodes' clocks may run a little apart: a request from a minute ahead is accepted.
        let from_future = request.at > now.as_millis().saturating_add(CLOCK_SKEW_MS);
        let age = now.as_millis().saturating_sub(request.at);
        (!from_future && age < PENDING_TTL_MS).then_some(request)
    }
}

impl Code {
    pub(crate) fn seal(&self, signer: &TicketSigner, room: &RoomId) -> String {
        signer.seal(&code_purpose(room), &to_json(self))
    }

    /// The code sealed in `sealed` for `room`, if genuine with a secret that still verifies at
    /// `now` (the code's own expiry is the caller's check).
    pub(crate) fn open(
        signer: &TicketSigner,
        room: &RoomId,
        sealed: &str,
        now: Timestamp,
    ) -> Option<Self> {
        let payload = signer
            .unseal(&code_purpose(room), sealed, now.as_secs())
            .ok()?;
        serde_json::from_slice(&payload).ok()
    }
}

/// A short digest of a redirect URI (96 bits of SHA-256, base64url): enough to find the URI
/// again among a client's few registered ones, short enough to keep the `return` small.
pub(crate) fn redirect_digest(uri: &str) -> String {
    let digest = Sha256::digest(uri.as_bytes());
    URL_SAFE_NO_PAD.encode(&digest[..12])
}

/// The S256 challenge of a PKCE verifier (RFC 7636 §4.2).
pub(crate) fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn to_json(value: &impl Serialize) -> Vec<u8> {
    // Plain structs of strings and integers always serialize.
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7636_example_challenge() {
        // RFC 7636 Appendix B.
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn codes_open_only_for_their_room() {
        let signer = TicketSigner::from_secret([9; 32]);
        let launch = RoomId::new("launch").expect("room id");
        let other = RoomId::new("other").expect("room id");
        let code = Code {
            id: "c".into(),
            session: "s".into(),
            generation: 1,
            auth_time: 1,
            redirect_uri: "https://app.example/cb".into(),
            nonce: "n".into(),
            challenge: None,
            issued_at: 1_000,
            expires_at: 61_000,
        };
        let sealed = code.seal(&signer, &launch);
        let now = Timestamp(2_000);
        assert_eq!(Code::open(&signer, &launch, &sealed, now), Some(code));
        assert_eq!(Code::open(&signer, &other, &sealed, now), None);
        // A pending request does not open as a code, nor the other way round.
        assert_eq!(
            PendingRequest::open(&signer, &sealed, Timestamp(2_000)),
            None
        );
    }

    #[test]
    fn pending_requests_expire() {
        let signer = TicketSigner::from_secret([9; 32]);
        let request = PendingRequest {
            room: "launch".into(),
            redirect: redirect_digest("https://app.example/cb"),
            state: "s".into(),
            nonce: "n".into(),
            challenge: None,
            at: 100_000,
        };
        let sealed = request.seal(&signer);
        let open = |now| PendingRequest::open(&signer, &sealed, Timestamp(now));
        assert_eq!(open(100_000), Some(request.clone()));
        assert_eq!(open(99_000), Some(request));
        assert_eq!(open(100_000 + PENDING_TTL_MS), None);
        assert_eq!(open(39_000), None);
    }
}
