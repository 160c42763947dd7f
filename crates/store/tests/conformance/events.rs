//! Per-visitor events (SPEC §14.9): written with the change they report, unique ids, a
//! ticket's events in order, and redelivery of whatever a sink has not acknowledged, also
//! after the store is reopened.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anteroom_core::engine::{EngineError, JoinRequest, SessionEnd};
use anteroom_core::room::Mode;
use anteroom_store::{EventOutbox, OutboxEntry, OutboxLimits};
use serde_json::Value;

use super::{Backend, clock, join, reference, room, room_id, session_of};

/// Every event `sink` has not acknowledged, parsed, with its place.
async fn pending(outbox: &dyn EventOutbox, sink: &str) -> Vec<(OutboxEntry, Value)> {
    outbox
        .pending(sink, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| {
            let event = serde_json::from_slice(&entry.payload).unwrap();
            (entry, event)
        })
        .collect()
}

/// The event types of each ticket, in delivery order (passes by hand under their session).
fn histories(events: &[(OutboxEntry, Value)]) -> BTreeMap<String, Vec<String>> {
    let mut histories: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, event) in events {
        let data = &event["data"];
        let owner = data["ticket"]
            .as_str()
            .or_else(|| data["session"].as_str())
            .unwrap()
            .to_owned();
        histories
            .entry(owner)
            .or_default()
            .push(event["type"].as_str().unwrap().to_owned());
    }
    histories
}

fn types(history: &[&str]) -> Vec<String> {
    history.iter().map(|kind| (*kind).to_owned()).collect()
}

pub async fn events_are_written_with_each_change(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let outbox = store.event_outbox(OutboxLimits::default()).unwrap();
    let id = room_id("r");
    store
        .put_room(room("r", |c| {
            c.max_active = 1;
            c.identity = anteroom_core::room::Identity::Header("X-User".to_owned());
        }))
        .await
        .unwrap();
    let request = |user: &str| JoinRequest {
        identity: Some(user.to_owned()),
        ..JoinRequest::default()
    };
    let first = store.join(&id, request("ann|50%")).await.unwrap();
    let second = store.join(&id, request("bob")).await.unwrap();
    let third = store.join(&id, request("cy")).await.unwrap();
    store.leave(&id, reference(&third, 1)).await.unwrap();
    store
        .end_session(&id, session_of(&first), SessionEnd::Completed)
        .await
        .unwrap();
    let second = store.status(&id, reference(&second, 1)).await.unwrap();
    // Renewal needs more than half the session's idle lifetime to have passed.
    let ttl = store.room(&id).await.unwrap().session_ttl;
    clock.advance(ttl.mul_f64(0.6));
    let (_, renewed) = store.renew_session(&id, session_of(&second)).await.unwrap();
    assert!(renewed, "the session was renewed");
    store
        .end_session(&id, session_of(&second), SessionEnd::Revoked)
        .await
        .unwrap();

    let events = pending(&*outbox, "hook").await;
    let ticket = |entry| match entry {
        anteroom_core::engine::Entry::Waiting(view) => view.ticket.to_string(),
        anteroom_core::engine::Entry::Admitted(view) => view.ticket.to_string(),
    };
    let histories = histories(&events);
    assert_eq!(
        histories[&ticket(first.clone())],
        types(&[
            "ticket.joined",
            "ticket.admitted",
            "pass.issued",
            "session.completed"
        ])
    );
    assert_eq!(
        histories[&ticket(second.clone())],
        types(&[
            "ticket.joined",
            "ticket.admitted",
            "pass.issued",
            "session.renewed",
            "session.revoked"
        ])
    );
    assert_eq!(
        histories[&ticket(third.clone())],
        types(&["ticket.joined", "ticket.left"])
    );
    // Each event names its room, time, ticket, session and uid where they exist, position.
    let completed = events
        .iter()
        .map(|(_, event)| event)
        .find(|event| event["type"] == "session.completed")
        .unwrap();
    assert_eq!(completed["room"], "r");
    assert_eq!(completed["at"], "2023-11-14T22:13:20.000Z");
    assert_eq!(completed["data"]["ticket"], ticket(first.clone()));
    assert_eq!(completed["data"]["session"], session_of(&first).to_string());
    assert_eq!(
        completed["data"]["uid"], "ann|50%",
        "the uid as the visitor's"
    );
    assert_eq!(completed["data"]["position"], 1);
    assert_eq!(completed["data"]["generation"], 1);
    let joined = events
        .iter()
        .map(|(_, event)| event)
        .find(|event| event["type"] == "ticket.joined")
        .unwrap();
    assert!(joined["data"].get("session").is_none(), "no session yet");

    // A refused change writes no event.
    let before = events.len();
    store
        .put_room(room("r", |c| c.mode = Mode::Closed))
        .await
        .unwrap();
    assert_eq!(
        super::engine_error(store.join(&id, request("dee")).await),
        EngineError::RoomClosed
    );
    assert_eq!(pending(&*outbox, "hook").await.len(), before);
    // A pass by hand has a session and no ticket.
    store
        .put_room(room("r", |c| c.mode = Mode::Queue))
        .await
        .unwrap();
    let vip = store
        .issue_session(&id, Some("vip".to_owned()), Duration::from_secs(60))
        .await
        .unwrap();
    let last = pending(&*outbox, "hook").await.pop().unwrap().1;
    assert_eq!(last["type"], "pass.issued");
    assert_eq!(last["data"]["session"], vip.id.to_string());
    assert!(last["data"].get("ticket").is_none());
    assert_eq!(last["data"]["position"], 0);
}

