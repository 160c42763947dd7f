//! The Redis waiting line (layout 3: ids in the line buckets, an id index of listpack hashes,
//! a count tree per lane) against a plain model of the line: under random joins (either lane,
//! in batches), status calls, leaves, admissions by hand and idle sweeps, every ticket's
//! position and `ahead` (I5) and the line's contents are the model's.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use anteroom_core::engine::{Entry, JoinRequest, TicketRef, TicketState};
use anteroom_core::room::{PriorityCodes, RoomConfig, priority_code_hash};
use anteroom_core::{Clock, ManualClock, RoomId, Timestamp};
use anteroom_store::{RedisConfig, RedisStore, RoomStore};
use anteroom_test_support::redis::{shared_server, unique_prefix};
use futures_util::future::join_all;
use proptest::prelude::*;

const IDLE_MS: u64 = 5_000;

#[derive(Clone, Debug)]
enum Step {
    /// `count` joins sent at once (so they go in few calls), all in one lane.
    Join {
        count: usize,
        priority: bool,
    },
    /// A status call for the live ticket at this index (modulo the line).
    Status(usize),
    Leave(usize),
    /// The operator admits this many, priority lane first, lowest positions first.
    Advance(u64),
    /// Time passes, then a tick abandons the tickets idle since `IDLE_MS` and admits what the
    /// bucket allows.
    Tick {
        wait_ms: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (1usize..48, prop::bool::weighted(0.2))
            .prop_map(|(count, priority)| Step::Join { count, priority }),
        3 => any::<usize>().prop_map(Step::Status),
        2 => any::<usize>().prop_map(Step::Leave),
        1 => (0u64..40).prop_map(Step::Advance),
        1 => (0u64..4_000).prop_map(|wait_ms| Step::Tick { wait_ms }),
    ]
}

/// A waiting ticket as the model keeps it.
#[derive(Clone, Debug)]
struct Waiting {
    ticket: TicketRef,
    position: u64,
    priority: bool,
    last_seen: u64,
}

/// The model: the live waiting tickets in position order.
struct Line {
    tickets: Vec<Waiting>,
}

impl Line {
    fn ahead(&self, of: &Waiting) -> u64 {
        self.tickets
            .iter()
            .filter(|other| other.priority == of.priority && other.position < of.position)
            .count() as u64
    }

    /// The next `count` to admit: the priority lane first, each lane by position.
    fn first(&self, count: u64) -> Vec<Waiting> {
        let mut order = self.tickets.clone();
        order.sort_by_key(|ticket| (!ticket.priority, ticket.position));
        order.truncate(count as usize);
        order
    }

    fn remove(&mut self, gone: &[Waiting]) {
        self.tickets
            .retain(|ticket| !gone.iter().any(|other| other.ticket.id == ticket.ticket.id));
    }
}

struct Room {
    store: RedisStore,
    clock: Arc<ManualClock>,
    id: RoomId,
}

impl Room {
    async fn new() -> Room {
        let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
        let shared: Arc<dyn Clock> = clock.clone();
        let config =
            RedisConfig::standalone(shared_server().url()).with_key_prefix(unique_prefix());
        let store = RedisStore::new(config, Some(shared)).unwrap();
        let id = RoomId::new("model").unwrap();
        let mut room = RoomConfig::with_defaults(id.clone());
        // Slots to spare, and an admission bucket that fills slowly: admissions are mostly by
        // `advance`, now and then by a tick or a join into an empty line.
        room.max_active = 100_000;
        room.admit_per_minute = 1;
        room.admit_burst = 1;
        room.ticket_idle_ttl = Duration::from_millis(IDLE_MS);
        room.priority = vec![PriorityCodes {
            hashes: vec![priority_code_hash("vip")],
            uses: 100_000,
        }];
        store.put_room(room).await.unwrap();
        Room { store, clock, id }
    }

    fn now(&self) -> u64 {
        self.clock.now().0
    }

