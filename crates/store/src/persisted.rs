//! Persisted record formats for durable backends.
//!
//! Core types do not derive `Serialize` (serialization is a boundary): the formats here are
//! the on-disk shape, each record tagged with its version so later formats read older files.
//! Room configurations are stored as JSON in their §3 raw form ([`RawRoom`]), the same shape
//! the admin API speaks: the one core type that derives `Serialize` (see the core's tidy test).
//!
//! A room's state, tickets and sessions are written in version 2, a compact binary form
//! ([`binary`]): every join writes a ticket and the room's state, so their size and encoding
//! time are paid per join. Version 1 (JSON objects with a `v` field, so starting with `{`) is
//! still read: stores written by earlier releases open unchanged, and their records are
//! rewritten in version 2 as they change.

use anteroom_core::config::RawRoom;
use anteroom_core::counters::CounterRecord;
use anteroom_core::engine::{
    Draw, RoomMeta, RoomTotals, Session, SessionEnd, SessionState, Ticket, TicketEnd, TicketState,
};
use anteroom_core::lottery::seed_from_hex;
use anteroom_core::room::RoomConfig;
use anteroom_core::{SessionId, TicketId, Timestamp};
use std::collections::BTreeMap;

mod binary;
pub(crate) mod fields;
mod record;

pub(crate) use record::DecodeError;
use record::{BINARY_VERSION, JSON_VERSION};

/// What a version 1 record of one kind holds: its fields' names, frozen (a field added since
/// is in no version 1 record, so the reader leaves it blank rather than refuse every old
/// record for lacking it), and the label its errors carry.
struct Version1 {
    label: &'static str,
    names: &'static [&'static str],
}

const STATE_V1: Version1 = Version1 {
    label: "state",
    names: &[
        "generation",
        "last_position",
        "serving",
        "bucket_units",
        "bucket_updated_at",
        "rate_admissions",
        "rate_seconds",
        "rate_measured_until",
        "totals",
        "draw",
        "code_uses",
    ],
};

const DRAW_V1: Version1 = Version1 {
    label: "draw",
    names: &["opens_at", "drawn_at", "seed", "cohort", "through_position"],
};

const TOTALS_V1: Version1 = Version1 {
    label: "total",
    names: &[
        "joined",
        "admitted",
        "no_show",
        "abandoned",
        "left",
        "passes",
        "completed",
        "sessions_abandoned",
        "expired",
    ],
};

const TICKET_V1: Version1 = Version1 {
    label: "ticket",
    names: &[
        "id",
        "position",
        "generation",
        "joined_at",
        "last_seen",
        "identity",
        "return_to",
        "priority",
        "state",
    ],
};

const SESSION_V1: Version1 = Version1 {
    label: "session",
    names: &[
        "id",
        "ticket",
        "position",
        "generation",
        "uid",
        "issued_at",
        "renewed_at",
        "expires_at",
        "hard_expires_at",
        "ended",
    ],
};

pub(crate) fn encode_config(config: &RoomConfig) -> Vec<u8> {
    serialize(&RawRoom::from_config(config))
}

pub(crate) fn decode_config(bytes: &[u8]) -> Result<RoomConfig, DecodeError> {
    let raw: RawRoom = serde_json::from_slice(bytes)?;
    raw.resolve().map_err(|problems| {
        let text: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect();
        DecodeError::Invalid(text.join("; "))
    })
}

/// A room's state (everything but its configuration) as a record.
pub(crate) fn encode_state(meta: &RoomMeta) -> Vec<u8> {
    binary::encode_state(meta)
}

/// Reads a state record of either version, completing it with the room's configuration.
pub(crate) fn decode_state(config: RoomConfig, bytes: &[u8]) -> Result<RoomMeta, DecodeError> {
    match record_version(bytes)? {
        Version::Json => decode_state_json(config, bytes),
        Version::Binary => binary::decode_state(config, bytes),
    }
}

/// Reads a version 1 state record: a JSON object with each field of [`fields::STATE_FIELDS`]
/// under its name (`draw` and `code_uses` absent in records written before they existed).
fn decode_state_json(config: RoomConfig, bytes: &[u8]) -> Result<RoomMeta, DecodeError> {
    let mut meta = fields::blank_state(config);
    read_json_record(bytes, &mut meta, &STATE_V1, fields::STATE_FIELDS)?;
    Ok(meta)
}

