//! The field lists of a room's state record and of its pre-queue draw, each written once.
//!
//! Every format of these records walks the same list: the binary record (`binary.rs`) writes
//! and reads the fields in list order, the version 1 JSON reader (`persisted.rs`) looks each
//! one up by its name, and the Redis answers' `draw` field (`redis_store/records.rs`) reads the
//! draw's fields in list order. A field added here reaches every format; the tests round-trip a
//! record with a different value in every field through each of them.
//!
//! The order is the binary record's: a new field goes where the record version says (a new
//! version for a field the version 2 reader does not know).

use std::collections::BTreeMap;

use anteroom_core::Timestamp;
use anteroom_core::engine::{AdmissionBucket, Draw, RoomMeta, RoomTotals};
use anteroom_core::eta::AdmissionRate;
use anteroom_core::room::RoomConfig;

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
}

/// A field list: each field's stored name and place.
pub(crate) type Fields<R> = [(&'static str, Field<R>)];

/// `(name, Kind, path.to.field)` as a list entry.
macro_rules! field {
    ($name:literal, $kind:ident, $($path:ident).+) => {
        (
            $name,
            Field::$kind(|record| &record.$($path).+, |record| &mut record.$($path).+),
        )
    };
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
