//! Version 2 of the state, ticket and session records: fixed-width little-endian fields in a
//! fixed order after the version byte, strings as a `u32` length and UTF-8 bytes, optional
//! fields behind a presence byte (0 or 1), enums as a stable one-byte code. A record must be
//! read to its last byte: a short or long one is refused.
//!
//! A ticket takes about 60 bytes this way, against about 200 as JSON, and encodes without
//! formatting numbers or base64 ids.

use anteroom_core::counters::CounterRecord;
use anteroom_core::engine::{
    RoomMeta, RoomTotals, Session, SessionEnd, SessionState, Ticket, TicketEnd, TicketState,
};
use anteroom_core::room::RoomConfig;
use anteroom_core::{SessionId, TicketId, Timestamp};

use super::fields::{
    DRAW_FIELDS, Field, Fields, SESSION_FIELDS, STATE_FIELDS, TICKET_FIELDS, blank_draw,
    blank_session, blank_state, blank_ticket,
};
use super::record::{BINARY_VERSION, DecodeError};

const TICKET_WAITING: u8 = 0;
const TICKET_ADMITTED: u8 = 1;
const TICKET_CLAIMED: u8 = 2;
const TICKET_ENDED: u8 = 3;

pub(super) fn encode_state(meta: &RoomMeta) -> Vec<u8> {
    let mut out = Out::with_capacity(160 + 40 * meta.code_uses.len());
    out.fields(meta, STATE_FIELDS);
    out.0
}

pub(super) fn decode_state(config: RoomConfig, bytes: &[u8]) -> Result<RoomMeta, DecodeError> {
    let mut input = In::new(bytes)?;
    let mut meta = blank_state(config);
    input.fields(&mut meta, STATE_FIELDS)?;
    input.end()?;
    Ok(meta)
}

pub(super) fn encode_ticket(ticket: &Ticket) -> Vec<u8> {
    let strings = ticket.identity.as_ref().map_or(0, String::len)
        + ticket.return_to.as_ref().map_or(0, String::len);
    let mut out = Out::with_capacity(72 + strings);
    out.fields(ticket, TICKET_FIELDS);
    out.0
}

pub(super) fn decode_ticket(bytes: &[u8]) -> Result<Ticket, DecodeError> {
    let mut input = In::new(bytes)?;
    let mut ticket = blank_ticket();
    input.fields(&mut ticket, TICKET_FIELDS)?;
    input.end()?;
    Ok(ticket)
}

pub(super) fn encode_session(session: &Session) -> Vec<u8> {
    let mut out = Out::with_capacity(96 + session.uid.as_ref().map_or(0, String::len));
    out.fields(session, SESSION_FIELDS);
    out.0
}

pub(super) fn decode_session(bytes: &[u8]) -> Result<Session, DecodeError> {
    let mut input = In::new(bytes)?;
    let mut session = blank_session();
    input.fields(&mut session, SESSION_FIELDS)?;
    input.end()?;
    Ok(session)
}

/// A ticket's state: its kind's code, then what the kind holds.
fn write_ticket_state(out: &mut Out, state: TicketState) {
    match state {
        TicketState::Waiting => out.u8(TICKET_WAITING),
        TicketState::Admitted { at, claim_deadline } => {
            out.u8(TICKET_ADMITTED);
            out.time(at);
            out.time(claim_deadline);
        }
        TicketState::Claimed { session } => {
            out.u8(TICKET_CLAIMED);
            out.bytes(&session.to_bytes());
        }
        TicketState::Ended { reason, at } => {
            out.u8(TICKET_ENDED);
            out.u8(ticket_end_code(reason));
            out.time(at);
        }
    }
}

fn read_ticket_state(input: &mut In<'_>) -> Result<TicketState, DecodeError> {
    Ok(match input.u8()? {
        TICKET_WAITING => TicketState::Waiting,
        TICKET_ADMITTED => TicketState::Admitted {
            at: input.time()?,
            claim_deadline: input.time()?,
        },
        TICKET_CLAIMED => TicketState::Claimed {
            session: SessionId::from_bytes(input.array()?),
        },
        TICKET_ENDED => TicketState::Ended {
            reason: ticket_end(input.u8()?)?,
            at: input.time()?,
        },
        _ => return Err(DecodeError::Binary("an unknown ticket state")),
    })
}

