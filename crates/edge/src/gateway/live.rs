//! The gateway's settings that change while it serves (SPEC §13): the route table, the
//! upstream and the `[websocket]` limits, held as one [`LiveSettings`] behind an `ArcSwap`.
//! A request loads the settings in force once, at its start (an atomic load and a reference
//! count, no lock), and keeps them to its end; a change (`reload.rs`) builds a whole new set
//! and swaps it in, so a request never sees half of one. Each serving thread's upstream pools
//! (`proxy.rs`, `UpstreamPools`) are made anew when the upstream they were made for is no
//! longer the one in force.
//!
//! The route table has two sources, kept apart in [`RouteSources`] and merged on every change:
//! the config file's `[[route]]` entries (replaced by a reload on SIGHUP) and the rooms'
//! `routes` shorthands, built from the rooms as the store holds them.

use std::sync::Arc;

use anteroom_core::RoomId;
use anteroom_core::config::{RouteConfig, WebSocketConfig, room_route};
use anteroom_core::room::RoomConfig;

use super::proxy::Upstream;
use super::routes::RouteTable;

/// What a request is served with; replaced whole.
pub(crate) struct LiveSettings {
    pub(crate) routes: RouteTable,
    /// The protected site; `None` beside an existing proxy.
    pub(crate) upstream: Option<Arc<Upstream>>,
    pub(crate) websocket: WebSocketConfig,
}

/// Where the route table comes from; only changes read and write it (under a lock that no
/// request takes).
pub(crate) struct RouteSources {
    /// `[[route]]`, in file order.
    pub(super) configured: Vec<RouteConfig>,
    /// The rooms' `routes` the shorthands were built from, to see when they change.
    pub(super) room_globs: Vec<(RoomId, Vec<String>)>,
    /// One route per room with `routes = [...]`, in the store's room order.
    pub(super) rooms: Vec<RouteConfig>,
}

impl RouteSources {
    pub(crate) fn new(configured: Vec<RouteConfig>, rooms: &[RoomConfig]) -> RouteSources {
        RouteSources {
            configured,
            room_globs: room_globs(rooms),
            rooms: room_routes(rooms),
        }
    }

    /// The names of the `[[route]]` entries that need `room`.
    pub(crate) fn configured_naming(&self, room: &RoomId) -> Vec<String> {
        self.configured
            .iter()
            .filter(|route| !route.bypass && route.rooms.contains(room))
            .map(|route| route.name.clone())
            .collect()
    }

    /// Every route in matching order: `[[route]]` first, then the rooms' shorthands.
    pub(crate) fn table(&self, previous: Option<&RouteTable>) -> RouteTable {
        let routes = self.configured.iter().chain(&self.rooms).cloned().collect();
        RouteTable::new(routes, previous)
    }
}

/// The shorthand routes of `rooms`, in their order. A room whose globs do not compile (the
/// room checks refuse them, so only a store written by something else) gets none, logged.
pub(super) fn room_routes(rooms: &[RoomConfig]) -> Vec<RouteConfig> {
    rooms
        .iter()
        .filter_map(|room| match room_route(room) {
            Ok(route) => route,
            Err(error) => {
                tracing::error!(room = %room.id, %error, "the room's routes cannot be used");
                None
            }
        })
        .collect()
}

/// The `routes` of the rooms that list any, by room.
pub(super) fn room_globs(rooms: &[RoomConfig]) -> Vec<(RoomId, Vec<String>)> {
    rooms
        .iter()
        .filter(|room| !room.routes.is_empty())
        .map(|room| (room.id.clone(), room.routes.clone()))
        .collect()
}