type JsonObject = serde_json::Map<String, serde_json::Value>;
type JsonValue = serde_json::Value;

/// Reads a whole version 1 record: a JSON object with `v` 1 and the fields `known` names.
fn read_json_record<R>(
    bytes: &[u8],
    record: &mut R,
    known: &Version1,
    fields: &fields::Fields<R>,
) -> Result<(), DecodeError> {
    let object: JsonObject = serde_json::from_slice(bytes)?;
    let version = object.get("v").and_then(JsonValue::as_u64);
    check_json_version(version.and_then(|v| u8::try_from(v).ok()).unwrap_or(0))?;
    read_json_fields(&object, record, known, fields)
}

/// Reads `record`'s fields from a version 1 JSON object, each under its name; the fields the
/// version did not have keep their blank value.
fn read_json_fields<R>(
    object: &JsonObject,
    record: &mut R,
    known: &Version1,
    fields: &fields::Fields<R>,
) -> Result<(), DecodeError> {
    for stored in fields
        .iter()
        .filter(|stored| known.names.contains(&stored.name))
    {
        let value = object.get(stored.name).filter(|value| !value.is_null());
        let invalid = || DecodeError::Invalid(format!("{} field {:?}", known.label, stored.name));
        read_json_field(value, &stored.field, record).map_err(|error| match error {
            FieldError::Invalid => invalid(),
            FieldError::Decode(error) => error,
        })?;
    }
    Ok(())
}

/// Why one field could not be read: its value is not one of its type, or a part of it is bad.
enum FieldError {
    Invalid,
    Decode(DecodeError),
}

impl From<DecodeError> for FieldError {
    fn from(error: DecodeError) -> FieldError {
        FieldError::Decode(error)
    }
}

/// Reads one field from its JSON value (`None`: absent or null).
fn read_json_field<R>(
    value: Option<&JsonValue>,
    field: &fields::Field<R>,
    record: &mut R,
) -> Result<(), FieldError> {
    use fields::Field;
    let number = || value.and_then(JsonValue::as_u64).ok_or(FieldError::Invalid);
    let text = || value.and_then(JsonValue::as_str).ok_or(FieldError::Invalid);
    let optional_text = || value.map(|_| text()).transpose();
    match field {
        Field::U32(_, slot) => {
            *slot(record) = u32::try_from(number()?).map_err(|_| FieldError::Invalid)?;
        }
        Field::U64(_, slot) => *slot(record) = number()?,
        Field::F64(_, slot) => {
            *slot(record) = value
                .and_then(JsonValue::as_f64)
                .ok_or(FieldError::Invalid)?;
        }
        Field::Time(_, slot) => *slot(record) = Timestamp(number()?),
        Field::OptionalTime(_, slot) => {
            *slot(record) = value.map(|_| number().map(Timestamp)).transpose()?;
        }
        Field::Seed(_, slot) => {
            let text = value.and_then(JsonValue::as_str).unwrap_or("");
            *slot(record) = seed_from_hex(text)
                .ok_or_else(|| DecodeError::Invalid(format!("lottery seed {text:?}")))?;
        }
        Field::Totals(_, slot) => *slot(record) = read_json_totals(value)?,
        Field::Draw(_, slot) => *slot(record) = read_json_draw(value)?,
        Field::CodeUses(_, slot) => *slot(record) = read_json_code_uses(value)?,
        Field::TicketId(_, slot) => *slot(record) = parse_ticket_id(text()?)?,
        Field::SessionId(_, slot) => *slot(record) = parse_session_id(text()?)?,
        Field::OptionalTicketId(_, slot) => {
            *slot(record) = optional_text()?.map(parse_ticket_id).transpose()?;
        }
        Field::OptionalText(_, slot) => *slot(record) = optional_text()?.map(str::to_owned),
        Field::Flag(_, slot) => {
            // Absent (false) in tickets written before priority lanes existed.
            *slot(record) = value
                .map_or(Some(false), JsonValue::as_bool)
                .ok_or(FieldError::Invalid)?;
        }
        Field::TicketState(_, slot) => *slot(record) = read_json_ticket_state(value)?,
        Field::SessionState(_, slot) => *slot(record) = read_json_session_state(value)?,
    }
    Ok(())
}

