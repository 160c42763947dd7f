//! How a room holds a ticket in memory.
//!
//! A room may hold millions of waiting tickets, so the record behind each one is kept small
//! (48 bytes, pinned by this module's `size_of` test; the heap bytes per waiting ticket
//! are counted by `crates/core/tests/memory.rs`): the id is the key of the room's map
//! and not repeated, the texts a ticket rarely has (identity, return path) sit behind one
//! pointer, and so does every state past waiting, which only the few admitted tickets and the
//! history have. [`Ticket`] stays the shape the rest of the system reads and persists.

use crate::clock::Timestamp;
use crate::ids::TicketId;

use super::ticket::{Ticket, TicketState};

/// One ticket as its room holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HeldTicket {
    /// Ticket number (I1).
    pub(super) position: u64,
    pub(super) joined_at: Timestamp,
    pub(super) last_seen: Timestamp,
    pub(super) generation: u32,
    /// Waits in the priority lane.
    pub(super) priority: bool,
    texts: Option<Box<TicketTexts>>,
    /// `None` while waiting.
    past_waiting: Option<Box<TicketState>>,
}

/// The texts a ticket may carry; most carry neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TicketTexts {
    identity: Option<String>,
    return_to: Option<String>,
}

impl HeldTicket {
    /// A new waiting ticket.
    pub(super) fn waiting(
        position: u64,
        generation: u32,
        now: Timestamp,
        identity: Option<String>,
        return_to: Option<String>,
        priority: bool,
    ) -> HeldTicket {
        HeldTicket {
            position,
            joined_at: now,
            last_seen: now,
            generation,
            priority,
            texts: texts(identity, return_to),
            past_waiting: None,
        }
    }

    /// The ticket as it was persisted, and its id.
    pub(super) fn from_ticket(ticket: Ticket) -> (TicketId, HeldTicket) {
        let mut held = HeldTicket::waiting(
            ticket.position,
            ticket.generation,
            ticket.joined_at,
            ticket.identity,
            ticket.return_to,
            ticket.priority,
        );
        held.last_seen = ticket.last_seen;
        held.set_state(ticket.state);
        (ticket.id, held)
    }

    /// The ticket in the shape the rest of the system reads.
    pub(super) fn to_ticket(&self, id: TicketId) -> Ticket {
        Ticket {
            id,
            position: self.position,
            generation: self.generation,
            joined_at: self.joined_at,
            last_seen: self.last_seen,
            identity: self.identity().map(str::to_owned),
            return_to: self.return_to().map(str::to_owned),
            priority: self.priority,
            state: self.state(),
        }
    }

    pub(super) fn state(&self) -> TicketState {
        self.past_waiting
            .as_deref()
            .copied()
            .unwrap_or(TicketState::Waiting)
    }

    pub(super) fn set_state(&mut self, state: TicketState) {
        match (state, self.past_waiting.as_deref_mut()) {
            (TicketState::Waiting, _) => self.past_waiting = None,
            (state, Some(held)) => *held = state,
            (state, None) => self.past_waiting = Some(Box::new(state)),
        }
    }

    pub(super) fn identity(&self) -> Option<&str> {
        self.texts.as_ref()?.identity.as_deref()
    }

    pub(super) fn return_to(&self) -> Option<&str> {
        self.texts.as_ref()?.return_to.as_deref()
    }

    /// The texts, for a record that keeps them once the ticket has ended (`history.rs`).
    pub(super) fn into_texts(self) -> Option<Box<TicketTexts>> {
        self.texts
    }
}

impl TicketTexts {
    pub(super) fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    pub(super) fn return_to(&self) -> Option<&str> {
        self.return_to.as_deref()
    }
}

fn texts(identity: Option<String>, return_to: Option<String>) -> Option<Box<TicketTexts>> {
    if identity.is_none() && return_to.is_none() {
        return None;
    }
    Some(Box::new(TicketTexts {
        identity,
        return_to,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_ticket_is_held_in_48_bytes() {
        assert_eq!(std::mem::size_of::<HeldTicket>(), 48);
    }

    #[test]
    fn every_ticket_shape_round_trips() {
        let id = TicketId::from_bytes([7; 16]);
        let states = [
            TicketState::Waiting,
            TicketState::Admitted {
                at: Timestamp(5),
                claim_deadline: Timestamp(9),
            },
            TicketState::Claimed {
                session: crate::ids::SessionId::from_bytes([3; 16]),
            },
            TicketState::Ended {
                reason: super::super::TicketEnd::NoShow,
                at: Timestamp(11),
            },
        ];
        for state in states {
            for (identity, return_to) in [
                (None, None),
                (Some("alice".to_owned()), None),
                (None, Some("/cart".to_owned())),
            ] {
                let ticket = Ticket {
                    id,
                    position: 42,
                    generation: 3,
                    joined_at: Timestamp(1),
                    last_seen: Timestamp(2),
                    identity,
                    return_to,
                    priority: true,
                    state,
                };
                let (held_id, held) = HeldTicket::from_ticket(ticket.clone());
                assert_eq!(held_id, id);
                assert_eq!(held.to_ticket(id), ticket);
            }
        }
    }
}
