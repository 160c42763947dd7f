//! Group commit of joins on Redis: the joins a node has for one room go to Redis as one call
//! of `join.lua`, which runs them one after the other.
//!
//! The first join into a room whose queue is idle is sent at once (no added latency); while
//! that call is in flight, later joins for the room gather in its queue, and the next call
//! carries all of them (at most [`MAX_JOINS_PER_CALL`]). The room's meta is then read and
//! written, and its change notice published, once per call instead of once per join, and Redis
//! runs one script instead of many: a room's join rate on one Redis core is the script's rate
//! per join, not per call. Each join's answer goes back to its own caller.
//!
//! A busy room's calls are kept as big as the last one: when a call of at least
//! [`GATHER_FROM`] joins comes back with fewer joins queued than it carried, the next call
//! waits for that many (the visitors just answered tend to come back with their next join),
//! but no longer than the last call took and never more than [`GATHER_AT_MOST`]. A room whose
//! calls carry one join or a few (an idle node) sends each at once, as before. Fewer, bigger
//! calls cost Redis and the node less per join: each call reads and writes the room's meta,
//! publishes a notice and is one request and one reply on the socket.
//!
//! A full batch does not wait for the calls before it: up to [`MAX_CALLS_IN_FLIGHT`] calls of
//! a room may be in flight, so a slow server (or a node that gets the CPU late) does not hold
//! a whole crowd behind one round trip. They keep their order: one task sends a room's calls
//! in the order their joins were queued, one connection runs its commands in the order sent,
//! and in a cluster a room's keys share one slot.
//!
//! The calls are sent by a task of their own (one per room while it has joins queued or calls
//! in flight), so a caller that gives up never strands the joins queued behind it. Every join
//! is bounded from its start ([`connection::bounded`](super::connection::bounded)'s bound), and
//! what giving up costs depends on where the join is:
//! - still queued: it is left out of every batch; it never reaches Redis and costs nothing;
//! - queued with less time left than the room's last call took, while calls are in flight: it
//!   is answered at once that it could not be sent in time, instead of making Redis run a join
//!   whose answer would come too late;
//! - sent: Redis may run it (`join.lua` refuses a join run after the deadline it carries, but
//!   one run just before may be answered too late), so this task takes its ticket back
//!   (`cancel_join.lua`), with every other such join of its call in one cancellation.

use std::collections::hash_map::Entry as MapEntry;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use anteroom_core::RoomId;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use super::connection::bounded;
use super::packed_answers;
use super::room_call::{Outcome, RoomCaller, admission_seed, lottery_seed, millis};
use super::scripts::RoomFunction;
use crate::StoreError;

/// The most joins one call carries: Redis runs nothing else while a script runs, so a batch
/// is kept to a few milliseconds of script.
pub(crate) const MAX_JOINS_PER_CALL: usize = 128;

/// The most calls of one room in flight from one node: enough to keep a slow server busy
/// without waiting for the node's turn between round trips, few enough that a node's joins
/// queued in Redis stay a few milliseconds of script.
pub(crate) const MAX_CALLS_IN_FLIGHT: usize = 4;

/// The smallest call after which the next one gathers (see the module docs): below it a room
/// is not busy enough for waiting to pay, and each join is sent at once.
pub(crate) const GATHER_FROM: usize = 4;

/// The longest a room's next call waits to gather as many joins as its last one carried: a
/// bound on the latency gathering adds, well under a join's store bound.
pub(crate) const GATHER_AT_MOST: Duration = Duration::from_millis(2);

/// How long a room remembers the ticket id of a join cancelled before it ran
/// (`cancel_join.lua`): far longer than any call may wait in a queue or a socket.
const CANCELLED_JOIN_MEMORY: Duration = Duration::from_secs(600);

/// How often a cancellation is tried before it is given up (one try per store timeout).
const CANCEL_ATTEMPTS: u32 = 3;

/// Where a join is, shared by its caller and the room's task; whichever moves it first from
/// queued (or sent) decides what giving up costs.
#[derive(Default)]
struct Claim(AtomicU8);

