//! The names the top level of a configuration may hold: the sections this version reads, and
//! those of later versions.

/// The top-level keys this version reads.
pub(super) const SUPPORTED_SECTIONS: &[&str] = &[
    "server",
    "upstream",
    "store",
    "keys",
    "auth",
    ROOM_SECTION,
    RATE_LIMIT_SECTION,
    "route",
    "websocket",
    "events",
    "verify",
    "log",
    "tracing",
];
/// Top-level sections of later versions, with how they are written.
pub(super) const UNSUPPORTED_SECTIONS: &[(&str, &str)] = &[];
/// Every top-level key, supported or not.
pub(super) fn top_level_keys() -> impl Iterator<Item = &'static str> + Clone {
    let unsupported = UNSUPPORTED_SECTIONS.iter().map(|(key, _)| *key);
    SUPPORTED_SECTIONS.iter().copied().chain(unsupported)
}
pub(super) const ROOM_SECTION: &str = "room";
pub(super) const RATE_LIMIT_SECTION: &str = "rate_limit";