/// A session's state: none while active, else how (its code) and when it ended.
fn write_session_state(out: &mut Out, state: SessionState) {
    let ended = match state {
        SessionState::Active => None,
        SessionState::Ended { reason, at } => Some((reason, at)),
    };
    out.option(ended, |out, (reason, at)| {
        out.u8(session_end_code(reason));
        out.time(at);
    });
}

fn read_session_state(input: &mut In<'_>) -> Result<SessionState, DecodeError> {
    let ended = input.option(|input| Ok((session_end(input.u8()?)?, input.time()?)))?;
    Ok(match ended {
        None => SessionState::Active,
        Some((reason, at)) => SessionState::Ended { reason, at },
    })
}

/// Stable codes: these bytes are on disk, never renumber them.
fn ticket_end_code(end: TicketEnd) -> u8 {
    match end {
        TicketEnd::Left => 0,
        TicketEnd::Abandoned => 1,
        TicketEnd::NoShow => 2,
        TicketEnd::Reset => 3,
    }
}

fn ticket_end(code: u8) -> Result<TicketEnd, DecodeError> {
    TicketEnd::ALL
        .into_iter()
        .find(|end| ticket_end_code(*end) == code)
        .ok_or(DecodeError::Binary("an unknown ticket end"))
}

/// Stable codes: these bytes are on disk, never renumber them.
fn session_end_code(end: SessionEnd) -> u8 {
    match end {
        SessionEnd::Completed => 0,
        SessionEnd::Abandoned => 1,
        SessionEnd::Expired => 2,
        SessionEnd::Revoked => 3,
        SessionEnd::Reset => 4,
    }
}

fn session_end(code: u8) -> Result<SessionEnd, DecodeError> {
    SessionEnd::ALL
        .into_iter()
        .find(|end| session_end_code(*end) == code)
        .ok_or(DecodeError::Binary("an unknown session end"))
}

/// A record being written, its version byte first.
struct Out(Vec<u8>);

impl Out {
    fn with_capacity(capacity: usize) -> Out {
        let mut bytes = Vec::with_capacity(capacity);
        bytes.push(BINARY_VERSION);
        Out(bytes)
    }

    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }

    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn f64(&mut self, value: f64) {
        self.u64(value.to_bits());
    }

    fn time(&mut self, value: Timestamp) {
        self.u64(value.0);
    }

    fn bytes(&mut self, value: &[u8]) {
        self.0.extend_from_slice(value);
    }

    fn str(&mut self, value: &str) {
        // Identities and return paths are bounded far below 4 GiB by the HTTP layer.
        self.u32(u32::try_from(value.len()).unwrap_or(u32::MAX));
        self.bytes(value.as_bytes());
    }

    fn option<T>(&mut self, value: Option<T>, write: impl FnOnce(&mut Out, T)) {
        match value {
            None => self.u8(0),
            Some(value) => {
                self.u8(1);
                write(self, value);
            }
        }
    }
}

impl Out {
    /// Writes `record`'s fields in list order.
    fn fields<R>(&mut self, record: &R, fields: &Fields<R>) {
        for stored in fields {
            match &stored.field {
                Field::U32(read, _) => self.u32(*read(record)),
                Field::U64(read, _) => self.u64(*read(record)),
                Field::F64(read, _) => self.f64(*read(record)),
                Field::Time(read, _) => self.time(*read(record)),
                Field::OptionalTime(read, _) => self.option(*read(record), Out::time),
                Field::Seed(read, _) => self.bytes(read(record)),
                Field::Totals(read, _) => {
                    for (_, count) in read(record).fields() {
                        self.u64(count);
                    }
                }
                Field::Draw(read, _) => {
                    self.option(read(record).as_ref(), |out, draw| {
                        out.fields(draw, DRAW_FIELDS);
                    });
                }
                Field::CodeUses(read, _) => {
                    let code_uses = read(record);
                    // A room has a handful of priority codes at most.
                    self.u32(u32::try_from(code_uses.len()).unwrap_or(u32::MAX));
                    for (hash, uses) in code_uses {
                        self.bytes(hash);
                        self.u64(*uses);
                    }
                }
                Field::TicketId(read, _) => self.bytes(&read(record).to_bytes()),
                Field::SessionId(read, _) => self.bytes(&read(record).to_bytes()),
                Field::OptionalTicketId(read, _) => {
                    self.option(*read(record), |out, id| out.bytes(&id.to_bytes()));
                }
                Field::OptionalText(read, _) => self.option(read(record).as_deref(), Out::str),
                Field::Flag(read, _) => self.u8(u8::from(*read(record))),
                Field::TicketState(read, _) => write_ticket_state(self, *read(record)),
                Field::SessionState(read, _) => write_session_state(self, *read(record)),
            }
        }
    }
}

