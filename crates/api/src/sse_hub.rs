//! The node's SSE hub (SPEC §6.2): one shared [`TickerRoomView`] per room that has listeners
//! or was polled lately, refreshed by the ticker and the change notices, the tickets the
//! ticker keeps alive (connected ones, and waiting ones whose polls the view answered), and
//! the bounds on open streams ([`SseLimits`]). The streams themselves are served in `sse.rs`,
//! the polls the view answers in `view_status.rs`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use metrics::counter;
use parking_lot::Mutex;
use tokio::sync::watch;

use anteroom_core::config::SseLimits;
use anteroom_core::engine::{RoomSnapshot, TicketRef};
use anteroom_core::{RoomId, TicketId};
use anteroom_store::{LineMasks, RoomStore};

use crate::error::ApiError;

/// What a stream refused for being one too many is told to wait before it tries again (the
/// page polls meanwhile).
const REFUSED_RETRY_AFTER_SECS: u64 = 5;

/// How far the admission rate may drift before a view that shows nothing else new is
/// published, and how often such a view is published at most. The rate is an average that
/// moves on every tick (by several percent a tick in a room's first minute): publishing each
/// move woke every connection twice a second, and sent most of them a new estimate every
/// second, while the line itself stood still.
const RATE_DRIFT: f64 = 0.02;
const RATE_ONLY_INTERVAL: Duration = Duration::from_secs(10);

/// How long after its last poll a room without listeners keeps its view refreshed: polls come
/// every 2 to 15 s (SPEC §5.5), so a room being polled stays watched between them.
const POLLED_ROOM_KEPT: Duration = Duration::from_secs(30);

/// The most tickets one batched touch carries: the store runs each batch as one call (one
/// script on Redis, which serves nothing else meanwhile: about 19 µs a ticket in a crowd of
/// 200,000), so a line of 100,000 polled tickets is touched in many short calls rather than
/// one long one.
const TOUCH_BATCH: usize = 250;

/// One room's figures as all of a node's connections see them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TickerRoomView {
    /// The room's summary.
    pub snapshot: RoomSnapshot,
    /// The live waiting positions of the regular line, one bit each.
    pub line: LineMasks,
}

impl TickerRoomView {
    /// Live tickets ahead of `position`, or `None` when it is no longer waiting.
    pub(crate) fn ahead_of(&self, position: u64) -> Option<u64> {
        self.line.ahead_of(position)
    }

    /// What a connection could show differently with `newer` than with this view: the line,
    /// a counter, the mode or the generation, or only estimates (the admission rate drifted
    /// by more than [`RATE_DRIFT`]). Figures no connection shows (active sessions, totals)
    /// do not count.
    fn change_to(&self, newer: &TickerRoomView) -> ViewChange {
        let (shown, next) = (&self.snapshot, &newer.snapshot);
        if shown.generation != next.generation
            || shown.mode != next.mode
            || shown.serving != next.serving
            || shown.waiting != next.waiting
            || self.line != newer.line
        {
            ViewChange::Line
        } else if rate_drifted(shown.admission_rate, next.admission_rate) {
            ViewChange::Rate
        } else {
            ViewChange::None
        }
    }
}

/// How a room's new view differs from the one its connections have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ViewChange {
    /// Nothing a connection shows.
    None,
    /// Only the estimates.
    Rate,
    /// The line, the counters, the mode or the generation.
    Line,
}

fn rate_drifted(shown: Option<f64>, now: Option<f64>) -> bool {
    match (shown, now) {
        (Some(shown), Some(now)) => (now - shown).abs() > RATE_DRIFT * shown.abs(),
        (None, None) => false,
        (Some(_), None) | (None, Some(_)) => true,
    }
}

/// The tickets of one room with open streams, and how many streams each has open.
type ConnectedTickets = HashMap<TicketId, (TicketRef, usize)>;

/// A room whose polls the view answers: when it was last polled, and the tickets answered
/// since the last touch (a poll is contact, SPEC §5.2: the ticker touches them in batches).
#[derive(Default)]
struct PolledRoom {
    last_poll: Option<tokio::time::Instant>,
    untouched: HashMap<TicketId, TicketRef>,
}

impl PolledRoom {
    /// Whether the room was polled within [`POLLED_ROOM_KEPT`] of `now`.
    fn lately(&self, now: tokio::time::Instant) -> bool {
        self.last_poll
            .is_some_and(|at| now.duration_since(at) < POLLED_ROOM_KEPT)
    }
}

