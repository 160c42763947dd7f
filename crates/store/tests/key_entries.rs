//! The shared key set's entries in Redis: read whole at one version, changed only from the
//! version read, so two nodes changing them at once cannot interleave.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use anteroom_store::{KeyEntries, RedisConfig, RedisKeyEntries};
use anteroom_test_support::redis::{shared_server, unique_prefix};

fn entries(prefix: &str) -> RedisKeyEntries {
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix);
    RedisKeyEntries::new(&config).unwrap()
}

fn changes(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
    pairs
        .iter()
        .map(|(name, text)| ((*name).to_owned(), text.map(str::to_owned)))
        .collect()
}

#[tokio::test]
async fn changes_apply_whole_and_only_from_the_version_read() {
    let prefix = unique_prefix();
    let one = entries(&prefix);
    let other = entries(&prefix);
    assert_eq!(one.load().await.unwrap(), KeyEntries::default());

    let first = changes(&[("active", Some("a")), ("a.eddsa.pem", Some("sealed"))]);
    assert!(one.apply(0, &first).await.unwrap());
    let seen = other.load().await.unwrap();
    assert_eq!(seen.version, 1);
    assert_eq!(seen.entries.len(), 2);
    assert_eq!(seen.entries["active"], "a");
    assert_eq!(other.version().await.unwrap(), 1);

    // A change made from an older version is refused and writes nothing.
    let stale = changes(&[("active", Some("b")), ("a.eddsa.pem", None)]);
    assert!(!one.apply(0, &stale).await.unwrap());
    assert_eq!(other.load().await.unwrap(), seen);

    assert!(one.apply(1, &stale).await.unwrap());
    let after = other.load().await.unwrap();
    assert_eq!(after.version, 2);
    assert_eq!(
        after.entries,
        BTreeMap::from([("active".to_owned(), "b".to_owned())])
    );
    assert_eq!(
        one.entries_key(),
        format!("{prefix}:{{keys}}:entries"),
        "one cluster slot"
    );
}