const QUEUED: u8 = 0;
const SENT: u8 = 1;
const ANSWERED: u8 = 2;
const WITHDRAWN: u8 = 3;
const ABANDONED: u8 = 4;

/// What became of a join its caller gave up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GaveUp {
    /// It was still queued: it will never be sent.
    Unsent,
    /// It was sent: the room's task takes its ticket back.
    InFlight,
    /// Its answer was already on the way: the caller takes it.
    Answered,
}

impl Claim {
    fn moved(&self, from: u8, to: u8) -> bool {
        self.0
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The task takes the join into a call; false when its caller has withdrawn it.
    fn send(&self) -> bool {
        self.moved(QUEUED, SENT)
    }

    /// The task answers the join without sending it; false when its caller has withdrawn it.
    fn answer_unsent(&self) -> bool {
        self.moved(QUEUED, ANSWERED)
    }

    /// The task answers a sent join; false when its caller is gone.
    fn answer(&self) -> bool {
        self.moved(SENT, ANSWERED)
    }

    fn is_withdrawn(&self) -> bool {
        self.0.load(Ordering::Acquire) == WITHDRAWN
    }

    /// The caller gives up (idempotent).
    fn give_up(&self) -> GaveUp {
        if self.moved(QUEUED, WITHDRAWN) {
            return GaveUp::Unsent;
        }
        self.moved(SENT, ABANDONED);
        match self.0.load(Ordering::Acquire) {
            WITHDRAWN => GaveUp::Unsent,
            ANSWERED => GaveUp::Answered,
            _ => GaveUp::InFlight,
        }
    }
}

/// One join waiting for its room's next call: its ticket id and its other `join.lua`
/// arguments (nine per join in all), when its caller stops waiting, and where its answer goes.
struct QueuedJoin {
    ticket: String,
    args: Vec<String>,
    deadline: Instant,
    claim: Arc<Claim>,
    reply: oneshot::Sender<Outcome>,
}

/// A room's joins not sent yet, and the bell that tells its task a batch has gathered: a full
/// one, or while the task gathers, as many joins as it waits for (`ring_at`).
struct RoomQueue {
    joins: VecDeque<QueuedJoin>,
    ring_at: usize,
    full_batch: Arc<Notify>,
}

/// The queues of joins per room. A room is in the map while a task sends its joins.
#[derive(Clone, Default)]
pub(crate) struct JoinQueues {
    rooms: Arc<Mutex<HashMap<RoomId, RoomQueue>>>,
}

/// What the room's task does next.
enum Next {
    /// Send this batch now.
    Send(Vec<QueuedJoin>),
    /// Wait for a call to finish or a full batch to gather.
    Wait,
    /// No call in flight: wait until this instant at most for the next call's joins to
    /// gather (the queue rings when they have).
    Gather(Instant),
    /// Nothing queued and nothing in flight: the room left the map, the task ends.
    Done,
}

/// A caller's side of a queued join. Dropped before its answer (the caller gave up, or its
/// request went away), it withdraws the join if it was not sent yet.
struct PendingJoin {
    claim: Arc<Claim>,
    receiver: oneshot::Receiver<Outcome>,
}

impl Drop for PendingJoin {
    fn drop(&mut self) {
        self.claim.give_up();
    }
}

impl JoinQueues {
    /// Joins `room` (`ticket` is the id of a new ticket, `args` the join's other arguments),
    /// waiting for the answer until `deadline`; the room's sending task is made by `sender`
    /// when none runs.
    pub(crate) async fn join(
        &self,
        room: &RoomId,
        ticket: String,
        args: Vec<String>,
        deadline: Instant,
        sender: impl FnOnce() -> RoomCaller,
    ) -> Outcome {
        let (reply, receiver) = oneshot::channel();
        let claim = Arc::new(Claim::default());
        let join = QueuedJoin {
            ticket,
            args,
            deadline,
            claim: claim.clone(),
            reply,
        };
        self.enqueue(room, join, sender);
        let mut pending = PendingJoin { claim, receiver };
        let left = deadline.saturating_duration_since(Instant::now());
        let waited = bounded(left, "join", async { Ok((&mut pending.receiver).await) }).await;
        let timed_out = match waited {
            Ok(Ok(outcome)) => return outcome,
            Ok(Err(_)) => return Err(dropped(room)),
            Err(timed_out) => timed_out,
        };
        let fate = match pending.claim.give_up() {
            GaveUp::Unsent => "it was never sent",
            GaveUp::InFlight => "it was sent, and its ticket is taken back",
            GaveUp::Answered => {
                return (&mut pending.receiver)
                    .await
                    .unwrap_or_else(|_| Err(dropped(room)));
            }
        };
        Err(StoreError::Backend {
            message: format!("the join into {room} was not answered in time: {fate}"),
            source: Some(Box::new(timed_out)),
        })
    }

