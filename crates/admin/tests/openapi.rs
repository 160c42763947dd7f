//! `docs/openapi.json` is the OpenAPI document the code generates: this test fails when the
//! checked-in copy is stale. To regenerate it:
//!
//! ```sh
//! ANTEROOM_WRITE_OPENAPI=1 cargo test -p anteroom-admin --test openapi
//! ```

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use serde_json::Value;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

#[test]
fn the_checked_in_document_is_current() {
    let generated = anteroom_admin::openapi_json();
    let path = checked_in();
    if std::env::var_os("ANTEROOM_WRITE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "docs/openapi.json is stale; regenerate it with\n  \
         ANTEROOM_WRITE_OPENAPI=1 cargo test -p anteroom-admin --test openapi"
    );
}

#[test]
fn the_document_covers_the_public_and_admin_apis() {
    let document: Value = serde_json::from_str(&anteroom_admin::openapi_json()).unwrap();
    assert!(document["openapi"].as_str().unwrap().starts_with("3."));
    let paths = document["paths"].as_object().unwrap();
    for path in [
        "/_anteroom/v1/rooms/{room}/join",
        "/_anteroom/v1/rooms/{room}/status",
        "/_anteroom/v1/rooms/{room}/events",
        "/.well-known/jwks.json",
        "/admin/v1/rooms",
        "/admin/v1/rooms/{room}",
        "/admin/v1/rooms/{room}/advance",
        "/admin/v1/rooms/{room}/sessions",
        "/admin/v1/rooms/{room}/sessions/{session}/revoke",
        "/admin/v1/rooms/{room}/stats",
        "/admin/v1/keys/rotate",
        "/admin/v1/keys/prune",
        "/admin/v1/events",
    ] {
        assert!(paths.contains_key(path), "{path} is missing");
    }
    let room = &paths["/admin/v1/rooms/{room}"];
    for method in ["get", "put", "patch", "delete"] {
        assert!(
            room[method].is_object(),
            "{method} /admin/v1/rooms/{{room}}"
        );
    }
    // Errors are problem+json; SSE is text/event-stream.
    let unauthorized = &room["get"]["responses"]["401"]["content"];
    assert!(
        unauthorized["application/problem+json"].is_object(),
        "{unauthorized}"
    );
    let events = &paths["/admin/v1/events"]["get"]["responses"]["200"]["content"];
    assert!(events["text/event-stream"].is_object(), "{events}");
    let schemas = document["components"]["schemas"].as_object().unwrap();
    for schema in ["Problem", "RoomBody", "StatusBody", "SessionPage", "Stats"] {
        assert!(schemas.contains_key(schema), "schema {schema} is missing");
    }
    assert!(document["components"]["securitySchemes"]["admin_key"].is_object());
}