/// The node's shared room views, its connection count and its connected tickets.
pub struct SseHub {
    views: Mutex<HashMap<RoomId, watch::Sender<Option<Arc<TickerRoomView>>>>>,
    /// One refresh of a room at a time (the ticker and change notices both ask for them), so
    /// views are published in the order they were read: an older read published after a newer
    /// one would show every stream people already admitted back in front of it.
    refreshing: Mutex<HashMap<RoomId, Arc<tokio::sync::Mutex<()>>>>,
    /// When each room's view was last published, to pace estimate-only updates.
    published_at: Mutex<HashMap<RoomId, tokio::time::Instant>>,
    /// When the read behind each room's current view began (a read that changed nothing
    /// still proves the view current): how old a view a poll would be answered from.
    read_at: Mutex<HashMap<RoomId, tokio::time::Instant>>,
    /// Rooms whose polls the view answered, and the tickets those polls keep alive.
    polled: Mutex<HashMap<RoomId, PolledRoom>>,
    connected: Mutex<HashMap<RoomId, ConnectedTickets>>,
    /// Open streams by client address (IPv6 by /64).
    by_address: Mutex<HashMap<IpAddr, usize>>,
    connections: AtomicUsize,
    limits: SseLimits,
}

/// Why a stream was refused: which bound is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The node holds `max_streams`.
    Node,
    /// The ticket holds `per_ticket` streams.
    Ticket,
    /// The client address holds `per_ip` streams.
    Address,
}

impl Refusal {
    fn reason(self) -> &'static str {
        match self {
            Refusal::Node => "node",
            Refusal::Ticket => "ticket",
            Refusal::Address => "address",
        }
    }

    pub(crate) fn into_error(self) -> ApiError {
        counter!("anteroom_sse_refused_total", "reason" => self.reason()).increment(1);
        let error = match self {
            Refusal::Node => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_connections",
                "this node holds as many live streams as it can; poll the status instead",
            ),
            Refusal::Ticket => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                "this ticket has as many live streams open as it may; poll the status instead",
            ),
            Refusal::Address => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                "this address has as many live streams open as it may; poll the status instead",
            ),
        };
        error.retry_after(REFUSED_RETRY_AFTER_SECS)
    }
}

impl SseHub {
    /// A hub that accepts at most `limits` streams.
    pub fn new(limits: SseLimits) -> SseHub {
        SseHub {
            views: Mutex::new(HashMap::new()),
            refreshing: Mutex::new(HashMap::new()),
            published_at: Mutex::new(HashMap::new()),
            read_at: Mutex::new(HashMap::new()),
            polled: Mutex::new(HashMap::new()),
            connected: Mutex::new(HashMap::new()),
            by_address: Mutex::new(HashMap::new()),
            connections: AtomicUsize::new(0),
            limits,
        }
    }

    /// The most streams this node holds (`max_streams`).
    pub fn max_streams(&self) -> usize {
        self.limits.max_streams
    }

    /// Open streams on this node.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    pub(crate) fn subscribe(&self, room: &RoomId) -> watch::Receiver<Option<Arc<TickerRoomView>>> {
        let mut views = self.views.lock();
        views
            .entry(room.clone())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// Rooms some connection on this node listens to, or polled within [`POLLED_ROOM_KEPT`].
    pub(crate) fn watched_rooms(&self) -> Vec<RoomId> {
        let now = tokio::time::Instant::now();
        let mut views = self.views.lock();
        let mut polled = self.polled.lock();
        polled.retain(|_, room| !room.untouched.is_empty() || room.lately(now));
        views.retain(|room, sender| {
            sender.receiver_count() > 0 || polled.get(room).is_some_and(|room| room.lately(now))
        });
        self.published_at
            .lock()
            .retain(|room, _| views.contains_key(room));
        self.read_at
            .lock()
            .retain(|room, _| views.contains_key(room));
        views.keys().cloned().collect()
    }

    /// The room's view and how long ago its read began, when that is at most `max_age`;
    /// `None` otherwise. Marks the room polled, so the ticker keeps its view refreshed from
    /// now on.
    pub(crate) fn view_for_poll(
        &self,
        room: &RoomId,
        max_age: Duration,
    ) -> Option<(Arc<TickerRoomView>, Duration)> {
        let now = tokio::time::Instant::now();
        self.polled
            .lock()
            .entry(room.clone())
            .or_default()
            .last_poll = Some(now);
        // Both under the views' lock, which a refresh holds while it sets them.
        let mut views = self.views.lock();
        let sender = views
            .entry(room.clone())
            .or_insert_with(|| watch::channel(None).0);
        let view = sender.borrow().clone()?;
        let age = now.duration_since(self.read_at.lock().get(room).copied()?);
        (age <= max_age).then_some((view, age))
    }

