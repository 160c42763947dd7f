//! How a room remembers its ended tickets and sessions for `history_retention`.
//!
//! History outnumbers the live room (every visitor of the last hour, by default), and all it
//! still has to answer is a lookup by ticket id (`status` and `leave` of an ended ticket), by
//! session id (the session itself, its revocation) and a walk for the session listing and
//! the revocation set. So an ended visitor is one flat record in end order, its ticket and its
//! ended session together (the session's ticket, position, generation and uid are the
//! ticket's), times as offsets in milliseconds where they fit in 32 bits, and the two lookups
//! are hash tables of 4-byte record numbers rather than maps repeating the 16-byte ids.
//!
//! Nothing is lost: a record gives back the very `Ticket` and `Session` it was made of (what
//! a durable backend writes and the API answers). A visitor whose times do not fit the
//! offsets, or whose session does not repeat its ticket (a pass issued by hand has none), is
//! not taken: the room keeps it whole, as before.

use std::collections::{BTreeSet, VecDeque};
use std::hash::BuildHasher;
use std::time::Duration;

use hashbrown::HashTable;

use crate::clock::Timestamp;
use crate::ids::{RandomIdHash, SessionId, TicketId};

use super::held::{HeldTicket, TicketTexts};
use super::session::{Session, SessionEnd, SessionState};
use super::ticket::{Ticket, TicketEnd, TicketState};

/// The ended visitors of one room, oldest end first.
#[derive(Debug, Clone, Default)]
pub(super) struct History {
    records: Records,
    /// The record number of `records.get(0)`; numbers wrap, and fewer than `u32::MAX` records
    /// are ever held at once.
    first: u32,
    /// Record numbers by ticket id.
    by_ticket: HashTable<u32>,
    /// Record numbers by session id (only the records with a session).
    by_session: HashTable<u32>,
}

/// A ticket that ended, or a claimed ticket and its ended session.
#[derive(Debug, Clone)]
struct EndedVisitor {
    ticket: TicketId,
    /// Meaningful when `end` is a session's.
    session: SessionId,
    position: u64,
    joined_at: Timestamp,
    generation: u32,
    /// When the ticket ended, or its session: milliseconds after `joined_at`.
    ended: u32,
    /// Milliseconds after `joined_at`.
    last_seen: u32,
    /// Milliseconds after `joined_at` (zero without a session).
    issued: u32,
    /// Milliseconds after the session's issue.
    renewed: u32,
    /// Milliseconds after the session's issue.
    expires: u32,
    /// Milliseconds after the session's issue; [`NO_HARD_EXPIRY`] for none.
    hard_expires: u32,
    end: Ending,
    priority: bool,
    texts: Option<Box<TicketTexts>>,
}

/// What ended: the ticket itself, or the session it had claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Ticket(TicketEnd),
    Session(SessionEnd),
}

const NO_HARD_EXPIRY: u32 = u32::MAX;

/// The offset from `from` to `to` in milliseconds, when it is not negative and fits.
fn offset(from: Timestamp, to: Timestamp) -> Option<u32> {
    to.0.checked_sub(from.0)
        .and_then(|millis| u32::try_from(millis).ok())
        .filter(|&millis| millis != NO_HARD_EXPIRY)
}

fn at(from: Timestamp, millis: u32) -> Timestamp {
    Timestamp(from.0.saturating_add(u64::from(millis)))
}

impl EndedVisitor {
    /// The record of a ticket that ended without a session, or the ticket back when it does
    /// not fit one.
    fn of_ticket(id: TicketId, ticket: HeldTicket) -> Result<EndedVisitor, HeldTicket> {
        let TicketState::Ended { reason, at } = ticket.state() else {
            return Err(ticket);
        };
        let (Some(last_seen), Some(ended)) = (
            offset(ticket.joined_at, ticket.last_seen),
            offset(ticket.joined_at, at),
        ) else {
            return Err(ticket);
        };
        Ok(EndedVisitor {
            ticket: id,
            session: SessionId::from_bytes([0; 16]),
            position: ticket.position,
            joined_at: ticket.joined_at,
            generation: ticket.generation,
            ended,
            last_seen,
            issued: 0,
            renewed: 0,
            expires: 0,
            hard_expires: NO_HARD_EXPIRY,
            end: Ending::Ticket(reason),
            priority: ticket.priority,
            texts: ticket.into_texts(),
        })
    }

