//! The key set: every key in the key directory, the active one that signs, the JWKS and the
//! ticket signer.
//!
//! Rotation and pruning happen here, whatever holds the entries (`storage.rs`): a prune
//! deletes retired keys only once no pass they signed can still be valid
//! ([`prune_horizon_secs`]: longest pass lifetime plus leeway and skew), and answers a
//! [`PruneReport`] of the kids it removed and kept, and why.

use std::fmt;
use std::sync::{Arc, Once};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{DecodingKey, EncodingKey};
use serde_json::{Value, json};

use crate::key_dir::{self, Listing};
use crate::keys::{self, KeyMaterial};
use crate::storage::KeyStorage;
use crate::ticket_secrets::SecretId;
use crate::{ChallengeSigner, SigningAlgorithm, TicketSigner, TokenError};

/// The keys of one key directory, loaded and ready to sign and verify.
///
/// Cloning is cheap (the keys are shared). A `KeySet` is a snapshot: after a rotation or
/// prune, load the directory again to see the change.
///
/// ```
/// use anteroom_token::{KeySet, SigningAlgorithm};
///
/// let dir = tempfile::tempdir().unwrap();
/// let keys = KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, 1_700_000_000).unwrap();
/// assert_eq!(keys.algorithm(), SigningAlgorithm::EdDsa);
/// assert_eq!(keys.jwks()["keys"][0]["kid"], keys.active_kid());
///
/// // Loading again finds the same key instead of making another.
/// let again = KeySet::load(dir.path()).unwrap();
/// assert_eq!(again.active_kid(), keys.active_kid());
/// ```
#[derive(Clone)]
pub struct KeySet {
    inner: Arc<Inner>,
}

struct Inner {
    /// Every key, the active one first, then by kid.
    keys: Vec<LoadedKey>,
    jwks: Value,
    ticket_signer: TicketSigner,
    challenge_signer: ChallengeSigner,
}

/// How much the clocks of two nodes may differ: a key's retirement time is read on the node
/// that rotated, the prune's on the node that prunes.
pub const NODE_CLOCK_SKEW_SECS: u64 = 30;

/// How long after a key stops signing a pass it signed can still be valid, so how long a
/// prune keeps it: the longest pass lifetime, plus the [`LEEWAY_SECS`](crate::LEEWAY_SECS)
/// verifiers allow past `exp`, plus [`NODE_CLOCK_SKEW_SECS`].
///
/// ```
/// assert_eq!(anteroom_token::prune_horizon_secs(3600), 3600 + 30 + 30);
/// ```
pub fn prune_horizon_secs(longest_pass_lifetime_secs: u64) -> u64 {
    longest_pass_lifetime_secs
        .saturating_add(crate::LEEWAY_SECS)
        .saturating_add(NODE_CLOCK_SKEW_SECS)
}

/// What [`KeySet::prune`] did with each key of the set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// The kids of the keys deleted (they leave the JWKS): every pass they signed has expired.
    pub removed: Vec<String>,
    /// The kids of the keys kept, each with why, the active key first.
    pub kept: Vec<(String, KeptBecause)>,
}

/// Why [`KeySet::prune`] kept a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptBecause {
    /// It signs new passes.
    Active,
    /// It stopped signing at `retired_at` (Unix seconds); a pass it signed may be valid until
    /// `prunable_at`, from when a prune deletes it.
    PassesMayBeValid {
        /// When it stopped signing.
        retired_at: u64,
        /// When no pass it signed can still be valid.
        prunable_at: u64,
    },
}

/// One key of the set.
pub(crate) struct LoadedKey {
    pub(crate) kid: String,
    pub(crate) material: KeyMaterial,
    /// The JOSE header of its passes in base64url: the same on every pass, so encoded once.
    pub(crate) encoded_header: String,
}

impl KeySet {
    /// Loads every key in `dir`; when the directory holds no signing key, generates one of
    /// `algorithm` (creating the directory, owner-only on unix) and makes it active. The
    /// ticket secret is generated too when missing.
    ///
    /// Keys that are neither active nor retired (left by an interrupted rotation, or copied
    /// in by hand) are recorded as retired at `now_secs`, so [`KeySet::prune`] removes them
    /// in time. An existing key of another algorithm is kept: changing the algorithm of a
    /// running key set is a [`KeySet::rotate`]. Retired ticket secrets past their drop time
    /// are deleted.
    pub fn load_or_generate<S: KeyStorage + ?Sized>(
        dir: &S,
        algorithm: SigningAlgorithm,
        now_secs: u64,
    ) -> Result<KeySet, TokenError> {
        dir.create()?;
        let listing = key_dir::list(dir)?;
        ensure_ticket_secret(dir, &listing)?;
        drop_expired_ticket_secrets(dir, &listing, now_secs)?;
        if listing.keys.is_empty() {
            let kid = add_key(dir, &listing, algorithm)?;
            dir.write(key_dir::ACTIVE_FILE, &format!("{kid}\n"))?;
        } else {
            let active = listing.active_kid(dir)?.to_owned();
            if listing.active.is_none() {
                dir.write(key_dir::ACTIVE_FILE, &format!("{active}\n"))?;
            }
            retire_all_but(dir, &listing, &active, now_secs)?;
        }
        KeySet::load(dir)
    }