fn read_json_draw(value: Option<&JsonValue>) -> Result<Option<Draw>, FieldError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let object = value.as_object().ok_or(FieldError::Invalid)?;
    let mut draw = fields::blank_draw();
    read_json_fields(object, &mut draw, &DRAW_V1, fields::DRAW_FIELDS)?;
    Ok(Some(draw))
}

/// The totals version 1 knew; one added since starts at zero.
fn read_json_totals(value: Option<&JsonValue>) -> Result<RoomTotals, DecodeError> {
    let totals = value.and_then(JsonValue::as_object);
    let mut read = RoomTotals::default();
    for name in TOTALS_V1.names {
        let missing = || DecodeError::Invalid(format!("{} {name:?} missing", TOTALS_V1.label));
        let field = RoomTotals::FIELDS
            .iter()
            .find(|field| field.name == *name)
            .ok_or_else(missing)?;
        *(field.slot)(&mut read) = totals
            .and_then(|totals| totals.get(*name))
            .and_then(JsonValue::as_u64)
            .ok_or_else(missing)?;
    }
    Ok(read)
}

/// `{"kind": "waiting" | "admitted" | "claimed" | "ended", ...}`, what the kind holds by name.
fn read_json_ticket_state(value: Option<&JsonValue>) -> Result<TicketState, FieldError> {
    let object = value
        .and_then(JsonValue::as_object)
        .ok_or(FieldError::Invalid)?;
    let number = |name| {
        object
            .get(name)
            .and_then(JsonValue::as_u64)
            .ok_or(FieldError::Invalid)
    };
    let text = |name| {
        object
            .get(name)
            .and_then(JsonValue::as_str)
            .ok_or(FieldError::Invalid)
    };
    Ok(match text("kind")? {
        "waiting" => TicketState::Waiting,
        "admitted" => TicketState::Admitted {
            at: Timestamp(number("at")?),
            claim_deadline: Timestamp(number("claim_deadline")?),
        },
        "claimed" => TicketState::Claimed {
            session: parse_session_id(text("session")?)?,
        },
        "ended" => TicketState::Ended {
            reason: parse_ticket_end(text("reason")?)?,
            at: Timestamp(number("at")?),
        },
        _ => return Err(FieldError::Invalid),
    })
}

/// None while active, else `{"reason": ..., "at": ...}`.
fn read_json_session_state(value: Option<&JsonValue>) -> Result<SessionState, FieldError> {
    let Some(value) = value else {
        return Ok(SessionState::Active);
    };
    let object = value.as_object().ok_or(FieldError::Invalid)?;
    let reason = object.get("reason").and_then(JsonValue::as_str);
    let at = object.get("at").and_then(JsonValue::as_u64);
    let (Some(reason), Some(at)) = (reason, at) else {
        return Err(FieldError::Invalid);
    };
    Ok(SessionState::Ended {
        reason: parse_session_end(reason)?,
        at: Timestamp(at),
    })
}

/// Joins made with each priority code, by the code's SHA-256 in hex.
fn read_json_code_uses(
    value: Option<&serde_json::Value>,
) -> Result<BTreeMap<[u8; 32], u64>, DecodeError> {
    let mut code_uses = BTreeMap::new();
    let Some(value) = value else {
        return Ok(code_uses);
    };
    let invalid = || DecodeError::Invalid("state field \"code_uses\"".to_owned());
    for (hash, uses) in value.as_object().ok_or_else(invalid)? {
        let hash = seed_from_hex(hash)
            .ok_or_else(|| DecodeError::Invalid(format!("priority code hash {hash:?}")))?;
        code_uses.insert(hash, uses.as_u64().ok_or_else(invalid)?);
    }
    Ok(code_uses)
}

/// A ticket as a record.
pub(crate) fn encode_ticket(ticket: &Ticket) -> Vec<u8> {
    binary::encode_ticket(ticket)
}

/// Reads a ticket record of either version.
pub(crate) fn decode_ticket(bytes: &[u8]) -> Result<Ticket, DecodeError> {
    match record_version(bytes)? {
        Version::Json => decode_ticket_json(bytes),
        Version::Binary => binary::decode_ticket(bytes),
    }
}

