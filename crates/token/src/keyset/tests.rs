//! Loading, generating, rotating and pruning key directories.

use std::fs;
use std::path::Path;

use super::*;
use crate::fixtures::{self, EXPECT, NOW};

/// How long a retired ticket secret verifies in these tests.
const RETENTION: Duration = Duration::from_secs(600);

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8")
        })
        .collect();
    names.sort();
    names
}

/// Loads `dir` and checks that it fails with a corrupt-file error naming `file`.
fn check_corrupt(dir: &Path, file: &str) {
    match KeySet::load(dir) {
        Err(error @ TokenError::CorruptKeyFile { .. }) => {
            let message = error.to_string();
            assert!(message.contains(file), "{message:?} names {file}");
        }
        other => panic!("expected a corrupt {file}, got {other:?}"),
    }
}

#[test]
fn generates_the_layout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key_dir = dir.path().join("keys");
    let keys = KeySet::load_or_generate(&key_dir, SigningAlgorithm::EdDsa, NOW).expect("keys");
    let kid = keys.active_kid().to_owned();
    assert!(key_dir::is_valid_kid(&kid) && kid.len() == 11, "{kid}");
    let mut expected = vec![
        format!("{kid}.eddsa.pem"),
        "active".into(),
        "ticket.key".into(),
    ];
    expected.sort();
    assert_eq!(file_names(&key_dir), expected);
    assert_eq!(
        fs::read_to_string(key_dir.join("active")).expect("active"),
        format!("{kid}\n")
    );
    let pem = fs::read_to_string(key_dir.join(format!("{kid}.eddsa.pem"))).expect("pem");
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
    assert_eq!(keys.kids(), [kid]);
}

#[cfg(unix)]
#[test]
fn files_are_owner_only() {
    use std::os::unix::fs::PermissionsExt as _;

    let dir = tempfile::tempdir().expect("tempdir");
    let key_dir = dir.path().join("keys");
    KeySet::load_or_generate(&key_dir, SigningAlgorithm::Hs256, NOW).expect("keys");
    KeySet::rotate(&key_dir, SigningAlgorithm::EdDsa, RETENTION, NOW).expect("rotate");
    let mode = |path: &Path| fs::metadata(path).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&key_dir), 0o700);
    for name in file_names(&key_dir) {
        assert_eq!(mode(&key_dir.join(&name)), 0o600, "{name}");
    }
}

#[test]
fn loading_again_reuses_the_keys() {
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::Es256);
    let before = file_names(dir.path());
    let again =
        KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, NOW + 1).expect("keys");
    assert_eq!(again.active_kid(), keys.active_kid());
    assert_eq!(
        again.algorithm(),
        SigningAlgorithm::Es256,
        "existing key kept"
    );
    assert_eq!(file_names(dir.path()), before, "nothing written");
    let token = keys.sign_pass(&fixtures::claims()).expect("sign");
    assert!(again.verify_pass(&token, &EXPECT, NOW).is_ok());
    let ticket = fixtures_ticket();
    let signed = keys.ticket_signer().sign(&ticket);
    assert_eq!(
        again.ticket_signer().verify(&signed, "launch", NOW),
        Ok(ticket)
    );
}

fn fixtures_ticket() -> crate::TicketClaims {
    crate::TicketClaims {
        room: "launch".into(),
        ticket_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
        position: 9,
        generation: 1,
    }
}

#[test]
fn load_needs_a_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        KeySet::load(dir.path()),
        Err(TokenError::NoSigningKey { .. })
    ));
    assert!(matches!(
        KeySet::load(&dir.path().join("missing")),
        Err(TokenError::Io { .. })
    ));
    assert!(file_names(dir.path()).is_empty(), "load writes nothing");
}