    /// Queues `join` for `room`, making the room's sending task (by `sender`) when none runs.
    fn enqueue(&self, room: &RoomId, join: QueuedJoin, sender: impl FnOnce() -> RoomCaller) {
        let mut rooms = self.rooms.lock();
        match rooms.entry(room.clone()) {
            MapEntry::Occupied(mut queue) => {
                let queue = queue.get_mut();
                queue.joins.push_back(join);
                if queue.joins.len() >= queue.ring_at {
                    queue.full_batch.notify_one();
                }
            }
            MapEntry::Vacant(slot) => {
                let full_batch = Arc::new(Notify::new());
                slot.insert(RoomQueue {
                    joins: VecDeque::from([join]),
                    ring_at: MAX_JOINS_PER_CALL,
                    full_batch: full_batch.clone(),
                });
                tokio::spawn(self.clone().send_all(room.clone(), sender(), full_batch));
            }
        }
    }

    /// What `room`'s task does next, with `in_flight` calls out, the last one (`last`) having
    /// taken `call_time`: joins whose callers are gone are dropped, and, while calls are in
    /// flight, joins with less time left than `call_time` go to `unsent` (answered without a
    /// call). A batch is sent when a full one has gathered, or when no call is in flight and
    /// the gathering the last call asks for (see [`Gathering`]) is over.
    fn next(
        &self,
        room: &RoomId,
        in_flight: usize,
        last: &mut Gathering,
        unsent: &mut Vec<QueuedJoin>,
    ) -> Next {
        let mut rooms = self.rooms.lock();
        let Some(queue) = rooms.get_mut(room) else {
            return Next::Done;
        };
        let now = Instant::now();
        let shed_before = if in_flight == 0 {
            now
        } else {
            now + last.call_time
        };
        loop {
            let mut kept = VecDeque::with_capacity(queue.joins.len());
            for join in queue.joins.drain(..) {
                if join.claim.is_withdrawn() {
                    continue;
                }
                if join.deadline <= shed_before {
                    if join.claim.answer_unsent() {
                        unsent.push(join);
                    }
                    continue;
                }
                kept.push_back(join);
            }
            queue.joins = kept;
            if in_flight == 0
                && let Some(until) = last.gathers(queue.joins.len(), now)
            {
                queue.ring_at = last.wanted();
                return Next::Gather(until);
            }
            queue.ring_at = MAX_JOINS_PER_CALL;
            if queue.joins.is_empty() && in_flight == 0 {
                rooms.remove(room);
                return Next::Done;
            }
            if queue.joins.is_empty() || (in_flight > 0 && queue.joins.len() < MAX_JOINS_PER_CALL) {
                return Next::Wait;
            }
            let count = queue.joins.len().min(MAX_JOINS_PER_CALL);
            let batch: Vec<QueuedJoin> = queue
                .joins
                .drain(..count)
                .filter(|join| join.claim.send())
                .collect();
            if !batch.is_empty() {
                last.sent(batch.len());
                return Next::Send(batch);
            }
        }
    }

