//! The Redis layout's record formats (layout 2) and the scripts' answers, decoded into core
//! types.
//!
//! Records are `|`-separated text, their columns where the store's field lists
//! (`persisted/fields.rs`) place them (see also `lua/rooms/room.lua`): compact, cheap to
//! rewrite in Lua, and readable with `redis-cli`. The scripts' readers and writers of ticket
//! and session records are written from the same lists ([`record_columns_lua`]). The only free text, identities and return
//! paths, is written `=` + the text with `%` and `|` percent-escaped, or empty for none, so the
//! scripts can split records on `|` and copy these fields without ever decoding them.

use anteroom_core::adaptive::LoadSignal;
use anteroom_core::counters::CounterRecord;
use anteroom_core::engine::{
    AdmittedView, Draw, EngineError, Entry, RoomSnapshot, RoomTotals, Session, SessionEnd,
    SessionState, TickReport, Ticket, TicketEnd, TicketState, WaitingView,
};
use anteroom_core::eta::{AdmissionRate, eta_seconds};
use anteroom_core::lottery::seed_from_hex;
use anteroom_core::room::Mode;
use anteroom_core::{SessionId, TicketId, Timestamp};

use crate::LineMasks;
use crate::persisted::fields::{
    DRAW_FIELDS, Field, Fields, Redis, SESSION_FIELDS, TICKET_FIELDS, blank_draw, blank_session,
    blank_ticket,
};

/// Why a script's answer could not be read.
#[derive(Debug, thiserror::Error)]
#[error("malformed answer from a room script: {0}")]
pub(crate) struct MalformedAnswer(pub(crate) String);

/// What a script says when it refuses an operation.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The room does not exist.
    RoomNotFound,
    /// The room engine's refusal.
    Engine(EngineError),
    /// A join arrived after its caller cancelled it (`cancel_join.lua`); nobody awaits it.
    JoinCancelled,
}

impl Refusal {
    /// The refusal as the store reports it for `room`.
    pub(crate) fn into_error(self, room: &anteroom_core::RoomId) -> crate::StoreError {
        match self {
            Refusal::RoomNotFound => crate::StoreError::RoomNotFound(room.clone()),
            Refusal::Engine(error) => crate::StoreError::Engine(error),
            Refusal::JoinCancelled => crate::StoreError::Backend {
                message: format!("a join into {room} ran after its caller had cancelled it"),
                source: None,
            },
        }
    }
}

/// Writes optional free text for a record field: `""` for none, else `=` and the escaped text.
pub(crate) fn encode_text(text: Option<&str>) -> String {
    let Some(text) = text else {
        return String::new();
    };
    let mut encoded = String::with_capacity(text.len() + 1);
    encoded.push('=');
    for character in text.chars() {
        match character {
            '%' => encoded.push_str("%25"),
            '|' => encoded.push_str("%7C"),
            other => encoded.push(other),
        }
    }
    encoded
}

/// Reads a field written by [`encode_text`].
pub(crate) fn decode_text(field: &str) -> Result<Option<String>, MalformedAnswer> {
    if field.is_empty() {
        return Ok(None);
    }
    let Some(escaped) = field.strip_prefix('=') else {
        return Err(MalformedAnswer(format!("text field {field:?}")));
    };
    let mut text = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(index) = rest.find('%') {
        text.push_str(&rest[..index]);
        let code = rest.get(index..index + 3);
        match code {
            Some("%25") => text.push('%'),
            Some("%7C") => text.push('|'),
            _ => return Err(MalformedAnswer(format!("escape in {field:?}"))),
        }
        rest = &rest[index + 3..];
    }
    text.push_str(rest);
    Ok(Some(text))
}

/// Reads the meta's `draw` field: the draw's fields in `DRAW_FIELDS` order joined by `|`
/// (`opens_at|drawn_at|seed|cohort|through_position`, the seed in hex), or empty for none.
fn decode_draw(field: &str) -> Result<Option<Draw>, MalformedAnswer> {
    if field.is_empty() {
        return Ok(None);
    }
    let malformed = || MalformedAnswer(format!("draw {field:?}"));
    let parts: Vec<&str> = field.split('|').collect();
    if parts.len() != DRAW_FIELDS.len() {
        return Err(malformed());
    }
    let mut draw = blank_draw();
    for (stored, text) in DRAW_FIELDS.iter().zip(parts) {
        match stored.field {
            Field::Time(_, slot) => *slot(&mut draw) = timestamp(text)?,
            Field::U64(_, slot) => *slot(&mut draw) = parse_number(text)?,
            Field::Seed(_, slot) => *slot(&mut draw) = seed_from_hex(text).ok_or_else(malformed)?,
            // A draw has no field of another kind.
            _ => return Err(malformed()),
        }
    }
    Ok(Some(draw))
}

