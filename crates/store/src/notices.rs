//! Room-change notices: how a node hears that another node changed a room (SPEC §6.2, §8.2).
//!
//! A backend shared by several nodes announces every change it makes to a room; each node
//! follows the rooms it serves and refreshes what it keeps about them (SSE views, cached room
//! configurations, revoked sessions) when a notice arrives, instead of waiting for its own
//! ticker. Single-process backends have no notices: the process itself made every change.
//!
//! Notices are hints, not a log: one can be lost when a subscription breaks. Whenever that may
//! have happened the backend sends [`Notice::Resync`], and a receiver that falls behind sees
//! `Lagged` from the channel; both mean "re-read everything you keep".

use std::collections::BTreeSet;
use std::sync::Arc;

use anteroom_core::{RoomId, SessionId};
use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast};

/// Notices buffered per receiver before it lags.
const CHANNEL_CAPACITY: usize = 4096;

/// What a node hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A followed room changed.
    Changed(RoomNotice),
    /// Notices may have been missed (a subscription was made or remade): re-read every room.
    Resync,
}

/// One change to a room, with the figures right after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomNotice {
    /// The room.
    pub room: RoomId,
    /// What changed it.
    pub change: Change,
    /// The room's figures after the change; absent when the room was deleted.
    pub figures: Option<NoticeFigures>,
    /// The session this change ended (completed, abandoned or revoked), if any: its pass must
    /// be refused from now on.
    pub ended_session: Option<SessionId>,
}

/// A room's headline figures as a notice carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoticeFigures {
    /// Generation.
    pub generation: u32,
    /// Serving counter.
    pub serving: u64,
    /// Last issued position.
    pub last_position: u64,
    /// Live waiting tickets.
    pub waiting: u64,
}

/// The operation behind a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A join (possibly admitted at once).
    Join,
    /// A status call claimed a pass or expired a session.
    Status,
    /// The admitter ran and changed something.
    Tick,
    /// A ticket left.
    Leave,
    /// A session ended early.
    EndSession,
    /// A pass was issued by hand.
    IssueSession,
    /// The room's configuration was created or replaced.
    Config,
    /// A new generation started.
    Reset,
    /// The room was deleted.
    Deleted,
    /// An operation this version does not know (a newer node's).
    Other,
}

impl Change {
    /// Reads the operation name a notice starts with.
    pub fn parse(text: &str) -> Change {
        match text {
            "join" => Change::Join,
            "status" => Change::Status,
            "tick" => Change::Tick,
            "leave" => Change::Leave,
            "end_session" => Change::EndSession,
            "issue_session" => Change::IssueSession,
            "config" => Change::Config,
            "reset" => Change::Reset,
            "deleted" => Change::Deleted,
            _ => Change::Other,
        }
    }

    /// Whether the room's configuration (or its existence) may have changed.
    pub fn touches_config(self) -> bool {
        matches!(
            self,
            Change::Config | Change::Reset | Change::Deleted | Change::Other
        )
    }
}

/// The notices of one store: which rooms this node follows, and a channel of what happened
/// to them. Cheap to clone; every clone shares the same subscription.
#[derive(Clone)]
pub struct Notices {
    inner: Arc<NoticesInner>,
}

pub(crate) struct NoticesInner {
    followed: Mutex<BTreeSet<RoomId>>,
    /// Wakes the subscriber when `followed` changed.
    pub(crate) follow_changed: Notify,
    sender: broadcast::Sender<Notice>,
}

impl Notices {
    pub(crate) fn new() -> Notices {
        Notices {
            inner: Arc::new(NoticesInner {
                followed: Mutex::new(BTreeSet::new()),
                follow_changed: Notify::new(),
                sender: broadcast::channel(CHANNEL_CAPACITY).0,
            }),
        }
    }

    /// A receiver of every notice from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.inner.sender.subscribe()
    }

    /// Follows `room` (again following a followed room changes nothing).
    pub fn follow(&self, room: &RoomId) {
        let added = self.inner.followed.lock().insert(room.clone());
        if added {
            self.inner.follow_changed.notify_one();
        }
    }

    /// Stops following `room`.
    pub fn unfollow(&self, room: &RoomId) {
        let removed = self.inner.followed.lock().remove(room);
        if removed {
            self.inner.follow_changed.notify_one();
        }
    }

    /// The rooms followed now.
    pub fn followed(&self) -> BTreeSet<RoomId> {
        self.inner.followed.lock().clone()
    }

    pub(crate) fn downgrade(&self) -> std::sync::Weak<NoticesInner> {
        Arc::downgrade(&self.inner)
    }
}

impl NoticesInner {
    pub(crate) fn followed(&self) -> BTreeSet<RoomId> {
        self.followed.lock().clone()
    }

    /// Sends a notice to every receiver (none listening is fine).
    pub(crate) fn publish(&self, notice: Notice) {
        let _ = self.sender.send(notice);
    }
}

/// Reads a notice's payload: `deleted`, or `<op>|<generation>|<serving>|<last position>|
/// <waiting>` optionally followed by `|<ended session id>`.
pub(crate) fn parse_notice(room: RoomId, payload: &str) -> Option<RoomNotice> {
    let mut fields = payload.split('|');
    let change = Change::parse(fields.next()?);
    if change == Change::Deleted {
        return Some(RoomNotice {
            room,
            change,
            figures: None,
            ended_session: None,
        });
    }
    let mut number = || fields.next()?.parse::<u64>().ok();
    let figures = NoticeFigures {
        generation: u32::try_from(number()?).ok()?,
        serving: number()?,
        last_position: number()?,
        waiting: number()?,
    };
    let ended_session = fields
        .next()
        .filter(|id| !id.is_empty())
        .and_then(|id| id.parse().ok());
    Some(RoomNotice {
        room,
        change,
        figures: Some(figures),
        ended_session,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn room() -> RoomId {
        RoomId::new("launch").unwrap()
    }

    #[test]
    fn notices_parse_with_and_without_an_ended_session() {
        let notice = parse_notice(room(), "tick|2|10|40|30").unwrap();
        assert_eq!(notice.change, Change::Tick);
        assert_eq!(
            notice.figures,
            Some(NoticeFigures {
                generation: 2,
                serving: 10,
                last_position: 40,
                waiting: 30
            })
        );
        assert_eq!(notice.ended_session, None);

        let session = SessionId::from_bytes([7; 16]);
        let ended = parse_notice(room(), &format!("end_session|1|5|9|3|{session}")).unwrap();
        assert_eq!(ended.ended_session, Some(session));

        let deleted = parse_notice(room(), "deleted").unwrap();
        assert_eq!(deleted.change, Change::Deleted);
        assert_eq!(deleted.figures, None);

        assert_eq!(parse_notice(room(), "tick|x|1|1|1"), None);
        assert_eq!(parse_notice(room(), "tick|1|1"), None);
        assert_eq!(
            parse_notice(room(), "someday|1|1|1|1").unwrap().change,
            Change::Other
        );
    }
}