    /// Sends `room`'s queued joins, a batch per call and up to [`MAX_CALLS_IN_FLIGHT`] calls
    /// at once, until its queue is empty and no call is in flight.
    async fn send_all(self, room: RoomId, sender: RoomCaller, full_batch: Arc<Notify>) {
        let mut calls = FuturesUnordered::new();
        let mut last = Gathering::default();
        let mut unsent = Vec::new();
        loop {
            let mut gather_until = None;
            while calls.len() < MAX_CALLS_IN_FLIGHT {
                let next = self.next(&room, calls.len(), &mut last, &mut unsent);
                answer_unsent(&room, unsent.drain(..));
                match next {
                    Next::Send(batch) => calls.push(run_call(&sender, batch)),
                    Next::Wait => break,
                    Next::Gather(until) => {
                        gather_until = Some(until);
                        break;
                    }
                    Next::Done => return,
                }
            }
            let gathering = async {
                match gather_until {
                    Some(until) => tokio::time::sleep_until(until).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(finished) = calls.next() => {
                    last.call_time = finished.took;
                    finished.deliver(&sender);
                }
                () = full_batch.notified() => {}
                () = gathering => last.gather_over(),
            }
        }
    }
}

/// What a room's task remembers of its last call, to size the next: how many joins it carried,
/// how long it took, and until when the next one gathers.
#[derive(Debug, Default)]
struct Gathering {
    last_batch: usize,
    call_time: Duration,
    until: Option<Instant>,
    over: bool,
}

impl Gathering {
    /// How many joins the next call waits for.
    fn wanted(&self) -> usize {
        self.last_batch.min(MAX_JOINS_PER_CALL)
    }

    /// With `queued` joins and no call in flight at `now`: until when the next call still
    /// gathers, or `None` when it goes now (the last call was small, enough have gathered, or
    /// the wait is over).
    fn gathers(&mut self, queued: usize, now: Instant) -> Option<Instant> {
        if self.over || self.last_batch < GATHER_FROM || queued >= self.wanted() {
            return None;
        }
        let until = *self
            .until
            .get_or_insert(now + self.call_time.min(GATHER_AT_MOST));
        (now < until).then_some(until)
    }

    /// The wait ran out: the next call goes with what has gathered (or the task ends).
    fn gather_over(&mut self) {
        self.over = true;
    }

