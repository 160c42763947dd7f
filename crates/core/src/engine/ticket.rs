//! A ticket: a place in a room's queue, where it stands, and why it ended: the shape the rest
//! of the system reads and persists (the room holds it smaller: `held.rs`).

use crate::clock::Timestamp;
use crate::ids::{SessionId, TicketId};

/// A place in a room's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// Random id.
    pub id: TicketId,
    /// Ticket number: strictly increasing per room in join order (I1).
    pub position: u64,
    /// Room generation the ticket belongs to.
    pub generation: u32,
    /// When the ticket joined.
    pub joined_at: Timestamp,
    /// Last contact (status poll, SSE, page load).
    pub last_seen: Timestamp,
    /// Identity the ticket is bound to, when the room has one.
    pub identity: Option<String>,
    /// Where the visitor goes once admitted (same-origin path).
    pub return_to: Option<String>,
    /// Joined with a priority access code (SPEC §12): waits in the priority lane.
    pub priority: bool,
    /// Where the ticket stands.
    pub state: TicketState,
}

/// Where a ticket stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketState {
    /// In line.
    Waiting,
    /// Let in; must claim its pass before `claim_deadline`.
    Admitted {
        /// When it was admitted.
        at: Timestamp,
        /// When the slot is given to somebody else.
        claim_deadline: Timestamp,
    },
    /// Holds a session (a pass was issued).
    Claimed {
        /// The session.
        session: SessionId,
    },
    /// No longer in play.
    Ended {
        /// Why.
        reason: TicketEnd,
        /// When.
        at: Timestamp,
    },
}

/// Why a ticket ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketEnd {
    /// The visitor left.
    Left,
    /// No contact for `ticket_idle_ttl` while waiting.
    Abandoned,
    /// Admitted but never claimed its pass within `claim_ttl`.
    NoShow,
    /// The room was reset to a new generation.
    Reset,
}

impl TicketEnd {
    /// Every way a ticket ends.
    pub const ALL: [TicketEnd; 4] = [
        TicketEnd::Left,
        TicketEnd::Abandoned,
        TicketEnd::NoShow,
        TicketEnd::Reset,
    ];

    /// The end named `text` by [`as_str`](Self::as_str).
    pub fn parse(text: &str) -> Option<TicketEnd> {
        TicketEnd::ALL.into_iter().find(|end| end.as_str() == text)
    }

    /// Stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            TicketEnd::Left => "left",
            TicketEnd::Abandoned => "abandoned",
            TicketEnd::NoShow => "no_show",
            TicketEnd::Reset => "reset",
        }
    }
}
