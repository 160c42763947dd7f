//! The keys of the node-wide sets, beside the rooms' own keys: the listed rooms, and the rooms
//! whose event partition may hold events.

/// The set of listed rooms.
pub(crate) fn rooms_key(prefix: &str) -> String {
    format!("{prefix}:rooms")
}

/// The set of rooms whose event partition may hold events (`outbox.rs`).
pub(crate) fn outbox_rooms_key(prefix: &str) -> String {
    format!("{prefix}:outbox-rooms")
}