#[test]
fn load_needs_the_ticket_secret() {
    let (dir, _keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    fs::remove_file(dir.path().join("ticket.key")).expect("remove");
    let error = KeySet::load(dir.path()).expect_err("no ticket key");
    assert!(
        matches!(error, TokenError::MissingTicketKey { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("ticket.key"));
    // load_or_generate makes a new one.
    KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, NOW).expect("keys");
    assert!(dir.path().join("ticket.key").is_file());
}

#[test]
fn corrupt_files_are_named() {
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let kid = keys.active_kid().to_owned();
    let key_file = format!("{kid}.eddsa.pem");
    let original = fs::read_to_string(dir.path().join(&key_file)).expect("pem");

    fs::write(dir.path().join(&key_file), "not a key").expect("write");
    check_corrupt(dir.path(), &key_file);
    // An ES256 key under an EdDSA name is corrupt too.
    fs::write(
        dir.path().join(&key_file),
        keys::generate(SigningAlgorithm::Es256).expect("key"),
    )
    .expect("write");
    check_corrupt(dir.path(), &key_file);
    fs::write(dir.path().join(&key_file), &original).expect("write");

    for (file, content) in [
        ("ticket.key", "short"),
        ("ticket.key", "!!!"),
        ("active", "not a kid!"),
        ("active", "unknownkid"),
        ("old.retired", "yesterday"),
        ("bad!kid.eddsa.pem", "x"),
        ("weak.hs256.key", "c2hvcnQ"),
    ] {
        let path = dir.path().join(file);
        let saved = fs::read(&path).ok();
        fs::write(&path, content).expect("write");
        check_corrupt(dir.path(), file);
        match saved {
            Some(saved) => fs::write(&path, saved).expect("restore"),
            None => fs::remove_file(&path).expect("remove"),
        }
    }
    KeySet::load(dir.path()).expect("restored directory loads");
}

#[test]
fn two_files_with_one_kid_are_refused() {
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let kid = keys.active_kid();
    let name = format!("{kid}.es256.pem");
    fs::write(
        dir.path().join(&name),
        keys::generate(SigningAlgorithm::Es256).expect("key"),
    )
    .expect("write");
    let error = KeySet::load(dir.path()).expect_err("duplicate kid");
    assert!(error.to_string().contains(kid), "{error}");
}

#[test]
fn foreign_files_are_ignored() {
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    fs::write(dir.path().join("README"), "keys live here").expect("write");
    fs::write(dir.path().join(".abc.eddsa.pem.tmp"), "partial").expect("write");
    fs::write(dir.path().join(".hidden.eddsa.pem"), "partial").expect("write");
    fs::create_dir(dir.path().join("backup.eddsa.pem")).expect("mkdir");
    let again = KeySet::load(dir.path()).expect("keys");
    assert_eq!(again.kids(), keys.kids());
}

#[test]
fn missing_active_file_is_recovered() {
    // A crash after the first key was written but before `active` was.
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    fs::remove_file(dir.path().join("active")).expect("remove");
    assert_eq!(
        KeySet::load(dir.path()).expect("keys").active_kid(),
        keys.active_kid()
    );
    KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, NOW).expect("keys");
    assert!(dir.path().join("active").is_file(), "active file rewritten");
}

#[test]
fn ambiguous_active_key_is_an_error() {
    let (dir, _keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let stray = format!("{}.eddsa.pem", "strayKey");
    fs::write(
        dir.path().join(stray),
        keys::generate(SigningAlgorithm::EdDsa).expect("key"),
    )
    .expect("write");
    fs::remove_file(dir.path().join("active")).expect("remove");
    assert!(matches!(
        KeySet::load(dir.path()),
        Err(TokenError::NoActiveKey { .. })
    ));
}

#[test]
fn stray_keys_are_retired_and_verify() {
    // A key copied in by hand (or left by an interrupted rotation) verifies and is retired.
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let (_other_dir, other) = fixtures::key_set(SigningAlgorithm::Es256);
    let other_kid = other.active_kid().to_owned();
    let name = format!("{other_kid}.es256.pem");
    fs::copy(_other_dir.path().join(&name), dir.path().join(&name)).expect("copy");

    let merged = KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, NOW).expect("keys");
    assert_eq!(merged.active_kid(), keys.active_kid());
    assert_eq!(
        merged.kids(),
        [keys.active_kid().to_owned(), other_kid.clone()]
    );
    let token = other.sign_pass(&fixtures::claims()).expect("sign");
    assert!(merged.verify_pass(&token, &EXPECT, NOW).is_ok());
    assert_eq!(
        fs::read_to_string(dir.path().join(format!("{other_kid}.retired"))).expect("record"),
        format!("{NOW}\n")
    );
}

#[test]
fn rotate_on_an_empty_directory_makes_the_first_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = KeySet::rotate(dir.path(), SigningAlgorithm::Hs256, RETENTION, NOW).expect("rotate");
    assert_eq!(keys.algorithm(), SigningAlgorithm::Hs256);
    assert_eq!(keys.kids().len(), 1);
    // Nothing was signed before, so the first ticket secret is the original one.
    assert!(dir.path().join("ticket.key").is_file());
    assert!(!dir.path().join("ticket.active").exists());
}

/// The id of the ticket secret `ticket.active` names.
fn signing_ticket_secret(dir: &Path) -> String {
    fs::read_to_string(dir.join("ticket.active"))
        .expect("ticket.active")
        .trim()
        .to_owned()
}

