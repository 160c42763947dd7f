//! Signing keys, JWT passes, signed ticket tokens and the JWKS.
//!
//! This crate owns everything cryptographic in anteroom: the key directory, the passes (JWTs
//! that let a visitor through a room), the ticket tokens (a visitor's MAC'd place in a queue)
//! and the JWKS that origins use to verify passes themselves.
//!
//! It reads no clock: every operation that depends on time takes `now_secs`, Unix seconds
//! from the caller's clock. It does no networking and depends on no other anteroom crate.
//!
//! # Passes
//!
//! A pass is a JWT signed by the active key of a [`KeySet`], with a `kid` header naming the
//! key and the claims of [`PassClaims`]. [`KeySet::verify_pass`] takes the algorithm from the
//! key the `kid` names, never from the token, so `alg: none` and HMAC-over-a-public-key forgeries
//! are refused; it checks `exp`/`nbf` with a 30 s leeway, then `aud`, `iss`, `gen`, `scope`.
//! Revocation is not checked here: the revocation set lives in the store.
//!
//! # The key directory
//!
//! One directory holds every key, one file each, all owner-only (0600 on unix, the directory
//! 0700 when this crate creates it):
//!
//! | file | content |
//! |------|---------|
//! | `<kid>.eddsa.pem`, `<kid>.es256.pem`, `<kid>.rs256.pem` | PKCS#8 PEM private key (RSA at least 2048 bits) |
//! | `<kid>.hs256.key` | base64url HS256 secret, at least 32 bytes |
//! | `active` | the kid of the key that signs |
//! | `<kid>.retired` | decimal Unix time at which that key stopped signing |
//! | `ticket.key` | base64url 32-byte original ticket secret |
//! | `ticket.<id>.key` | base64url 32-byte ticket secret made by a rotation |
//! | `ticket.active` | the id of the ticket secret that signs (absent: `ticket.key` signs) |
//! | `ticket.expires`, `ticket.<id>.expires` | decimal Unix time from which that retired ticket secret no longer verifies |
//!
//! A kid is 1 to 64 base64url characters; generated kids are 64 random bits (11 characters).
//! [`KeySet::rotate`] adds a key, points `active` at it and writes a `.retired` record for the
//! keys it replaces; they keep verifying until [`KeySet::prune`] deletes them once their
//! passes can no longer be valid. It rotates the ticket secret too: a new `ticket.<id>.key`
//! signs, and the one it replaces keeps verifying the tickets, challenges and sealed values it
//! made until the drop time in its `.expires` record (the rotation's retention later), so
//! waiting visitors keep their tickets (`ticket_secrets.rs`). Every write goes to a temporary
//! dot file first and is renamed into place, so a crash never leaves half a key. Files with
//! other names and dot files are ignored; a file with one of these names that cannot be read
//! is an error naming it. One process at a time should change a directory.
//!
//! The same layout can live elsewhere than on disk: [`KeyRecords`] holds its entries in
//! memory for a caller that keeps them in a shared store, and records what an operation
//! changed so the caller writes back exactly that. [`KeyEncryptionKey`] seals each entry
//! (AES-256-GCM, bound to the entry's name) so the store never holds a key in plain text.
//!
//! # OpenID Connect
//!
//! ID tokens and access tokens ([`IdTokenClaims`], [`AccessTokenClaims`]) are signed like
//! passes; sealed values ([`TicketSigner::seal`]) carry OIDC requests and codes. See `oidc.rs`.
//!
//! # Ticket tokens
//!
//! See [`TicketSigner`]: `t1.<room>.<ticket_id>.<position>.<generation>.<mac>` (original
//! secret) or `t2.<secret_id>.<room>.…` (a rotated one), with an HMAC-SHA256 over the rest.
//!
//! # Fuzzing
//!
//! `fuzz/` is a workspace of its own (nightly, run by `scripts/fuzz`) with one target per
//! token a visitor can send (`ticket`, `challenge`, `sealed`, `pass`): no panic, only what a
//! signer made verifies (nothing of a dropped secret), claims round-trip, and no one-byte
//! change verifies. Seeds are in `fuzz/corpus/`.

mod algorithm;
mod challenge;
mod error;
#[cfg(test)]
mod fixtures;
pub mod json_text;
mod key_dir;
mod key_sealing;
mod keys;
mod keyset;
mod leeway;
mod oidc;
mod pass;
mod storage;
mod ticket;
mod ticket_secrets;

pub use algorithm::SigningAlgorithm;
pub use challenge::{ChallengeClaims, ChallengeError, ChallengeSigner};
pub use error::TokenError;
pub use key_sealing::KeyEncryptionKey;
pub use keyset::{KeptBecause, KeySet, NODE_CLOCK_SKEW_SECS, PruneReport, prune_horizon_secs};
pub use leeway::LEEWAY_SECS;
pub use oidc::{ACCESS_TOKEN_SCOPE, AccessTokenClaims, IdTokenClaims, SealError};
pub use pass::{Inspection, PASS_SCOPE, PassClaims, PassClaimsView, PassError, PassExpectations};
pub use storage::{KeyRecords, KeyStorage};
pub use ticket::{TicketClaims, TicketSigner, TicketTokenError};