/// A record being read, after its version byte.
struct In<'a>(&'a [u8]);

impl<'a> In<'a> {
    fn new(bytes: &'a [u8]) -> Result<In<'a>, DecodeError> {
        match bytes.split_first() {
            Some((&BINARY_VERSION, rest)) => Ok(In(rest)),
            Some((&other, _)) => Err(DecodeError::Version(other)),
            None => Err(DecodeError::Binary("an empty record")),
        }
    }

    fn take(&mut self, length: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < length {
            return Err(DecodeError::Binary("a truncated record"));
        }
        let (field, rest) = self.0.split_at(length);
        self.0 = rest;
        Ok(field)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn flag(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Binary("a flag neither 0 nor 1")),
        }
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn f64(&mut self) -> Result<f64, DecodeError> {
        Ok(f64::from_bits(self.u64()?))
    }

    fn time(&mut self) -> Result<Timestamp, DecodeError> {
        Ok(Timestamp(self.u64()?))
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let length = usize::try_from(self.u32()?).unwrap_or(usize::MAX);
        let bytes = self.take(length)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Binary("a string not UTF-8"))
    }

    fn option<T>(
        &mut self,
        read: impl FnOnce(&mut In<'a>) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        if self.flag()? {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Reads `record`'s fields in list order.
    fn fields<R>(&mut self, record: &mut R, fields: &Fields<R>) -> Result<(), DecodeError> {
        for stored in fields {
            match &stored.field {
                Field::U32(_, slot) => *slot(record) = self.u32()?,
                Field::U64(_, slot) => *slot(record) = self.u64()?,
                Field::F64(_, slot) => *slot(record) = self.f64()?,
                Field::Time(_, slot) => *slot(record) = self.time()?,
                Field::OptionalTime(_, slot) => *slot(record) = self.option(In::time)?,
                Field::Seed(_, slot) => *slot(record) = self.array()?,
                Field::Totals(_, slot) => {
                    *slot(record) = RoomTotals::try_from_fields(|_| self.u64())?;
                }
                Field::Draw(_, slot) => {
                    *slot(record) = self.option(|input| {
                        let mut draw = blank_draw();
                        input.fields(&mut draw, DRAW_FIELDS)?;
                        Ok(draw)
                    })?;
                }
                Field::CodeUses(_, slot) => {
                    let code_uses = slot(record);
                    for _ in 0..self.u32()? {
                        let hash = self.array()?;
                        code_uses.insert(hash, self.u64()?);
                    }
                }
                Field::TicketId(_, slot) => *slot(record) = TicketId::from_bytes(self.array()?),
                Field::SessionId(_, slot) => *slot(record) = SessionId::from_bytes(self.array()?),
                Field::OptionalTicketId(_, slot) => {
                    *slot(record) =
                        self.option(|input| Ok(TicketId::from_bytes(input.array()?)))?;
                }
                Field::OptionalText(_, slot) => *slot(record) = self.option(In::string)?,
                Field::Flag(_, slot) => *slot(record) = self.flag()?,
                Field::TicketState(_, slot) => *slot(record) = read_ticket_state(self)?,
                Field::SessionState(_, slot) => *slot(record) = read_session_state(self)?,
            }
        }
        Ok(())
    }

    fn end(&self) -> Result<(), DecodeError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Binary("trailing bytes after the record"))
        }
    }
}