#[test]
fn rotation_writes_the_ticket_secret_layout() {
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let old_kid = keys.active_kid().to_owned();
    let rotated =
        KeySet::rotate(dir.path(), SigningAlgorithm::EdDsa, RETENTION, NOW).expect("rotate");
    let id = signing_ticket_secret(dir.path());
    assert!(key_dir::is_valid_kid(&id) && id.len() == 11, "{id}");
    let mut expected = vec![
        format!("{old_kid}.eddsa.pem"),
        format!("{old_kid}.retired"),
        format!("{}.eddsa.pem", rotated.active_kid()),
        "active".to_owned(),
        "ticket.active".to_owned(),
        "ticket.expires".to_owned(),
        "ticket.key".to_owned(),
        format!("ticket.{id}.key"),
    ];
    expected.sort();
    assert_eq!(file_names(dir.path()), expected);
    assert_eq!(
        fs::read_to_string(dir.path().join("ticket.expires")).expect("record"),
        format!("{}\n", NOW + RETENTION.as_secs())
    );

    // A second rotation retires the named secret with a record of its own.
    KeySet::rotate(dir.path(), SigningAlgorithm::EdDsa, RETENTION, NOW + 1).expect("rotate");
    assert_ne!(signing_ticket_secret(dir.path()), id);
    assert_eq!(
        fs::read_to_string(dir.path().join(format!("ticket.{id}.expires"))).expect("record"),
        format!("{}\n", NOW + 1 + RETENTION.as_secs())
    );
}

#[test]
fn an_interrupted_ticket_rotation_leaves_the_old_secret_signing() {
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let ticket = fixtures_ticket();
    let token = keys.ticket_signer().sign(&ticket);
    // A crash after the new secret and the old one's record were written, before
    // `ticket.active` switched: the new secret is unused, the old one still signs, and its
    // record does not make it stop verifying.
    write_ticket_secret(dir.path(), &SecretId::Named("newSecret01".into())).expect("secret");
    fs::write(dir.path().join("ticket.expires"), format!("{NOW}\n")).expect("record");
    let keys = KeySet::load(dir.path()).expect("loads");
    assert!(keys.ticket_signer().sign(&ticket).starts_with("t1."));
    assert_eq!(
        keys.ticket_signer()
            .verify(&token, "launch", NOW + 1_000_000),
        Ok(ticket.clone())
    );
    // A secret that never signed verifies nothing.
    let stray = TicketSigner::from_secrets(&crate::ticket_secrets::TicketSecrets {
        signing: crate::ticket_secrets::TicketSecret {
            id: SecretId::Named("newSecret01".into()),
            bytes: read_secret(dir.path(), "ticket.newSecret01.key"),
        },
        retired: Vec::new(),
    });
    let forged = stray.sign(&ticket);
    assert_eq!(
        keys.ticket_signer().verify(&forged, "launch", NOW),
        Err(crate::TicketTokenError::Invalid)
    );
    // Nor does a start or prune delete the signing secret for its stale record.
    KeySet::load_or_generate(dir.path(), SigningAlgorithm::EdDsa, NOW + 1_000_000).expect("start");
    assert!(dir.path().join("ticket.key").is_file());
}

fn read_secret(dir: &Path, name: &str) -> [u8; keys::SECRET_LEN] {
    let text = fs::read_to_string(dir.join(name)).expect("secret file");
    keys::decode_secret(&text)
        .expect("base64url")
        .try_into()
        .expect("32 bytes")
}