/// Whether `history` is a path a ticket can take: joined, then admitted or an end; once
/// admitted, a pass or an end; once it has a pass, renewals and one session end.
fn is_a_ticket_path(history: &[String]) -> bool {
    let mut state = "new";
    for kind in history {
        state = match (state, kind.as_str()) {
            ("new", "ticket.joined") => "waiting",
            ("waiting", "ticket.admitted") => "admitted",
            ("admitted", "pass.issued") | ("session", "session.renewed") => "session",
            ("waiting" | "admitted", "ticket.left" | "ticket.reset")
            | ("waiting", "ticket.abandoned")
            | ("admitted", "ticket.no_show") => "ended",
            ("session", end) if end.starts_with("session.") => "ended",
            _ => return false,
        };
    }
    true
}

pub async fn event_ids_are_unique_and_each_ticket_in_order(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let outbox = store.event_outbox(OutboxLimits::default()).unwrap();
    let id = room_id("r");
    store
        .put_room(room("r", |c| {
            c.max_active = 3;
            c.admit_per_minute = 6_000;
            c.claim_ttl = Duration::from_secs(5);
            c.session_ttl = Duration::from_secs(20);
            c.ticket_idle_ttl = Duration::from_secs(30);
        }))
        .await
        .unwrap();
    let mut tickets = Vec::new();
    for round in 0..12_u32 {
        tickets.push(join(&*store, &id).await);
        tickets.push(join(&*store, &id).await);
        store.tick(&id).await.unwrap();
        // Some claim their pass, some leave, some are never seen again.
        for (n, entry) in tickets.iter().enumerate() {
            let n = n as u32;
            if (n + round).is_multiple_of(3) {
                let _ = store.status(&id, reference(entry, 1)).await;
            } else if (n + round).is_multiple_of(7) {
                let _ = store.leave(&id, reference(entry, 1)).await;
            }
        }
        clock.advance(Duration::from_secs(4));
    }
    clock.advance(Duration::from_secs(60));
    store.tick(&id).await.unwrap();
    store.reset(&id, false).await.unwrap();

    let events = pending(&*outbox, "hook").await;
    assert!(events.len() > 48, "{} events", events.len());
    let ids: BTreeSet<&str> = events
        .iter()
        .map(|(_, event)| event["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), events.len(), "event ids are unique");
    assert!(
        ids.iter()
            .all(|id| id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()))
    );
    // Within a partition, sequences only grow.
    let mut last_sequence: BTreeMap<&str, u64> = BTreeMap::new();
    for (entry, _) in &events {
        let last = last_sequence.entry(entry.partition.as_str()).or_insert(0);
        assert!(entry.sequence > *last, "sequences grow within a partition");
        *last = entry.sequence;
    }
    let histories = histories(&events);
    assert_eq!(histories.len(), tickets.len());
    let mut ends = BTreeSet::new();
    for (ticket, history) in &histories {
        assert!(is_a_ticket_path(history), "{ticket}: {history:?}");
        ends.insert(history.last().unwrap().clone());
    }
    // The run took tickets down every road.
    for end in [
        "ticket.left",
        "ticket.abandoned",
        "ticket.no_show",
        "session.expired",
    ] {
        assert!(ends.contains(end), "no ticket ended with {end}: {ends:?}");
    }
}

pub async fn unacknowledged_events_are_delivered_again(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let outbox = store.event_outbox(OutboxLimits::default()).unwrap();
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    for _ in 0..5 {
        join(&*store, &id).await;
    }
    let all = pending(&*outbox, "hook").await;
    assert_eq!(all.len(), 5);
    // A failed delivery acknowledges nothing: the same events come again.
    assert_eq!(pending(&*outbox, "hook").await, all);
    // The sink delivered the first two, then stopped.
    let (second, _) = &all[1];
    outbox
        .acknowledge("hook", &second.partition, second.sequence)
        .await
        .unwrap();
    assert_eq!(pending(&*outbox, "hook").await, all[2..]);
    // Acknowledgements never move back, and each sink has its own.
    let (first, _) = &all[0];
    outbox
        .acknowledge("hook", &first.partition, first.sequence)
        .await
        .unwrap();
    assert_eq!(pending(&*outbox, "hook").await, all[2..]);
    assert_eq!(pending(&*outbox, "log").await, all);
    if !backend.is_durable() {
        return;
    }
    // The node stops before the sink acknowledged the rest: they come again, and events
    // written after the restart follow them.
    drop(outbox);
    drop(store);
    let store = backend.open(clock.clone());
    let outbox = store.event_outbox(OutboxLimits::default()).unwrap();
    assert_eq!(pending(&*outbox, "hook").await, all[2..]);
    join(&*store, &id).await;
    let after = pending(&*outbox, "hook").await;
    assert_eq!(after.len(), 4);
    assert_eq!(after[3].1["type"], "ticket.joined");
    assert!(after[3].0.sequence > all[4].0.sequence);
}

pub async fn the_outbox_keeps_the_newest_events_up_to_its_cap(backend: &dyn Backend) {
    let store = backend.open(clock());
    let outbox = store
        .event_outbox(OutboxLimits { max_entries: 10 })
        .unwrap();
    let id = room_id("r");
    store
        .put_room(room("r", |c| c.mode = Mode::QueueAll))
        .await
        .unwrap();
    for _ in 0..30 {
        join(&*store, &id).await;
    }
    // A receiver gone for long: its sink never acknowledges. Some backends apply the cap as
    // they write, the embedded store as it prunes (every 30 s under the sinks).
    outbox.prune(&["hook"]).await.unwrap();
    let kept = pending(&*outbox, "hook").await;
    assert_eq!(kept.len(), 10, "the cap holds");
    let sequences: Vec<u64> = kept.iter().map(|(entry, _)| entry.sequence).collect();
    assert_eq!(
        sequences,
        (21..=30).collect::<Vec<_>>(),
        "the oldest went first"
    );
    // Delivery goes on from the oldest event kept.
    let (last, _) = kept.last().unwrap();
    outbox
        .acknowledge("hook", &last.partition, last.sequence)
        .await
        .unwrap();
    join(&*store, &id).await;
    assert_eq!(pending(&*outbox, "hook").await.len(), 1);
}