    /// The record of a claimed ticket and its ended session, or the ticket back when the
    /// session does not repeat it or a time does not fit.
    fn of_session(
        id: TicketId,
        ticket: HeldTicket,
        session: &Session,
    ) -> Result<EndedVisitor, HeldTicket> {
        let SessionState::Ended { reason, at } = session.state else {
            return Err(ticket);
        };
        let repeats_ticket = session.ticket == Some(id)
            && ticket.state()
                == (TicketState::Claimed {
                    session: session.id,
                })
            && session.position == ticket.position
            && session.generation == ticket.generation
            && session.uid.as_deref() == ticket.identity();
        let hard_expires = match session.hard_expires_at {
            None => Some(NO_HARD_EXPIRY),
            Some(hard) => offset(session.issued_at, hard),
        };
        let offsets = (
            offset(ticket.joined_at, at),
            offset(ticket.joined_at, ticket.last_seen),
            offset(ticket.joined_at, session.issued_at),
            offset(session.issued_at, session.renewed_at),
            offset(session.issued_at, session.expires_at),
            hard_expires,
        );
        let (
            Some(ended),
            Some(last_seen),
            Some(issued),
            Some(renewed),
            Some(expires),
            Some(hard_expires),
        ) = offsets
        else {
            return Err(ticket);
        };
        if !repeats_ticket {
            return Err(ticket);
        }
        Ok(EndedVisitor {
            ticket: id,
            session: session.id,
            position: ticket.position,
            joined_at: ticket.joined_at,
            generation: ticket.generation,
            ended,
            last_seen,
            issued,
            renewed,
            expires,
            hard_expires,
            end: Ending::Session(reason),
            priority: ticket.priority,
            texts: ticket.into_texts(),
        })
    }

    fn has_session(&self) -> bool {
        matches!(self.end, Ending::Session(_))
    }

    fn ended_at(&self) -> Timestamp {
        at(self.joined_at, self.ended)
    }

    fn identity(&self) -> Option<&str> {
        self.texts.as_deref()?.identity()
    }

    fn issued_at(&self) -> Timestamp {
        at(self.joined_at, self.issued)
    }

    fn expires_at(&self) -> Timestamp {
        at(self.issued_at(), self.expires)
    }

    fn to_ticket(&self) -> Ticket {
        let state = match self.end {
            Ending::Ticket(reason) => TicketState::Ended {
                reason,
                at: self.ended_at(),
            },
            Ending::Session(_) => TicketState::Claimed {
                session: self.session,
            },
        };
        Ticket {
            id: self.ticket,
            position: self.position,
            generation: self.generation,
            joined_at: self.joined_at,
            last_seen: at(self.joined_at, self.last_seen),
            identity: self.identity().map(str::to_owned),
            return_to: self
                .texts
                .as_deref()
                .and_then(TicketTexts::return_to)
                .map(str::to_owned),
            priority: self.priority,
            state,
        }
    }

    fn to_session(&self) -> Option<Session> {
        let Ending::Session(reason) = self.end else {
            return None;
        };
        let issued_at = self.issued_at();
        Some(Session {
            id: self.session,
            ticket: Some(self.ticket),
            position: self.position,
            generation: self.generation,
            uid: self.identity().map(str::to_owned),
            issued_at,
            renewed_at: at(issued_at, self.renewed),
            expires_at: self.expires_at(),
            hard_expires_at: (self.hard_expires != NO_HARD_EXPIRY)
                .then(|| at(issued_at, self.hard_expires)),
            state: SessionState::Ended {
                reason,
                at: self.ended_at(),
            },
        })
    }
}

