//! One live event for operators (SPEC §8.4), as the admin API's `/admin/v1/events` stream
//! shows it and the event sinks deliver it.

use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use anteroom_core::config::format_time;
use anteroom_core::{RoomId, Timestamp};

/// One live event.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct AdminEvent {
    /// Unique (32 hex digits): what a receiver deduplicates on.
    pub id: String,
    /// What happened: `room.updated`, `counter.advanced`, `room.reset`, `pass.issued` (by
    /// hand), `keys.rotated`, `room.metrics`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The room, when the event is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    /// When, RFC 3339.
    pub at: String,
    /// The event's own fields.
    #[schema(value_type = Object)]
    pub data: Value,
}

impl AdminEvent {
    /// An event of `kind` about `room` at `at`.
    pub fn new(kind: &str, room: Option<&RoomId>, at: Timestamp, data: Value) -> AdminEvent {
        AdminEvent {
            id: format!("{:032x}", rand::random::<u128>()),
            kind: kind.to_owned(),
            room: room.map(ToString::to_string),
            at: format_time(at),
            data,
        }
    }

    /// `room.updated` with what was done (`created`, `replaced`, `updated`, `deleted`,
    /// `pause`, …) and the room after.
    pub(crate) fn room_updated(
        room: &RoomId,
        action: &str,
        at: Timestamp,
        config: Value,
    ) -> AdminEvent {
        AdminEvent::new(
            "room.updated",
            Some(room),
            at,
            json!({"action": action, "room": config}),
        )
    }
}
