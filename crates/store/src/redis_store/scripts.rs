//! The room scripts (`lua/rooms/*.lua`), each one Lua script run with EVALSHA.
//!
//! Every script is the record field lists (written here from the Rust records), the shared
//! prelude `room.lua` (keys, record formats and the engine's state changes) and the
//! operation's own file, so each operation stays one atomic script while the engine logic is
//! written once and the scripts name exactly the fields the Rust records have.

use std::sync::LazyLock;

use anteroom_core::counters::CounterRecord;
use anteroom_core::engine::{RoomTotals, TickReport};
use redis::Script;

macro_rules! room_script {
    ($file:literal) => {
        room_script(include_str!(concat!("../../lua/rooms/", $file)))
    };
}

const ROOM_PRELUDE: &str = include_str!("../../lua/rooms/room.lua");

fn room_script(operation: &str) -> Script {
    Script::new(&format!(
        "{}\n{ROOM_PRELUDE}\n{operation}",
        record_fields_lua()
    ))
}

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

/// Every room script, compiled (hashed) once per process.
pub(crate) struct RoomScripts {
    pub(crate) put_room: Script,
    pub(crate) delete_room: Script,
    pub(crate) join: Script,
    pub(crate) cancel_join: Script,
    pub(crate) status: Script,
    pub(crate) leave: Script,
    pub(crate) end_session: Script,
    pub(crate) renew_session: Script,
    pub(crate) session: Script,
    pub(crate) issue_session: Script,
    pub(crate) tick: Script,
    pub(crate) snapshot: Script,
    pub(crate) advance: Script,
    pub(crate) reset: Script,
    pub(crate) records: Script,
    pub(crate) session_page: Script,
    pub(crate) reopen: Script,
    pub(crate) touch: Script,
    pub(crate) waiting_positions: Script,
    pub(crate) put_signal: Script,
    pub(crate) load_signal: Script,
}

pub(crate) static SCRIPTS: LazyLock<RoomScripts> = LazyLock::new(|| RoomScripts {
    put_room: room_script!("put_room.lua"),
    delete_room: room_script!("delete_room.lua"),
    join: room_script!("join.lua"),
    cancel_join: room_script!("cancel_join.lua"),
    status: room_script!("status.lua"),
    leave: room_script!("leave.lua"),
    end_session: room_script!("end_session.lua"),
    renew_session: room_script!("renew_session.lua"),
    session: room_script!("session.lua"),
    issue_session: room_script!("issue_session.lua"),
    tick: room_script!("tick.lua"),
    snapshot: room_script!("snapshot.lua"),
    advance: room_script!("advance.lua"),
    reset: room_script!("reset.lua"),
    records: room_script!("records.lua"),
    session_page: room_script!("session_page.lua"),
    reopen: room_script!("reopen.lua"),
    touch: room_script!("touch.lua"),
    waiting_positions: room_script!("waiting_positions.lua"),
    put_signal: room_script!("put_signal.lua"),
    load_signal: room_script!("load_signal.lua"),
});

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