impl History {
    /// Takes a ticket that ended without a session; gives it back when it does not fit.
    pub(super) fn take_ticket(&mut self, id: TicketId, ticket: HeldTicket) -> Option<HeldTicket> {
        self.take(EndedVisitor::of_ticket(id, ticket))
    }

    /// Takes a claimed ticket with its ended session; gives the ticket back when they do not
    /// fit (the caller keeps both whole).
    pub(super) fn take_session(
        &mut self,
        id: TicketId,
        ticket: HeldTicket,
        session: &Session,
    ) -> Option<HeldTicket> {
        self.take(EndedVisitor::of_session(id, ticket, session))
    }

    fn take(&mut self, record: Result<EndedVisitor, HeldTicket>) -> Option<HeldTicket> {
        match record {
            Ok(record) if self.records.len() < u32::MAX as usize => {
                self.push(record);
                None
            }
            Ok(record) => Some(HeldTicket::from_ticket(record.to_ticket()).1),
            Err(ticket) => Some(ticket),
        }
    }

    fn push(&mut self, record: EndedVisitor) {
        let number = self.first.wrapping_add(self.records.len() as u32);
        let History {
            records,
            first,
            by_ticket,
            by_session,
        } = self;
        let of = |number: &u32| records.get(number.wrapping_sub(*first) as usize);
        by_ticket.insert_unique(RandomIdHash.hash_one(record.ticket), number, |n| {
            RandomIdHash.hash_one(of(n).ticket)
        });
        if record.has_session() {
            by_session.insert_unique(RandomIdHash.hash_one(record.session), number, |n| {
                RandomIdHash.hash_one(of(n).session)
            });
        }
        records.push_back(record);
    }

    fn by_ticket(&self, id: TicketId) -> Option<&EndedVisitor> {
        let number = self
            .by_ticket
            .find(RandomIdHash.hash_one(id), |&n| self.record(n).ticket == id)?;
        Some(self.record(*number))
    }

    fn by_session(&self, id: SessionId) -> Option<&EndedVisitor> {
        let number = self.by_session.find(RandomIdHash.hash_one(id), |&n| {
            let record = self.record(n);
            record.has_session() && record.session == id
        })?;
        Some(self.record(*number))
    }

    fn record(&self, number: u32) -> &EndedVisitor {
        self.records.get(number.wrapping_sub(self.first) as usize)
    }

    /// The generation of an ended ticket, when it is held here.
    pub(super) fn ticket_generation(&self, id: TicketId) -> Option<u32> {
        self.by_ticket(id).map(|record| record.generation)
    }

    pub(super) fn holds_session(&self, id: SessionId) -> bool {
        self.by_session(id).is_some()
    }

    pub(super) fn ticket(&self, id: TicketId) -> Option<Ticket> {
        self.by_ticket(id).map(EndedVisitor::to_ticket)
    }

    pub(super) fn session(&self, id: SessionId) -> Option<Session> {
        self.by_session(id).and_then(EndedVisitor::to_session)
    }

