//! Persisted record formats (version 1) for durable backends.
//!
//! Core types do not derive `Serialize` (serialization is a boundary): these wire structs are
//! the on-disk shape, each tagged with a version so later formats can read older files. Room
//! configurations are stored in their §3 raw form ([`RawRoom`]), the same shape the admin API
//! speaks.

use anteroom_core::config::RawRoom;
use anteroom_core::engine::{
    AdmissionBucket, Draw, RoomMeta, RoomTotals, Session, SessionEnd, SessionState, Ticket,
    TicketEnd, TicketState,
};
use anteroom_core::eta::AdmissionRate;
use anteroom_core::lottery::{seed_from_hex, seed_to_hex};
use anteroom_core::room::RoomConfig;
use anteroom_core::{SessionId, TicketId, Timestamp};
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Why a stored record could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    #[error("malformed record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unsupported record version {0}")]
    Version(u8),
    #[error("invalid stored value: {0}")]
    Invalid(String),
}

const VERSION: u8 = 1;

#[derive(Serialize, Deserialize)]
struct StateV1 {
    v: u8,
    generation: u32,
    last_position: u64,
    serving: u64,
    bucket_units: u64,
    bucket_updated_at: u64,
    rate_admissions: f64,
    rate_seconds: f64,
    rate_measured_until: Option<u64>,
    totals: TotalsV1,
    /// Absent in records written before schedules existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    draw: Option<DrawV1>,
    /// Joins made with each priority code, by the code's SHA-256 in hex.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    code_uses: BTreeMap<String, u64>,
}

#[derive(Serialize, Deserialize)]
struct DrawV1 {
    opens_at: u64,
    drawn_at: u64,
    /// 64 hex digits.
    seed: String,
    cohort: u64,
    through_position: u64,
}

#[derive(Serialize, Deserialize)]
struct TotalsV1 {
    joined: u64,
    admitted: u64,
    no_show: u64,
    abandoned: u64,
    left: u64,
    passes: u64,
    completed: u64,
    sessions_abandoned: u64,
    expired: u64,
}