    /// Counts a poll the view answered as the ticket's contact: the ticker touches it with
    /// the next batch (SPEC §5.2).
    pub(crate) fn polled_from_view(&self, room: &RoomId, ticket: TicketRef) {
        self.polled
            .lock()
            .entry(room.clone())
            .or_default()
            .untouched
            .insert(ticket.id, ticket);
    }

    /// Whether some connection on this node listens to `room`, or it was polled within
    /// [`POLLED_ROOM_KEPT`].
    pub fn watches(&self, room: &RoomId) -> bool {
        let listened = self
            .views
            .lock()
            .get(room)
            .is_some_and(|sender| sender.receiver_count() > 0);
        let now = tokio::time::Instant::now();
        listened
            || self
                .polled
                .lock()
                .get(room)
                .is_some_and(|polled| polled.lately(now))
    }

    /// Re-reads a watched room's figures and publishes them when a connection could show
    /// something new: at once when the line moved, at most every `RATE_ONLY_INTERVAL` when
    /// only the estimates did.
    pub async fn refresh(&self, store: &dyn RoomStore, room: &RoomId) {
        let turn = self
            .refreshing
            .lock()
            .entry(room.clone())
            .or_default()
            .clone();
        let _turn = turn.lock().await;
        let started = tokio::time::Instant::now();
        let view = match (store.snapshot(room).await, store.line_masks(room).await) {
            (Ok(snapshot), Ok(line)) => TickerRoomView { snapshot, line },
            (Err(error), _) | (_, Err(error)) => {
                tracing::debug!(%room, %error, "cannot refresh the room view");
                return;
            }
        };
        let now = tokio::time::Instant::now();
        let views = self.views.lock();
        let Some(sender) = views.get(room) else {
            return;
        };
        // Under the views' lock, as a poll reads both: it never pairs this read's time with
        // the view before it.
        self.read_at.lock().insert(room.clone(), started);
        let mut published_at = self.published_at.lock();
        let last_published = published_at.get(room).copied();
        let published = sender.send_if_modified(|current| {
            let publish = match current.as_deref().map(|shown| shown.change_to(&view)) {
                None | Some(ViewChange::Line) => true,
                Some(ViewChange::Rate) => {
                    last_published.is_none_or(|at| now.duration_since(at) >= RATE_ONLY_INTERVAL)
                }
                Some(ViewChange::None) => false,
            };
            if publish {
                *current = Some(Arc::new(view));
            }
            publish
        });
        if published {
            published_at.insert(room.clone(), now);
        }
    }

    /// Keeps every connected waiting ticket of `room` alive, in batched store calls.
    pub(crate) async fn touch_connected(&self, store: &dyn RoomStore, room: &RoomId) {
        let tickets: Vec<TicketRef> = self
            .connected
            .lock()
            .get(room)
            .map(|tickets| tickets.values().map(|(reference, _)| *reference).collect())
            .unwrap_or_default();
        // (Connected tickets are all touched again at the next call.)
        touch_in_batches(store, room, &tickets, "connected").await;
    }

    /// Keeps the tickets of `room` whose polls the view answered since the last call alive,
    /// in batched store calls. When a batch fails, it and the batches not sent yet wait for
    /// the next call: their polls were contact all the same.
    pub(crate) async fn touch_polled(&self, store: &dyn RoomStore, room: &RoomId) {
        let tickets: Vec<TicketRef> = self
            .polled
            .lock()
            .get_mut(room)
            .map(|polled| polled.untouched.drain().map(|(_, ticket)| ticket).collect())
            .unwrap_or_default();
        let untouched = touch_in_batches(store, room, &tickets, "polled").await;
        if !untouched.is_empty() {
            let mut polled = self.polled.lock();
            let again = &mut polled.entry(room.clone()).or_default().untouched;
            for ticket in untouched {
                again.entry(ticket.id).or_insert(*ticket);
            }
        }
    }

    /// Rooms with connected tickets.
    pub(crate) fn rooms_with_connections(&self) -> Vec<RoomId> {
        self.connected.lock().keys().cloned().collect()
    }

