//! The room engine: one room's queue, admissions and sessions as a pure state machine
//! (SPEC §2, §3, §5.1, §5.2).
//!
//! Every operation takes the current time and, where it needs chance, a random generator, and
//! records what it changed in a [`ChangeSet`] so a durable backend knows which records to write.
//! Backends run each operation under the room's lock, which makes every operation, `tick`
//! included, atomic.
//!
//! A ticket moves `Waiting → Admitted → Claimed` (its session is then the pass's life), or ends
//! as `Left`, `Abandoned`, `NoShow` or `Reset`. Capacity (I2) counts active sessions plus
//! admitted-unclaimed tickets; the admission bucket bounds the pace (I3); FIFO rooms admit the
//! lowest waiting position first (I4), so nobody's `ahead` ever grows (I5).
//!
//! `status` claims the session of an admitted ticket; `advance` is the operator's admissions
//! by hand, bounded by the line and the free capacity. Each thing that happens to a ticket or
//! session is also recorded as a [`VisitorEvent`] (SPEC §14.9), written with the change.
//!
//! Priority access (SPEC §12): a join with a valid code waits in a second [`WaitingLine`],
//! which `tick` and `advance` serve first. Each lane counts its own `ahead`, so the priority
//! lane never makes a regular ticket's `ahead` grow (I5); uses are counted per code digest in
//! [`RoomMeta::code_uses`], inside the join.
//!
//! A schedule needs no timer: `settle_schedule` runs inside the first operation (join, status,
//! leave, tick, advance) at or after a shuffled event's `opens_at` and hands the cohort's
//! positions out in the order [`lottery`] draws, so the set of waiting positions, and
//! everyone outside the cohort, stays put; the seed comes from the operation's generator and
//! is kept as [`RoomMeta::draw`].
//!
//! The room's indexes (`waiting`, `priority`, `idle`, `claim_deadlines`, `ended`,
//! `identities`, and the `active` / `admitted_unclaimed` counts) are kept consistent by its
//! methods alone. A ticket that ends, and a session that ends with the ticket that claimed
//! it, leave the ticket and session maps for `history` (`history.rs`), which holds them
//! compactly until `history_retention` is over and answers for them. Ticket and session maps hash their keys with `ids.rs`'s `IdOrderHash` and `RandomIdHash`
//! (the ids are random and never chosen by a client); maps keyed by what a client picks
//! (identities) keep SipHash.

mod bucket;
mod held;
mod history;
mod session;
mod ticket;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Duration;

use rand::Rng;

use crate::clock::Timestamp;
use crate::eta::{AdmissionRate, eta_seconds};
use crate::ids::{IdOrderHash, RandomIdHash, SessionId, TicketId};
use crate::lottery::{self, Seed};
use crate::room::{Limits, Mode, Order, Phase, RoomConfig};
use crate::waiting::{LineLoader, WaitingLine};
use held::HeldTicket;
use history::History;

pub use bucket::AdmissionBucket;
pub use session::{Session, SessionEnd, SessionState};
pub use ticket::{Ticket, TicketEnd, TicketState};

/// The longest `return` path a ticket remembers.
pub const MAX_RETURN_PATH_LEN: usize = 2048;

/// The longest identity a ticket is bound to.
pub const MAX_IDENTITY_LEN: usize = 256;

crate::counter_record! {
    /// Running totals of a room, kept across restarts. Every stored form of them is derived
    /// from this one list (`CounterRecord::FIELDS`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct RoomTotals {
        /// Tickets created.
        joined,
        /// Tickets admitted.
        admitted,
        /// Admitted tickets that never claimed their pass.
        no_show,
        /// Waiting tickets dropped for lack of contact.
        abandoned,
        /// Tickets that left on their own.
        left,
        /// Passes issued (sessions opened).
        passes,
        /// Sessions completed by the site.
        completed,
        /// Sessions abandoned or revoked.
        sessions_abandoned,
        /// Sessions that ran out of time.
        expired,
    }
}

/// The persistent scalar state of a room (everything but its tickets and sessions).
#[derive(Debug, Clone, PartialEq)]
pub struct RoomMeta {
    /// Configuration.
    pub config: RoomConfig,
    /// Generation, bumped by a reset.
    pub generation: u32,
    /// Last issued position (0 before the first join).
    pub last_position: u64,
    /// Highest admitted position (I8: never above `last_position`).
    pub serving: u64,
    /// Admission budget.
    pub bucket: AdmissionBucket,
    /// Measured admission rate.
    pub rate: AdmissionRate,
    /// Running totals.
    pub totals: RoomTotals,
    /// The latest pre-queue lottery (SPEC §5.3), kept for audits.
    pub draw: Option<Draw>,
    /// Joins made so far with each priority access code, by the code's SHA-256.
    pub code_uses: BTreeMap<[u8; 32], u64>,
}

/// A pre-queue lottery as it happened: enough to reproduce it ([`crate::lottery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draw {
    /// The `opens_at` of the event it was drawn for.
    pub opens_at: Timestamp,
    /// When it was drawn (the first operation at or after `opens_at`).
    pub drawn_at: Timestamp,
    /// The seed, drawn from the store's cryptographic generator at the draw.
    pub seed: Seed,
    /// How many waiting tickets it ordered.
    pub cohort: u64,
    /// The room's last issued position at the draw: the cohort waited at or below it.
    pub through_position: u64,
}

/// Something that happened to one ticket or session (SPEC §14.9), recorded by the operation
/// that made it happen, so a backend writes it together with the change itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisitorEvent {
    /// What happened.
    pub kind: VisitorEventKind,
    /// When.
    pub at: Timestamp,
    /// The ticket, when there is one (not for passes issued by hand).
    pub ticket: Option<TicketId>,
    /// The session, once there is one.
    pub session: Option<SessionId>,
    /// The ticket's position at that moment (0 for passes issued by hand).
    pub position: u64,
    /// The room generation the ticket or session belongs to.
    pub generation: u32,
    /// The identity bound to the ticket or pass, when the room has one.
    pub uid: Option<String>,
}

/// What happened to a ticket or session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisitorEventKind {
    /// A new ticket took a place in line.
    Joined,
    /// The admitter let the ticket in.
    Admitted,
    /// The ticket ended before it claimed a pass (or was admitted).
    TicketEnded(TicketEnd),
    /// A pass was issued: a session started.
    PassIssued,
    /// An active session was renewed.
    SessionRenewed,
    /// A session ended.
    SessionEnded(SessionEnd),
}

