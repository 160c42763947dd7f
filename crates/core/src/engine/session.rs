//! A session: what a pass stands for, whether it still holds its slot, and why it ended: the
//! shape the rest of the system reads and persists (an ended one is held smaller:
//! `history.rs`).

use crate::clock::Timestamp;
use crate::ids::{SessionId, TicketId};

/// An active session: what a pass stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Random id (the pass's `sub` and `jti`).
    pub id: SessionId,
    /// The ticket it was claimed by; `None` for passes issued by hand.
    pub ticket: Option<TicketId>,
    /// The ticket's position (0 for passes issued by hand).
    pub position: u64,
    /// Room generation.
    pub generation: u32,
    /// Identity bound to the pass.
    pub uid: Option<String>,
    /// When the pass was first issued.
    pub issued_at: Timestamp,
    /// Last renewal (or issue).
    pub renewed_at: Timestamp,
    /// Idle expiry, pushed forward by renewals, never past `hard_expires_at`.
    pub expires_at: Timestamp,
    /// Absolute cap (`session_max`).
    pub hard_expires_at: Option<Timestamp>,
    /// Active or ended.
    pub state: SessionState,
}

/// Whether a session still holds its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Holds a capacity slot.
    Active,
    /// Ended; the slot is free.
    Ended {
        /// Why.
        reason: SessionEnd,
        /// When.
        at: Timestamp,
    },
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The site said the visitor is done.
    Completed,
    /// The site (or visitor) gave the slot up.
    Abandoned,
    /// Its time ran out.
    Expired,
    /// An operator revoked it.
    Revoked,
    /// The room was reset to a new generation.
    Reset,
}

impl SessionEnd {
    /// Every way a session ends.
    pub const ALL: [SessionEnd; 5] = [
        SessionEnd::Completed,
        SessionEnd::Abandoned,
        SessionEnd::Expired,
        SessionEnd::Revoked,
        SessionEnd::Reset,
    ];

    /// The end named `text` by [`as_str`](Self::as_str).
    pub fn parse(text: &str) -> Option<SessionEnd> {
        SessionEnd::ALL.into_iter().find(|end| end.as_str() == text)
    }

    /// Stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionEnd::Completed => "completed",
            SessionEnd::Abandoned => "abandoned",
            SessionEnd::Expired => "expired",
            SessionEnd::Revoked => "revoked",
            SessionEnd::Reset => "reset",
        }
    }
}
