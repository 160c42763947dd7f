//! The field lists of the records a store keeps: a room's state and its pre-queue draw, a
//! ticket and a session, each written once.
//!
//! Every format of these records walks the same list: the binary record (`binary.rs`) writes
//! and reads the fields in list order, the version 1 JSON reader (`persisted.rs`) looks each
//! one it knew up by its name, and the Redis side reads and writes by each field's [`Redis`]
//! place: the answers' `draw` field and ticket and session records are read in
//! `redis_store/records.rs`, which also writes the room scripts' readers and writers of the
//! ticket, waiting ticket and session records from these lists. A field added here reaches
//! every format; the tests round-trip records with a different value in every field through
//! each of them, and pin each format's bytes.
//!
//! The order is the binary record's: a field added changes its layout, so it comes with a new
//! record version (a test pins what version 2 holds).

use std::collections::BTreeMap;

use anteroom_core::engine::{
    AdmissionBucket, Draw, RoomMeta, RoomTotals, Session, SessionState, Ticket, TicketState,
};
use anteroom_core::eta::AdmissionRate;
use anteroom_core::room::RoomConfig;
use anteroom_core::{SessionId, TicketId, Timestamp};

/// Where one field of a record `R` lives, by its type: a reader and a writer of it.
pub(crate) enum Field<R> {
    U32(fn(&R) -> &u32, fn(&mut R) -> &mut u32),
    U64(fn(&R) -> &u64, fn(&mut R) -> &mut u64),
    F64(fn(&R) -> &f64, fn(&mut R) -> &mut f64),
    Time(fn(&R) -> &Timestamp, fn(&mut R) -> &mut Timestamp),
    OptionalTime(
        fn(&R) -> &Option<Timestamp>,
        fn(&mut R) -> &mut Option<Timestamp>,
    ),
    /// 32 bytes: a lottery seed (64 hex digits in text formats).
    Seed(fn(&R) -> &[u8; 32], fn(&mut R) -> &mut [u8; 32]),
    /// The room's totals, listed by `RoomTotals` itself.
    Totals(fn(&R) -> &RoomTotals, fn(&mut R) -> &mut RoomTotals),
    /// The latest draw, if any, listed by [`DRAW_FIELDS`].
    Draw(fn(&R) -> &Option<Draw>, fn(&mut R) -> &mut Option<Draw>),
    /// Joins made with each priority code, by the code's SHA-256.
    CodeUses(
        fn(&R) -> &BTreeMap<[u8; 32], u64>,
        fn(&mut R) -> &mut BTreeMap<[u8; 32], u64>,
    ),
    /// 16 bytes (its text form in text formats).
    TicketId(fn(&R) -> &TicketId, fn(&mut R) -> &mut TicketId),
    /// 16 bytes (its text form in text formats).
    SessionId(fn(&R) -> &SessionId, fn(&mut R) -> &mut SessionId),
    OptionalTicketId(
        fn(&R) -> &Option<TicketId>,
        fn(&mut R) -> &mut Option<TicketId>,
    ),
    /// Free text, if any: an identity, a return path, a uid.
    OptionalText(fn(&R) -> &Option<String>, fn(&mut R) -> &mut Option<String>),
    /// A mark that is there or not (the priority lane).
    Flag(fn(&R) -> &bool, fn(&mut R) -> &mut bool),
    /// Where a ticket stands: a kind and what that kind holds.
    TicketState(fn(&R) -> &TicketState, fn(&mut R) -> &mut TicketState),
    /// A session active, or how and when it ended.
    SessionState(fn(&R) -> &SessionState, fn(&mut R) -> &mut SessionState),
}

/// One field of a record: its stored name, its type and place in the record, and where the
/// Redis layout keeps it.
pub(crate) struct Stored<R> {
    pub(crate) name: &'static str,
    pub(crate) field: Field<R>,
    pub(crate) redis: Redis,
}

/// A field list, in the binary record's order.
pub(crate) type Fields<R> = [Stored<R>];

/// Where the Redis layout (2) keeps a field (see `lua/rooms/room.lua`).
pub(crate) enum Redis {
    /// Not in a `|`-separated record: the room's state is its meta hash, one hash field per
    /// field; a draw is one meta field, its fields in list order.
    Elsewhere,
    /// The record's key: its field in the `tickets` or `sessions` hash, a waiting ticket's
    /// member in its line.
    Key,
    /// The columns (from 1) of the full record the field takes: one, or for a state its letter
    /// and the two columns its kind uses. `waiting`: its column in a waiting ticket's record,
    /// `None` where that record implies the field (the position is the ticket's score in its
    /// line, the generation the room's, the state waiting).
    Columns {
        full: &'static [usize],
        waiting: Option<usize>,
    },
}

/// `(name, Kind, path.to.field)` as a list entry, with its Redis place when it has one.
macro_rules! field {
    ($name:literal, $kind:ident, $($path:ident).+) => {
        field!($name, $kind, $($path).+; Redis::Elsewhere)
    };
    ($name:literal, $kind:ident, $($path:ident).+; $redis:expr) => {
        Stored {
            name: $name,
            field: Field::$kind(|record| &record.$($path).+, |record| &mut record.$($path).+),
            redis: $redis,
        }
    };
}