#[derive(Serialize, Deserialize)]
struct TicketV1 {
    v: u8,
    id: String,
    position: u64,
    generation: u32,
    joined_at: u64,
    last_seen: u64,
    identity: Option<String>,
    return_to: Option<String>,
    /// Absent (false) in records written before priority lanes existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    priority: bool,
    state: TicketStateV1,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum TicketStateV1 {
    Waiting,
    Admitted { at: u64, claim_deadline: u64 },
    Claimed { session: String },
    Ended { reason: String, at: u64 },
}

#[derive(Serialize, Deserialize)]
struct SessionV1 {
    v: u8,
    id: String,
    ticket: Option<String>,
    position: u64,
    generation: u32,
    uid: Option<String>,
    issued_at: u64,
    renewed_at: u64,
    expires_at: u64,
    hard_expires_at: Option<u64>,
    ended: Option<EndedV1>,
}

#[derive(Serialize, Deserialize)]
struct EndedV1 {
    reason: String,
    at: u64,
}

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

pub(crate) fn encode_state(meta: &RoomMeta) -> Vec<u8> {
    let totals = meta.totals;
    serialize(&StateV1 {
        v: VERSION,
        generation: meta.generation,
        last_position: meta.last_position,
        serving: meta.serving,
        bucket_units: meta.bucket.units,
        bucket_updated_at: meta.bucket.updated_at.0,
        rate_admissions: meta.rate.admissions,
        rate_seconds: meta.rate.seconds,
        rate_measured_until: meta.rate.measured_until.map(|t| t.0),
        totals: TotalsV1 {
            joined: totals.joined,
            admitted: totals.admitted,
            no_show: totals.no_show,
            abandoned: totals.abandoned,
            left: totals.left,
            passes: totals.passes,
            completed: totals.completed,
            sessions_abandoned: totals.sessions_abandoned,
            expired: totals.expired,
        },
        draw: meta.draw.map(|draw| DrawV1 {
            opens_at: draw.opens_at.0,
            drawn_at: draw.drawn_at.0,
            seed: seed_to_hex(&draw.seed),
            cohort: draw.cohort,
            through_position: draw.through_position,
        }),
        code_uses: meta
            .code_uses
            .iter()
            .map(|(hash, uses)| (seed_to_hex(hash), *uses))
            .collect(),
    })
}

pub(crate) fn decode_state(config: RoomConfig, bytes: &[u8]) -> Result<RoomMeta, DecodeError> {
    let state: StateV1 = serde_json::from_slice(bytes)?;
    check_version(state.v)?;
    let totals = state.totals;
    let draw = match state.draw {
        None => None,
        Some(draw) => Some(Draw {
            opens_at: Timestamp(draw.opens_at),
            drawn_at: Timestamp(draw.drawn_at),
            seed: seed_from_hex(&draw.seed)
                .ok_or_else(|| DecodeError::Invalid(format!("lottery seed {:?}", draw.seed)))?,
            cohort: draw.cohort,
            through_position: draw.through_position,
        }),
    };
    let mut code_uses = BTreeMap::new();
    for (hash, uses) in state.code_uses {
        let hash = seed_from_hex(&hash)
            .ok_or_else(|| DecodeError::Invalid(format!("priority code hash {hash:?}")))?;
        code_uses.insert(hash, uses);
    }
    Ok(RoomMeta {
        draw,
        code_uses,
        config,
        generation: state.generation,
        last_position: state.last_position,
        serving: state.serving,
        bucket: AdmissionBucket {
            units: state.bucket_units,
            updated_at: Timestamp(state.bucket_updated_at),
        },
        rate: AdmissionRate {
            admissions: state.rate_admissions,
            seconds: state.rate_seconds,
            measured_until: state.rate_measured_until.map(Timestamp),
        },
        totals: RoomTotals {
            joined: totals.joined,
            admitted: totals.admitted,
            no_show: totals.no_show,
            abandoned: totals.abandoned,
            left: totals.left,
            passes: totals.passes,
            completed: totals.completed,
            sessions_abandoned: totals.sessions_abandoned,
            expired: totals.expired,
        },
    })
}

pub(crate) fn encode_ticket(ticket: &Ticket) -> Vec<u8> {
    let state = match ticket.state {
        TicketState::Waiting => TicketStateV1::Waiting,
        TicketState::Admitted { at, claim_deadline } => TicketStateV1::Admitted {
            at: at.0,
            claim_deadline: claim_deadline.0,
        },
        TicketState::Claimed { session } => TicketStateV1::Claimed {
            session: session.to_string(),
        },
        TicketState::Ended { reason, at } => TicketStateV1::Ended {
            reason: reason.as_str().to_owned(),
            at: at.0,
        },
    };
    serialize(&TicketV1 {
        v: VERSION,
        id: ticket.id.to_string(),
        position: ticket.position,
        generation: ticket.generation,
        joined_at: ticket.joined_at.0,
        last_seen: ticket.last_seen.0,
        identity: ticket.identity.clone(),
        return_to: ticket.return_to.clone(),
        priority: ticket.priority,
        state,
    })
}

pub(crate) fn decode_ticket(bytes: &[u8]) -> Result<Ticket, DecodeError> {
    let stored: TicketV1 = serde_json::from_slice(bytes)?;
    check_version(stored.v)?;
    let state = match stored.state {
        TicketStateV1::Waiting => TicketState::Waiting,
        TicketStateV1::Admitted { at, claim_deadline } => TicketState::Admitted {
            at: Timestamp(at),
            claim_deadline: Timestamp(claim_deadline),
        },
        TicketStateV1::Claimed { session } => TicketState::Claimed {
            session: parse_session_id(&session)?,
        },
        TicketStateV1::Ended { reason, at } => TicketState::Ended {
            reason: parse_ticket_end(&reason)?,
            at: Timestamp(at),
        },
    };
    Ok(Ticket {
        id: parse_ticket_id(&stored.id)?,
        position: stored.position,
        generation: stored.generation,
        joined_at: Timestamp(stored.joined_at),
        last_seen: Timestamp(stored.last_seen),
        identity: stored.identity,
        return_to: stored.return_to,
        priority: stored.priority,
        state,
    })
}

pub(crate) fn encode_session(session: &Session) -> Vec<u8> {
    let ended = match session.state {
        SessionState::Active => None,
        SessionState::Ended { reason, at } => Some(EndedV1 {
            reason: reason.as_str().to_owned(),
            at: at.0,
        }),
    };
    serialize(&SessionV1 {
        v: VERSION,
        id: session.id.to_string(),
        ticket: session.ticket.map(|t| t.to_string()),
        position: session.position,
        generation: session.generation,
        uid: session.uid.clone(),
        issued_at: session.issued_at.0,
        renewed_at: session.renewed_at.0,
        expires_at: session.expires_at.0,
        hard_expires_at: session.hard_expires_at.map(|t| t.0),
        ended,
    })
}

pub(crate) fn decode_session(bytes: &[u8]) -> Result<Session, DecodeError> {
    let stored: SessionV1 = serde_json::from_slice(bytes)?;
    check_version(stored.v)?;
    let state = match stored.ended {
        None => SessionState::Active,
        Some(ended) => SessionState::Ended {
            reason: parse_session_end(&ended.reason)?,
            at: Timestamp(ended.at),
        },
    };
    Ok(Session {
        id: parse_session_id(&stored.id)?,
        ticket: stored.ticket.as_deref().map(parse_ticket_id).transpose()?,
        position: stored.position,
        generation: stored.generation,
        uid: stored.uid,
        issued_at: Timestamp(stored.issued_at),
        renewed_at: Timestamp(stored.renewed_at),
        expires_at: Timestamp(stored.expires_at),
        hard_expires_at: stored.hard_expires_at.map(Timestamp),
        state,
    })
}

fn serialize(value: &impl Serialize) -> Vec<u8> {
    // Serializing these plain structs cannot fail: no maps with non-string keys, no foreign
    // Serialize impls.
    serde_json::to_vec(value).unwrap_or_default()
}

fn check_version(version: u8) -> Result<(), DecodeError> {
    if version == VERSION {
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
    [
        TicketEnd::Left,
        TicketEnd::Abandoned,
        TicketEnd::NoShow,
        TicketEnd::Reset,
    ]
    .into_iter()
    .find(|end| end.as_str() == text)
    .ok_or_else(|| DecodeError::Invalid(format!("ticket end {text:?}")))
}

fn parse_session_end(text: &str) -> Result<SessionEnd, DecodeError> {
    [
        SessionEnd::Completed,
        SessionEnd::Abandoned,
        SessionEnd::Expired,
        SessionEnd::Revoked,
        SessionEnd::Reset,
    ]
    .into_iter()
    .find(|end| end.as_str() == text)
    .ok_or_else(|| DecodeError::Invalid(format!("session end {text:?}")))
}
