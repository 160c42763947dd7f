//! The room scripts (`lua/rooms/*.lua`), loaded into Redis once as one library of functions
//! (Redis 7 `FUNCTION LOAD`) and each called with `FCALL`.
//!
//! The library is the record field lists (written here from the Rust records), the shared
//! prelude `room.lua` (keys, record formats and the engine's state changes) and one function
//! per operation, whose body is the operation's own file. The prelude's helpers are made once
//! when Redis loads the library, not again on every call as when each operation was a script
//! of its own; each call only binds its keys and arguments (`begin_call`). Each operation is
//! still one atomic call, the engine logic is written once, and the scripts name exactly the
//! fields the Rust records have.
//!
//! The library's name and its functions' names carry a hash of its code, so nodes of different
//! versions sharing one Redis each call their own functions (as each called its own scripts by
//! their SHA before), and loading one version never replaces another's.

use std::sync::LazyLock;

use anteroom_core::counters::CounterRecord;
use anteroom_core::engine::{RoomTotals, TickReport};

const ROOM_PRELUDE: &str = include_str!("../../lua/rooms/room.lua");

/// One room operation: a function of the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RoomFunction {
    PutRoom,
    DeleteRoom,
    Join,
    CancelJoin,
    Status,
    Leave,
    EndSession,
    RenewSession,
    Session,
    IssueSession,
    Tick,
    Snapshot,
    Advance,
    Reset,
    Records,
    SessionPage,
    Reopen,
    Touch,
    LineMasks,
    PutSignal,
    LoadSignal,
}

impl RoomFunction {
    const ALL: [RoomFunction; 21] = [
        RoomFunction::PutRoom,
        RoomFunction::DeleteRoom,
        RoomFunction::Join,
        RoomFunction::CancelJoin,
        RoomFunction::Status,
        RoomFunction::Leave,
        RoomFunction::EndSession,
        RoomFunction::RenewSession,
        RoomFunction::Session,
        RoomFunction::IssueSession,
        RoomFunction::Tick,
        RoomFunction::Snapshot,
        RoomFunction::Advance,
        RoomFunction::Reset,
        RoomFunction::Records,
        RoomFunction::SessionPage,
        RoomFunction::Reopen,
        RoomFunction::Touch,
        RoomFunction::LineMasks,
        RoomFunction::PutSignal,
        RoomFunction::LoadSignal,
    ];

    /// Whether a call may be made again when its connection dropped before its answer came
    /// (the first call may or may not have run): the function only reads, or running it twice
    /// leaves what running it once does (a ticket that left or was kept alive, a session that
    /// ended, a session page's index; a second tick works from the room as the first left
    /// it). A join, a session issued or renewed, a tick of its own or a room change made twice
    /// would do twice what was asked once, or answer that it could not.
    pub(crate) fn may_be_sent_again(self) -> bool {
        matches!(
            self,
            RoomFunction::Status
                | RoomFunction::Leave
                | RoomFunction::EndSession
                | RoomFunction::Session
                | RoomFunction::Snapshot
                | RoomFunction::Records
                | RoomFunction::SessionPage
                | RoomFunction::Touch
                | RoomFunction::LineMasks
                | RoomFunction::LoadSignal
        )
    }