    /// Loads every key in `dir` without changing anything; an error if it holds no signing
    /// key, no ticket secret, or a file it owns that it cannot read.
    pub fn load<S: KeyStorage + ?Sized>(dir: &S) -> Result<KeySet, TokenError> {
        install_crypto_provider();
        let listing = key_dir::list(dir)?;
        let active = listing.active_kid(dir)?;
        let ticket_secrets = listing.ticket_secrets(dir)?;
        let mut keys = Vec::with_capacity(listing.keys.len());
        for file in &listing.keys {
            let text = dir.read(&file.name)?;
            let material = keys::parse(file.algorithm, &text)
                .map_err(|reason| TokenError::corrupt(dir.location(&file.name), reason))?;
            keys.push(LoadedKey::new(file.kid.clone(), material)?);
        }
        // `list` sorts by kid; a stable sort on "is not active" moves the active key first.
        keys.sort_by_key(|key| key.kid != active);
        let jwks = jwks_document(&keys);
        Ok(KeySet {
            inner: Arc::new(Inner {
                keys,
                jwks,
                ticket_signer: TicketSigner::from_secrets(&ticket_secrets),
                challenge_signer: ChallengeSigner::from_secrets(&ticket_secrets),
            }),
        })
    }

    /// Generates a new key of `algorithm` in `dir` and makes it the active signing key. The
    /// previous keys stay for verification, recorded as retired at `now_secs`, until
    /// [`KeySet::prune`] removes them.
    ///
    /// The ticket secret rotates too: a new one makes tickets, challenges and sealed values
    /// from now on, and the one it replaces keeps verifying what it made for
    /// `ticket_secret_retention`, then is refused on every node and deleted at the next
    /// rotation, prune or start. Ticket tokens carry no expiry (a waiting visitor keeps their
    /// ticket for as long as they keep contact), so the retention is the longest wait worth
    /// honouring, not a token lifetime.
    pub fn rotate<S: KeyStorage + ?Sized>(
        dir: &S,
        algorithm: SigningAlgorithm,
        ticket_secret_retention: Duration,
        now_secs: u64,
    ) -> Result<KeySet, TokenError> {
        dir.create()?;
        let listing = key_dir::list(dir)?;
        let kid = add_key(dir, &listing, algorithm)?;
        // The new key becomes active before the old ones are marked retired, so a crash in
        // between never leaves the active key with a retirement record.
        dir.write(key_dir::ACTIVE_FILE, &format!("{kid}\n"))?;
        retire_all_but(dir, &listing, &kid, now_secs)?;
        if !ensure_ticket_secret(dir, &listing)? {
            let drop_at = now_secs.saturating_add(ticket_secret_retention.as_secs());
            rotate_ticket_secret(dir, &listing, drop_at)?;
        }
        // Listed again: with no retention, the secret just retired goes now.
        drop_expired_ticket_secrets(dir, &key_dir::list(dir)?, now_secs)?;
        KeySet::load(dir)
    }

