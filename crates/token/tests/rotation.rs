//! Key rotation and pruning through the public API, as the CLI and the server use them: the
//! signing keys and the ticket secret rotate together.

use std::path::Path;
use std::time::Duration;

use anteroom_token::{
    ChallengeClaims, ChallengeError, KeptBecause, KeySet, PassClaims, PassError, PassExpectations,
    SealError, SigningAlgorithm, TicketClaims, TicketTokenError,
};

const START: u64 = 1_700_000_000;
const TTL: u64 = 600;
/// How long retired keys are kept: a pass lifetime plus the verification leeway.
const KEEP: u64 = TTL + anteroom_token::LEEWAY_SECS;
/// How long a retired ticket secret keeps verifying in these tests.
const RETENTION: Duration = Duration::from_secs(3600);

const EXPECT: PassExpectations<'static> = PassExpectations {
    room: "launch",
    issuer: "https://shop.example",
    generation: 1,
};

fn claims(now: u64) -> PassClaims {
    PassClaims {
        iss: EXPECT.issuer.into(),
        aud: EXPECT.room.into(),
        sub: format!("session-{now}"),
        jti: format!("session-{now}"),
        iat: now,
        nbf: now,
        exp: now + TTL,
        pos: 1,
        r#gen: EXPECT.generation,
        uid: None,
        scope: "room".into(),
    }
}

fn kid_of(token: &str) -> String {
    let header = token.split('.').next().expect("header");
    let header: serde_json::Value =
        serde_json::from_slice(&base64_url_decode(header)).expect("json header");
    header["kid"].as_str().expect("kid").to_owned()
}

fn base64_url_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .expect("base64url")
}

fn jwks_kids(keys: &KeySet) -> Vec<String> {
    keys.jwks()["keys"]
        .as_array()
        .expect("keys array")
        .iter()
        .map(|key| key["kid"].as_str().expect("kid").to_owned())
        .collect()
}

#[test]
fn rotation_keeps_old_passes_until_pruned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, START).expect("keys");
    let old_kid = first.active_kid().to_owned();
    let old_pass = first.sign_pass(&claims(START)).expect("sign");
    let ticket = TicketClaims {
        room: "launch".into(),
        ticket_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
        position: 5,
        generation: 1,
    };
    let old_ticket = first.ticket_signer().sign(&ticket);

    // Rotate to another algorithm, then look at the directory afresh, as another node would.
    let rotated_at = START + 60;
    let rotated =
        KeySet::rotate(dir.path(), SigningAlgorithm::Es256, RETENTION, rotated_at).expect("rotate");
    let keys = KeySet::load(dir.path()).expect("reload");
    let new_kid = keys.active_kid().to_owned();
    assert_ne!(new_kid, old_kid);
    assert_eq!(rotated.active_kid(), new_kid);
    assert_eq!(keys.algorithm(), SigningAlgorithm::Es256);
    assert_eq!(keys.kids(), [new_kid.clone(), old_kid.clone()]);
    assert_eq!(jwks_kids(&keys), [new_kid.clone(), old_kid.clone()]);

    // Old passes still verify; new passes carry the new kid.
    assert!(keys.verify_pass(&old_pass, &EXPECT, rotated_at).is_ok());
    let new_pass = keys.sign_pass(&claims(rotated_at)).expect("sign");
    assert_eq!(kid_of(&new_pass), new_kid);
    assert_eq!(kid_of(&old_pass), old_kid);

    // Tickets survive rotation: the retired ticket secret keeps verifying.
    assert_eq!(
        keys.ticket_signer()
            .verify(&old_ticket, "launch", rotated_at),
        Ok(ticket.clone())
    );

    // Before the keep time is up, pruning keeps the old key.
    let report = KeySet::prune(dir.path(), KEEP, rotated_at + KEEP - 1).expect("prune");
    assert!(report.removed.is_empty());
    assert_eq!(
        report.kept,
        [
            (new_kid.clone(), KeptBecause::Active),
            (
                old_kid.clone(),
                KeptBecause::PassesMayBeValid {
                    retired_at: rotated_at,
                    prunable_at: rotated_at + KEEP
                }
            ),
        ]
    );
    assert_eq!(KeySet::load(dir.path()).expect("reload").kids().len(), 2);

    // After it, the old key goes, and so do its passes (long expired by then anyway).
    let pruned_at = rotated_at + KEEP;
    let report = KeySet::prune(dir.path(), KEEP, pruned_at).expect("prune");
    assert_eq!(report.removed, std::slice::from_ref(&old_kid));
    assert_eq!(report.kept, [(new_kid.clone(), KeptBecause::Active)]);
    let keys = KeySet::load(dir.path()).expect("reload");
    assert_eq!(keys.kids(), std::slice::from_ref(&new_kid));
    assert_eq!(jwks_kids(&keys), std::slice::from_ref(&new_kid));
    assert_eq!(
        keys.verify_pass(&old_pass, &EXPECT, START + 1),
        Err(PassError::UnknownKey)
    );
    assert!(keys.verify_pass(&new_pass, &EXPECT, rotated_at).is_ok());
    assert_eq!(
        keys.ticket_signer()
            .verify(&old_ticket, "launch", pruned_at),
        Ok(ticket),
        "pruning signing keys leaves ticket secrets within their retention"
    );
    assert!(
        !dir.path().join(format!("{old_kid}.retired")).exists(),
        "retirement record removed with its key"
    );

    // Pruning again finds nothing more.
    let report = KeySet::prune(dir.path(), KEEP, pruned_at + 1000).expect("prune");
    assert!(report.removed.is_empty());
    assert_eq!(report.kept.len(), 1);
}