impl VisitorEventKind {
    /// The event's stable type name, as sinks deliver it.
    pub fn name(self) -> &'static str {
        match self {
            VisitorEventKind::Joined => "ticket.joined",
            VisitorEventKind::Admitted => "ticket.admitted",
            VisitorEventKind::TicketEnded(TicketEnd::Left) => "ticket.left",
            VisitorEventKind::TicketEnded(TicketEnd::Abandoned) => "ticket.abandoned",
            VisitorEventKind::TicketEnded(TicketEnd::NoShow) => "ticket.no_show",
            VisitorEventKind::TicketEnded(TicketEnd::Reset) => "ticket.reset",
            VisitorEventKind::PassIssued => "pass.issued",
            VisitorEventKind::SessionRenewed => "session.renewed",
            VisitorEventKind::SessionEnded(SessionEnd::Completed) => "session.completed",
            VisitorEventKind::SessionEnded(SessionEnd::Abandoned) => "session.abandoned",
            VisitorEventKind::SessionEnded(SessionEnd::Expired) => "session.expired",
            VisitorEventKind::SessionEnded(SessionEnd::Revoked) => "session.revoked",
            VisitorEventKind::SessionEnded(SessionEnd::Reset) => "session.reset",
        }
    }

    fn about_ticket(self, id: TicketId, ticket: &HeldTicket, at: Timestamp) -> VisitorEvent {
        VisitorEvent {
            kind: self,
            at,
            ticket: Some(id),
            session: None,
            position: ticket.position,
            generation: ticket.generation,
            uid: ticket.identity().map(str::to_owned),
        }
    }

    fn about_session(self, session: &Session, at: Timestamp) -> VisitorEvent {
        VisitorEvent {
            kind: self,
            at,
            ticket: session.ticket,
            session: Some(session.id),
            position: session.position,
            generation: session.generation,
            uid: session.uid.clone(),
        }
    }
}

/// Which records an operation changed; a durable backend writes exactly these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    /// The room's [`RoomMeta`] changed.
    pub meta: bool,
    /// Tickets created, changed or deleted (look each up: absent means deleted).
    pub tickets: BTreeSet<TicketId>,
    /// Sessions created, changed or deleted (absent means deleted).
    pub sessions: BTreeSet<SessionId>,
    /// What happened to tickets and sessions, in order (SPEC §14.9).
    pub events: Vec<VisitorEvent>,
}

impl ChangeSet {
    /// Whether nothing durable changed.
    pub fn is_empty(&self) -> bool {
        !self.meta && self.tickets.is_empty() && self.sessions.is_empty()
    }
}

/// A visitor's request to join (or resume).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinRequest {
    /// The ticket the visitor already holds, if any.
    pub resume: Option<TicketRef>,
    /// The visitor's identity, for rooms that bind one.
    pub identity: Option<String>,
    /// Where to go once admitted.
    pub return_to: Option<String>,
    /// A priority access code (SPEC §12): a new ticket joins the priority lane.
    pub priority_code: Option<String>,
    /// Only resume a live ticket (the held one, or the identity's); never make a new one:
    /// [`EngineError::NothingToResume`] instead. The join gate (SPEC §14.2) asks this first,
    /// so a ticket that still verifies but is no longer live never passes for a resume.
    pub resume_only: bool,
}

/// A ticket as named by a client's verified ticket token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketRef {
    /// Ticket id.
    pub id: TicketId,
    /// Generation the token was issued for.
    pub generation: u32,
}

/// What a ticket means right now.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// Still waiting.
    Waiting(WaitingView),
    /// Let in: the session behind the pass.
    Admitted(AdmittedView),
}

/// A waiting ticket's view of the room.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingView {
    /// Ticket id.
    pub ticket: TicketId,
    /// Its position.
    pub position: u64,
    /// Room generation.
    pub generation: u32,
    /// Live tickets ahead of it, exactly.
    pub ahead: u64,
    /// The room's serving counter.
    pub serving: u64,
    /// Live waiting tickets in the room.
    pub waiting: u64,
    /// Expected wait, `None` while the admission rate is unknown or zero.
    pub eta_seconds: Option<u64>,
    /// Admission is stopped (`queue_all`).
    pub paused: bool,
    /// The room is in a scheduled pre-queue opening at this time (SPEC §5.3): the order is
    /// not drawn yet, so `ahead` means nothing.
    pub opens_at: Option<Timestamp>,
    /// Where to go once admitted.
    pub return_to: Option<String>,
}

/// An admitted ticket with its session.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmittedView {
    /// Ticket id.
    pub ticket: TicketId,
    /// Its position.
    pub position: u64,
    /// The room's serving counter.
    pub serving: u64,
    /// Live waiting tickets in the room.
    pub waiting: u64,
    /// The session (same one on every ask, I7).
    pub session: Session,
    /// Where to go now.
    pub return_to: Option<String>,
}

crate::counter_record! {
    /// What one `tick` did.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct TickReport {
        /// Tickets admitted.
        admitted,
        /// Sessions that expired.
        expired,
        /// Admitted tickets that lost their slot unclaimed.
        no_shows,
        /// Waiting tickets abandoned for lack of contact.
        abandoned,
    }
}

/// A consistent summary of a room at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct RoomSnapshot {
    /// Generation.
    pub generation: u32,
    /// Mode.
    pub mode: Mode,
    /// Serving counter.
    pub serving: u64,
    /// Last issued position.
    pub last_position: u64,
    /// Live waiting tickets.
    pub waiting: u64,
    /// Active sessions.
    pub active: u64,
    /// Admitted tickets not yet claimed.
    pub admitted_unclaimed: u64,
    /// Measured admissions per second.
    pub admission_rate: Option<f64>,
    /// Expected wait for somebody joining now.
    pub eta_seconds_for_new: Option<u64>,
    /// Running totals.
    pub totals: RoomTotals,
    /// The latest pre-queue lottery.
    pub draw: Option<Draw>,
}

/// Why an operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The room does not accept joins.
    #[error("room is closed")]
    RoomClosed,
    /// The ticket is unknown (never existed here, or was purged).
    #[error("ticket is unknown")]
    TicketUnknown,
    /// The ticket left, was abandoned, expired, or belongs to an older generation.
    #[error("ticket has expired")]
    TicketExpired,
    /// The session is unknown.
    #[error("session is unknown")]
    SessionUnknown,
    /// The session has ended.
    #[error("session has ended")]
    SessionEnded,
    /// Every capacity slot is taken (`max_active`): a pass by hand would break I2.
    #[error("room is full")]
    RoomFull,
    /// The priority access code is not one of the room's, or has been used up.
    #[error("priority access code is invalid or used up")]
    InvalidPriorityCode,
    /// A resume-only join found no live ticket to resume; nothing changed.
    #[error("no live ticket to resume")]
    NothingToResume,
}