    /// Deletes the keys that can no longer have signed a valid pass: retired keys whose
    /// retirement is at least `keep_secs` old. The active key is never deleted. Choose
    /// `keep_secs` at least the longest pass lifetime plus the verification leeway and the
    /// clock skew between nodes ([`prune_horizon_secs`](crate::prune_horizon_secs)).
    /// Retired ticket secrets past their drop time are deleted too, and retirement records
    /// whose key is gone.
    ///
    /// A key with no retirement record that does not sign (left by an interrupted rotation)
    /// is recorded as retired now, and kept.
    pub fn prune<S: KeyStorage + ?Sized>(
        dir: &S,
        keep_secs: u64,
        now_secs: u64,
    ) -> Result<PruneReport, TokenError> {
        let listing = key_dir::list(dir)?;
        let active = listing.active_kid(dir)?.to_owned();
        retire_all_but(dir, &listing, &active, now_secs)?;
        drop_expired_ticket_secrets(dir, &listing, now_secs)?;
        // Listed again to see the retirement records just written.
        let listing = key_dir::list(dir)?;
        let mut report = PruneReport::default();
        for key in &listing.keys {
            let retired_at = match listing.retired.get(&key.kid) {
                Some((retired_at, _)) if key.kid != active => *retired_at,
                // The active key, even with a stale record a crashed rotation left it.
                _ => {
                    report.kept.push((key.kid.clone(), KeptBecause::Active));
                    continue;
                }
            };
            let prunable_at = retired_at.saturating_add(keep_secs);
            if now_secs < prunable_at {
                let because = KeptBecause::PassesMayBeValid {
                    retired_at,
                    prunable_at,
                };
                report.kept.push((key.kid.clone(), because));
                continue;
            }
            // Key first, record second: a crash in between leaves only an orphan record,
            // which the next prune removes.
            dir.remove(&key.name)?;
            report.removed.push(key.kid.clone());
        }
        // `listing.keys` is in kid order; a stable sort moves the active key first.
        report
            .kept
            .sort_by_key(|(_, because)| *because != KeptBecause::Active);
        for (kid, (_, record)) in &listing.retired {
            if *kid != active && !report.kept.iter().any(|(kept, _)| kept == kid) {
                dir.remove(record)?;
            }
        }
        Ok(report)
    }

    /// The id of the key that signs new passes.
    pub fn active_kid(&self) -> &str {
        &self.active().kid
    }

    /// The algorithm of the active key.
    pub fn algorithm(&self) -> SigningAlgorithm {
        self.active().material.algorithm
    }

    /// The ids of every key in the set, the active one first.
    pub fn kids(&self) -> Vec<String> {
        self.inner.keys.iter().map(|key| key.kid.clone()).collect()
    }

    /// The JWKS document (`{"keys": [...]}`) with every public key in the set, the active one
    /// first, each with `kid`, `alg` and `"use": "sig"`. HS256 keys are secret and never
    /// appear.
    pub fn jwks(&self) -> Value {
        self.inner.jwks.clone()
    }

    /// The signer for ticket tokens and sealed values, keyed by the directory's ticket
    /// secrets.
    pub fn ticket_signer(&self) -> &TicketSigner {
        &self.inner.ticket_signer
    }

    /// The signer of proof-of-work challenges (its key derived from the ticket secret).
    pub fn challenge_signer(&self) -> &ChallengeSigner {
        &self.inner.challenge_signer
    }

    pub(crate) fn active(&self) -> &LoadedKey {
        // `load` never builds an empty set and puts the active key first.
        &self.inner.keys[0]
    }

    pub(crate) fn find(&self, kid: &str) -> Option<&LoadedKey> {
        self.inner.keys.iter().find(|key| key.kid == kid)
    }
}

impl LoadedKey {
    fn new(kid: String, material: KeyMaterial) -> Result<LoadedKey, TokenError> {
        let header = jws_header(material.algorithm, &kid);
        let json = serde_json::to_vec(&header).map_err(|e| TokenError::Signing(e.to_string()))?;
        Ok(LoadedKey {
            encoded_header: URL_SAFE_NO_PAD.encode(json),
            kid,
            material,
        })
    }

    /// The JOSE header of the passes this key signs: `alg`, `kid` and `typ: JWT`.
    pub(crate) fn jws_header(&self) -> jsonwebtoken::Header {
        jws_header(self.material.algorithm, &self.kid)
    }

    pub(crate) fn encoding_key(&self) -> &EncodingKey {
        &self.material.encoding
    }

    pub(crate) fn decoding_key(&self) -> &DecodingKey {
        &self.material.decoding
    }
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySet")
            .field("active_kid", &self.active_kid())
            .field("algorithm", &self.algorithm().as_str())
            .field("kids", &self.kids())
            .finish_non_exhaustive()
    }
}

fn jws_header(algorithm: SigningAlgorithm, kid: &str) -> jsonwebtoken::Header {
    let mut header = jsonwebtoken::Header::new(algorithm.jsonwebtoken());
    header.kid = Some(kid.to_owned());
    header
}

/// jsonwebtoken picks its crypto backend from a process-wide provider. Installing the
/// RustCrypto one here means callers need not know; if the process already chose a provider,
/// that one stays.
fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // An error only says a provider is already installed, which is fine.
        let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
    });
}