#[test]
fn several_rotations_keep_every_unpruned_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut passes = Vec::new();
    let mut now = START;
    let mut keys =
        KeySet::load_or_generate(dir.path(), SigningAlgorithm::Hs256, now).expect("keys");
    for algorithm in [
        SigningAlgorithm::EdDsa,
        SigningAlgorithm::Hs256,
        SigningAlgorithm::EdDsa,
    ] {
        passes.push((now, keys.sign_pass(&claims(now)).expect("sign")));
        now += 100;
        keys = KeySet::rotate(dir.path(), algorithm, RETENTION, now).expect("rotate");
    }
    assert_eq!(keys.kids().len(), 4);
    // HS256 keys never reach the JWKS.
    assert_eq!(jwks_kids(&keys).len(), 2);
    for (signed_at, pass) in &passes {
        assert!(keys.verify_pass(pass, &EXPECT, *signed_at).is_ok());
    }
    // Keys retired at START+100, +200, +300; keeping 150 s at START+400 drops the first two.
    let report = KeySet::prune(dir.path(), 150, START + 400).expect("prune");
    assert_eq!(report.removed.len(), 2);
    assert_eq!(report.kept.len(), 2);
    let keys = KeySet::load(dir.path()).expect("reload");
    assert_eq!(keys.kids().len(), 2);
    let outcomes: Vec<bool> = passes
        .iter()
        .map(|(signed_at, pass)| keys.verify_pass(pass, &EXPECT, *signed_at).is_ok())
        .collect();
    assert_eq!(outcomes, [false, false, true]);
}

fn ticket(position: u64) -> TicketClaims {
    TicketClaims {
        room: "launch".into(),
        ticket_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
        position,
        generation: 1,
    }
}

fn challenge() -> ChallengeClaims {
    ChallengeClaims {
        room: "launch".into(),
        nonce: "bm9uY2Vub25jZW5vbmNl".into(),
        expires_at: u64::MAX,
        difficulty: 4,
    }
}

/// Everything a ticket secret makes: a ticket token, a challenge and a sealed value.
struct Made {
    ticket: String,
    challenge: String,
    sealed: String,
}

impl Made {
    fn by(keys: &KeySet, position: u64) -> Made {
        Made {
            ticket: keys.ticket_signer().sign(&ticket(position)),
            challenge: keys.challenge_signer().sign(&challenge()),
            sealed: keys.ticket_signer().seal("oidc-code:launch", b"code"),
        }
    }

    /// Whether each of the three verifies with `keys` at `now`; panics on any answer other
    /// than the claims or "invalid".
    fn verifies(&self, keys: &KeySet, position: u64, now: u64) -> [bool; 3] {
        let ticket_ok = match keys.ticket_signer().verify(&self.ticket, "launch", now) {
            Ok(claims) => claims == ticket(position),
            Err(TicketTokenError::Invalid) => false,
            Err(other) => panic!("ticket: {other:?}"),
        };
        let challenge_ok = match keys
            .challenge_signer()
            .verify(&self.challenge, "launch", now)
        {
            Ok(claims) => claims == challenge(),
            Err(ChallengeError::Invalid) => false,
            Err(other) => panic!("challenge: {other:?}"),
        };
        let sealed_ok = match keys
            .ticket_signer()
            .unseal("oidc-code:launch", &self.sealed, now)
        {
            Ok(payload) => payload == b"code",
            Err(SealError) => false,
        };
        [ticket_ok, challenge_ok, sealed_ok]
    }
}

fn file_exists(dir: &Path, name: &str) -> bool {
    dir.join(name).is_file()
}