    async fn join(&self, line: &mut Line, count: usize, priority: bool) {
        let request = JoinRequest {
            priority_code: priority.then(|| "vip".to_owned()),
            ..JoinRequest::default()
        };
        let joins = (0..count).map(|_| self.store.join(&self.id, request.clone()));
        let mut views = Vec::new();
        for answer in join_all(joins).await {
            match answer.unwrap() {
                Entry::Waiting(view) => views.push(view),
                // Nobody waited and the bucket held a token.
                Entry::Admitted(_) => assert!(line.tickets.is_empty()),
            }
        }
        for view in &views {
            line.tickets.push(Waiting {
                ticket: TicketRef {
                    id: view.ticket,
                    generation: view.generation,
                },
                position: view.position,
                priority,
                last_seen: self.now(),
            });
        }
        line.tickets.sort_by_key(|ticket| ticket.position);
        for view in &views {
            let model = line.tickets.iter().find(|t| t.ticket.id == view.ticket);
            assert_eq!(view.ahead, line.ahead(model.unwrap()), "{view:?}");
        }
    }

    async fn status(&self, line: &mut Line, index: usize) {
        if line.tickets.is_empty() {
            return;
        }
        let index = index % line.tickets.len();
        let Entry::Waiting(view) = self
            .store
            .status(&self.id, line.tickets[index].ticket)
            .await
            .unwrap()
        else {
            panic!("a waiting ticket was admitted");
        };
        let model = &line.tickets[index];
        assert_eq!(
            (view.position, view.ahead, view.waiting),
            (model.position, line.ahead(model), line.tickets.len() as u64)
        );
        line.tickets[index].last_seen = self.now();
    }

    async fn leave(&self, line: &mut Line, index: usize) {
        if line.tickets.is_empty() {
            return;
        }
        let gone = line.tickets.remove(index % line.tickets.len());
        self.store.leave(&self.id, gone.ticket).await.unwrap();
    }

    async fn advance(&self, line: &mut Line, count: u64) {
        let admitted = line.first(count);
        let (done, _) = self.store.advance(&self.id, count).await.unwrap();
        assert_eq!(done, admitted.len() as u64);
        line.remove(&admitted);
    }

    async fn tick(&self, line: &mut Line, wait_ms: u64) {
        self.clock.advance(Duration::from_millis(wait_ms));
        let now = self.now();
        let idle: Vec<Waiting> = line
            .tickets
            .iter()
            .filter(|ticket| ticket.last_seen + IDLE_MS <= now)
            .cloned()
            .collect();
        let report = self.store.tick(&self.id).await.unwrap();
        assert_eq!(report.abandoned, idle.len() as u64);
        line.remove(&idle);
        // What the bucket allowed, the first in order.
        let admitted = line.first(report.admitted);
        assert_eq!(admitted.len() as u64, report.admitted);
        line.remove(&admitted);
    }

    /// The store's waiting tickets are the model's, and so is every count it gives.
    async fn check(&self, line: &Line) {
        let records = self.store.records(&self.id).await.unwrap();
        let mut waiting: Vec<(u64, bool, TicketRef)> = records
            .tickets
            .iter()
            .filter(|ticket| ticket.state == TicketState::Waiting)
            .map(|ticket| {
                let reference = TicketRef {
                    id: ticket.id,
                    generation: ticket.generation,
                };
                (ticket.position, ticket.priority, reference)
            })
            .collect();
        waiting.sort_by_key(|(position, _, _)| *position);
        let model: Vec<(u64, bool, TicketRef)> = line
            .tickets
            .iter()
            .map(|ticket| (ticket.position, ticket.priority, ticket.ticket))
            .collect();
        assert_eq!(waiting, model);
        let snapshot = self.store.snapshot(&self.id).await.unwrap();
        assert_eq!(snapshot.waiting, line.tickets.len() as u64);
        let regular: Vec<u64> = line
            .tickets
            .iter()
            .filter(|ticket| !ticket.priority)
            .map(|ticket| ticket.position)
            .collect();
        assert_eq!(
            self.store
                .line_masks(&self.id)
                .await
                .unwrap()
                .positions()
                .collect::<Vec<_>>(),
            regular
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_line_keeps_positions_and_ahead_as_the_model_does(steps in prop::collection::vec(step(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let room = Room::new().await;
            let mut line = Line { tickets: Vec::new() };
            for step in steps {
                match step {
                    Step::Join { count, priority } => room.join(&mut line, count, priority).await,
                    Step::Status(index) => room.status(&mut line, index).await,
                    Step::Leave(index) => room.leave(&mut line, index).await,
                    Step::Advance(count) => room.advance(&mut line, count).await,
                    Step::Tick { wait_ms } => room.tick(&mut line, wait_ms).await,
                }
                room.check(&line).await;
            }
            // Every ticket's `ahead` at the end, asked in an order of its own.
            for index in (0..line.tickets.len()).rev() {
                room.status(&mut line, index).await;
            }
        });
    }
}