#[test]
fn corrupt_ticket_secret_files_are_named() {
    let (dir, _keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    KeySet::rotate(dir.path(), SigningAlgorithm::EdDsa, RETENTION, NOW).expect("rotate");
    let id = signing_ticket_secret(dir.path());
    for (file, content) in [
        ("ticket.active", "not an id!"),
        ("ticket.active", "missingSecret"),
        ("ticket.expires", "soon"),
        (format!("ticket.{id}.key").as_str(), "c2hvcnQ"),
        ("ticket.bad!id.key", "x"),
    ] {
        let path = dir.path().join(file);
        let saved = fs::read(&path).ok();
        fs::write(&path, content).expect("write");
        check_corrupt(dir.path(), file);
        match saved {
            Some(saved) => fs::write(&path, saved).expect("restore"),
            None => fs::remove_file(&path).expect("remove"),
        }
    }
    KeySet::load(dir.path()).expect("restored directory loads");
}

#[test]
fn prune_keeps_the_active_key() {
    let (dir, keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    // Even a stale retirement record on the active key does not get it deleted.
    fs::write(
        dir.path().join(format!("{}.retired", keys.active_kid())),
        "0",
    )
    .expect("write");
    let report = KeySet::prune(dir.path(), 0, NOW).expect("prune");
    assert!(report.removed.is_empty());
    assert_eq!(
        report.kept,
        [(keys.active_kid().to_owned(), crate::KeptBecause::Active)]
    );
    KeySet::load(dir.path()).expect("active key still there");
}

#[test]
fn prune_removes_orphan_records() {
    let (dir, _keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    fs::write(dir.path().join("gone.retired"), "5").expect("write");
    assert!(
        KeySet::prune(dir.path(), 10, NOW)
            .expect("prune")
            .removed
            .is_empty()
    );
    assert!(!dir.path().join("gone.retired").exists());
}

#[test]
fn debug_shows_ids_not_secrets() {
    let (_dir, keys) = fixtures::key_set(SigningAlgorithm::Hs256);
    let debug = format!("{keys:?}");
    assert!(debug.contains(keys.active_kid()), "{debug}");
    assert!(debug.contains("HS256"), "{debug}");
}

#[test]
fn key_set_is_shareable() {
    fn assert_shareable<T: Clone + Send + Sync + 'static>() {}
    assert_shareable::<KeySet>();
    assert_shareable::<TicketSigner>();
}

#[test]
fn prune_keeps_a_key_while_a_pass_it_signed_can_verify() {
    let (dir, first) = fixtures::key_set(SigningAlgorithm::EdDsa);
    // Signed the second before the rotation, so it lives the longest of any pass of this key.
    let rotated_at = NOW + 1;
    let last_pass = first.sign_pass(&fixtures::claims()).expect("sign");
    KeySet::rotate(dir.path(), SigningAlgorithm::EdDsa, RETENTION, rotated_at).expect("rotate");
    let keep = crate::prune_horizon_secs(fixtures::TTL);
    let last_valid_second = NOW + fixtures::TTL + crate::LEEWAY_SECS - 1;

    let report = KeySet::prune(dir.path(), keep, last_valid_second).expect("prune");
    assert!(report.removed.is_empty(), "{report:?}");
    let keys = KeySet::load(dir.path()).expect("load");
    assert!(
        keys.verify_pass(&last_pass, &EXPECT, last_valid_second)
            .is_ok()
    );

    let report = KeySet::prune(dir.path(), keep, rotated_at + keep).expect("prune");
    assert_eq!(report.removed, [first.active_kid().to_owned()]);
    assert_eq!(
        KeySet::load(dir.path()).expect("load").kids().len(),
        1,
        "the pruned key left the set"
    );
}

#[test]
fn prune_records_a_stray_key_and_keeps_it() {
    let (dir, _keys) = fixtures::key_set(SigningAlgorithm::EdDsa);
    let stray = keys::generate(SigningAlgorithm::EdDsa).expect("key");
    fs::write(dir.path().join("stray.eddsa.pem"), stray).expect("write");
    let report = KeySet::prune(dir.path(), 10, NOW + 5).expect("prune");
    assert!(report.removed.is_empty());
    assert_eq!(
        report.kept[1],
        (
            "stray".to_owned(),
            crate::KeptBecause::PassesMayBeValid {
                retired_at: NOW + 5,
                prunable_at: NOW + 15
            }
        )
    );
    let report = KeySet::prune(dir.path(), 10, NOW + 15).expect("prune");
    assert_eq!(report.removed, ["stray"]);
}

#[test]
fn records_hold_a_key_set_and_report_what_changed() {
    let records = crate::KeyRecords::new("shared", Default::default());
    let first = KeySet::load_or_generate(&records, SigningAlgorithm::EdDsa, NOW).expect("keys");
    let created = records.changes();
    assert!(created.values().all(Option::is_some), "{created:?}");
    assert!(created.contains_key("ticket.key"));

    let rotated =
        KeySet::rotate(&records, SigningAlgorithm::Es256, RETENTION, NOW + 1).expect("rotate");
    assert_eq!(rotated.kids().len(), 2);
    let retired = format!("{}.retired", first.active_kid());
    assert_eq!(records.changes()[&retired].as_deref(), Some("1700000001\n"));

    let report = KeySet::prune(&records, 10, NOW + 11).expect("prune");
    assert_eq!(report.removed, [first.active_kid().to_owned()]);
    let changes = records.changes();
    assert_eq!(
        changes[&retired], None,
        "removed entries are recorded as removed"
    );
    assert_eq!(changes[&format!("{}.eddsa.pem", first.active_kid())], None);
    let reloaded = KeySet::load(&records).expect("load");
    assert_eq!(reloaded.kids(), [rotated.active_kid().to_owned()]);

    // A corrupt entry is named by the records' label.
    let corrupt = crate::KeyRecords::new(
        "shared",
        [("active".to_owned(), "not a kid!".to_owned())].into(),
    );
    let error = KeySet::load(&corrupt).expect_err("corrupt");
    assert!(error.to_string().contains("shared entry active"), "{error}");
}