/// A script's answer: a flat list of text fields, read front to back.
pub(crate) struct Answer {
    fields: std::vec::IntoIter<String>,
}

impl Answer {
    /// Splits off a refusal (`error`, why); anything else is handed back for reading.
    pub(crate) fn new(fields: Vec<String>) -> Result<Result<Answer, Refusal>, MalformedAnswer> {
        let mut answer = Answer {
            fields: fields.into_iter(),
        };
        if answer.peek() != Some("error") {
            return Ok(Ok(answer));
        }
        answer.text()?;
        let why = answer.text()?;
        let refusal = match why.as_str() {
            "room_not_found" => Refusal::RoomNotFound,
            "room_closed" => Refusal::Engine(EngineError::RoomClosed),
            "ticket_unknown" => Refusal::Engine(EngineError::TicketUnknown),
            "ticket_expired" => Refusal::Engine(EngineError::TicketExpired),
            "session_unknown" => Refusal::Engine(EngineError::SessionUnknown),
            "session_ended" => Refusal::Engine(EngineError::SessionEnded),
            "room_full" => Refusal::Engine(EngineError::RoomFull),
            "invalid_priority_code" => Refusal::Engine(EngineError::InvalidPriorityCode),
            "nothing_to_resume" => Refusal::Engine(EngineError::NothingToResume),
            "join_cancelled" => Refusal::JoinCancelled,
            other => return Err(MalformedAnswer(format!("unknown refusal {other:?}"))),
        };
        Ok(Err(refusal))
    }

    /// Whether the answer starts with `word` (an outcome other than `ok`, read by the caller).
    pub(crate) fn is_refused_as(&self, word: &str) -> bool {
        self.peek() == Some(word)
    }

    /// Whether every field was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.fields.as_slice().is_empty()
    }

    fn peek(&self) -> Option<&str> {
        self.fields.as_slice().first().map(String::as_str)
    }

    pub(crate) fn text(&mut self) -> Result<String, MalformedAnswer> {
        self.fields
            .next()
            .ok_or_else(|| MalformedAnswer("answer too short".to_owned()))
    }

    pub(crate) fn expect(&mut self, word: &str) -> Result<(), MalformedAnswer> {
        let found = self.text()?;
        if found == word {
            Ok(())
        } else {
            Err(MalformedAnswer(format!(
                "expected {word:?}, found {found:?}"
            )))
        }
    }

    pub(crate) fn number(&mut self) -> Result<u64, MalformedAnswer> {
        parse_number(&self.text()?)
    }

    fn float(&mut self) -> Result<f64, MalformedAnswer> {
        let text = self.text()?;
        text.parse()
            .map_err(|_| MalformedAnswer(format!("number {text:?}")))
    }

    /// The measured admission rate: decayed admissions, then decayed seconds (eta.rs).
    fn rate(&mut self) -> Result<AdmissionRate, MalformedAnswer> {
        Ok(AdmissionRate {
            admissions: self.float()?,
            seconds: self.float()?,
            measured_until: None,
        })
    }

    /// `ok` followed by a snapshot (`snapshot_reply` in room.lua).
    pub(crate) fn snapshot(&mut self) -> Result<RoomSnapshot, MalformedAnswer> {
        self.expect("ok")?;
        let generation = self.generation()?;
        let mode_text = self.text()?;
        let mode = Mode::parse(&mode_text)
            .ok_or_else(|| MalformedAnswer(format!("mode {mode_text:?}")))?;
        let serving = self.number()?;
        let last_position = self.number()?;
        let waiting = self.number()?;
        let active = self.number()?;
        let admitted_unclaimed = self.number()?;
        let rate = self.rate()?;
        // `snapshot_reply` sends the totals in the field list's order (`TOTAL_FIELDS`).
        let totals = RoomTotals::try_from_fields(|_| self.number())?;
        let draw = decode_draw(&self.text()?)?;
        Ok(RoomSnapshot {
            draw,
            generation,
            mode,
            serving,
            last_position,
            waiting,
            active,
            admitted_unclaimed,
            admission_rate: rate.per_second(),
            eta_seconds_for_new: eta_seconds(waiting, &rate),
            totals,
        })
    }

    /// A status answer (`waiting_reply` / `admitted_reply` in room.lua).
    pub(crate) fn entry(&mut self) -> Result<Entry, MalformedAnswer> {
        let kind = self.text()?;
        match kind.as_str() {
            "waiting" => {
                let ticket = decode_ticket(&self.text()?, &self.text()?)?;
                let ahead = self.number()?;
                let serving = self.number()?;
                let waiting = self.number()?;
                let rate = self.rate()?;
                let mode = self.text()?;
                let opens_at = optional_number(&self.text()?)?.map(Timestamp);
                Ok(Entry::Waiting(WaitingView {
                    opens_at,
                    ticket: ticket.id,
                    position: ticket.position,
                    generation: ticket.generation,
                    ahead,
                    serving,
                    waiting,
                    eta_seconds: eta_seconds(ahead, &rate),
                    paused: mode == Mode::QueueAll.as_str(),
                    return_to: ticket.return_to,
                }))
            }
            "admitted" => {
                let ticket = decode_ticket(&self.text()?, &self.text()?)?;
                let session = decode_session(&self.text()?, &self.text()?)?;
                let serving = self.number()?;
                let waiting = self.number()?;
                Ok(Entry::Admitted(AdmittedView {
                    ticket: ticket.id,
                    position: ticket.position,
                    serving,
                    waiting,
                    session,
                    return_to: ticket.return_to,
                }))
            }
            other => Err(MalformedAnswer(format!("status kind {other:?}"))),
        }
    }

    /// `ok`, session id, session record.
    pub(crate) fn session(&mut self) -> Result<Session, MalformedAnswer> {
        decode_session(&self.text()?, &self.text()?)
    }

    /// `ok`, then the report's counts in its field list's order (`tick.lua`).
    pub(crate) fn tick_report(&mut self) -> Result<TickReport, MalformedAnswer> {
        self.expect("ok")?;
        TickReport::try_from_fields(|_| self.number())
    }

    /// `ok`, then counted tickets and sessions (each an id and a record).
    pub(crate) fn records(&mut self) -> Result<(Vec<Ticket>, Vec<Session>), MalformedAnswer> {
        self.expect("ok")?;
        let n_tickets = self.number()?;
        let mut tickets = Vec::new();
        for _ in 0..n_tickets {
            let id = self.text()?;
            let record = self.text()?;
            tickets.push(decode_ticket(&id, &record)?);
        }
        let n_sessions = self.number()?;
        let mut sessions = Vec::new();
        for _ in 0..n_sessions {
            let id = self.text()?;
            let record = self.text()?;
            sessions.push(decode_session(&id, &record)?);
        }
        Ok((tickets, sessions))
    }

    fn generation(&mut self) -> Result<u32, MalformedAnswer> {
        let number = self.number()?;
        u32::try_from(number).map_err(|_| MalformedAnswer(format!("generation {number}")))
    }
}