    /// The operation's name, in errors and in its function's name.
    pub(crate) fn name(self) -> &'static str {
        self.operation().0
    }

    /// The operation's name and its file.
    fn operation(self) -> (&'static str, &'static str) {
        macro_rules! lua {
            ($name:literal) => {
                (
                    $name,
                    include_str!(concat!("../../lua/rooms/", $name, ".lua")),
                )
            };
        }
        match self {
            RoomFunction::PutRoom => lua!("put_room"),
            RoomFunction::DeleteRoom => lua!("delete_room"),
            RoomFunction::Join => lua!("join"),
            RoomFunction::CancelJoin => lua!("cancel_join"),
            RoomFunction::Status => lua!("status"),
            RoomFunction::Leave => lua!("leave"),
            RoomFunction::EndSession => lua!("end_session"),
            RoomFunction::RenewSession => lua!("renew_session"),
            RoomFunction::Session => lua!("session"),
            RoomFunction::IssueSession => lua!("issue_session"),
            RoomFunction::Tick => lua!("tick"),
            RoomFunction::Snapshot => lua!("snapshot"),
            RoomFunction::Advance => lua!("advance"),
            RoomFunction::Reset => lua!("reset"),
            RoomFunction::Records => lua!("records"),
            RoomFunction::SessionPage => lua!("session_page"),
            RoomFunction::Reopen => lua!("reopen"),
            RoomFunction::Touch => lua!("touch"),
            RoomFunction::LineMasks => lua!("line_masks"),
            RoomFunction::PutSignal => lua!("put_signal"),
            RoomFunction::LoadSignal => lua!("load_signal"),
        }
    }

    /// The name this operation's function has in Redis (`anteroom_<code hash>_<operation>`).
    pub(crate) fn function_name(self) -> String {
        format!("{}_{}", LIBRARY.name, self.name())
    }
}

/// The library as `FUNCTION LOAD` takes it, and its name.
pub(crate) struct RoomLibrary {
    pub(crate) name: String,
    pub(crate) code: String,
}

pub(crate) static LIBRARY: LazyLock<RoomLibrary> = LazyLock::new(|| {
    let mut body = format!("{}\n{ROOM_PRELUDE}\n", record_fields_lua());
    for function in RoomFunction::ALL {
        let (name, operation) = function.operation();
        // The function's name is filled in below, once the code's hash is known.
        body.push_str(&format!(
            "redis.register_function('{{library}}_{name}', function(keys, args)\n\
             begin_call(keys, args)\n{operation}\nend)\n"
        ));
    }
    let name = format!(
        "anteroom_{:016x}",
        xxhash_rust::xxh3::xxh3_64(body.as_bytes())
    );
    let code = format!(
        "#!lua name={name}\n{}",
        body.replace("'{library}_", &format!("'{name}_"))
    );
    RoomLibrary { name, code }
});

/// The Lua declaration of the field lists the scripts share with the Rust records.
fn record_fields_lua() -> String {
    format!(
        "local TOTAL_FIELDS = {}\nlocal TICK_REPORT_FIELDS = {}\n{}",
        lua_names::<RoomTotals>(),
        lua_names::<TickReport>(),
        super::records::record_columns_lua()
    )
}

/// A record's field names as a Lua list: `{ 'a', 'b' }`.
fn lua_names<R: CounterRecord>() -> String {
    let names: Vec<String> = R::FIELDS
        .iter()
        .map(|field| format!("'{}'", field.name))
        .collect();
    format!("{{ {} }}", names.join(", "))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use anteroom_core::RoomId;
    use anteroom_core::room::RoomConfig;

    /// The names `text` reads as `<prefix><name>`.
    fn names_after<'t>(text: &'t str, prefix: &str) -> BTreeSet<&'t str> {
        text.split(prefix)
            .skip(1)
            .map(|rest| {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect()
    }

    #[test]
    fn put_room_reads_by_name_every_configuration_field_the_store_sends() {
        let config = RoomConfig::with_defaults(RoomId::new("shop").expect("a valid id"));
        let sent: BTreeSet<&str> = super::super::config_fields(&config)
            .iter()
            .map(|(name, _)| *name)
            .collect();
        let put_room = include_str!("../../lua/rooms/put_room.lua");
        let mut read = names_after(put_room, "given.");
        // Only stored by put_room: join.lua reads it from the meta hash.
        let join = include_str!("../../lua/rooms/join.lua");
        assert!(join.contains("HGET', META, 'priority_codes'"));
        read.insert("priority_codes");
        assert_eq!(read, sent);
        // load_room reads back every field put_room stored from them.
        let prelude = super::ROOM_PRELUDE;
        for name in sent.iter().filter(|name| **name != "priority_codes") {
            assert!(
                prelude.contains(&format!("'{name}'")),
                "room.lua never reads {name}"
            );
        }
    }
}
