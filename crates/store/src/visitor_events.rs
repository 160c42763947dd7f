//! Per-visitor events as the outbox keeps them (SPEC §14.9): one JSON object per ticket or
//! session event, written by the store in the same durable write as the change it reports.
//!
//! ```json
//! {"id":"5f0c…","type":"ticket.admitted","room":"shop","at":"2026-11-26T22:14:19.123Z",
//!  "data":{"ticket":"…","session":"…","uid":"…","position":17,"generation":1}}
//! ```
//!
//! `data` names the ticket, the session and the `uid` only where they exist. The `id` is 32
//! hex digits: 24 drawn at random for the operation that made the event and 8 counting the
//! events of that operation, so ids are unique without any counter shared between nodes or
//! kept across restarts. The Redis scripts (`lua/rooms/room.lua`, `emit`) write the same
//! object; `tests/conformance/events.rs` holds both to it.

use anteroom_core::RoomId;
use anteroom_core::engine::VisitorEvent;
use rand::RngCore;

/// Hands out the ids of one operation's events.
pub(crate) struct EventIds {
    prefix: String,
    next: u32,
}

impl EventIds {
    /// Ids for one operation, from a fresh random prefix.
    pub(crate) fn new() -> EventIds {
        EventIds {
            prefix: random_prefix(),
            next: 0,
        }
    }

    fn next_id(&mut self) -> String {
        self.next += 1;
        format!("{}{:08x}", self.prefix, self.next)
    }
}

/// 24 random hex digits (96 bits), as the Redis store hands one to each script call.
pub(crate) fn random_prefix() -> String {
    let mut bytes = [0_u8; 12];
    rand::thread_rng().fill_bytes(&mut bytes);
    let mut prefix = String::with_capacity(24);
    push_hex(&mut prefix, &bytes);
    prefix
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
}

/// Every event of one operation in `room`, as outbox payloads.
pub(crate) fn encode_all(room: &RoomId, events: &[VisitorEvent]) -> Vec<Vec<u8>> {
    let mut ids = EventIds::new();
    events
        .iter()
        .map(|event| encode(room, &ids.next_id(), event))
        .collect()
}

/// Written out field by field (joins are the hot path; this is a few appends to one buffer).
/// Ids, room ids and type names need no escaping; the uid is escaped by serde_json.
fn encode(room: &RoomId, id: &str, event: &VisitorEvent) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(256);
    let _ = write!(
        out,
        r#"{{"id":"{id}","type":"{}","room":"{room}","at":"{}","data":{{"#,
        event.kind.name(),
        rfc3339_millis(event.at.as_millis()),
    );
    if let Some(ticket) = event.ticket {
        let _ = write!(out, r#""ticket":"{ticket}","#);
    }
    if let Some(session) = event.session {
        let _ = write!(out, r#""session":"{session}","#);
    }
    if let Some(uid) = &event.uid {
        let quoted = serde_json::to_string(uid).unwrap_or_else(|_| "null".to_owned());
        let _ = write!(out, r#""uid":{quoted},"#);
    }
    let _ = write!(
        out,
        r#""position":{},"generation":{}}}}}"#,
        event.position, event.generation
    );
    out.into_bytes()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for milliseconds since the Unix epoch (the civil-from-days
/// conversion the Lua scripts repeat, so both backends write the same text).
pub(crate) fn rfc3339_millis(millis: u64) -> String {
    let seconds = millis / 1000;
    let days = (seconds / 86_400) as i64;
    let of_day = seconds % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        millis % 1000
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use anteroom_core::engine::{SessionEnd, VisitorEventKind};
    use anteroom_core::{SessionId, TicketId, Timestamp};

    #[test]
    fn events_are_json_with_the_fields_that_exist() {
        let room = RoomId::new("shop").unwrap();
        let event = VisitorEvent {
            kind: VisitorEventKind::SessionEnded(SessionEnd::Completed),
            at: Timestamp(1_795_731_259_123),
            ticket: Some(TicketId::from_bytes([1; 16])),
            session: Some(SessionId::from_bytes([2; 16])),
            position: 17,
            generation: 3,
            uid: Some("ann \"|\\ 50%".to_owned()),
        };
        let encoded: serde_json::Value =
            serde_json::from_slice(&encode(&room, "ab", &event)).unwrap();
        assert_eq!(
            encoded,
            serde_json::json!({
                "id": "ab", "type": "session.completed", "room": "shop",
                "at": "2026-11-26T22:14:19.123Z",
                "data": {"ticket": TicketId::from_bytes([1; 16]).to_string(),
                         "session": SessionId::from_bytes([2; 16]).to_string(),
                         "uid": "ann \"|\\ 50%", "position": 17, "generation": 3}
            })
        );
        let bare = VisitorEvent {
            ticket: None,
            session: None,
            uid: None,
            ..event
        };
        let encoded: serde_json::Value =
            serde_json::from_slice(&encode(&room, "ab", &bare)).unwrap();
        assert_eq!(
            encoded["data"],
            serde_json::json!({"position": 17, "generation": 3})
        );
    }

    #[test]
    fn times_are_rfc3339_with_milliseconds() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(951_782_400_007), "2000-02-29T00:00:00.007Z");
        assert_eq!(
            rfc3339_millis(1_795_731_259_123),
            "2026-11-26T22:14:19.123Z"
        );
        assert_eq!(
            rfc3339_millis(4_107_542_399_999),
            "2100-02-28T23:59:59.999Z"
        );
    }

    #[test]
    fn ids_are_32_hex_digits_and_unique_per_operation() {
        let mut ids = EventIds::new();
        let (one, two) = (ids.next_id(), ids.next_id());
        assert_eq!(one.len(), 32);
        assert!(one.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(one, two);
        assert_ne!(EventIds::new().next_id(), one);
    }
}