/// Decodes a ticket record (the full form every answer carries, see `room.lua`), the columns
/// where [`TICKET_FIELDS`] places them.
pub(crate) fn decode_ticket(id: &str, record: &str) -> Result<Ticket, MalformedAnswer> {
    let mut ticket = blank_ticket();
    decode_record(id, record, &mut ticket, TICKET_FIELDS)
        .map_err(|why| MalformedAnswer(format!("ticket record {record:?}: {why}")))?;
    Ok(ticket)
}

/// Decodes a session record, the columns where [`SESSION_FIELDS`] places them.
pub(crate) fn decode_session(id: &str, record: &str) -> Result<Session, MalformedAnswer> {
    let mut session = blank_session();
    decode_record(id, record, &mut session, SESSION_FIELDS)
        .map_err(|why| MalformedAnswer(format!("session record {record:?}: {why}")))?;
    Ok(session)
}

/// The most columns a record's fields place (tickets and sessions have fewer); a wider list
/// of fields fails every decode, which the record tests would show.
const MAX_RECORD_COLUMNS: usize = 16;

/// Fills `value` from a `|`-separated record stored under `id`. A record may end before
/// trailing flags (records written before a flag existed, or with it unset); no other column
/// may be missing, and none may be extra.
fn decode_record<R>(
    id: &str,
    record: &str,
    value: &mut R,
    fields: &Fields<R>,
) -> Result<(), MalformedAnswer> {
    let (required, width) = column_count(fields);
    // The columns on the stack: a record is decoded with every join's and status' answer.
    let mut columns = [""; MAX_RECORD_COLUMNS];
    let mut count = 0;
    for text in record.split('|') {
        let slot = columns
            .get_mut(count)
            .filter(|_| count < width)
            .ok_or_else(|| MalformedAnswer(format!("more than {width} columns")))?;
        *slot = text;
        count += 1;
    }
    if count < required {
        return Err(MalformedAnswer(format!("{count} columns")));
    }
    let column = |at: usize| columns.get(at - 1).copied().unwrap_or("");
    for stored in fields {
        match stored.redis {
            Redis::Key => decode_column(id, &stored.field, value)?,
            Redis::Columns { full: [at], .. } => decode_column(column(*at), &stored.field, value)?,
            Redis::Columns {
                full: [tag, first, second],
                ..
            } => {
                let state = [column(*tag), column(*first), column(*second)];
                decode_state(state, &stored.field, value)?;
            }
            _ => return Err(MalformedAnswer(format!("no column for {}", stored.name))),
        }
    }
    Ok(())
}

