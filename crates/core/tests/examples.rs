//! The example configuration shipped in `examples/` stays valid as the config model changes.

#![allow(clippy::unwrap_used)]

use anteroom_core::config::{parse_config, room_route};

#[test]
fn shipped_example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/anteroom.toml");
    let source = std::fs::read_to_string(path).unwrap();
    let config = parse_config(&source, &[]).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(config.rooms.len(), 2);
    assert_eq!(config.rooms[1].requires[0].as_str(), "launch");
    let names: Vec<&str> = config
        .rate_limits
        .iter()
        .map(|rule| rule.name.as_str())
        .collect();
    assert_eq!(names, ["join-per-ip", "status-polls"]);
    let routes: Vec<&str> = config
        .routes
        .iter()
        .map(|route| route.name.as_str())
        .collect();
    assert_eq!(routes, ["health", "route-2"]);
    // A room's own `routes` are a route built from the room (the gateway builds it from the
    // rooms in the store, so it follows admin API changes), not one of `[[route]]`.
    let own: Vec<String> = config
        .rooms
        .iter()
        .filter_map(|room| room_route(room).unwrap())
        .map(|route| route.name)
        .collect();
    assert_eq!(own, ["room-launch"]);
    assert_eq!(config.websocket.unwrap().limit.unwrap().limit, 20);
}
