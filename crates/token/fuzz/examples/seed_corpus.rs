//! Writes the seed corpus of every target into `corpus/<target>/`: tokens made with the
//! original secret, the signing secret and the dropped secret (and passes of both keys), so
//! the fuzzer starts next to tokens that verify. Run it again when a token format changes:
//! `cargo +nightly run --example seed_corpus` in this directory.

use std::path::Path;

use anteroom_token::{ChallengeClaims, PASS_SCOPE, PassClaims, TicketClaims};
use anteroom_token_fuzz::{GENERATION, ISSUER, NOW, ROOM, fixture};

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let fixture = fixture();

    let ticket = TicketClaims {
        room: ROOM.into(),
        ticket_id: "Ab-_0123456789abcdefgh".into(),
        position: 1234,
        generation: GENERATION,
    };
    write(
        &corpus,
        "ticket",
        &[
            ("original", fixture.original_tickets.sign(&ticket)),
            ("signing", fixture.keys.ticket_signer().sign(&ticket)),
            (
                "dropped",
                fixture.dropped_keys.ticket_signer().sign(&ticket),
            ),
        ],
    );

    let challenge = ChallengeClaims {
        room: ROOM.into(),
        nonce: "bm9uY2Vub25jZW5vbmNl".into(),
        expires_at: NOW + 300,
        difficulty: 18,
    };
    write(
        &corpus,
        "challenge",
        &[
            ("original", fixture.original_challenges.sign(&challenge)),
            ("signing", fixture.keys.challenge_signer().sign(&challenge)),
            (
                "dropped",
                fixture.dropped_keys.challenge_signer().sign(&challenge),
            ),
        ],
    );

    let payload = br#"{"id":"c","session":"s","generation":3,"expires_at":61000}"#;
    let purpose = "oidc-code:launch";
    write(
        &corpus,
        "sealed",
        &[
            ("original", fixture.original_tickets.seal(purpose, payload)),
            (
                "signing",
                fixture.keys.ticket_signer().seal(purpose, payload),
            ),
            (
                "dropped",
                fixture.dropped_keys.ticket_signer().seal(purpose, payload),
            ),
        ],
    );

    let pass = PassClaims {
        iss: ISSUER.into(),
        aud: ROOM.into(),
        sub: "session-1".into(),
        jti: "session-1".into(),
        iat: NOW,
        nbf: NOW,
        exp: NOW + 600,
        pos: 1234,
        r#gen: GENERATION,
        uid: Some("user-7".into()),
        scope: PASS_SCOPE.into(),
    };
    write(
        &corpus,
        "pass",
        &[
            ("eddsa", fixture.keys.sign_pass(&pass).expect("sign")),
            ("hs256", fixture.hs256_keys.sign_pass(&pass).expect("sign")),
        ],
    );
}

fn write(corpus: &Path, target: &str, seeds: &[(&str, String)]) {
    let dir = corpus.join(target);
    std::fs::create_dir_all(&dir).expect("corpus directory");
    for (name, seed) in seeds {
        std::fs::write(dir.join(name), seed).expect("seed file");
    }
}