/// How many columns a record has at least (up to its last column that is not a flag) and at
/// most.
fn column_count<R>(fields: &Fields<R>) -> (usize, usize) {
    let (mut required, mut width) = (0, 0);
    for stored in fields {
        if let Redis::Columns { full, .. } = stored.redis {
            let last = full.iter().copied().max().unwrap_or(0);
            width = width.max(last);
            if !matches!(stored.field, Field::Flag(..)) {
                required = required.max(last);
            }
        }
    }
    (required, width)
}

/// One column into the field it holds.
fn decode_column<R>(text: &str, field: &Field<R>, value: &mut R) -> Result<(), MalformedAnswer> {
    match field {
        Field::U32(_, slot) => {
            *slot(value) = u32::try_from(parse_number(text)?)
                .map_err(|_| MalformedAnswer(format!("number {text:?}")))?;
        }
        Field::U64(_, slot) => *slot(value) = parse_number(text)?,
        Field::Time(_, slot) => *slot(value) = timestamp(text)?,
        Field::OptionalTime(_, slot) => *slot(value) = optional_number(text)?.map(Timestamp),
        Field::TicketId(_, slot) => *slot(value) = parse_ticket_id(text)?,
        Field::SessionId(_, slot) => *slot(value) = parse_session_id(text)?,
        Field::OptionalTicketId(_, slot) => {
            *slot(value) = Some(text)
                .filter(|text| !text.is_empty())
                .map(parse_ticket_id)
                .transpose()?;
        }
        Field::OptionalText(_, slot) => *slot(value) = decode_text(text)?,
        Field::Flag(_, slot) => {
            *slot(value) = match text {
                "p" => true,
                "" => false,
                other => return Err(MalformedAnswer(format!("flag {other:?}"))),
            };
        }
        _ => return Err(MalformedAnswer("a field with no column form".to_owned())),
    }
    Ok(())
}

/// A state's three columns (its letter and two values) into the state field.
fn decode_state<R>(
    [tag, first, second]: [&str; 3],
    field: &Field<R>,
    value: &mut R,
) -> Result<(), MalformedAnswer> {
    match field {
        // x, y: at and claim deadline; session; at and reason.
        Field::TicketState(_, slot) => {
            *slot(value) = match tag {
                "w" => TicketState::Waiting,
                "a" => TicketState::Admitted {
                    at: timestamp(first)?,
                    claim_deadline: timestamp(second)?,
                },
                "c" => TicketState::Claimed {
                    session: parse_session_id(first)?,
                },
                "e" => TicketState::Ended {
                    reason: parse_ticket_end(second)?,
                    at: timestamp(first)?,
                },
                other => return Err(MalformedAnswer(format!("ticket state {other:?}"))),
            };
        }
        // ended_at, reason.
        Field::SessionState(_, slot) => {
            *slot(value) = match tag {
                "a" => SessionState::Active,
                "e" => SessionState::Ended {
                    reason: parse_session_end(second)?,
                    at: timestamp(first)?,
                },
                other => return Err(MalformedAnswer(format!("session state {other:?}"))),
            };
        }
        _ => return Err(MalformedAnswer("a field with no state form".to_owned())),
    }
    Ok(())
}

/// How the room scripts read and write a column: a number, an optional number (`''` for
/// none), text kept as it is, or a flag (`p`, or nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LuaKind {
    Int,
    OptionalInt,
    Text,
    Flag,
}

impl LuaKind {
    fn of<R>(field: &Field<R>) -> LuaKind {
        match field {
            Field::U32(..) | Field::U64(..) | Field::Time(..) => LuaKind::Int,
            Field::OptionalTime(..) => LuaKind::OptionalInt,
            Field::Flag(..) => LuaKind::Flag,
            _ => LuaKind::Text,
        }
    }

    /// Lua reading column `at` of the split record `f`.
    fn read(self, at: usize) -> String {
        match self {
            // tonumber('') is nil: none.
            LuaKind::Int | LuaKind::OptionalInt => format!("tonumber(f[{at}])"),
            LuaKind::Text => format!("f[{at}]"),
            LuaKind::Flag => format!("f[{at}] == 'p'"),
        }
    }

    /// Lua writing the field `name` of the table `t` as its column.
    fn write(self, name: &str) -> String {
        match self {
            LuaKind::Int => format!("int(t.{name})"),
            LuaKind::OptionalInt => format!("(t.{name} and int(t.{name}) or '')"),
            LuaKind::Text => format!("t.{name}"),
            LuaKind::Flag => format!("(t.{name} and 'p' or '')"),
        }
    }
}