    /// Rooms with tickets whose polls the view answered and that are not touched yet.
    pub(crate) fn rooms_with_polled_tickets(&self) -> Vec<RoomId> {
        self.polled
            .lock()
            .iter()
            .filter(|(_, polled)| !polled.untouched.is_empty())
            .map(|(room, _)| room.clone())
            .collect()
    }

    pub(crate) fn connect(
        self: &Arc<Self>,
        room: &RoomId,
        ticket: TicketRef,
        client: IpAddr,
    ) -> Result<Connection, Refusal> {
        let previous = self.connections.fetch_add(1, Ordering::AcqRel);
        if previous >= self.limits.max_streams {
            self.connections.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Node);
        }
        // Taken in this order here and in `Connection::drop`.
        let mut connected = self.connected.lock();
        let mut by_address = self.by_address.lock();
        let tickets = connected.entry(room.clone()).or_default();
        let ticket_streams = tickets.get(&ticket.id).map_or(0, |(_, streams)| *streams);
        let address_streams = by_address.get(&client).copied().unwrap_or(0);
        let refusal = if ticket_streams >= self.limits.per_ticket {
            Some(Refusal::Ticket)
        } else if address_streams >= self.limits.per_ip {
            Some(Refusal::Address)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            if tickets.is_empty() {
                connected.remove(room);
            }
            self.connections.fetch_sub(1, Ordering::AcqRel);
            return Err(refusal);
        }
        tickets.entry(ticket.id).or_insert((ticket, 0)).1 += 1;
        *by_address.entry(client).or_insert(0) += 1;
        Ok(Connection {
            hub: self.clone(),
            room: room.clone(),
            ticket: ticket.id,
            client,
        })
    }
}

/// Touches `tickets` of `room` in calls of at most [`TOUCH_BATCH`], until one fails; the
/// tickets not touched (empty when all were). `which` names them in the log.
async fn touch_in_batches<'a>(
    store: &dyn RoomStore,
    room: &RoomId,
    tickets: &'a [TicketRef],
    which: &str,
) -> &'a [TicketRef] {
    for (index, batch) in tickets.chunks(TOUCH_BATCH).enumerate() {
        if let Err(error) = store.touch(room, batch).await {
            tracing::warn!(%room, %error, which, "cannot refresh waiting tickets");
            return &tickets[index * TOUCH_BATCH..];
        }
    }
    &[]
}

