//! Key rotation and pruning through the public API, as the CLI and the server use them.

use anteroom_token::{
    KeySet, PassClaims, PassError, PassExpectations, SigningAlgorithm, TicketClaims,
};

const START: u64 = 1_700_000_000;
const TTL: u64 = 600;
/// How long retired keys are kept: a pass lifetime plus the verification leeway.
const KEEP: u64 = TTL + anteroom_token::LEEWAY_SECS;

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
    let rotated = KeySet::rotate(dir.path(), SigningAlgorithm::Es256, rotated_at).expect("rotate");
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

    // Tickets survive rotation: the ticket secret is kept.
    assert_eq!(
        keys.ticket_signer().verify(&old_ticket, "launch"),
        Ok(ticket.clone())
    );

    // Before the keep time is up, pruning keeps the old key.
    assert_eq!(
        KeySet::prune(dir.path(), KEEP, rotated_at + KEEP - 1).expect("prune"),
        0
    );
    assert_eq!(KeySet::load(dir.path()).expect("reload").kids().len(), 2);

    // After it, the old key goes, and so do its passes (long expired by then anyway).
    let pruned_at = rotated_at + KEEP;
    assert_eq!(
        KeySet::prune(dir.path(), KEEP, pruned_at).expect("prune"),
        1
    );
    let keys = KeySet::load(dir.path()).expect("reload");
    assert_eq!(keys.kids(), std::slice::from_ref(&new_kid));
    assert_eq!(jwks_kids(&keys), std::slice::from_ref(&new_kid));
    assert_eq!(
        keys.verify_pass(&old_pass, &EXPECT, START + 1),
        Err(PassError::UnknownKey)
    );
    assert!(keys.verify_pass(&new_pass, &EXPECT, rotated_at).is_ok());
    assert_eq!(
        keys.ticket_signer().verify(&old_ticket, "launch"),
        Ok(ticket)
    );
    assert!(
        !dir.path().join(format!("{old_kid}.retired")).exists(),
        "retirement record removed with its key"
    );

    // Pruning again finds nothing more.
    assert_eq!(
        KeySet::prune(dir.path(), KEEP, pruned_at + 1000).expect("prune"),
        0
    );
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
        keys = KeySet::rotate(dir.path(), algorithm, now).expect("rotate");
    }
    assert_eq!(keys.kids().len(), 4);
    // HS256 keys never reach the JWKS.
    assert_eq!(jwks_kids(&keys).len(), 2);
    for (signed_at, pass) in &passes {
        assert!(keys.verify_pass(pass, &EXPECT, *signed_at).is_ok());
    }
    // Keys retired at START+100, +200, +300; keeping 150 s at START+400 drops the first two.
    assert_eq!(
        KeySet::prune(dir.path(), 150, START + 400).expect("prune"),
        2
    );
    let keys = KeySet::load(dir.path()).expect("reload");
    assert_eq!(keys.kids().len(), 2);
    let outcomes: Vec<bool> = passes
        .iter()
        .map(|(signed_at, pass)| keys.verify_pass(pass, &EXPECT, *signed_at).is_ok())
        .collect();
    assert_eq!(outcomes, [false, false, true]);
}