/// The Lua names and kinds of a state's three columns: the scripts keep a ticket's as
/// `state`, `x`, `y` and a session's as `state`, `ended_at`, `reason`.
fn state_columns<R>(field: &Field<R>) -> [(&'static str, LuaKind); 3] {
    match field {
        Field::SessionState(..) => [
            ("state", LuaKind::Text),
            ("ended_at", LuaKind::OptionalInt),
            ("reason", LuaKind::Text),
        ],
        _ => [
            ("state", LuaKind::Text),
            ("x", LuaKind::Text),
            ("y", LuaKind::Text),
        ],
    }
}

/// The full record's columns in order: each one's Lua name and kind.
fn record_columns<R>(fields: &Fields<R>) -> Vec<(&'static str, LuaKind)> {
    let mut columns: Vec<(usize, &'static str, LuaKind)> = Vec::new();
    for stored in fields {
        let Redis::Columns { full, .. } = stored.redis else {
            continue;
        };
        if let [at] = full {
            columns.push((*at, stored.name, LuaKind::of(&stored.field)));
        } else {
            let names = state_columns(&stored.field);
            for (at, (name, kind)) in full.iter().zip(names) {
                columns.push((*at, name, kind));
            }
        }
    }
    columns.sort_by_key(|(at, ..)| *at);
    columns
        .into_iter()
        .map(|(_, name, kind)| (name, kind))
        .collect()
}

/// A waiting ticket's record's columns in order (`last_seen` holds the time since joining).
fn waiting_columns<R>(fields: &Fields<R>) -> Vec<(&'static str, LuaKind)> {
    let mut columns: Vec<(usize, &'static str, LuaKind)> = fields
        .iter()
        .filter_map(|stored| match stored.redis {
            Redis::Columns {
                waiting: Some(at), ..
            } => Some((at, stored.name, LuaKind::of(&stored.field))),
            _ => None,
        })
        .collect();
    columns.sort_by_key(|(at, ..)| *at);
    columns
        .into_iter()
        .map(|(_, name, kind)| (name, kind))
        .collect()
}

/// The Lua functions that read and write the ticket and session records' columns, put in
/// front of the room scripts' prelude (room.lua): for `ticket`, `waiting` and `session`,
/// `<form>_from_columns(f, t)` fills the table `t` from the split record `f`, and
/// `<form>_record(t)` writes `t` as a record. Written out field by field rather than by a loop
/// over a list in Lua, which made a record's reading and writing about a third slower; and
/// `SESSION_REASON_COLUMN`, where `session_page.lua` finds an end reason. Numbers are written
/// with room.lua's `int` (declared here, defined there: it keeps the texts it made).
pub(crate) fn record_columns_lua() -> String {
    let session = record_columns(SESSION_FIELDS);
    let reason = session
        .iter()
        .position(|(name, _)| *name == "reason")
        .map_or(0, |index| index + 1);
    [
        "local int\n".to_owned(),
        lua_codec("ticket", &record_columns(TICKET_FIELDS)),
        lua_codec("waiting", &waiting_columns(TICKET_FIELDS)),
        lua_codec("session", &session),
        format!("local SESSION_REASON_COLUMN = {reason}\n"),
    ]
    .concat()
}

/// `<form>_from_columns` and `<form>_record` for a record of `columns`. A record ends before
/// the unset flags at its end (records written before a flag existed end there too).
fn lua_codec(form: &str, columns: &[(&str, LuaKind)]) -> String {
    let mut lua = format!("local function {form}_from_columns(f, t)\n");
    for (index, (name, kind)) in columns.iter().enumerate() {
        lua.push_str(&format!("  t.{name} = {}\n", kind.read(index + 1)));
    }
    lua.push_str("  return t\nend\n");
    let written: Vec<String> = columns
        .iter()
        .map(|(name, kind)| kind.write(name))
        .collect();
    lua.push_str(&format!(
        "local function {form}_record(t)\n  local fields = {{ {} }}\n  local n = {}\n",
        written.join(", "),
        columns.len()
    ));
    for (index, _) in columns
        .iter()
        .enumerate()
        .rev()
        .take_while(|(_, (_, kind))| *kind == LuaKind::Flag)
    {
        let at = index + 1;
        lua.push_str(&format!(
            "  if n == {at} and fields[{at}] == '' then n = {} end\n",
            at - 1
        ));
    }
    lua.push_str("  return table.concat(fields, '|', 1, n)\nend\n");
    lua
}

/// A load signal's record (`put_signal.lua`): `p95_ms|error_rate|in_flight|received_at`,
/// `in_flight` empty when the origin did not say.
pub(crate) fn encode_signal(signal: &LoadSignal) -> String {
    let in_flight = signal
        .in_flight
        .map(|count| count.to_string())
        .unwrap_or_default();
    format!(
        "{}|{}|{in_flight}|{}",
        signal.p95_ms, signal.error_rate, signal.received_at.0
    )
}

/// Bytes of one bucket's mask in `line_masks.lua`'s answer (its `MASK_BYTES`): one `u128`.
const MASK_BYTES: usize = size_of::<u128>();

/// Reads `line_masks.lua`'s answer: `ok`, then for a line with someone waiting its first
/// bucket and one string of [`MASK_BYTES`] raw bytes a bucket from it on (byte i of the Lua
/// mask first, bit k of that byte is position bucket * 128 + 8 * i + k); or a refusal.
pub(crate) fn decode_line_masks(
    fields: Vec<Vec<u8>>,
) -> Result<Result<LineMasks, Refusal>, MalformedAnswer> {
    match fields.as_slice() {
        [ok] if ok.as_slice() == b"ok" => Ok(Ok(LineMasks::default())),
        [ok, first, masks] if ok.as_slice() == b"ok" => {
            let first = std::str::from_utf8(first)
                .map_err(|_| MalformedAnswer(format!("first bucket {first:?}")))
                .and_then(parse_number)?;
            let chunks = masks.chunks_exact(MASK_BYTES);
            if !chunks.remainder().is_empty() {
                return Err(MalformedAnswer(format!(
                    "line masks of {} bytes, not a multiple of {MASK_BYTES}",
                    masks.len()
                )));
            }
            let masks = chunks
                .map(|chunk| {
                    let mut bytes = [0u8; MASK_BYTES];
                    bytes.copy_from_slice(chunk);
                    u128::from_le_bytes(bytes)
                })
                .collect();
            Ok(Ok(LineMasks::from_masks(first, masks)))
        }
        _ => {
            // A refusal is text, as every other script's answer.
            let text = fields
                .into_iter()
                .map(|field| {
                    String::from_utf8(field)
                        .map_err(|error| MalformedAnswer(format!("line masks answer {error}")))
                })
                .collect::<Result<Vec<String>, _>>()?;
            match Answer::new(text)? {
                Err(refusal) => Ok(Err(refusal)),
                Ok(mut answer) => Err(MalformedAnswer(format!(
                    "line masks answer starting {:?}",
                    answer.text().unwrap_or_default()
                ))),
            }
        }
    }
}

/// Reads a record written by [`encode_signal`]; `None` for the empty answer (no signal).
pub(crate) fn decode_signal(record: &str) -> Result<Option<LoadSignal>, MalformedAnswer> {
    if record.is_empty() {
        return Ok(None);
    }
    let malformed = || MalformedAnswer(format!("signal record {record:?}"));
    let fields: Vec<&str> = record.split('|').collect();
    let [p95_ms, error_rate, in_flight, received_at] = fields.as_slice() else {
        return Err(malformed());
    };
    let float = |text: &str| text.parse::<f64>().ok().filter(|value| value.is_finite());
    Ok(Some(LoadSignal {
        p95_ms: float(p95_ms).ok_or_else(malformed)?,
        error_rate: float(error_rate).ok_or_else(malformed)?,
        in_flight: optional_number(in_flight)?,
        received_at: Timestamp(parse_number(received_at)?),
    }))
}

fn parse_number(text: &str) -> Result<u64, MalformedAnswer> {
    text.parse()
        .map_err(|_| MalformedAnswer(format!("number {text:?}")))
}

/// A number, or none for an empty field.
fn optional_number(text: &str) -> Result<Option<u64>, MalformedAnswer> {
    if text.is_empty() {
        return Ok(None);
    }
    parse_number(text).map(Some)
}

fn timestamp(text: &str) -> Result<Timestamp, MalformedAnswer> {
    parse_number(text).map(Timestamp)
}

fn parse_ticket_id(text: &str) -> Result<TicketId, MalformedAnswer> {
    text.parse()
        .map_err(|_| MalformedAnswer(format!("ticket id {text:?}")))
}

fn parse_session_id(text: &str) -> Result<SessionId, MalformedAnswer> {
    text.parse()
        .map_err(|_| MalformedAnswer(format!("session id {text:?}")))
}

fn parse_ticket_end(text: &str) -> Result<TicketEnd, MalformedAnswer> {
    TicketEnd::parse(text).ok_or_else(|| MalformedAnswer(format!("ticket end {text:?}")))
}

fn parse_session_end(text: &str) -> Result<SessionEnd, MalformedAnswer> {
    SessionEnd::parse(text).ok_or_else(|| MalformedAnswer(format!("session end {text:?}")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn line_masks_are_read_as_raw_bytes() {
        // Bucket 7 holds positions 7 * 128 + 0 and + 9 (byte 0 bit 0, byte 1 bit 1); bucket 8
        // none; bucket 9 position 9 * 128 + 127 (byte 15 bit 7), bytes that are not UTF-8.
        let mut masks = vec![0u8; 48];
        masks[0] = 0b1;
        masks[1] = 0b10;
        masks[47] = 0x80;
        let fields = vec![b"ok".to_vec(), b"7".to_vec(), masks];
        let line = decode_line_masks(fields).unwrap().unwrap();
        assert_eq!(
            line,
            LineMasks::from_positions([7 * 128, 7 * 128 + 9, 9 * 128 + 127])
        );
        let empty = decode_line_masks(vec![b"ok".to_vec()]).unwrap().unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn line_masks_of_a_broken_length_or_a_refusal_are_told_apart() {
        let short = vec![b"ok".to_vec(), b"7".to_vec(), vec![0u8; 17]];
        assert!(decode_line_masks(short).is_err());
        let bucket = vec![b"ok".to_vec(), b"x".to_vec(), vec![0u8; 16]];
        assert!(decode_line_masks(bucket).is_err());
        let refused = vec![b"error".to_vec(), b"room_not_found".to_vec()];
        assert!(matches!(
            decode_line_masks(refused),
            Ok(Err(Refusal::RoomNotFound))
        ));
        assert!(decode_line_masks(vec![b"what".to_vec()]).is_err());
    }

    #[test]
    fn free_text_survives_the_separator_and_escapes() {
        for text in [
            "",
            "plain",
            "a|b",
            "100%",
            "%7C",
            "|%|%25|",
            "ünïcode/päth?q=1",
        ] {
            let encoded = encode_text(Some(text));
            assert!(!encoded.contains('|'), "{encoded}");
            assert_eq!(decode_text(&encoded).unwrap().as_deref(), Some(text));
        }
        assert_eq!(encode_text(None), "");
        assert_eq!(decode_text("").unwrap(), None);
        assert!(decode_text("=%zz").is_err());
        assert!(decode_text("no-marker").is_err());
    }

    #[test]
    fn records_decode_into_core_types() {
        let ticket_id = TicketId::from_bytes([1; 16]).to_string();
        let session_id = SessionId::from_bytes([2; 16]).to_string();
        let record = format!("c|7|2|1000|1500|{session_id}|||=/back%7C");
        let ticket = decode_ticket(&ticket_id, &record).unwrap();
        assert_eq!(ticket.position, 7);
        assert_eq!(ticket.generation, 2);
        assert_eq!(ticket.last_seen, Timestamp(1500));
        assert_eq!(ticket.return_to.as_deref(), Some("/back|"));
        assert_eq!(
            ticket.state,
            TicketState::Claimed {
                session: SessionId::from_bytes([2; 16])
            }
        );
        let waiting = decode_ticket(&ticket_id, "w|1|1|10|99||||").unwrap();
        assert_eq!(waiting.last_seen, Timestamp(99));
        let session = decode_session(
            &session_id,
            &format!("e|{ticket_id}|7|2|1|2|3||4|revoked|=u"),
        )
        .unwrap();
        assert_eq!(session.hard_expires_at, None);
        assert_eq!(session.uid.as_deref(), Some("u"));
        assert_eq!(
            session.state,
            SessionState::Ended {
                reason: SessionEnd::Revoked,
                at: Timestamp(4)
            }
        );
        assert!(decode_ticket(&ticket_id, "w|1|1").is_err());
        // Ten columns at most (the last a flag), and never past the stack's room for them.
        assert!(decode_ticket(&ticket_id, "w|1|1|10|99|||||p").is_ok());
        assert!(decode_ticket(&ticket_id, "w|1|1|10|99|||||p|").is_err());
        assert!(decode_ticket(&ticket_id, &format!("w|1|1|10|99{}", "|".repeat(40))).is_err());
    }

    fn column_names(columns: &[(&'static str, LuaKind)]) -> Vec<String> {
        columns
            .iter()
            .map(|(name, kind)| format!("{name}:{kind:?}"))
            .collect()
    }

    #[test]
    fn the_record_columns_are_layout_2s() {
        // Redis holds records in these columns (room.lua): the field lists may grow only at
        // the end of a record, and sweep_idle reads a waiting record's first two columns and
        // its trailing `|p` without decoding it, session_page a session's state from its
        // first character.
        assert_eq!(
            column_names(&record_columns(TICKET_FIELDS)),
            [
                "state:Text",
                "position:Int",
                "generation:Int",
                "joined_at:Int",
                "last_seen:Int",
                "x:Text",
                "y:Text",
                "identity:Text",
                "return_to:Text",
                "priority:Flag",
            ]
        );
        assert_eq!(
            column_names(&waiting_columns(TICKET_FIELDS)),
            [
                "joined_at:Int",
                "last_seen:Int",
                "identity:Text",
                "return_to:Text",
                "priority:Flag",
            ]
        );
        assert_eq!(
            column_names(&record_columns(SESSION_FIELDS)),
            [
                "state:Text",
                "ticket:Text",
                "position:Int",
                "generation:Int",
                "issued_at:Int",
                "renewed_at:Int",
                "expires_at:Int",
                "hard_expires_at:OptionalInt",
                "ended_at:OptionalInt",
                "reason:Text",
                "uid:Text",
            ]
        );
        // Every column is placed once, with no gap.
        let mut placed: Vec<usize> = Vec::new();
        for stored in TICKET_FIELDS {
            if let Redis::Columns { full, .. } = stored.redis {
                placed.extend(full);
            }
        }
        placed.sort_unstable();
        assert_eq!(placed, (1..=10).collect::<Vec<_>>());
        assert_eq!(column_count(TICKET_FIELDS), (9, 10));
        assert_eq!(column_count(SESSION_FIELDS), (11, 11));
        // The scripts' writers leave out an unset trailing flag, and session_page finds the
        // reason where the list puts it.
        let lua = record_columns_lua();
        assert!(
            lua.contains("if n == 10 and fields[10] == '' then n = 9 end"),
            "{lua}"
        );
        assert!(
            lua.contains("if n == 5 and fields[5] == '' then n = 4 end"),
            "{lua}"
        );
        assert!(lua.contains("local SESSION_REASON_COLUMN = 10\n"), "{lua}");
    }

    #[test]
    fn records_with_columns_missing_or_extra_are_refused() {
        let ticket_id = TicketId::from_bytes([1; 16]).to_string();
        let session_id = SessionId::from_bytes([2; 16]).to_string();
        for record in ["w|1|1|10|99|||", "w|1|1|10|99||||||", "w|1|1|10|99|||||q"] {
            assert!(decode_ticket(&ticket_id, record).is_err(), "{record}");
        }
        let priority = decode_ticket(&ticket_id, "w|1|1|10|99|||||p").unwrap();
        assert!(priority.priority);
        assert!(
            !decode_ticket(&ticket_id, "w|1|1|10|99|||||")
                .unwrap()
                .priority
        );
        for record in ["a||0|1|1|2|3|||", "a||0|1|1|2|3||||=u|"] {
            assert!(decode_session(&session_id, record).is_err(), "{record}");
        }
        let session = decode_session(&session_id, "a||0|1|1|2|3|4|||=u").unwrap();
        assert_eq!(session.hard_expires_at, Some(Timestamp(4)));
        assert_eq!(session.ticket, None);
    }

    #[test]
    fn every_draw_field_is_read_from_its_place() {
        let seed = "ab".repeat(32);
        let draw = decode_draw(&format!("100|101|{seed}|17|18")).unwrap();
        assert_eq!(
            draw,
            Some(Draw {
                opens_at: Timestamp(100),
                drawn_at: Timestamp(101),
                seed: [0xab; 32],
                cohort: 17,
                through_position: 18,
            })
        );
        assert_eq!(decode_draw("").unwrap(), None);
        for malformed in [
            format!("100|101|{seed}|17"),
            format!("100|101|{seed}|17|18|19"),
            "100|101|zz|17|18".to_owned(),
        ] {
            assert!(decode_draw(&malformed).is_err(), "{malformed}");
        }
    }

    #[test]
    fn signal_records_round_trip_and_refuse_what_is_not_one() {
        let signal = LoadSignal {
            p95_ms: 0.1 + 0.2,
            error_rate: 1.0 / 3.0,
            in_flight: Some(u64::MAX),
            received_at: Timestamp(1_700_000_000_123),
        };
        assert_eq!(
            decode_signal(&encode_signal(&signal)).unwrap(),
            Some(signal)
        );
        let without = LoadSignal {
            in_flight: None,
            ..signal
        };
        assert_eq!(
            decode_signal(&encode_signal(&without)).unwrap(),
            Some(without)
        );
        assert_eq!(decode_signal("").unwrap(), None);
        for malformed in [
            "1|2", "1|0||5|6", "NaN|0||5", "inf|0||5", "x|0||5", "1|0||-5",
        ] {
            assert!(decode_signal(malformed).is_err(), "{malformed}");
        }
    }
}