fn decode_ticket_json(bytes: &[u8]) -> Result<Ticket, DecodeError> {
    let mut ticket = fields::blank_ticket();
    read_json_record(bytes, &mut ticket, &TICKET_V1, fields::TICKET_FIELDS)?;
    Ok(ticket)
}

/// A session as a record.
pub(crate) fn encode_session(session: &Session) -> Vec<u8> {
    binary::encode_session(session)
}

/// Reads a session record of either version.
pub(crate) fn decode_session(bytes: &[u8]) -> Result<Session, DecodeError> {
    match record_version(bytes)? {
        Version::Json => decode_session_json(bytes),
        Version::Binary => binary::decode_session(bytes),
    }
}

fn decode_session_json(bytes: &[u8]) -> Result<Session, DecodeError> {
    let mut session = fields::blank_session();
    read_json_record(bytes, &mut session, &SESSION_V1, fields::SESSION_FIELDS)?;
    Ok(session)
}

fn serialize(value: &impl serde::Serialize) -> Vec<u8> {
    // Serializing these plain structs cannot fail: no maps with non-string keys, no foreign
    // Serialize impls.
    serde_json::to_vec(value).unwrap_or_default()
}

/// The two record encodings: version 1 is a JSON object, version 2 starts with its version
/// byte.
enum Version {
    Json,
    Binary,
}

fn record_version(bytes: &[u8]) -> Result<Version, DecodeError> {
    match bytes.first() {
        Some(b'{') => Ok(Version::Json),
        Some(&BINARY_VERSION) => Ok(Version::Binary),
        Some(&other) => Err(DecodeError::Version(other)),
        None => Err(DecodeError::Binary("an empty record")),
    }
}

fn check_json_version(version: u8) -> Result<(), DecodeError> {
    if version == JSON_VERSION {
        Ok(())
    } else {
        Err(DecodeError::Version(version))
    }
}

fn parse_ticket_id(text: &str) -> Result<TicketId, DecodeError> {
    text.parse()
        .map_err(|_| DecodeError::Invalid(format!("ticket id {text:?}")))
}

fn parse_session_id(text: &str) -> Result<SessionId, DecodeError> {
    text.parse()
        .map_err(|_| DecodeError::Invalid(format!("session id {text:?}")))
}

fn parse_ticket_end(text: &str) -> Result<TicketEnd, DecodeError> {
    TicketEnd::parse(text).ok_or_else(|| DecodeError::Invalid(format!("ticket end {text:?}")))
}