    pub(super) fn tickets(&self) -> impl Iterator<Item = Ticket> + '_ {
        self.records.iter().map(EndedVisitor::to_ticket)
    }

    pub(super) fn sessions(&self) -> impl Iterator<Item = Session> + '_ {
        self.records.iter().filter_map(EndedVisitor::to_session)
    }

    /// Sessions ended early (not expired) whose passes are still within their expiry.
    pub(super) fn revoked_sessions(
        &self,
        now: Timestamp,
    ) -> impl Iterator<Item = (SessionId, Timestamp)> + '_ {
        self.records
            .iter()
            .filter(move |record| {
                matches!(record.end, Ending::Session(reason) if reason != SessionEnd::Expired)
                    && record.expires_at() > now
            })
            .map(|record| (record.session, record.expires_at()))
    }

    /// Forgets the records ended `retention` ago or longer, recording each deleted ticket and
    /// session (for the change set). A session whose pass has not expired yet stays on the revocation set: it is
    /// handed back whole (its ticket and itself) for the room to keep until then.
    pub(super) fn forget(
        &mut self,
        retention: Duration,
        now: Timestamp,
        deleted: (&mut BTreeSet<TicketId>, &mut BTreeSet<SessionId>),
    ) -> Vec<(TicketId, HeldTicket, Session)> {
        let mut lingering = Vec::new();
        while let Some(front) = self.records.front() {
            if front.ended_at().after(retention) > now {
                break;
            }
            let Some(record) = self.pop_front() else {
                break;
            };
            match record.to_session() {
                Some(session) if record.expires_at() > now => {
                    let (id, ticket) = HeldTicket::from_ticket(record.to_ticket());
                    lingering.push((id, ticket, session));
                }
                _ => {
                    deleted.0.insert(record.ticket);
                    if record.has_session() {
                        deleted.1.insert(record.session);
                    }
                }
            }
        }
        lingering
    }

    fn pop_front(&mut self) -> Option<EndedVisitor> {
        let number = self.first;
        let record = self.records.pop_front()?;
        self.first = self.first.wrapping_add(1);
        if let Ok(entry) = self
            .by_ticket
            .find_entry(RandomIdHash.hash_one(record.ticket), |&n| n == number)
        {
            entry.remove();
        }
        if record.has_session()
            && let Ok(entry) = self
                .by_session
                .find_entry(RandomIdHash.hash_one(record.session), |&n| n == number)
        {
            entry.remove();
        }
        Some(record)
    }

    /// Forgets everything (a purging reset), recording each deleted ticket and session.
    pub(super) fn purge(&mut self, deleted: (&mut BTreeSet<TicketId>, &mut BTreeSet<SessionId>)) {
        for record in self.records.iter() {
            deleted.0.insert(record.ticket);
            if record.has_session() {
                deleted.1.insert(record.session);
            }
        }
        *self = History::default();
    }
}

/// The records in end order, in chunks of [`CHUNK`]: a deque that doubled as it grew would
/// leave up to half of one large allocation unused; a chunk fills to the capacity it doubled
/// to, so only the newest chunk has room to spare.
#[derive(Debug, Clone, Default)]
struct Records {
    chunks: VecDeque<VecDeque<EndedVisitor>>,
    /// Records taken from the front of the first chunk since it was filled.
    taken_from_first: usize,
    len: usize,
}

/// Records per chunk: a power of two, so a chunk that doubled from empty ends exactly full.
const CHUNK: usize = 1024;

impl Records {
    fn len(&self) -> usize {
        self.len
    }

    fn push_back(&mut self, record: EndedVisitor) {
        let pushed_into_last = match self.chunks.len() {
            0 => CHUNK,
            1 => self.chunks[0].len() + self.taken_from_first,
            _ => self.chunks.back().map_or(CHUNK, VecDeque::len),
        };
        match self.chunks.back_mut() {
            Some(chunk) if pushed_into_last < CHUNK => chunk.push_back(record),
            _ => self.chunks.push_back(VecDeque::from([record])),
        }
        self.len += 1;
    }

    fn front(&self) -> Option<&EndedVisitor> {
        self.chunks.front()?.front()
    }

    fn pop_front(&mut self) -> Option<EndedVisitor> {
        let chunk = self.chunks.front_mut()?;
        let record = chunk.pop_front()?;
        self.len -= 1;
        self.taken_from_first += 1;
        if chunk.is_empty() {
            self.chunks.pop_front();
            self.taken_from_first = 0;
        }
        Some(record)
    }

    /// The record `slot` places from the front.
    fn get(&self, slot: usize) -> &EndedVisitor {
        let place = slot + self.taken_from_first;
        let chunk = place / CHUNK;
        let within = place % CHUNK - if chunk == 0 { self.taken_from_first } else { 0 };
        &self.chunks[chunk][within]
    }

    fn iter(&self) -> impl Iterator<Item = &EndedVisitor> {
        self.chunks.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_visitor_is_held_in_88_bytes() {
        assert_eq!(std::mem::size_of::<EndedVisitor>(), 88);
    }
}
