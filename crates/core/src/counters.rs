//! Records of named counters whose fields are listed once (DESIGN.md convention 22).
//!
//! [`counter_record!`](crate::counter_record) declares a struct of `u64` counters together
//! with [`CounterRecord::FIELDS`], the same fields as a table of names and accessors. Every
//! format that stores or sends the record (the embedded store's binary and JSON records, the
//! Redis meta hash and script answers) is written by walking that table, so a new counter is
//! one edit to the struct and each format picks it up; nothing can name a field the struct
//! lacks.

/// One counter of a record: the name every format stores it under, and where it lives.
pub struct CounterField<R> {
    /// The field's name, as written in every format (Redis hash field, JSON key).
    pub name: &'static str,
    /// Reads the counter.
    pub read: fn(&R) -> u64,
    /// The counter, to be written.
    pub slot: fn(&mut R) -> &mut u64,
}

/// A record made only of counters, with its field list.
pub trait CounterRecord: Default + Sized + 'static {
    /// Every field in declaration order, which is the order of positional formats.
    const FIELDS: &'static [CounterField<Self>];

    /// Builds the record from one value per field, read in [`FIELDS`](Self::FIELDS) order.
    ///
    /// # Errors
    ///
    /// The first error `value` returns.
    fn try_from_fields<E>(
        mut value: impl FnMut(&CounterField<Self>) -> Result<u64, E>,
    ) -> Result<Self, E> {
        let mut record = Self::default();
        for field in Self::FIELDS {
            *(field.slot)(&mut record) = value(field)?;
        }
        Ok(record)
    }

    /// Each field's name and value, in [`FIELDS`](Self::FIELDS) order.
    fn fields(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Self::FIELDS
            .iter()
            .map(move |field| (field.name, (field.read)(self)))
    }
}

/// Declares a struct of public `u64` counters and its [`CounterRecord`] field list from one
/// list of fields.
///
/// ```
/// anteroom_core::counter_record! {
///     /// Doors opened and closed.
///     #[derive(Debug, Default, PartialEq)]
///     pub struct Doors {
///         /// Times opened.
///         opened,
///         /// Times closed.
///         closed,
///     }
/// }
/// use anteroom_core::counters::CounterRecord;
/// let doors = Doors { opened: 2, closed: 1 };
/// let names: Vec<_> = doors.fields().collect();
/// assert_eq!(names, [("opened", 2), ("closed", 1)]);
/// ```
#[macro_export]
macro_rules! counter_record {
    (
        $(#[$attribute:meta])*
        pub struct $record:ident {
            $( $(#[doc = $doc:literal])* $field:ident, )+
        }
    ) => {
        $(#[$attribute])*
        pub struct $record {
            $( $(#[doc = $doc])* pub $field: u64, )+
        }

        impl $crate::counters::CounterRecord for $record {
            const FIELDS: &'static [$crate::counters::CounterField<$record>] = &[
                $( $crate::counters::CounterField {
                    name: stringify!($field),
                    read: |record: &$record| record.$field,
                    slot: |record: &mut $record| &mut record.$field,
                }, )+
            ];
        }
    };
}