/// One open stream; unregisters itself when dropped (the client went away).
pub(crate) struct Connection {
    hub: Arc<SseHub>,
    room: RoomId,
    ticket: TicketId,
    /// The client address it is counted under.
    client: IpAddr,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.hub.connections.fetch_sub(1, Ordering::AcqRel);
        let mut connected = self.hub.connected.lock();
        let mut by_address = self.hub.by_address.lock();
        if let Some(streams) = by_address.get_mut(&self.client) {
            *streams -= 1;
            if *streams == 0 {
                by_address.remove(&self.client);
            }
        }
        if let Some(tickets) = connected.get_mut(&self.room) {
            if let Some(entry) = tickets.get_mut(&self.ticket) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    tickets.remove(&self.ticket);
                }
            }
            if tickets.is_empty() {
                connected.remove(&self.room);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use anteroom_core::engine::Entry;
    use anteroom_core::room::Mode;

    use super::*;

    fn view(serving: u64, rate: Option<f64>, positions: &[u64]) -> TickerRoomView {
        TickerRoomView {
            snapshot: RoomSnapshot {
                generation: 1,
                mode: Mode::Queue,
                serving,
                last_position: serving + positions.len() as u64,
                waiting: positions.len() as u64,
                active: 1,
                admitted_unclaimed: 0,
                admission_rate: rate,
                eta_seconds_for_new: None,
                totals: Default::default(),
                draw: None,
            },
            line: LineMasks::from_positions(positions.iter().copied()),
        }
    }

    #[test]
    fn a_drifting_rate_changes_only_the_estimates() {
        let shown = view(10, Some(1.0), &[11, 12, 13]);
        let change = |newer: TickerRoomView| shown.change_to(&newer);
        assert_eq!(
            change(view(10, Some(0.99), &[11, 12, 13])),
            ViewChange::None
        );
        assert_eq!(
            change(view(10, Some(0.97), &[11, 12, 13])),
            ViewChange::Rate
        );
        assert_eq!(change(view(10, None, &[11, 12, 13])), ViewChange::Rate);
        assert_eq!(
            view(10, None, &[11]).change_to(&view(10, None, &[11])),
            ViewChange::None
        );
    }

    #[test]
    fn the_line_moving_is_a_line_change() {
        let shown = view(10, Some(1.0), &[11, 12, 13]);
        let change = |newer: &TickerRoomView| shown.change_to(newer);
        assert_eq!(change(&view(11, Some(0.5), &[12, 13])), ViewChange::Line);
        assert_eq!(
            change(&view(10, Some(1.0), &[11, 13])),
            ViewChange::Line,
            "a leave"
        );
        let mut newer = view(10, Some(1.0), &[11, 12, 13]);
        newer.snapshot.active = 7;
        newer.snapshot.totals.admitted = 99;
        assert_eq!(change(&newer), ViewChange::None, "figures no stream shows");
        newer.snapshot.mode = Mode::QueueAll;
        assert_eq!(change(&newer), ViewChange::Line);
    }

    #[tokio::test(start_paused = true)]
    async fn estimate_only_views_are_published_at_most_every_ten_seconds() {
        use anteroom_core::engine::{JoinRequest, SessionEnd};
        use anteroom_core::room::RoomConfig;
        use anteroom_core::{ManualClock, Timestamp};

        let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
        let store = anteroom_store::MemoryStore::new(clock.clone());
        let room = RoomId::new("line").unwrap();
        let mut config = RoomConfig::with_defaults(room.clone());
        config.max_active = 1;
        store.put_room(config).await.unwrap();
        let Entry::Admitted(first_in) = store.join(&room, JoinRequest::default()).await.unwrap()
        else {
            panic!("an empty room admits at once");
        };
        for _ in 0..4 {
            store.join(&room, JoinRequest::default()).await.unwrap();
        }
        let hub = SseHub::new(SseLimits {
            max_streams: 10,
            ..SseLimits::default()
        });
        let mut views = hub.subscribe(&room);
        // A few seconds with one admission give the room a measured rate.
        for step in 0..6 {
            clock.advance(Duration::from_millis(500));
            if step == 3 {
                store
                    .end_session(&room, first_in.session.id, SessionEnd::Completed)
                    .await
                    .unwrap();
            }
            store.tick(&room).await.unwrap();
        }
        hub.refresh(&store, &room).await;
        assert!(views.has_changed().unwrap(), "the first view is published");
        let first = views.borrow_and_update().clone().unwrap();
        assert!(first.snapshot.admission_rate.is_some(), "{first:?}");

        // Time passes with nobody admitted: the rate decays while the line stands still.
        let mut published = 0;
        for _ in 0..40 {
            clock.advance(Duration::from_millis(500));
            tokio::time::advance(Duration::from_millis(500)).await;
            store.tick(&room).await.unwrap();
            hub.refresh(&store, &room).await;
            if views.has_changed().unwrap() {
                published += 1;
                views.borrow_and_update();
            }
        }
        let last = views.borrow().clone().unwrap();
        assert_ne!(
            last.snapshot.admission_rate, first.snapshot.admission_rate,
            "the estimates were updated"
        );
        assert!(published <= 2, "20 s of decay published {published} views");
    }

    /// Streams stop at the per-ticket and per-address bounds before the node's, and a closed
    /// stream gives its places back.
    #[test]
    fn streams_are_bounded_per_ticket_and_per_address() {
        let hub = Arc::new(SseHub::new(SseLimits {
            max_streams: 100,
            per_ticket: 2,
            per_ip: 3,
        }));
        let room = RoomId::new("r").unwrap();
        let ticket = || TicketRef {
            id: TicketId::random(&mut rand::thread_rng()),
            generation: 0,
        };
        let home: IpAddr = "198.51.100.7".parse().unwrap();
        let elsewhere: IpAddr = "203.0.113.9".parse().unwrap();
        let one = ticket();
        let first = hub.connect(&room, one, home).unwrap();
        let _second = hub.connect(&room, one, home).unwrap();
        assert_eq!(
            hub.connect(&room, one, elsewhere).err(),
            Some(Refusal::Ticket)
        );
        let _third = hub.connect(&room, ticket(), home).unwrap();
        assert_eq!(
            hub.connect(&room, ticket(), home).err(),
            Some(Refusal::Address)
        );
        assert!(hub.connect(&room, ticket(), elsewhere).is_ok());
        assert_eq!(hub.connections(), 3, "refusals hold nothing");
        drop(first);
        assert!(hub.connect(&room, one, home).is_ok());
    }
}
