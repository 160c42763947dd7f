//! Priority access codes (SPEC §12) on every backend: a valid code puts a new ticket in the
//! priority lane, admitted before the regular line but within the same capacity (I2) and pace
//! (I3); a wrong or used-up code is refused and changes nothing; uses are counted atomically
//! and survive reopening.

use std::time::Duration;

use anteroom_core::engine::{EngineError, Entry, JoinRequest, TicketRef};
use anteroom_core::room::{PriorityCodes, priority_code_hash};
use anteroom_core::{RoomId, TicketId};
use anteroom_store::RoomStore;

use super::{Backend, ahead, clock, engine_error, join, room, room_id};

fn coded(code: &str) -> JoinRequest {
    JoinRequest {
        priority_code: Some(code.to_owned()),
        ..JoinRequest::default()
    }
}

fn ticket_of(entry: &Entry) -> TicketId {
    match entry {
        Entry::Waiting(view) => view.ticket,
        Entry::Admitted(view) => view.ticket,
    }
}

async fn refused_without_change(store: &dyn RoomStore, id: &RoomId, code: &str) {
    let before = store.snapshot(id).await.unwrap();
    assert_eq!(
        engine_error(store.join(id, coded(code)).await),
        EngineError::InvalidPriorityCode,
        "code {code:?}"
    );
    assert_eq!(store.snapshot(id).await.unwrap(), before, "code {code:?}");
}

pub async fn priority_codes_jump_the_line_within_the_limits(backend: &dyn Backend) {
    let clock = clock();
    let store = backend.open(clock.clone());
    let id = room_id("vip");
    store
        .put_room(room("vip", |c| {
            c.max_active = 2;
            c.admit_per_minute = 60;
            c.admit_burst = 1;
            c.priority = vec![
                PriorityCodes {
                    hashes: vec![priority_code_hash("vip-1"), priority_code_hash("vip-2")],
                    uses: 1,
                },
                PriorityCodes {
                    hashes: vec![priority_code_hash("team")],
                    uses: 2,
                },
            ];
        }))
        .await
        .unwrap();
    let first = join(&*store, &id).await;
    assert!(
        matches!(first, Entry::Admitted(_)),
        "nobody waits: in at once"
    );
    let regular: Vec<Entry> = [
        join(&*store, &id).await,
        join(&*store, &id).await,
        join(&*store, &id).await,
    ]
    .into();
    refused_without_change(&*store, &id, "nope").await;
    let vip = store.join(&id, coded("vip-1")).await.unwrap();
    assert_eq!(ahead(&vip), 0, "the priority lane is empty ahead of it");
    refused_without_change(&*store, &id, "vip-1").await;
    let team_a = store.join(&id, coded("team")).await.unwrap();
    let team_b = store.join(&id, coded("team")).await.unwrap();
    assert_eq!(ahead(&team_b), 2);
    refused_without_change(&*store, &id, "team").await;
    // A regular ticket's `ahead` does not grow because of the lane (I5).
    let second = store
        .status(&id, super::reference(&regular[0], 1))
        .await
        .unwrap();
    assert_eq!(ahead(&second), 0);
    // Resuming a held ticket never spends a code, used up or not.
    let resumed = store
        .join(
            &id,
            JoinRequest {
                resume: Some(super::reference(&vip, 1)),
                priority_code: Some("vip-1".to_owned()),
                ..JoinRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ticket_of(&resumed), ticket_of(&vip));

    let mut order = vec![ticket_of(&first)];
    let mut held = vec![super::session_of(&first)];
    let expected: Vec<TicketId> = [&first, &vip, &team_a, &team_b]
        .into_iter()
        .chain(regular.iter())
        .map(ticket_of)
        .collect();
    let waiting: Vec<TicketId> = expected[1..].to_vec();
    for _ in 0..40 {
        if order.len() == expected.len() {
            break;
        }
        clock.advance(Duration::from_millis(500));
        let report = store.tick(&id).await.unwrap();
        assert!(report.admitted <= 1, "one a second at most (I3)");
        let snapshot = store.snapshot(&id).await.unwrap();
        assert!(snapshot.active + snapshot.admitted_unclaimed <= 2, "I2");
        for ticket in &waiting {
            if order.contains(ticket) {
                continue;
            }
            let reference = TicketRef {
                id: *ticket,
                generation: 1,
            };
            if let Entry::Admitted(view) = store.status(&id, reference).await.unwrap() {
                order.push(*ticket);
                held.push(view.session.id);
            }
        }
        // Sessions end now and then, so capacity, not only pace, holds the line back.
        if held.len() >= 2 {
            let session = held.remove(0);
            store
                .end_session(&id, session, anteroom_core::engine::SessionEnd::Completed)
                .await
                .unwrap();
        }
    }
    assert_eq!(order, expected, "the priority lane first, then the line");

    if backend.is_durable() {
        drop(store);
        let store = backend.open(clock.clone());
        refused_without_change(&*store, &id, "vip-1").await;
        refused_without_change(&*store, &id, "team").await;
        assert!(store.join(&id, coded("vip-2")).await.is_ok());
    }
}