/// The idle index of a restored room. A waiting ticket's last contact is `now` unless it was
/// seen later (a clock set back), so nearly every key is `(now, position)` and comes in order
/// from the lines, already built: no sort of millions of keys read in the store's order (by
/// id, positions at random). The few seen after `now` sort after them.
fn restored_idle_index(
    waiting: &WaitingLine,
    priority: &WaitingLine,
    now: Timestamp,
    mut seen_after_now: Vec<(Timestamp, u64)>,
) -> BTreeSet<(Timestamp, u64)> {
    seen_after_now.sort_unstable();
    let later: HashSet<u64> = seen_after_now
        .iter()
        .map(|(_, position)| *position)
        .collect();
    let at_now = waiting
        .iter()
        .chain(priority.iter())
        .filter(|(position, _)| later.is_empty() || !later.contains(position))
        .map(|(position, _)| (now, position));
    // Three runs in order (the two lines, then the later ones): `collect` merges them in
    // linear time and builds the tree bottom up, its nodes full.
    at_now.chain(seen_after_now).collect()
}

/// One room: its meta state, tickets, sessions and the indexes over them.
#[derive(Debug, Clone)]
pub struct RoomState {
    meta: RoomMeta,
    /// Hashed so that a restore, reading tickets in id order, fills the table front to back.
    tickets: HashMap<TicketId, HeldTicket, IdOrderHash>,
    sessions: HashMap<SessionId, Session, RandomIdHash>,
    waiting: WaitingLine,
    /// Waiting tickets that joined with a priority access code: admitted before `waiting`.
    priority: WaitingLine,
    /// Waiting tickets by last contact and position, for abandonment. Keyed by position (no
    /// two waiting tickets share one; the lines map it back to the id) rather than by id: 16-byte
    /// keys instead of 24, about 15 bytes less per waiting ticket.
    idle: BTreeSet<(Timestamp, u64)>,
    /// Admitted tickets by claim deadline, for no-shows.
    claim_deadlines: BTreeSet<(Timestamp, TicketId)>,
    /// Ended tickets held whole (not in `history`) in end order, for garbage collection.
    ended: VecDeque<(Timestamp, TicketId)>,
    /// Ended tickets and sessions, compactly (most of them; the others stay in `tickets`
    /// and `sessions`).
    history: History,
    identities: HashMap<String, TicketId>,
    active: u64,
    admitted_unclaimed: u64,
}

impl RoomState {
    /// A new, empty room.
    pub fn new(config: RoomConfig, now: Timestamp) -> RoomState {
        let meta = RoomMeta {
            bucket: AdmissionBucket::full(config.limits_at(now), now),
            config,
            generation: 1,
            last_position: 0,
            serving: 0,
            rate: AdmissionRate::default(),
            totals: RoomTotals::default(),
            draw: None,
            code_uses: BTreeMap::new(),
        };
        RoomState::restore(meta, Vec::new(), Vec::new(), now)
    }

    /// Rebuilds a room from its persisted records. Waiting tickets get `now` as their last
    /// contact at the latest, so a restart never abandons anybody.
    pub fn restore(
        meta: RoomMeta,
        tickets: impl IntoIterator<Item = Ticket>,
        sessions: Vec<Session>,
        now: Timestamp,
    ) -> RoomState {
        RoomState::restore_expecting(meta, tickets, 0, sessions, now)
    }

    /// [`restore`](Self::restore) with the ticket map sized up front for `expected_tickets`
    /// (a hint, for a stream that does not know its length): a map of millions grown by
    /// doubling moves every ticket again at each step, and touches memory it then gives back.
    pub fn restore_expecting(
        meta: RoomMeta,
        tickets: impl IntoIterator<Item = Ticket>,
        expected_tickets: usize,
        sessions: Vec<Session>,
        now: Timestamp,
    ) -> RoomState {
        let tickets = tickets.into_iter();
        let capacity = expected_tickets.max(tickets.size_hint().0);
        let mut room = RoomState {
            meta,
            tickets: HashMap::with_capacity_and_hasher(
                capacity,
                IdOrderHash::for_capacity(capacity),
            ),
            sessions: HashMap::with_capacity_and_hasher(sessions.len(), RandomIdHash),
            waiting: WaitingLine::new(),
            priority: WaitingLine::new(),
            idle: BTreeSet::new(),
            claim_deadlines: BTreeSet::new(),
            ended: VecDeque::new(),
            history: History::default(),
            identities: HashMap::new(),
            active: 0,
            admitted_unclaimed: 0,
        };
        // The tickets come in the store's order (by id: positions at random), so the lines and
        // the idle index are built once at the end rather than updated ticket by ticket.
        let mut ended = Vec::new();
        let (mut waiting, mut priority) = (LineLoader::new(), LineLoader::new());
        let mut seen_after_now = Vec::new();
        for ticket in tickets {
            let (id, mut ticket) = HeldTicket::from_ticket(ticket);
            let state = ticket.state();
            match state {
                TicketState::Waiting => {
                    ticket.last_seen = ticket.last_seen.max(now);
                    let line = if ticket.priority {
                        &mut priority
                    } else {
                        &mut waiting
                    };
                    line.insert(ticket.position, id);
                    if ticket.last_seen > now {
                        seen_after_now.push((ticket.last_seen, ticket.position));
                    }
                }
                TicketState::Admitted { claim_deadline, .. } => {
                    room.admitted_unclaimed += 1;
                    room.claim_deadlines.insert((claim_deadline, id));
                }
                TicketState::Claimed { .. } => {}
                TicketState::Ended { at, .. } => ended.push((at, id)),
            }
            if let Some(identity) = ticket.identity()
                && !matches!(state, TicketState::Ended { .. })
            {
                room.identities.insert(identity.to_owned(), id);
            }
            room.tickets.insert(id, ticket);
        }
        ended.sort();
        room.ended = ended.into();
        room.waiting = waiting.finish();
        room.priority = priority.finish();
        room.idle = restored_idle_index(&room.waiting, &room.priority, now, seen_after_now);
        for session in sessions {
            if session.state == SessionState::Active {
                room.active += 1;
            }
            room.sessions.insert(session.id, session);
        }
        room.move_restored_history();
        room
    }