#[test]
fn a_rotated_ticket_secret_verifies_until_its_drop_time_then_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, START).expect("keys");
    let before = Made::by(&first, 1);
    // Before any rotation, tokens are in the formats that name no secret: tokens of earlier
    // versions look the same and keep verifying.
    assert!(before.ticket.starts_with("t1.launch."), "{}", before.ticket);
    assert!(before.challenge.starts_with("c1.launch."));
    assert!(before.sealed.starts_with("s1."));

    let rotated_at = START + 100;
    KeySet::rotate(dir.path(), SigningAlgorithm::EdDsa, RETENTION, rotated_at).expect("rotate");
    // Another node sharing the directory loads it afresh.
    let keys = KeySet::load(dir.path()).expect("reload");
    let after = Made::by(&keys, 2);
    let secret_id = after
        .ticket
        .split('.')
        .nth(1)
        .expect("secret id")
        .to_owned();
    assert!(after.ticket.starts_with(&format!("t2.{secret_id}.launch.")));
    assert!(
        after
            .challenge
            .starts_with(&format!("c2.{secret_id}.launch."))
    );
    assert!(after.sealed.starts_with(&format!("s2.{secret_id}.")));
    assert!(file_exists(dir.path(), &format!("ticket.{secret_id}.key")));

    let drop_at = rotated_at + RETENTION.as_secs();
    assert_eq!(before.verifies(&keys, 1, rotated_at), [true; 3]);
    assert_eq!(before.verifies(&keys, 1, drop_at - 1), [true; 3]);
    // From the drop time on, every node refuses the old secret, its file deleted or not.
    assert_eq!(before.verifies(&keys, 1, drop_at), [false; 3]);
    assert!(file_exists(dir.path(), "ticket.key"));
    assert_eq!(after.verifies(&keys, 2, drop_at + 1_000_000), [true; 3]);
    // The old secret never verified what the new one made, nor the other way round.
    assert_eq!(after.verifies(&first, 2, rotated_at), [false; 3]);

    // A start after the drop time deletes it and its record.
    let restarted =
        KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, drop_at).expect("start");
    assert!(!file_exists(dir.path(), "ticket.key"));
    assert!(!file_exists(dir.path(), "ticket.expires"));
    assert_eq!(before.verifies(&restarted, 1, rotated_at), [false; 3]);
    assert_eq!(after.verifies(&restarted, 2, drop_at), [true; 3]);
}

#[test]
fn each_retired_ticket_secret_keeps_its_own_drop_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let original =
        KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, START).expect("keys");
    let first = Made::by(&original, 1);
    let short = Duration::from_secs(60);
    let second_keys =
        KeySet::rotate(dir.path(), SigningAlgorithm::EdDsa, short, START + 10).expect("rotate");
    let second = Made::by(&second_keys, 2);
    let third_keys =
        KeySet::rotate(dir.path(), SigningAlgorithm::EdDsa, RETENTION, START + 20).expect("rotate");
    let third = Made::by(&third_keys, 3);
    let keys = KeySet::load(dir.path()).expect("reload");

    // The original was retired at START+10 for 60 s; the second at START+20 for an hour.
    assert_eq!(first.verifies(&keys, 1, START + 69), [true; 3]);
    assert_eq!(first.verifies(&keys, 1, START + 70), [false; 3]);
    assert_eq!(second.verifies(&keys, 2, START + 70), [true; 3]);
    assert_eq!(second.verifies(&keys, 2, START + 20 + 3600), [false; 3]);
    assert_eq!(third.verifies(&keys, 3, START + 10_000_000), [true; 3]);
    assert_ne!(
        second.ticket.split('.').nth(1),
        third.ticket.split('.').nth(1)
    );

    // Pruning after the first drop time deletes only the original secret.
    KeySet::prune(dir.path(), KEEP, START + 70).expect("prune");
    let keys = KeySet::load(dir.path()).expect("reload");
    assert_eq!(first.verifies(&keys, 1, START + 30), [false; 3]);
    assert_eq!(second.verifies(&keys, 2, START + 70), [true; 3]);
}

#[test]
fn a_retention_of_zero_refuses_the_old_secret_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, START).expect("keys");
    let before = Made::by(&first, 1);
    let keys = KeySet::rotate(
        dir.path(),
        SigningAlgorithm::EdDsa,
        Duration::ZERO,
        START + 5,
    )
    .expect("rotate");
    assert_eq!(before.verifies(&keys, 1, START + 5), [false; 3]);
    assert!(
        !file_exists(dir.path(), "ticket.key"),
        "deleted by the rotation itself"
    );
}

#[test]
fn a_token_naming_another_secret_is_invalid() {
    let dir = tempfile::tempdir().expect("tempdir");
    KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, START).expect("keys");
    let keys =
        KeySet::rotate(dir.path(), SigningAlgorithm::EdDsa, RETENTION, START).expect("rotate");
    let token = keys.ticket_signer().sign(&ticket(7));
    let mut fields: Vec<&str> = token.split('.').collect();
    let signer = keys.ticket_signer();
    // The same MAC under another secret's name, under no name, and under the original's.
    fields[1] = "AAAAAAAAAAA";
    let renamed = fields.join(".");
    let unnamed = format!("t1.{}", token.splitn(3, '.').nth(2).expect("rest"));
    for forged in [renamed, unnamed] {
        assert_eq!(
            signer.verify(&forged, "launch", START),
            Err(TicketTokenError::Invalid),
            "{forged}"
        );
    }
    assert_eq!(signer.verify(&token, "launch", START), Ok(ticket(7)));
}