/// Writes `ticket.key` when the directory has no ticket secret that signs; returns whether it
/// did.
fn ensure_ticket_secret(
    dir: &(impl KeyStorage + ?Sized),
    listing: &Listing,
) -> Result<bool, TokenError> {
    // With `ticket.active`, a rotation made the signing secret: a missing file is corruption
    // for `load` to name, never a reason to make a new one.
    if listing.ticket_active.is_some() || listing.ticket_secrets.contains_key(&SecretId::Original) {
        return Ok(false);
    }
    write_ticket_secret(dir, &SecretId::Original)?;
    Ok(true)
}

/// Adds a named ticket secret and makes it the one that signs; the one it replaces verifies
/// until `drop_at`.
fn rotate_ticket_secret(
    dir: &(impl KeyStorage + ?Sized),
    listing: &Listing,
    drop_at: u64,
) -> Result<(), TokenError> {
    let retiring = listing.signing_ticket_secret();
    let (id, named) = loop {
        // 64 random bits, like kids: collisions are only possible in theory, and checked.
        let id = keys::encode_secret(&keys::random_secret()[..8]);
        let named = SecretId::Named(id.clone());
        if !listing.ticket_secrets.contains_key(&named)
            && !listing.ticket_drops.contains_key(&named)
        {
            break (id, named);
        }
    };
    write_ticket_secret(dir, &named)?;
    // The retiring secret gets its drop record before the new one signs: a crash in between
    // leaves it signing (the signing secret ignores its record) rather than retired without
    // a record, which would refuse its tokens at once.
    let record = key_dir::ticket_drop_file_name(&retiring);
    dir.write(&record, &format!("{drop_at}\n"))?;
    dir.write(key_dir::TICKET_ACTIVE_FILE, &format!("{id}\n"))
}

fn write_ticket_secret(dir: &(impl KeyStorage + ?Sized), id: &SecretId) -> Result<(), TokenError> {
    let secret = keys::encode_secret(&keys::random_secret());
    dir.write(
        &key_dir::ticket_secret_file_name(id),
        &format!("{secret}\n"),
    )
}

/// Deletes every retired ticket secret whose drop time is past at `now_secs`, and its record.
/// The signing secret is never deleted, whatever record a crashed rotation left it.
fn drop_expired_ticket_secrets(
    dir: &(impl KeyStorage + ?Sized),
    listing: &Listing,
    now_secs: u64,
) -> Result<(), TokenError> {
    let signing = listing.signing_ticket_secret();
    for (id, (drop_at, record)) in &listing.ticket_drops {
        if *id == signing || now_secs < *drop_at {
            continue;
        }
        // Secret first, record second: a crash in between leaves only an orphan record,
        // which the next pass removes.
        dir.remove(&key_dir::ticket_secret_file_name(id))?;
        dir.remove(record)?;
    }
    Ok(())
}

/// Generates a key of `algorithm` under a fresh kid, writes its file and returns the kid.
fn add_key(
    dir: &(impl KeyStorage + ?Sized),
    listing: &Listing,
    algorithm: SigningAlgorithm,
) -> Result<String, TokenError> {
    let text = keys::generate(algorithm).map_err(|reason| TokenError::KeyGeneration {
        algorithm: algorithm.as_str(),
        reason,
    })?;
    let kid = loop {
        // 64 random bits: collisions are only possible in theory, and checked anyway.
        let kid = keys::encode_secret(&keys::random_secret()[..8]);
        if !listing.has_kid(&kid) && !listing.retired.contains_key(&kid) {
            break kid;
        }
    };
    dir.write(&key_dir::key_file_name(&kid, algorithm), &text)?;
    Ok(kid)
}

/// Records every key other than `active` that has no retirement record as retired now.
fn retire_all_but(
    dir: &(impl KeyStorage + ?Sized),
    listing: &Listing,
    active: &str,
    now_secs: u64,
) -> Result<(), TokenError> {
    for key in &listing.keys {
        if key.kid != active && !listing.retired.contains_key(&key.kid) {
            dir.write(
                &key_dir::retired_file_name(&key.kid),
                &format!("{now_secs}\n"),
            )?;
        }
    }
    Ok(())
}

fn jwks_document(keys: &[LoadedKey]) -> Value {
    let entries: Vec<Value> = keys
        .iter()
        .filter_map(|key| {
            let mut jwk = key.material.public_jwk.clone()?;
            jwk.insert("kid".into(), json!(key.kid));
            jwk.insert("alg".into(), json!(key.material.algorithm.as_str()));
            jwk.insert("use".into(), json!("sig"));
            Some(Value::Object(jwk))
        })
        .collect();
    json!({ "keys": entries })
}

#[cfg(test)]
mod tests;