    /// Moves the restored ended tickets and sessions into `history`, in end order.
    fn move_restored_history(&mut self) {
        let tickets = std::mem::take(&mut self.ended);
        let mut sessions: Vec<(Timestamp, SessionId)> = self
            .sessions
            .values()
            .filter_map(|session| match session.state {
                SessionState::Ended { at, .. } if session.ticket.is_some() => {
                    Some((at, session.id))
                }
                _ => None,
            })
            .collect();
        sessions.sort_unstable();
        let mut tickets = tickets.into_iter().peekable();
        let mut sessions = sessions.into_iter().peekable();
        loop {
            let ticket_first = match (tickets.peek(), sessions.peek()) {
                (Some(ticket), Some(session)) => ticket.0 <= session.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if ticket_first {
                if let Some((at, ticket)) = tickets.next() {
                    self.keep_ended_ticket(ticket, at);
                }
            } else if let Some((_, session)) = sessions.next() {
                self.keep_ended_session(session);
            }
        }
    }

    /// Moves an ended ticket into `history`, or into the end-order queue when it stays whole.
    fn keep_ended_ticket(&mut self, ticket_id: TicketId, ended_at: Timestamp) {
        let Some(ticket) = self.tickets.remove(&ticket_id) else {
            return;
        };
        if let Some(ticket) = self.history.take_ticket(ticket_id, ticket) {
            self.tickets.insert(ticket_id, ticket);
            self.ended.push_back((ended_at, ticket_id));
        }
    }

    /// Moves an ended session and the ticket that claimed it into `history`, when they fit.
    fn keep_ended_session(&mut self, session_id: SessionId) {
        let Some(session) = self.sessions.remove(&session_id) else {
            return;
        };
        let claimed_by = session
            .ticket
            .and_then(|ticket_id| Some((ticket_id, self.tickets.remove(&ticket_id)?)));
        let Some((ticket_id, ticket)) = claimed_by else {
            self.sessions.insert(session_id, session);
            return;
        };
        if let Some(ticket) = self.history.take_session(ticket_id, ticket, &session) {
            self.tickets.insert(ticket_id, ticket);
            self.sessions.insert(session_id, session);
        }
    }

    /// The room's scalar state.
    pub fn meta(&self) -> &RoomMeta {
        &self.meta
    }

    /// The room's configuration.
    pub fn config(&self) -> &RoomConfig {
        &self.meta.config
    }

    /// A ticket by id.
    pub fn ticket(&self, id: TicketId) -> Option<Ticket> {
        match self.tickets.get(&id) {
            Some(held) => Some(held.to_ticket(id)),
            None => self.history.ticket(id),
        }
    }

    /// A session by id.
    pub fn session(&self, id: SessionId) -> Option<Session> {
        match self.sessions.get(&id) {
            Some(session) => Some(session.clone()),
            None => self.history.session(id),
        }
    }

    /// Every ticket the room remembers.
    pub fn tickets(&self) -> impl Iterator<Item = Ticket> + '_ {
        self.tickets
            .iter()
            .map(|(id, held)| held.to_ticket(*id))
            .chain(self.history.tickets())
    }

