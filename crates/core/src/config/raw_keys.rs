//! The keys of a raw configuration table, read from the struct's `Deserialize` derive.
//!
//! A raw table (`RawRoom`, `RawEvent`, ...) is read from the config tree key by key, so the
//! reader needs the list of known keys for its "unknown key" problems and suggestions. That
//! list is the struct's own field list, as serde's derive hands it to
//! [`Deserializer::deserialize_struct`]: asking for it here keeps the struct the one place the
//! keys are named (DESIGN.md convention 22).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// The keys of the raw table `T`, in declaration order.
pub(super) fn raw_keys<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    let mut asked = KeysAsked(&[]);
    // The deserializer answers every request with `Stop`; what matters is what it was asked.
    let _stopped = T::deserialize(&mut asked);
    asked.0
}

/// A deserializer that only notes the field names a struct asks for.
struct KeysAsked(&'static [&'static str]);

/// The only answer [`KeysAsked`] gives.
#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("only the field names were asked for")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_message: T) -> Stop {
        Stop
    }
}

impl<'de> Deserializer<'de> for &mut KeysAsked {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::raw_keys;
    use crate::config::{RawEvent, RawPriority, RawRoom};

    #[test]
    fn the_keys_are_the_fields_in_declaration_order() {
        assert_eq!(raw_keys::<RawPriority>(), ["codes", "uses"]);
        assert_eq!(
            raw_keys::<RawEvent>()[..3],
            ["prequeue_at", "opens_at", "closes_at"]
        );
        assert_eq!(raw_keys::<RawRoom>().len(), 24);
    }
}