/// A field in the full Redis record's `full` columns and the waiting record's `waiting` one.
const fn columns(full: &'static [usize], waiting: Option<usize>) -> Redis {
    Redis::Columns { full, waiting }
}

/// A room's state: everything in [`RoomMeta`] but its configuration, stored apart.
pub(crate) const STATE_FIELDS: &Fields<RoomMeta> = &[
    field!("generation", U32, generation),
    field!("last_position", U64, last_position),
    field!("serving", U64, serving),
    field!("bucket_units", U64, bucket.units),
    field!("bucket_updated_at", Time, bucket.updated_at),
    field!("rate_admissions", F64, rate.admissions),
    field!("rate_seconds", F64, rate.seconds),
    field!("rate_measured_until", OptionalTime, rate.measured_until),
    field!("totals", Totals, totals),
    field!("draw", Draw, draw),
    field!("code_uses", CodeUses, code_uses),
];

/// A pre-queue lottery.
pub(crate) const DRAW_FIELDS: &Fields<Draw> = &[
    field!("opens_at", Time, opens_at),
    field!("drawn_at", Time, drawn_at),
    field!("seed", Seed, seed),
    field!("cohort", U64, cohort),
    field!("through_position", U64, through_position),
];

/// A ticket. In Redis a ticket that no longer waits is kept as
/// `state|position|generation|joined_at|last_seen|x|y|identity|return_to[|p]`, a waiting one
/// as `joined_at|seen|identity|return_to[|p]` (`seen`: the last contact minus `joined_at`).
pub(crate) const TICKET_FIELDS: &Fields<Ticket> = &[
    field!("id", TicketId, id; Redis::Key),
    field!("position", U64, position; columns(&[2], None)),
    field!("generation", U32, generation; columns(&[3], None)),
    field!("joined_at", Time, joined_at; columns(&[4], Some(1))),
    field!("last_seen", Time, last_seen; columns(&[5], Some(2))),
    field!("identity", OptionalText, identity; columns(&[8], Some(3))),
    field!("return_to", OptionalText, return_to; columns(&[9], Some(4))),
    field!("priority", Flag, priority; columns(&[10], Some(5))),
    field!("state", TicketState, state; columns(&[1, 6, 7], None)),
];

/// A session (`ended`: none while it is active). In Redis: `state|ticket|position|generation|
/// issued_at|renewed_at|expires_at|hard_expires_at|ended_at|reason|uid`.
pub(crate) const SESSION_FIELDS: &Fields<Session> = &[
    field!("id", SessionId, id; Redis::Key),
    field!("ticket", OptionalTicketId, ticket; columns(&[2], None)),
    field!("position", U64, position; columns(&[3], None)),
    field!("generation", U32, generation; columns(&[4], None)),
    field!("uid", OptionalText, uid; columns(&[11], None)),
    field!("issued_at", Time, issued_at; columns(&[5], None)),
    field!("renewed_at", Time, renewed_at; columns(&[6], None)),
    field!("expires_at", Time, expires_at; columns(&[7], None)),
    field!("hard_expires_at", OptionalTime, hard_expires_at; columns(&[8], None)),
    field!("ended", SessionState, state; columns(&[1, 9, 10], None)),
];

/// A state whose every listed field is zero or empty, for a reader to fill in.
pub(crate) fn blank_state(config: RoomConfig) -> RoomMeta {
    RoomMeta {
        config,
        generation: 0,
        last_position: 0,
        serving: 0,
        bucket: AdmissionBucket {
            units: 0,
            updated_at: Timestamp(0),
        },
        rate: AdmissionRate::default(),
        totals: RoomTotals::default(),
        draw: None,
        code_uses: BTreeMap::new(),
    }
}

/// A draw whose every listed field is zero, for a reader to fill in.
pub(crate) fn blank_draw() -> Draw {
    Draw {
        opens_at: Timestamp(0),
        drawn_at: Timestamp(0),
        seed: [0; 32],
        cohort: 0,
        through_position: 0,
    }
}

/// A ticket whose every listed field is zero or empty, for a reader to fill in.
pub(crate) fn blank_ticket() -> Ticket {
    Ticket {
        id: TicketId::from_bytes([0; 16]),
        position: 0,
        generation: 0,
        joined_at: Timestamp(0),
        last_seen: Timestamp(0),
        identity: None,
        return_to: None,
        priority: false,
        state: TicketState::Waiting,
    }
}

/// A session whose every listed field is zero or empty, for a reader to fill in.
pub(crate) fn blank_session() -> Session {
    Session {
        id: SessionId::from_bytes([0; 16]),
        ticket: None,
        position: 0,
        generation: 0,
        uid: None,
        issued_at: Timestamp(0),
        renewed_at: Timestamp(0),
        expires_at: Timestamp(0),
        hard_expires_at: None,
        state: SessionState::Active,
    }
}