    /// Every session the room remembers: the ones held whole borrowed, the ended ones kept
    /// compactly made on the way.
    pub fn sessions(&self) -> impl Iterator<Item = Cow<'_, Session>> {
        self.sessions
            .values()
            .map(Cow::Borrowed)
            .chain(self.history.sessions().map(Cow::Owned))
    }

    /// Whether a pass for `session` must be refused although its signature and expiry are
    /// fine: the session ended early (completed, abandoned, revoked, reset) or is unknown.
    /// (Every session in `history` has ended.)
    pub fn is_revoked(&self, session: SessionId) -> bool {
        match self.sessions.get(&session) {
            Some(found) => found.state != SessionState::Active,
            None => true,
        }
    }

    /// Sessions ended early whose passes have not yet expired: the room's revocation set.
    pub fn revoked_sessions(&self, now: Timestamp) -> Vec<(SessionId, Timestamp)> {
        self.sessions
            .values()
            .filter(|s| {
                matches!(s.state, SessionState::Ended { reason, .. } if reason != SessionEnd::Expired)
                    && s.expires_at > now
            })
            .map(|s| (s.id, s.expires_at))
            .chain(self.history.revoked_sessions(now))
            .collect()
    }

    /// A consistent summary of the room.
    pub fn snapshot(&self) -> RoomSnapshot {
        RoomSnapshot {
            generation: self.meta.generation,
            mode: self.meta.config.mode,
            serving: self.meta.serving,
            last_position: self.meta.last_position,
            waiting: self.n_waiting(),
            active: self.active,
            admitted_unclaimed: self.admitted_unclaimed,
            admission_rate: self.meta.rate.per_second(),
            eta_seconds_for_new: eta_seconds(self.n_waiting(), &self.meta.rate),
            totals: self.meta.totals,
            draw: self.meta.draw,
        }
    }

    /// Positions of the live waiting tickets of the regular line (not the priority lane), in
    /// order: what `ahead` of a regular ticket counts.
    pub fn waiting_positions(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().map(|(position, _)| position)
    }

    /// Keeps waiting tickets alive (an open SSE stream is contact too, SPEC §5.2); returns how
    /// many of them were still waiting. Tickets of another generation are ignored.
    pub fn touch_waiting(&mut self, tickets: &[TicketRef], now: Timestamp) -> u64 {
        let mut waiting = 0;
        for reference in tickets {
            let current = self.tickets.get(&reference.id).is_some_and(|t| {
                t.generation == reference.generation && t.state() == TicketState::Waiting
            });
            if current {
                self.touch(reference.id, now);
                waiting += 1;
            }
        }
        waiting
    }

    /// Replaces the configuration, keeping queue, sessions and counters. The admission budget
    /// earned under the old rate is kept (trimmed to the new burst); a room that had no rate
    /// limit starts its new one with a full bucket.
    pub fn set_config(&mut self, config: RoomConfig, now: Timestamp, changes: &mut ChangeSet) {
        let old_limits = self.meta.config.limits_at(now);
        let was_unlimited = old_limits.admit_per_minute == 0;
        self.meta.bucket.refill(old_limits, now);
        self.meta.config = config;
        let limits = self.meta.config.limits_at(now);
        if was_unlimited {
            self.meta.bucket = AdmissionBucket::full(limits, now);
        }
        self.meta.bucket.clamp(limits);
        changes.meta = true;
    }

    /// Joins the queue, or resumes the visitor's live ticket (by token or identity). In a
    /// `queue` room where nobody waits and limits allow, the visitor is admitted and claims a
    /// session at once; a `passthrough` room admits everybody.
    pub fn join(
        &mut self,
        request: JoinRequest,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> Result<Entry, EngineError> {
        let mode = self.meta.config.mode_at(now);
        if mode == Mode::Closed {
            return Err(EngineError::RoomClosed);
        }
        self.settle_schedule(now, rng, changes);
        let identity = request.identity.map(|i| truncate(i, MAX_IDENTITY_LEN));
        if let Some(entry) =
            self.resume_live(identity.as_deref(), request.resume, now, rng, changes)?
        {
            return Ok(entry);
        }
        if request.resume_only {
            return Err(EngineError::NothingToResume);
        }
        let priority = self.check_priority_code(request.priority_code.as_deref())?;
        let return_to = request
            .return_to
            .filter(|path| path.len() <= MAX_RETURN_PATH_LEN);
        let ticket_id = self.add_waiting_ticket(identity, return_to, priority, now, rng, changes);
        if !self.admits_at_once(mode, now) {
            // What `status` answers for a ticket that has just joined: the schedule was settled
            // above at the same time, and its last contact is now.
            return Ok(Entry::Waiting(self.waiting_view(ticket_id, now)));
        }
        self.admit(ticket_id, now, changes);
        self.status(
            TicketRef {
                id: ticket_id,
                generation: self.meta.generation,
            },
            now,
            rng,
            changes,
        )
    }

    /// The visitor's live ticket, if it has one: in an identity room the identity decides
    /// which ticket is resumed, so a ticket token presented by somebody else (a shared
    /// browser) never hands over another user's place.
    fn resume_live(
        &mut self,
        identity: Option<&str>,
        held: Option<TicketRef>,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> Result<Option<Entry>, EngineError> {
        let resumable = match identity {
            Some(identity) => self.identities.get(identity).copied(),
            None => held
                .filter(|held| held.generation == self.meta.generation)
                .map(|held| held.id),
        };
        let Some(ticket_id) = resumable else {
            return Ok(None);
        };
        let reference = TicketRef {
            id: ticket_id,
            generation: self.meta.generation,
        };
        match self.status(reference, now, rng, changes) {
            Ok(entry) => Ok(Some(entry)),
            Err(EngineError::TicketExpired | EngineError::TicketUnknown) => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// The SHA-256 of a priority access code that still has uses left. A code is checked
    /// (and counted, by [`add_waiting_ticket`](Self::add_waiting_ticket)) only for a new
    /// ticket: resuming never spends one.
    fn check_priority_code(&self, code: Option<&str>) -> Result<Option<[u8; 32]>, EngineError> {
        let Some(code) = code else {
            return Ok(None);
        };
        let (hash, uses) = self
            .meta
            .config
            .priority_code(code)
            .ok_or(EngineError::InvalidPriorityCode)?;
        if self.meta.code_uses.get(&hash).copied().unwrap_or(0) >= uses {
            return Err(EngineError::InvalidPriorityCode);
        }
        Ok(Some(hash))
    }

    /// Issues the next position to a new waiting ticket (in the priority lane when it came
    /// with a code, which is then counted as used).
    fn add_waiting_ticket(
        &mut self,
        identity: Option<String>,
        return_to: Option<String>,
        priority: Option<[u8; 32]>,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> TicketId {
        if let Some(hash) = priority {
            *self.meta.code_uses.entry(hash).or_insert(0) += 1;
        }
        self.meta.last_position += 1;
        self.meta.totals.joined += 1;
        let ticket_id = TicketId::random(rng);
        if let Some(identity) = &identity {
            self.identities.insert(identity.clone(), ticket_id);
        }
        let ticket = HeldTicket::waiting(
            self.meta.last_position,
            self.meta.generation,
            now,
            identity,
            return_to,
            priority.is_some(),
        );
        self.line_mut(ticket.priority)
            .insert(ticket.position, ticket_id);
        self.idle.insert((now, ticket.position));
        changes
            .events
            .push(VisitorEventKind::Joined.about_ticket(ticket_id, &ticket, now));
        self.tickets.insert(ticket_id, ticket);
        changes.meta = true;
        changes.tickets.insert(ticket_id);
        ticket_id
    }

    /// Whether the ticket that has just joined goes in at once (which spends one admission):
    /// always in a `passthrough` room; in a `queue` room when it is the only one waiting and
    /// a slot and the admission budget allow.
    fn admits_at_once(&mut self, mode: Mode, now: Timestamp) -> bool {
        let limits = self.meta.config.limits_at(now);
        let admits = match mode {
            Mode::Passthrough => true,
            Mode::Queue => {
                self.meta.bucket.refill(limits, now);
                self.n_waiting() == 1
                    && self.free_slots(limits) >= 1
                    && self.meta.bucket.available(limits) >= 1
            }
            Mode::QueueAll | Mode::Closed => false,
        };
        if admits {
            self.meta.bucket.spend(limits, 1);
        }
        admits
    }

    /// The current meaning of a ticket; keeps a waiting ticket alive, and claims the session of
    /// an admitted one (returning the same session on every later ask, I7).
    pub fn status(
        &mut self,
        reference: TicketRef,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> Result<Entry, EngineError> {
        if reference.generation != self.meta.generation {
            return Err(EngineError::TicketExpired);
        }
        self.settle_schedule(now, rng, changes);
        let Some(ticket) = self.tickets.get(&reference.id) else {
            // An ended ticket, of this generation or not.
            return match self.history.ticket_generation(reference.id) {
                Some(_) => Err(EngineError::TicketExpired),
                None => Err(EngineError::TicketUnknown),
            };
        };
        if ticket.generation != reference.generation {
            return Err(EngineError::TicketExpired);
        }
        match ticket.state() {
            TicketState::Waiting => {
                self.touch(reference.id, now);
                Ok(Entry::Waiting(self.waiting_view(reference.id, now)))
            }
            TicketState::Admitted { .. } => {
                let session = self.claim(reference.id, now, rng, changes);
                Ok(self.admitted_entry(reference.id, session))
            }
            TicketState::Claimed { session } => {
                let expired = self
                    .sessions
                    .get(&session)
                    .is_none_or(|s| s.state != SessionState::Active || !session_alive(s, now));
                if expired {
                    self.expire_session_if_due(session, now, changes);
                    return Err(EngineError::TicketExpired);
                }
                Ok(self.admitted_entry(reference.id, session))
            }
            TicketState::Ended { .. } => Err(EngineError::TicketExpired),
        }
    }

    /// Leaves: a waiting ticket leaves the line, an admitted one gives its slot up, and one
    /// holding a pass abandons its session (the pass is revoked). Returns whether a capacity
    /// slot was freed (the caller then ticks so it is refilled).
    pub fn leave(
        &mut self,
        reference: TicketRef,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> Result<bool, EngineError> {
        self.settle_schedule(now, rng, changes);
        let Some(ticket) = self.tickets.get(&reference.id) else {
            // Leaving again once ended changes nothing.
            return match self.history.ticket_generation(reference.id) {
                Some(generation) if generation == reference.generation => Ok(false),
                Some(_) => Err(EngineError::TicketExpired),
                None => Err(EngineError::TicketUnknown),
            };
        };
        if ticket.generation != reference.generation {
            return Err(EngineError::TicketExpired);
        }
        match ticket.state() {
            state @ (TicketState::Waiting | TicketState::Admitted { .. }) => {
                let freed = matches!(state, TicketState::Admitted { .. });
                self.end_ticket(reference.id, TicketEnd::Left, now, changes);
                self.meta.totals.left += 1;
                changes.meta = true;
                Ok(freed)
            }
            // Leaving with a pass gives the slot up at once and revokes the pass.
            TicketState::Claimed { session } => {
                let active = self
                    .sessions
                    .get(&session)
                    .is_some_and(|s| s.state == SessionState::Active);
                if active {
                    self.finish_session(session, SessionEnd::Abandoned, now, changes);
                }
                Ok(active)
            }
            TicketState::Ended { .. } => Ok(false),
        }
    }

    /// Ends a session early (completed, abandoned or revoked), freeing its slot and putting its
    /// pass on the revocation set. Ending an ended session again changes nothing.
    pub fn end_session(
        &mut self,
        session: SessionId,
        reason: SessionEnd,
        now: Timestamp,
        changes: &mut ChangeSet,
    ) -> Result<Session, EngineError> {
        let active = match self.sessions.get(&session) {
            Some(found) => found.state == SessionState::Active,
            None if self.history.holds_session(session) => false,
            None => return Err(EngineError::SessionUnknown),
        };
        if active {
            self.finish_session(session, reason, now, changes);
        }
        self.session(session).ok_or(EngineError::SessionUnknown)
    }

    /// Renews a session on use once more than half of `session_ttl` has passed since its last
    /// renewal (one write per renewal, not per request). Returns the session and whether it
    /// was renewed.
    pub fn renew_session(
        &mut self,
        session: SessionId,
        now: Timestamp,
        changes: &mut ChangeSet,
    ) -> Result<(Session, bool), EngineError> {
        let ttl = self.meta.config.session_ttl;
        let Some(found) = self.sessions.get_mut(&session) else {
            return match self.history.holds_session(session) {
                true => Err(EngineError::SessionEnded),
                false => Err(EngineError::SessionUnknown),
            };
        };
        if found.state != SessionState::Active || !session_alive(found, now) {
            return Err(EngineError::SessionEnded);
        }
        let half_ttl = ttl / 2;
        if now.since(found.renewed_at) <= half_ttl {
            return Ok((found.clone(), false));
        }
        found.renewed_at = now;
        found.expires_at = cap(now.after(ttl), found.hard_expires_at);
        changes.sessions.insert(session);
        changes
            .events
            .push(VisitorEventKind::SessionRenewed.about_session(found, now));
        Ok((found.clone(), true))
    }

    /// Issues a session by hand (an operator's VIP pass): it does not take a ticket, and it
    /// counts against capacity like any other session, so it is refused when every slot is
    /// taken (I2).
    pub fn issue_session(
        &mut self,
        uid: Option<String>,
        ttl: Duration,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> Result<Session, EngineError> {
        let limits = self.meta.config.limits_at(now);
        if self.meta.config.mode_at(now) != Mode::Passthrough && self.free_slots(limits) == 0 {
            return Err(EngineError::RoomFull);
        }
        let session = Session {
            id: SessionId::random(rng),
            ticket: None,
            position: 0,
            generation: self.meta.generation,
            uid,
            issued_at: now,
            renewed_at: now,
            expires_at: now.after(ttl),
            hard_expires_at: Some(now.after(ttl)),
            state: SessionState::Active,
        };
        self.active += 1;
        self.meta.totals.passes += 1;
        changes
            .events
            .push(VisitorEventKind::PassIssued.about_session(&session, now));
        self.sessions.insert(session.id, session.clone());
        changes.sessions.insert(session.id);
        changes.meta = true;
        Ok(session)
    }

    /// The admitter (SPEC §5.1): expire sessions and no-shows, abandon idle tickets, refill the
    /// admission bucket, admit up to the free capacity, advance serving, and forget history
    /// older than the room's `history_retention`.
    pub fn tick(
        &mut self,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> TickReport {
        self.settle_schedule(now, rng, changes);
        let had_demand = self.n_waiting() > 0;
        let mut report = TickReport {
            expired: self.expire_sessions(now, changes),
            no_shows: self.end_no_shows(now, changes),
            abandoned: self.abandon_idle(now, changes),
            admitted: 0,
        };
        report.admitted = self.admit_due(now, rng, changes);
        self.meta.rate.record(report.admitted, had_demand, now);

        self.forget_history(now, changes);
        if report != TickReport::default() {
            changes.meta = true;
        }
        report
    }

    /// Ends the active sessions whose time has run out; returns how many.
    fn expire_sessions(&mut self, now: Timestamp, changes: &mut ChangeSet) -> u64 {
        let due_sessions: Vec<SessionId> = self
            .sessions
            .values()
            .filter(|s| s.state == SessionState::Active && !session_alive(s, now))
            .map(|s| s.id)
            .collect();
        for &session in &due_sessions {
            self.finish_session(session, SessionEnd::Expired, now, changes);
        }
        due_sessions.len() as u64
    }

    /// Ends the admitted tickets whose claim deadline has passed; returns how many.
    fn end_no_shows(&mut self, now: Timestamp, changes: &mut ChangeSet) -> u64 {
        let mut no_shows = 0;
        while let Some(&(deadline, ticket)) = self.claim_deadlines.first() {
            if deadline > now {
                break;
            }
            self.end_ticket(ticket, TicketEnd::NoShow, now, changes);
            self.meta.totals.no_show += 1;
            no_shows += 1;
        }
        no_shows
    }

    /// Ends the waiting tickets not seen for `ticket_idle_ttl`; returns how many.
    fn abandon_idle(&mut self, now: Timestamp, changes: &mut ChangeSet) -> u64 {
        let idle_ttl = self.meta.config.ticket_idle_ttl;
        let mut abandoned = 0;
        while let Some(&(last_seen, position)) = self.idle.first() {
            if last_seen.after(idle_ttl) > now {
                break;
            }
            let Some(ticket) = self.waiting.get(position).or(self.priority.get(position)) else {
                // Not reachable while the index and the lines agree; dropping the entry keeps
                // the admitter from spinning on it if they ever did not.
                self.idle.pop_first();
                continue;
            };
            self.end_ticket(ticket, TicketEnd::Abandoned, now, changes);
            self.meta.totals.abandoned += 1;
            abandoned += 1;
        }
        abandoned
    }

    /// Admits as many waiting tickets as the mode, the free capacity and the admission budget
    /// allow (the priority lane first, then the room's order); returns how many.
    fn admit_due(&mut self, now: Timestamp, rng: &mut impl Rng, changes: &mut ChangeSet) -> u64 {
        let limits = self.meta.config.limits_at(now);
        let mode = self.meta.config.mode_at(now);
        self.meta.bucket.refill(limits, now);
        let admissions = match mode {
            Mode::Queue => self
                .n_waiting()
                .min(self.free_slots(limits))
                .min(self.meta.bucket.available(limits)),
            Mode::Passthrough => self.n_waiting(),
            Mode::QueueAll | Mode::Closed => 0,
        };
        if mode == Mode::Queue {
            self.meta.bucket.spend(limits, admissions);
        }
        let mut admitted = 0;
        for _ in 0..admissions {
            // The priority lane goes first, in join order (SPEC §12).
            let next = match self.meta.config.order {
                _ if !self.priority.is_empty() => self.priority.first(),
                Order::Fifo => self.waiting.first(),
                Order::Random => self.waiting.nth(rng.gen_range(0..self.waiting.len())),
            };
            let Some((_, ticket)) = next else { break };
            self.admit(ticket, now, changes);
            admitted += 1;
        }
        admitted
    }

    /// The operator's advance by hand (SPEC §5.1, §8.1): admits up to `count` more waiting
    /// tickets now, lowest positions first whatever the room's order, so the serving counter
    /// moves forward like AWS's increment but never past the last issued position (I8). It
    /// ignores the admission bucket and the mode (an operator may let a few in while paused),
    /// but not capacity: with `max_active > 0` it admits at most the free slots, so I2 holds.
    /// Returns how many tickets were admitted.
    pub fn advance(
        &mut self,
        count: u64,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> u64 {
        self.settle_schedule(now, rng, changes);
        let had_demand = self.n_waiting() > 0;
        let limits = self.meta.config.limits_at(now);
        let admissions = count.min(self.n_waiting()).min(self.free_slots(limits));
        let mut admitted = 0;
        for _ in 0..admissions {
            let Some((_, ticket)) = self.priority.first().or_else(|| self.waiting.first()) else {
                break;
            };
            self.admit(ticket, now, changes);
            admitted += 1;
        }
        if admitted > 0 {
            self.meta.rate.record(admitted, had_demand, now);
            changes.meta = true;
        }
        admitted
    }

    /// Starts a new generation: every waiting and admitted ticket ends, every active session is
    /// revoked, and (with `purge`) the records of the old generation are deleted. Positions go
    /// on increasing, so I1 holds across generations too.
    pub fn reset(&mut self, purge: bool, now: Timestamp, changes: &mut ChangeSet) {
        let live: Vec<TicketId> = self
            .tickets
            .iter()
            .filter(|(_, t)| {
                matches!(
                    t.state(),
                    TicketState::Waiting | TicketState::Admitted { .. }
                )
            })
            .map(|(id, _)| *id)
            .collect();
        for ticket in live {
            self.end_ticket(ticket, TicketEnd::Reset, now, changes);
        }
        let active: Vec<SessionId> = self
            .sessions
            .values()
            .filter(|s| s.state == SessionState::Active)
            .map(|s| s.id)
            .collect();
        for session in active {
            self.finish_session(session, SessionEnd::Reset, now, changes);
        }
        self.meta.generation += 1;
        self.meta.serving = self.meta.last_position;
        changes.meta = true;
        if purge {
            changes.tickets.extend(self.tickets.keys().copied());
            changes.sessions.extend(self.sessions.keys().copied());
            self.history
                .purge((&mut changes.tickets, &mut changes.sessions));
            self.tickets.clear();
            self.sessions.clear();
            self.ended.clear();
            self.identities.clear();
        }
    }

    /// Draws the pre-queue lottery once an event with `shuffle` has opened (SPEC §5.3):
    /// every ticket waiting at that moment (the cohort; later joiners get higher positions)
    /// is given one of the cohort's positions in the order [`lottery::shuffled_order`] makes
    /// of a fresh seed. The set of waiting positions does not change, so nobody outside the
    /// cohort moves, and FIFO by the new positions keeps `ahead` from ever growing (I5).
    fn settle_schedule(&mut self, now: Timestamp, rng: &mut impl Rng, changes: &mut ChangeSet) {
        let Phase::Open { event } = self.meta.config.phase(now) else {
            return;
        };
        let Some(event) = self.meta.config.schedule.events.get(event) else {
            return;
        };
        let drawn = self
            .meta
            .draw
            .is_some_and(|draw| draw.opens_at >= event.opens_at);
        if !event.shuffle || drawn {
            return;
        }
        let opens_at = event.opens_at;
        let mut seed: Seed = [0; 32];
        rng.fill(&mut seed);
        let cohort: Vec<(u64, TicketId)> = self.waiting.iter().collect();
        // The idle index is keyed by position: take the cohort out before positions move.
        for (position, ticket_id) in &cohort {
            if let Some(ticket) = self.tickets.get(ticket_id) {
                self.idle.remove(&(ticket.last_seen, *position));
            }
        }
        let order = lottery::shuffled_order(&seed, cohort.len());
        for (slot, &member) in order.iter().enumerate() {
            let (position, _) = cohort[slot];
            let (_, ticket_id) = cohort[member];
            self.waiting.insert(position, ticket_id);
            if let Some(ticket) = self.tickets.get_mut(&ticket_id) {
                ticket.position = position;
                self.idle.insert((ticket.last_seen, position));
            }
            changes.tickets.insert(ticket_id);
        }
        self.meta.draw = Some(Draw {
            opens_at,
            drawn_at: now,
            seed,
            cohort: cohort.len() as u64,
            through_position: self.meta.last_position,
        });
        changes.meta = true;
    }

    /// Live waiting tickets, both lanes.
    fn n_waiting(&self) -> u64 {
        self.waiting.len() + self.priority.len()
    }

    fn line(&self, priority: bool) -> &WaitingLine {
        if priority {
            &self.priority
        } else {
            &self.waiting
        }
    }

    fn line_mut(&mut self, priority: bool) -> &mut WaitingLine {
        if priority {
            &mut self.priority
        } else {
            &mut self.waiting
        }
    }

    fn free_slots(&self, limits: Limits) -> u64 {
        let limit = limits.max_active;
        if limit == 0 {
            return u64::MAX;
        }
        limit.saturating_sub(self.active + self.admitted_unclaimed)
    }

    fn admit(&mut self, ticket_id: TicketId, now: Timestamp, changes: &mut ChangeSet) {
        let claim_deadline = now.after(self.meta.config.claim_ttl);
        let Some(ticket) = self.tickets.get_mut(&ticket_id) else {
            return;
        };
        let line = if ticket.priority {
            &mut self.priority
        } else {
            &mut self.waiting
        };
        line.remove(ticket.position);
        self.idle.remove(&(ticket.last_seen, ticket.position));
        ticket.set_state(TicketState::Admitted {
            at: now,
            claim_deadline,
        });
        self.meta.serving = self.meta.serving.max(ticket.position);
        self.claim_deadlines.insert((claim_deadline, ticket_id));
        self.admitted_unclaimed += 1;
        self.meta.totals.admitted += 1;
        changes
            .events
            .push(VisitorEventKind::Admitted.about_ticket(ticket_id, ticket, now));
        changes.tickets.insert(ticket_id);
        changes.meta = true;
    }

    /// Turns an admitted ticket into a session; the capacity slot moves from
    /// admitted-unclaimed to active, so I2 is unaffected.
    fn claim(
        &mut self,
        ticket_id: TicketId,
        now: Timestamp,
        rng: &mut impl Rng,
        changes: &mut ChangeSet,
    ) -> SessionId {
        let config = &self.meta.config;
        let hard_expires_at = config.session_max.map(|max| now.after(max));
        let expires_at = cap(now.after(config.session_ttl), hard_expires_at);
        let session_id = SessionId::random(rng);
        let Some(ticket) = self.tickets.get_mut(&ticket_id) else {
            return session_id;
        };
        if let TicketState::Admitted { claim_deadline, .. } = ticket.state() {
            self.claim_deadlines.remove(&(claim_deadline, ticket_id));
            self.admitted_unclaimed -= 1;
        }
        ticket.set_state(TicketState::Claimed {
            session: session_id,
        });
        let session = Session {
            id: session_id,
            ticket: Some(ticket_id),
            position: ticket.position,
            generation: ticket.generation,
            uid: ticket.identity().map(str::to_owned),
            issued_at: now,
            renewed_at: now,
            expires_at,
            hard_expires_at,
            state: SessionState::Active,
        };
        changes
            .events
            .push(VisitorEventKind::PassIssued.about_session(&session, now));
        self.sessions.insert(session_id, session);
        self.active += 1;
        self.meta.totals.passes += 1;
        changes.tickets.insert(ticket_id);
        changes.sessions.insert(session_id);
        changes.meta = true;
        session_id
    }

    fn touch(&mut self, ticket_id: TicketId, now: Timestamp) {
        let Some(ticket) = self.tickets.get_mut(&ticket_id) else {
            return;
        };
        if ticket.state() == TicketState::Waiting && ticket.last_seen < now {
            self.idle.remove(&(ticket.last_seen, ticket.position));
            ticket.last_seen = now;
            self.idle.insert((now, ticket.position));
        }
    }

    fn end_ticket(
        &mut self,
        ticket_id: TicketId,
        reason: TicketEnd,
        now: Timestamp,
        changes: &mut ChangeSet,
    ) {
        let Some(ticket) = self.tickets.get_mut(&ticket_id) else {
            return;
        };
        match ticket.state() {
            TicketState::Waiting => {
                let line = if ticket.priority {
                    &mut self.priority
                } else {
                    &mut self.waiting
                };
                line.remove(ticket.position);
                self.idle.remove(&(ticket.last_seen, ticket.position));
            }
            TicketState::Admitted { claim_deadline, .. } => {
                self.claim_deadlines.remove(&(claim_deadline, ticket_id));
                self.admitted_unclaimed -= 1;
            }
            TicketState::Claimed { .. } | TicketState::Ended { .. } => {}
        }
        if let Some(identity) = ticket.identity()
            && self.identities.get(identity) == Some(&ticket_id)
        {
            self.identities.remove(identity);
        }
        ticket.set_state(TicketState::Ended { reason, at: now });
        changes
            .events
            .push(VisitorEventKind::TicketEnded(reason).about_ticket(ticket_id, ticket, now));
        self.keep_ended_ticket(ticket_id, now);
        changes.tickets.insert(ticket_id);
        changes.meta = true;
    }

    fn finish_session(
        &mut self,
        session_id: SessionId,
        reason: SessionEnd,
        now: Timestamp,
        changes: &mut ChangeSet,
    ) {
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return;
        };
        if session.state != SessionState::Active {
            return;
        }
        session.state = SessionState::Ended { reason, at: now };
        changes
            .events
            .push(VisitorEventKind::SessionEnded(reason).about_session(session, now));
        self.active -= 1;
        let totals = &mut self.meta.totals;
        match reason {
            SessionEnd::Completed => totals.completed += 1,
            SessionEnd::Abandoned | SessionEnd::Revoked => totals.sessions_abandoned += 1,
            SessionEnd::Expired => totals.expired += 1,
            SessionEnd::Reset => {}
        }
        if let Some(ticket_id) = session.ticket
            && let Some(ticket) = self.tickets.get(&ticket_id)
            && let Some(identity) = ticket.identity()
            && self.identities.get(identity) == Some(&ticket_id)
        {
            self.identities.remove(identity);
        }
        self.keep_ended_session(session_id);
        changes.sessions.insert(session_id);
        changes.meta = true;
    }

    fn expire_session_if_due(
        &mut self,
        session: SessionId,
        now: Timestamp,
        changes: &mut ChangeSet,
    ) {
        let due = self
            .sessions
            .get(&session)
            .is_some_and(|s| s.state == SessionState::Active && !session_alive(s, now));
        if due {
            self.finish_session(session, SessionEnd::Expired, now, changes);
        }
    }

    fn forget_history(&mut self, now: Timestamp, changes: &mut ChangeSet) {
        let retention = self.meta.config.history_retention;
        // A session still on the revocation set goes back whole, to the walk below.
        for (ticket_id, ticket, session) in self.history.forget(
            retention,
            now,
            (&mut changes.tickets, &mut changes.sessions),
        ) {
            self.tickets.insert(ticket_id, ticket);
            self.sessions.insert(session.id, session);
        }
        while let Some(&(ended_at, ticket_id)) = self.ended.front() {
            if ended_at.after(retention) > now {
                break;
            }
            self.ended.pop_front();
            let still_ended = self.tickets.get(&ticket_id).is_some_and(
                |t| matches!(t.state(), TicketState::Ended { at, .. } if at == ended_at),
            );
            if still_ended {
                self.tickets.remove(&ticket_id);
                changes.tickets.insert(ticket_id);
            }
        }
        let forgotten: Vec<SessionId> = self
            .sessions
            .values()
            .filter(|s| match s.state {
                SessionState::Active => false,
                SessionState::Ended { at, .. } => at.after(retention) <= now && s.expires_at <= now,
            })
            .map(|s| s.id)
            .collect();
        for session_id in forgotten {
            if let Some(session) = self.sessions.remove(&session_id)
                && let Some(ticket_id) = session.ticket
                && self.tickets.remove(&ticket_id).is_some()
            {
                changes.tickets.insert(ticket_id);
            }
            changes.sessions.insert(session_id);
        }
    }

    fn waiting_view(&self, ticket_id: TicketId, now: Timestamp) -> WaitingView {
        let ticket = &self.tickets[&ticket_id];
        // Each lane counts its own: the priority lane never makes a regular ticket's `ahead`
        // grow (I5); it only holds the line still while it is served first.
        let ahead = self.line(ticket.priority).count_below(ticket.position);
        WaitingView {
            ticket: ticket_id,
            position: ticket.position,
            generation: ticket.generation,
            ahead,
            serving: self.meta.serving,
            waiting: self.n_waiting(),
            eta_seconds: eta_seconds(ahead, &self.meta.rate),
            paused: self.meta.config.mode == Mode::QueueAll,
            opens_at: match self.meta.config.phase(now) {
                Phase::Prequeue { opens_at, .. } => Some(opens_at),
                _ => None,
            },
            return_to: ticket.return_to().map(str::to_owned),
        }
    }

    fn admitted_entry(&self, ticket_id: TicketId, session: SessionId) -> Entry {
        let ticket = &self.tickets[&ticket_id];
        Entry::Admitted(AdmittedView {
            ticket: ticket_id,
            position: ticket.position,
            serving: self.meta.serving,
            waiting: self.n_waiting(),
            session: self.sessions[&session].clone(),
            return_to: ticket.return_to().map(str::to_owned),
        })
    }
}

fn session_alive(session: &Session, now: Timestamp) -> bool {
    session.expires_at > now && session.hard_expires_at.is_none_or(|hard| hard > now)
}

fn cap(expiry: Timestamp, hard: Option<Timestamp>) -> Timestamp {
    hard.map_or(expiry, |hard| expiry.min(hard))
}

fn truncate(mut text: String, max_len: usize) -> String {
    if text.len() > max_len {
        let mut end = max_len;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests;