fn parse_session_end(text: &str) -> Result<SessionEnd, DecodeError> {
    SessionEnd::parse(text).ok_or_else(|| DecodeError::Invalid(format!("session end {text:?}")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use anteroom_core::RoomId;
    use anteroom_core::engine::{Draw, RoomState};

    fn config() -> RoomConfig {
        RoomConfig::with_defaults(RoomId::new("shop").unwrap())
    }

    fn tickets() -> Vec<Ticket> {
        let base = Ticket {
            id: TicketId::from_bytes([7; 16]),
            position: 41,
            generation: 3,
            joined_at: Timestamp(1_700_000_000_123),
            last_seen: Timestamp(1_700_000_050_000),
            identity: None,
            return_to: None,
            priority: false,
            state: TicketState::Waiting,
        };
        vec![
            base.clone(),
            Ticket {
                identity: Some("user-é".to_owned()),
                return_to: Some("/checkout?x=1".to_owned()),
                priority: true,
                state: TicketState::Admitted {
                    at: Timestamp(5),
                    claim_deadline: Timestamp(6),
                },
                ..base.clone()
            },
            Ticket {
                state: TicketState::Claimed {
                    session: SessionId::from_bytes([9; 16]),
                },
                ..base.clone()
            },
            Ticket {
                state: TicketState::Ended {
                    reason: TicketEnd::NoShow,
                    at: Timestamp(u64::MAX),
                },
                ..base
            },
        ]
    }

    fn sessions() -> Vec<Session> {
        let base = Session {
            id: SessionId::from_bytes([1; 16]),
            ticket: Some(TicketId::from_bytes([2; 16])),
            position: 12,
            generation: 1,
            uid: Some("u".to_owned()),
            issued_at: Timestamp(10),
            renewed_at: Timestamp(20),
            expires_at: Timestamp(30),
            hard_expires_at: Some(Timestamp(40)),
            state: SessionState::Active,
        };
        let mut all = vec![
            base.clone(),
            Session {
                ticket: None,
                uid: None,
                hard_expires_at: None,
                ..base.clone()
            },
        ];
        for reason in SessionEnd::ALL {
            all.push(Session {
                state: SessionState::Ended {
                    reason,
                    at: Timestamp(35),
                },
                ..base.clone()
            });
        }
        all
    }

    fn meta() -> RoomMeta {
        let mut meta = RoomState::new(config(), Timestamp(1_000)).meta().clone();
        meta.generation = 4;
        meta.last_position = 1_000_000;
        meta.serving = 999;
        meta.bucket.units = 123_456;
        meta.rate.admissions = 0.1 + 0.2;
        meta.rate.seconds = 1e-300;
        meta.rate.measured_until = Some(Timestamp(77));
        meta.totals.joined = 1_000_000;
        meta.totals.expired = 3;
        meta.draw = Some(Draw {
            opens_at: Timestamp(100),
            drawn_at: Timestamp(101),
            seed: [0xab; 32],
            cohort: 17,
            through_position: 18,
        });
        meta.code_uses.insert([3; 32], 2);
        meta.code_uses.insert([4; 32], 9);
        meta
    }

    #[test]
    fn records_are_written_in_the_binary_version_and_read_back_exactly() {
        for ticket in tickets() {
            let bytes = encode_ticket(&ticket);
            assert_eq!(bytes[0], BINARY_VERSION);
            assert_eq!(decode_ticket(&bytes).unwrap(), ticket);
        }
        for session in sessions() {
            assert_eq!(decode_session(&encode_session(&session)).unwrap(), session);
        }
        let meta = meta();
        let decoded = decode_state(config(), &encode_state(&meta)).unwrap();
        assert_eq!(decoded, meta);
        assert_eq!(
            decoded.rate.admissions.to_bits(),
            meta.rate.admissions.to_bits()
        );
        let plain = RoomState::new(config(), Timestamp(1_000)).meta().clone();
        assert_eq!(
            decode_state(config(), &encode_state(&plain)).unwrap(),
            plain
        );
        let waiting = encode_ticket(&tickets()[0]);
        assert!(waiting.len() < 80, "{} bytes", waiting.len());
    }

    #[test]
    fn a_room_stored_without_history_retention_reads_the_default() {
        let stored = br#"{"id":"shop","max_active":10,"session_ttl":"10m"}"#;
        let config = decode_config(stored).unwrap();
        assert_eq!(
            config.history_retention,
            anteroom_core::room::DEFAULT_HISTORY_RETENTION
        );
        assert_eq!(config.max_active, 10);
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn tickets_and_sessions_are_byte_for_byte_what_version_2_wrote() {
        // Written by the version 2 encoder before their fields were listed in `fields.rs`:
        // stores on disk hold these bytes.
        let written_tickets = [
            "02070707070707070707070707070707072900000000000000030000007b68e5cf8b010000502be6cf8b01000000000000",
            "02070707070707070707070707070707072900000000000000030000007b68e5cf8b010000502be6cf8b0100000107000000757365722dc3a9010d0000002f636865636b6f75743f783d31010105000000000000000600000000000000",
            "02070707070707070707070707070707072900000000000000030000007b68e5cf8b010000502be6cf8b0100000000000209090909090909090909090909090909",
            "02070707070707070707070707070707072900000000000000030000007b68e5cf8b010000502be6cf8b0100000000000302ffffffffffffffff",
        ];
        let encoded: Vec<String> = tickets().iter().map(|t| hex(&encode_ticket(t))).collect();
        assert_eq!(encoded, written_tickets);
        let written_sessions = [
            "020101010101010101010101010101010101020202020202020202020202020202020c00000000000000010000000101000000750a0000000000000014000000000000001e0000000000000001280000000000000000",
            "0201010101010101010101010101010101000c0000000000000001000000000a0000000000000014000000000000001e000000000000000000",
            "020101010101010101010101010101010101020202020202020202020202020202020c00000000000000010000000101000000750a0000000000000014000000000000001e0000000000000001280000000000000001002300000000000000",
            "020101010101010101010101010101010101020202020202020202020202020202020c00000000000000010000000101000000750a0000000000000014000000000000001e0000000000000001280000000000000001012300000000000000",
            "020101010101010101010101010101010101020202020202020202020202020202020c00000000000000010000000101000000750a0000000000000014000000000000001e0000000000000001280000000000000001022300000000000000",
            "020101010101010101010101010101010101020202020202020202020202020202020c00000000000000010000000101000000750a0000000000000014000000000000001e0000000000000001280000000000000001032300000000000000",
            "020101010101010101010101010101010101020202020202020202020202020202020c00000000000000010000000101000000750a0000000000000014000000000000001e0000000000000001280000000000000001042300000000000000",
        ];
        let encoded: Vec<String> = sessions().iter().map(|s| hex(&encode_session(s))).collect();
        assert_eq!(encoded, written_sessions);
    }

    fn names<R>(fields: &fields::Fields<R>) -> Vec<&'static str> {
        fields.iter().map(|stored| stored.name).collect()
    }

    #[test]
    fn version_2_records_hold_exactly_what_version_1_held() {
        // The binary record writes every listed field (every total) in list order: a field
        // added to a list changes what version 2 means. Such a field comes with version 3 (a
        // version 2 reader that leaves it blank, and version 2's names frozen beside version
        // 1's); until then version 2 holds the fields version 1 held, in the same order.
        let why = "a field added changes the version 2 layout: write version 3";
        assert_eq!(BINARY_VERSION, 2, "{why}, and pin it here");
        let totals: Vec<&str> = RoomTotals::FIELDS.iter().map(|field| field.name).collect();
        for (version_1, current) in [
            (&STATE_V1, names(fields::STATE_FIELDS)),
            (&TOTALS_V1, totals),
            (&DRAW_V1, names(fields::DRAW_FIELDS)),
            (&TICKET_V1, names(fields::TICKET_FIELDS)),
            (&SESSION_V1, names(fields::SESSION_FIELDS)),
        ] {
            assert_eq!(
                current, version_1.names,
                "{} fields: {why}",
                version_1.label
            );
        }
    }

    #[test]
    fn what_version_1_holds_is_still_listed() {
        // The version 1 reader reads its frozen names through the current lists: a field
        // renamed or dropped there would be lost from every version 1 record.
        let listed = [
            (&STATE_V1, names(fields::STATE_FIELDS)),
            (&DRAW_V1, names(fields::DRAW_FIELDS)),
            (&TICKET_V1, names(fields::TICKET_FIELDS)),
            (&SESSION_V1, names(fields::SESSION_FIELDS)),
            (
                &TOTALS_V1,
                RoomTotals::FIELDS.iter().map(|field| field.name).collect(),
            ),
        ];
        for (version_1, current) in listed {
            for name in version_1.names {
                assert!(current.contains(name), "{} {name}", version_1.label);
            }
        }
    }

    #[test]
    fn a_field_version_1_did_not_have_is_left_blank() {
        // As if `priority` had been added after version 1: a record holding it is read
        // without it, and one lacking it is not refused.
        let without_priority = Version1 {
            label: "ticket",
            names: &TICKET_V1.names[..7],
        };
        assert!(!without_priority.names.contains(&"priority"));
        let json = br#"{"v":1,"id":"BwcHBwcHBwcHBwcHBwcHBw","position":41,"generation":3,"joined_at":1700000000123,"last_seen":1700000050000,"priority":true,"state":{"kind":"waiting"}}"#;
        let mut ticket = fields::blank_ticket();
        read_json_record(json, &mut ticket, &without_priority, fields::TICKET_FIELDS).unwrap();
        assert!(!ticket.priority);
        assert_eq!(ticket, tickets()[0]);
        // Nor is a total added since version 1 looked for.
        let totals = br#"{"joined":1,"admitted":2,"no_show":3,"abandoned":4,"left":5,"passes":6,"completed":7,"sessions_abandoned":8,"expired":9}"#;
        let totals: JsonValue = serde_json::from_slice(totals).unwrap();
        assert_eq!(read_json_totals(Some(&totals)).unwrap().expired, 9);
    }

    #[test]
    fn every_ticket_and_session_field_is_read_from_a_version_1_record() {
        let ticket = r#"{"v":1,"id":"BwcHBwcHBwcHBwcHBwcHBw","position":41,"generation":3,"joined_at":1700000000123,"last_seen":1700000050000,"identity":"user-\u00e9","return_to":"/checkout?x=1","priority":true,"state":{"kind":"admitted","at":5,"claim_deadline":6}}"#;
        assert_eq!(decode_ticket(ticket.as_bytes()).unwrap(), tickets()[1]);
        let claimed = br#"{"v":1,"id":"BwcHBwcHBwcHBwcHBwcHBw","position":41,"generation":3,"joined_at":1700000000123,"last_seen":1700000050000,"identity":null,"return_to":null,"state":{"kind":"claimed","session":"CQkJCQkJCQkJCQkJCQkJCQ"}}"#;
        assert_eq!(decode_ticket(claimed).unwrap(), tickets()[2]);
        let ended = br#"{"v":1,"id":"BwcHBwcHBwcHBwcHBwcHBw","position":41,"generation":3,"joined_at":1700000000123,"last_seen":1700000050000,"state":{"kind":"ended","reason":"no_show","at":18446744073709551615}}"#;
        assert_eq!(decode_ticket(ended).unwrap(), tickets()[3]);
        let active = br#"{"v":1,"id":"AQEBAQEBAQEBAQEBAQEBAQ","ticket":null,"position":12,"generation":1,"uid":null,"issued_at":10,"renewed_at":20,"expires_at":30,"hard_expires_at":null,"ended":null}"#;
        assert_eq!(decode_session(active).unwrap(), sessions()[1]);
        let without_position = ticket.replace(r#""position":41,"#, "");
        let error = decode_ticket(without_position.as_bytes()).unwrap_err();
        assert!(
            error.to_string().contains("ticket field \"position\""),
            "{error}"
        );
        let bad_kind = br#"{"v":1,"id":"BwcHBwcHBwcHBwcHBwcHBw","position":41,"generation":3,"joined_at":1,"last_seen":1,"state":{"kind":"gone"}}"#;
        let error = decode_ticket(bad_kind).unwrap_err();
        assert!(
            error.to_string().contains("ticket field \"state\""),
            "{error}"
        );
    }

    #[test]
    fn a_bad_draw_field_is_named_as_one() {
        let state = format!(
            r#"{{"v":1,"generation":1,"last_position":0,"serving":0,"bucket_units":0,"bucket_updated_at":0,"rate_admissions":0.0,"rate_seconds":0.0,"rate_measured_until":null,"totals":{{"joined":0,"admitted":0,"no_show":0,"abandoned":0,"left":0,"passes":0,"completed":0,"sessions_abandoned":0,"expired":0}},"draw":{{"opens_at":100,"drawn_at":101,"seed":"{}","cohort":"many","through_position":18}}}}"#,
            "ab".repeat(32)
        );
        let error = decode_state(config(), state.as_bytes()).unwrap_err();
        assert!(
            error.to_string().contains("draw field \"cohort\""),
            "{error}"
        );
    }

    #[test]
    fn version_1_json_records_are_still_read() {
        let ticket = br#"{"v":1,"id":"BwcHBwcHBwcHBwcHBwcHBw","position":41,"generation":3,"joined_at":1700000000123,"last_seen":1700000050000,"identity":null,"return_to":null,"state":{"kind":"waiting"}}"#;
        assert_eq!(decode_ticket(ticket).unwrap(), tickets()[0]);
        let session = br#"{"v":1,"id":"AQEBAQEBAQEBAQEBAQEBAQ","ticket":"AgICAgICAgICAgICAgICAg","position":12,"generation":1,"uid":"u","issued_at":10,"renewed_at":20,"expires_at":30,"hard_expires_at":40,"ended":{"reason":"revoked","at":35}}"#;
        assert_eq!(decode_session(session).unwrap(), sessions()[5]);
        let state = br#"{"v":1,"generation":4,"last_position":1000000,"serving":999,"bucket_units":123456,"bucket_updated_at":1000,"rate_admissions":0.5,"rate_seconds":2.0,"rate_measured_until":null,"totals":{"joined":1000000,"admitted":1,"no_show":0,"abandoned":0,"left":0,"passes":0,"completed":0,"sessions_abandoned":0,"expired":3}}"#;
        let decoded = decode_state(config(), state).unwrap();
        assert_eq!(
            (decoded.last_position, decoded.totals.expired, decoded.draw),
            (1_000_000, 3, None)
        );
        assert_eq!(decoded.rate.admissions, 0.5);
    }

    #[test]
    fn the_state_record_is_byte_for_byte_what_version_2_wrote() {
        // Written by the version 2 encoder before its fields were listed in `fields.rs`: stores
        // on disk hold these bytes.
        let written = "020400000040420f0000000000e70300000000000040e2010000000000e803000000000000343333333333d33f59f3f8c21f6ea501014d0000000000000040420f0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000003000000000000000164000000000000006500000000000000abababababababababababababababababababababababababababababababab11000000000000001200000000000000020000000303030303030303030303030303030303030303030303030303030303030303020000000000000004040404040404040404040404040404040404040404040404040404040404040900000000000000";
        let encoded: String = encode_state(&meta())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        assert_eq!(encoded, written);
    }

    #[test]
    fn every_state_field_is_read_from_a_version_1_record() {
        let seed = "ab".repeat(32);
        let code = "03".repeat(32);
        let state = format!(
            r#"{{"v":1,"generation":4,"last_position":1000000,"serving":999,"bucket_units":123456,"bucket_updated_at":1000,"rate_admissions":0.30000000000000004,"rate_seconds":1e-300,"rate_measured_until":77,"totals":{{"joined":1000000,"admitted":0,"no_show":0,"abandoned":0,"left":0,"passes":0,"completed":0,"sessions_abandoned":0,"expired":3}},"draw":{{"opens_at":100,"drawn_at":101,"seed":"{seed}","cohort":17,"through_position":18}},"code_uses":{{"{code}":2,"{}":9}}}}"#,
            "04".repeat(32)
        );
        let decoded = decode_state(config(), state.as_bytes()).unwrap();
        assert_eq!(decoded, meta());
        let without = state.replace(r#""serving":999,"#, "");
        let error = decode_state(config(), without.as_bytes()).unwrap_err();
        assert!(error.to_string().contains("serving"), "{error}");
    }

    /// Totals with a different value in every field, so a field a format drops or swaps shows.
    fn distinct_totals() -> RoomTotals {
        RoomTotals::try_from_fields(|field| {
            let index = RoomTotals::FIELDS
                .iter()
                .position(|other| other.name == field.name)
                .unwrap();
            Ok::<u64, ()>(1_000 * (index as u64 + 1) + index as u64)
        })
        .unwrap()
    }

    #[test]
    fn every_total_survives_the_binary_record() {
        let mut meta = meta();
        meta.totals = distinct_totals();
        let decoded = decode_state(config(), &encode_state(&meta)).unwrap();
        assert_eq!(decoded.totals, meta.totals);
    }

    #[test]
    fn every_total_is_read_from_a_version_1_record() {
        let totals: Vec<String> = distinct_totals()
            .fields()
            .map(|(name, value)| format!("{name:?}:{value}"))
            .collect();
        let state = format!(
            r#"{{"v":1,"generation":1,"last_position":0,"serving":0,"bucket_units":0,"bucket_updated_at":0,"rate_admissions":0.0,"rate_seconds":0.0,"rate_measured_until":null,"totals":{{{}}}}}"#,
            totals.join(",")
        );
        let decoded = decode_state(config(), state.as_bytes()).unwrap();
        assert_eq!(decoded.totals, distinct_totals());
        let expired = format!(r#","expired":{}"#, distinct_totals().expired);
        let without_expired = state.replace(&expired, "");
        assert_ne!(without_expired, state);
        let error = decode_state(config(), without_expired.as_bytes()).unwrap_err();
        assert!(error.to_string().contains("expired"), "{error}");
    }

    #[test]
    fn damaged_binary_records_are_refused() {
        let bytes = encode_ticket(&tickets()[1]);
        for length in 0..bytes.len() {
            assert!(decode_ticket(&bytes[..length]).is_err(), "{length} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_ticket(&longer).is_err());
        let mut version = bytes;
        version[0] = 9;
        let error = decode_ticket(&version).unwrap_err().to_string();
        assert!(error.contains("unsupported record version 9"), "{error}");
    }
}