    /// A call of `count` joins was sent: the one after it gathers afresh.
    fn sent(&mut self, count: usize) {
        self.last_batch = count;
        self.until = None;
        self.over = false;
    }
}

fn dropped(room: &RoomId) -> StoreError {
    StoreError::Backend {
        message: format!("the join into {room} was dropped unsent"),
        source: None,
    }
}

/// Answers joins that were left out because they could not be answered in time.
fn answer_unsent(room: &RoomId, joins: impl Iterator<Item = QueuedJoin>) {
    for join in joins {
        let _ = join.reply.send(Err(StoreError::Backend {
            message: format!(
                "the join into {room} was not sent: redis answers the room's calls slower than \
                 the time it had left"
            ),
            source: None,
        }));
    }
}

/// A join in a call: its ticket id, to take back, and its caller.
struct SentJoin {
    ticket: String,
    claim: Arc<Claim>,
    reply: oneshot::Sender<Outcome>,
}

/// A call that finished (answered, failed or timed out): its joins, one outcome each, and
/// how long it took.
struct FinishedCall {
    joins: Vec<SentJoin>,
    outcomes: Vec<Outcome>,
    took: Duration,
}

/// Runs one call of `join.lua` for `batch`.
async fn run_call(sender: &RoomCaller, batch: Vec<QueuedJoin>) -> FinishedCall {
    let started = Instant::now();
    let count = batch.len();
    let per_join = batch.first().map_or(0, |join| 1 + join.args.len());
    let mut args = Vec::with_capacity(2 + count * per_join);
    args.push(count.to_string());
    // One lottery seed for the call: its first join settles what is due (`join.lua`).
    args.push(lottery_seed());
    let mut joins = Vec::with_capacity(count);
    for join in batch {
        args.push(join.ticket.clone());
        args.extend(join.args);
        joins.push(SentJoin {
            ticket: join.ticket,
            claim: join.claim,
            reply: join.reply,
        });
    }
    let outcomes = packed_answers::call(sender, RoomFunction::Join, args, count).await;
    FinishedCall {
        joins,
        outcomes,
        took: started.elapsed(),
    }
}

impl FinishedCall {
    /// Gives each waiting caller its outcome, and takes back the tickets nobody holds: those of
    /// joins that failed (the visitor is told so, yet the join may have run) and those whose
    /// callers left before their answer came.
    fn deliver(self, sender: &RoomCaller) {
        let mut take_back = Vec::new();
        for (join, outcome) in self.joins.into_iter().zip(self.outcomes) {
            // A refusal made no ticket; an answer made or resumed one, which its caller holds
            // once it hears of it.
            let failed = outcome.is_err();
            let answered = matches!(outcome, Ok(Ok(_)));
            let delivered = join.claim.answer() && join.reply.send(outcome).is_ok();
            if failed || (answered && !delivered) {
                take_back.push(join.ticket);
            }
        }
        if !take_back.is_empty() {
            tokio::spawn(cancel_joins(sender.clone(), take_back));
        }
    }
}

/// Takes back, best effort, the tickets `tickets` named in `sender`'s room, in one call of
/// `cancel_join.lua`, tried up to [`CANCEL_ATTEMPTS`] times. The connection keeps calls in
/// order, so joins still queued in Redis run before their cancellation; a join that runs after
/// it anyway is refused (its id is remembered as cancelled).
async fn cancel_joins(sender: RoomCaller, tickets: Vec<String>) {
    let count = tickets.len();
    let mut args = vec![
        millis(CANCELLED_JOIN_MEMORY),
        admission_seed(),
        lottery_seed(),
    ];
    args.extend(tickets);
    let call = sender.prelude.call(RoomFunction::CancelJoin, args);
    let room = &sender.prelude.room;
    for attempt in 1..=CANCEL_ATTEMPTS {
        match bounded(sender.timeout, "cancel_join", call.run(&sender.connection)).await {
            Ok(Ok(mut answer)) => {
                let removed = answer.expect("ok").and_then(|()| answer.number());
                tracing::info!(
                    %room,
                    joins = count,
                    removed = removed.unwrap_or_default(),
                    "cancelled joins whose call failed or whose callers left"
                );
                return;
            }
            Ok(Err(_)) => return,
            Err(error) => {
                tracing::debug!(%room, attempt, %error, "cancelling joins failed");
            }
        }
        tokio::time::sleep(sender.timeout).await;
    }
    tracing::warn!(
        %room,
        joins = count,
        "joins whose call failed could not be cancelled; if they ran, their tickets wait \
         until they are abandoned"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(deadline: Instant) -> (QueuedJoin, PendingJoin) {
        let (reply, receiver) = oneshot::channel();
        let claim = Arc::new(Claim::default());
        let join = QueuedJoin {
            ticket: String::new(),
            args: Vec::new(),
            deadline,
            claim: claim.clone(),
            reply,
        };
        (join, PendingJoin { claim, receiver })
    }

    /// A room queue holding `joins`, in the map as the room's task would find it.
    fn queues(room: &RoomId, joins: Vec<QueuedJoin>) -> JoinQueues {
        let queues = JoinQueues::default();
        queues.rooms.lock().insert(
            room.clone(),
            RoomQueue {
                joins: joins.into(),
                ring_at: MAX_JOINS_PER_CALL,
                full_batch: Arc::new(Notify::new()),
            },
        );
        queues
    }

    /// While a call is in flight, a queued join with less time left than the last call took
    /// is answered at once (it would be answered too late), a withdrawn one is dropped, and the
    /// rest wait for a full batch or for no call to be in flight.
    #[test]
    fn joins_that_cannot_be_answered_in_time_are_not_sent() {
        let room = RoomId::new("shed").expect("room id");
        let now = Instant::now();
        let (short, mut short_caller) = queued(now + Duration::from_millis(50));
        let (withdrawn, withdrawn_caller) = queued(now + Duration::from_secs(2));
        let (long, mut long_caller) = queued(now + Duration::from_secs(2));
        drop(withdrawn_caller);
        let queues = queues(&room, vec![short, withdrawn, long]);
        let mut last = Gathering {
            call_time: Duration::from_millis(500),
            ..Gathering::default()
        };

        let mut unsent = Vec::new();
        assert!(matches!(
            queues.next(&room, 1, &mut last, &mut unsent),
            Next::Wait
        ));
        assert_eq!(unsent.len(), 1);
        answer_unsent(&room, unsent.drain(..));
        assert!(matches!(short_caller.receiver.try_recv(), Ok(Err(_))));
        assert_eq!(short_caller.claim.give_up(), GaveUp::Answered);

        // No call in flight: what is left goes, whatever the last call took.
        match queues.next(&room, 0, &mut last, &mut unsent) {
            Next::Send(batch) => assert_eq!(batch.len(), 1),
            _ => panic!("the long join is sent"),
        }
        assert!(unsent.is_empty());
        assert!(long_caller.receiver.try_recv().is_err());
        assert_eq!(long_caller.claim.give_up(), GaveUp::InFlight);
        assert!(matches!(
            queues.next(&room, 0, &mut last, &mut unsent),
            Next::Done
        ));
        assert!(queues.rooms.lock().is_empty());
    }

    /// After a call of 20 joins that took 5 ms, the next call waits (at most the bound on
    /// gathering) until 20 have queued; the queue rings the task when they have, and they go
    /// as one call. Once the wait is over, what has gathered goes; with nothing queued the
    /// task ends.
    #[test]
    fn a_busy_room_gathers_as_many_joins_as_its_last_call_carried() {
        let room = RoomId::new("gather").expect("room id");
        let far = Instant::now() + Duration::from_secs(2);
        let (first, _first_caller) = queued(far);
        let queues = queues(&room, vec![first]);
        let mut last = Gathering {
            last_batch: 20,
            call_time: Duration::from_millis(5),
            ..Gathering::default()
        };
        let mut unsent = Vec::new();
        let started = Instant::now();
        let until = match queues.next(&room, 0, &mut last, &mut unsent) {
            Next::Gather(until) => until,
            _ => panic!("one join after a call of 20 gathers"),
        };
        assert!(until <= started + GATHER_AT_MOST + Duration::from_millis(50));
        let bell = queues.rooms.lock()[&room].full_batch.clone();
        let mut callers = Vec::new();
        for _ in 0..19 {
            let (join, caller) = queued(far);
            callers.push(caller);
            queues.enqueue(&room, join, || unreachable!("the room's task runs"));
        }
        // The twentieth join rang the bell: the task wakes at once, not at the bound.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), bell.notified())
                .await
                .expect("the queue rings when twenty have gathered");
        });
        match queues.next(&room, 0, &mut last, &mut unsent) {
            Next::Send(batch) => assert_eq!(batch.len(), 20),
            _ => panic!("twenty gathered joins go as one call"),
        }

        // Three queued after that call: the next one gathers, and once the wait is over the
        // three go alone.
        for _ in 0..3 {
            let (join, caller) = queued(far);
            callers.push(caller);
            queues.enqueue(&room, join, || unreachable!("the room's task runs"));
        }
        assert!(matches!(
            queues.next(&room, 0, &mut last, &mut unsent),
            Next::Gather(_)
        ));
        last.gather_over();
        match queues.next(&room, 0, &mut last, &mut unsent) {
            Next::Send(batch) => assert_eq!(batch.len(), 3),
            _ => panic!("what gathered goes once the wait is over"),
        }
        // A call of three is below the threshold: nothing gathers, the task ends.
        assert!(matches!(
            queues.next(&room, 0, &mut last, &mut unsent),
            Next::Done
        ));
        assert!(unsent.is_empty());
    }

    /// An idle room's join goes at once: a call of one join asks for no gathering.
    #[test]
    fn an_idle_room_sends_each_join_at_once() {
        let room = RoomId::new("idle").expect("room id");
        let (join, _caller) = queued(Instant::now() + Duration::from_secs(2));
        let queues = queues(&room, vec![join]);
        let mut last = Gathering {
            last_batch: 1,
            call_time: Duration::from_millis(5),
            ..Gathering::default()
        };
        let mut unsent = Vec::new();
        match queues.next(&room, 0, &mut last, &mut unsent) {
            Next::Send(batch) => assert_eq!(batch.len(), 1),
            _ => panic!("an idle room's join is sent at once"),
        }
    }
}
