//! What the token fuzz targets share: key sets with fixed keys and ticket secrets, so the
//! committed seed corpus holds tokens that verify, and the checks every target makes.
//!
//! Each target feeds its input two ways:
//!
//! - as a token, to the verifier: it must never panic, and whatever it accepts must be exactly
//!   the token the secret it names would make for the claims it returned (so a token it
//!   accepts is one a signer made, and nothing made with a dropped secret is accepted);
//! - as claims, which are signed, verified (the claims must round-trip) and then changed in
//!   one byte, after which the token must never verify.
//!
//! The key directory holds an EdDSA key (active) and an HS256 key, the original ticket secret
//! (retired, still verifying), a rotated one that signs, and a rotated one past its drop time.

use std::path::Path;
use std::sync::OnceLock;

use anteroom_token::{ChallengeSigner, KeySet, TicketSigner};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::pkcs8::EncodePrivateKey as _;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use libfuzzer_sys::arbitrary::{self, Arbitrary as _, Unstructured};

/// The time the targets verify at.
pub const NOW: u64 = 1_700_000_000;
/// The room tokens are verified for.
pub const ROOM: &str = "launch";
/// The pass issuer.
pub const ISSUER: &str = "https://shop.example";
/// The room generation passes are verified for.
pub const GENERATION: u32 = 3;

/// The original ticket secret (`ticket.key`): retired, verifying until an hour after [`NOW`].
pub const ORIGINAL_SECRET: [u8; 32] = [1; 32];
/// The id of the rotated ticket secret that signs.
pub const SIGNING_SECRET_ID: &str = "fuzzSigning";
/// The id of the rotated ticket secret whose drop time is past at [`NOW`].
pub const DROPPED_SECRET_ID: &str = "fuzzDropped";

/// The kids of the two signing keys.
pub const EDDSA_KID: &str = "fuzzEd";
pub const HS256_KID: &str = "fuzzHs";

/// The key sets of the targets, loaded once per process.
pub struct Fixture {
    /// Signs passes with the EdDSA key and tickets with the signing secret.
    pub keys: KeySet,
    /// The same directory with the HS256 key active.
    pub hs256_keys: KeySet,
    /// The same directory with the dropped secret signing, for the seed corpus.
    pub dropped_keys: KeySet,
    /// The original secret alone, as it made tokens before any rotation.
    pub original_tickets: TicketSigner,
    pub original_challenges: ChallengeSigner,
}

/// The fixture, built on first use.
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(build_fixture)
}

fn build_fixture() -> Fixture {
    // The directory is only read while loading: it goes as soon as the key sets are built.
    let dir = std::env::temp_dir().join(format!("anteroom-token-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("fixture directory");
    write_key_dir(&dir);
    let load = |active: &str, ticket_active: &str| {
        write(&dir, "active", active);
        write(&dir, "ticket.active", ticket_active);
        KeySet::load(&dir).expect("fixture key set")
    };
    let fixture = Fixture {
        hs256_keys: load(HS256_KID, SIGNING_SECRET_ID),
        dropped_keys: load(EDDSA_KID, DROPPED_SECRET_ID),
        keys: load(EDDSA_KID, SIGNING_SECRET_ID),
        original_tickets: TicketSigner::from_secret(ORIGINAL_SECRET),
        original_challenges: ChallengeSigner::from_secret(ORIGINAL_SECRET),
    };
    let _ = std::fs::remove_dir_all(&dir);
    fixture
}

fn write_key_dir(dir: &Path) {
    let eddsa = ed25519_dalek::SigningKey::from_bytes(&[7; 32])
        .to_pkcs8_pem(LineEnding::LF)
        .expect("pem");
    write(dir, &format!("{EDDSA_KID}.eddsa.pem"), &eddsa);
    write(
        dir,
        &format!("{HS256_KID}.hs256.key"),
        &secret_text([8; 32]),
    );
    write(dir, "ticket.key", &secret_text(ORIGINAL_SECRET));
    write(dir, "ticket.expires", &(NOW + 3600).to_string());
    write(
        dir,
        &format!("ticket.{SIGNING_SECRET_ID}.key"),
        &secret_text([2; 32]),
    );
    write(
        dir,
        &format!("ticket.{DROPPED_SECRET_ID}.key"),
        &secret_text([3; 32]),
    );
    write(
        dir,
        &format!("ticket.{DROPPED_SECRET_ID}.expires"),
        &(NOW - 1).to_string(),
    );
}

fn secret_text(secret: [u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(secret)
}

fn write(dir: &Path, name: &str, contents: &str) {
    std::fs::write(dir.join(name), contents).expect("fixture file");
}

/// A string without `.` (the separator of every token format), possibly empty.
pub fn dotless(input: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(String::arbitrary(input)?.replace('.', ""))
}

/// A non-empty string without `.`.
pub fn dotless_non_empty(input: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let text = dotless(input)?;
    Ok(if text.is_empty() {
        "x".to_owned()
    } else {
        text
    })
}

/// `token` with one byte changed (XOR with a non-zero value at a position the input picks);
/// `None` when the change leaves it not UTF-8, which no caller can present as a token.
pub fn one_byte_changed(
    token: &str,
    input: &mut Unstructured<'_>,
) -> arbitrary::Result<Option<String>> {
    let mut bytes = token.as_bytes().to_vec();
    if bytes.is_empty() {
        return Ok(None);
    }
    let index = usize::arbitrary(input)? % bytes.len();
    let flip = u8::arbitrary(input)?.max(1);
    bytes[index] ^= flip;
    Ok(String::from_utf8(bytes).ok())
}
