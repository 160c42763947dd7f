//! The event outbox on every backend, through the node's own events (`append`): order,
//! per-sink progress, pruning, the cap, and (for the embedded store and Redis) durability
//! across reopening. Events written by the stores themselves are in the conformance suite.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use anteroom_core::ManualClock;
use anteroom_store::{
    EventOutbox, MemoryOutbox, OutboxLimits, RedbStore, RedisConfig, RedisOutbox, RoomStore,
};
use anteroom_test_support::redis::{shared_server, unique_prefix};

fn payloads(range: std::ops::RangeInclusive<u32>) -> Vec<Vec<u8>> {
    range
        .map(|n| format!("{{\"n\":{n}}}").into_bytes())
        .collect()
}

fn sequences(entries: &[anteroom_store::OutboxEntry]) -> Vec<u64> {
    entries.iter().map(|entry| entry.sequence).collect()
}

async fn check_delivery(outbox: &dyn EventOutbox) {
    assert_eq!(outbox.append(Vec::new()).await.unwrap(), 0);
    assert_eq!(outbox.append(payloads(1..=5)).await.unwrap(), 5);
    assert_eq!(outbox.append(payloads(6..=7)).await.unwrap(), 7);
    let first = outbox.pending("hook", 3).await.unwrap();
    assert_eq!(sequences(&first), [1, 2, 3]);
    assert_eq!(first[0].payload, b"{\"n\":1}");
    // Nothing moves until the sink acknowledges: a failed delivery is read again.
    assert_eq!(
        sequences(&outbox.pending("hook", 3).await.unwrap()),
        [1, 2, 3]
    );
    outbox.acknowledge("hook", "", 3).await.unwrap();
    assert_eq!(
        sequences(&outbox.pending("hook", 10).await.unwrap()),
        [4, 5, 6, 7]
    );
    // Acknowledgements never move back; sinks progress independently.
    outbox.acknowledge("hook", "", 2).await.unwrap();
    assert_eq!(sequences(&outbox.pending("hook", 1).await.unwrap()), [4]);
    assert_eq!(sequences(&outbox.pending("log", 2).await.unwrap()), [1, 2]);
    // Pruning keeps what any sink still needs.
    outbox.acknowledge("log", "", 1).await.unwrap();
    assert_eq!(outbox.prune(&["hook", "log"]).await.unwrap(), 1);
    assert_eq!(
        sequences(&outbox.pending("log", 10).await.unwrap()),
        [2, 3, 4, 5, 6, 7]
    );
    outbox.acknowledge("log", "", 7).await.unwrap();
    outbox.acknowledge("hook", "", 7).await.unwrap();
    assert_eq!(outbox.prune(&["hook", "log"]).await.unwrap(), 6);
    assert!(outbox.pending("hook", 10).await.unwrap().is_empty());
    // Sequences go on after pruning.
    assert_eq!(outbox.append(payloads(8..=8)).await.unwrap(), 8);
    assert_eq!(sequences(&outbox.pending("hook", 10).await.unwrap()), [8]);
}

async fn check_cap(outbox: &dyn EventOutbox) {
    outbox.append(payloads(1..=10)).await.unwrap();
    // Some outboxes apply the cap as they append, the embedded store's as it prunes.
    outbox.prune(&["slow"]).await.unwrap();
    assert_eq!(
        sequences(&outbox.pending("slow", 100).await.unwrap()),
        [7, 8, 9, 10],
        "past the cap the oldest go"
    );
}

#[tokio::test]
async fn memory_outbox_delivers_in_order_per_sink() {
    check_delivery(&MemoryOutbox::default()).await;
    check_cap(&MemoryOutbox::new(OutboxLimits { max_entries: 4 })).await;
}

fn embedded_store(path: &std::path::Path) -> RedbStore {
    RedbStore::open(
        path,
        Arc::new(ManualClock::new(anteroom_core::Timestamp(1_000))),
    )
    .unwrap()
}

#[tokio::test]
async fn the_embedded_stores_outbox_delivers_in_order_per_sink() {
    let dir = tempfile::tempdir().unwrap();
    let store = embedded_store(&dir.path().join("a.redb"));
    check_delivery(&*store.event_outbox(OutboxLimits::default()).unwrap()).await;
    let store = embedded_store(&dir.path().join("b.redb"));
    check_cap(&*store.event_outbox(OutboxLimits { max_entries: 4 }).unwrap()).await;
}

#[tokio::test]
async fn the_embedded_stores_outbox_keeps_events_and_progress_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    {
        let store = embedded_store(&path);
        let outbox = store.event_outbox(OutboxLimits::default()).unwrap();
        outbox.append(payloads(1..=4)).await.unwrap();
        outbox.acknowledge("hook", "", 2).await.unwrap();
    }
    let store = embedded_store(&path);
    let outbox = store.event_outbox(OutboxLimits::default()).unwrap();
    assert_eq!(
        sequences(&outbox.pending("hook", 10).await.unwrap()),
        [3, 4]
    );
    assert_eq!(outbox.append(payloads(5..=5)).await.unwrap(), 5);
}

fn redis_outbox(prefix: &str, limits: OutboxLimits) -> RedisOutbox {
    let config = RedisConfig::standalone(shared_server().url()).with_key_prefix(prefix);
    RedisOutbox::new(&config, limits).unwrap()
}

#[tokio::test]
async fn redis_outbox_delivers_in_order_per_sink() {
    check_delivery(&redis_outbox(&unique_prefix(), OutboxLimits::default())).await;
    check_cap(&redis_outbox(
        &unique_prefix(),
        OutboxLimits { max_entries: 4 },
    ))
    .await;
}

#[tokio::test]
async fn redis_outbox_is_shared_by_every_node() {
    let prefix = unique_prefix();
    let one = redis_outbox(&prefix, OutboxLimits::default());
    let other = redis_outbox(&prefix, OutboxLimits::default());
    one.append(payloads(1..=2)).await.unwrap();
    assert_eq!(other.append(payloads(3..=3)).await.unwrap(), 3);
    other.acknowledge("hook", "", 2).await.unwrap();
    assert_eq!(sequences(&one.pending("hook", 10).await.unwrap()), [3]);
}
