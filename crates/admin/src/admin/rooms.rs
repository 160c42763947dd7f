//! Rooms through the admin API: list, get, create or replace (PUT), patch, delete.
//!
//! The room JSON uses SPEC §3's field names with durations as text, exactly as a `[[room]]`
//! is written ([`RawRoom`]). A body is checked field by field, so a 400 lists every problem
//! (wrong types, unknown fields, invalid values, unknown or circular `requires`) at once, and
//! nothing changes unless the whole room is valid. A room that a route (from the config file)
//! or another room's `requires` still names is not deleted: 409 `room_required`.

use std::collections::{BTreeMap, BTreeSet};

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use anteroom_core::RoomId;
use anteroom_core::config::{
    FieldProblem, RawAdaptive, RawChallenge, RawIdentityJwt, RawPriority, RawRoom,
};
use anteroom_core::room::RoomConfig;

use super::auth::{ReadAccess, WriteAccess};
use super::bodies::body_bytes;
use super::conditional::{IfMatch, RoomTag, precondition_failed, update_room};
use super::room_body::{
    AdaptiveBody, ChallengeBody, EventBody, IdentityJwtBody, PriorityBody, RoomBody, RoomList,
};
use anteroom_api::parse_room;

use super::AdminState;
use crate::admin_event::AdminEvent;
use anteroom_api::error::ApiError;
use anteroom_api::problem_answers;

/// `GET /admin/v1/rooms`
#[utoipa::path(get, path = "/admin/v1/rooms", tag = "admin",
    security(("admin_key" = [])),
    responses(
        (status = 200, description = "Every room, ordered by id", body = RoomList),
        problem_answers::NoValidKey, problem_answers::StoreUnreachable,
    ))]
pub(crate) async fn list(
    _: ReadAccess,
    State(admin): State<AdminState>,
) -> Result<Json<RoomList>, ApiError> {
    let rooms = admin.app().store().rooms().await?;
    Ok(Json(RoomList {
        rooms: rooms.iter().map(RoomBody::from_config).collect(),
    }))
}

/// `GET /admin/v1/rooms/{room}`
#[utoipa::path(get, path = "/admin/v1/rooms/{room}", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id")),
    responses(
        (status = 200, description = "The room", body = RoomBody, headers(
            ("ETag" = String, description = "The room's version: send it as `If-Match` to change the room only if nobody changed it since"))),
        problem_answers::NoValidKey, problem_answers::RoomNotFound,
    ))]
pub(crate) async fn get_room(
    _: ReadAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
) -> Result<Response, ApiError> {
    let room = parse_room(&room)?;
    let config = admin.app().store().room(&room).await?;
    Ok(room_response(StatusCode::OK, &config))
}

/// A room as an answer, with its `ETag`.
fn room_response(status: StatusCode, config: &RoomConfig) -> Response {
    let mut response = (status, Json(RoomBody::from_config(config))).into_response();
    RoomTag::of(config).set_on(response.headers_mut());
    response
}

/// `PUT /admin/v1/rooms/{room}`: creates the room, or replaces its configuration keeping its
/// queue, sessions and counters.
#[utoipa::path(put, path = "/admin/v1/rooms/{room}", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id"), super::conditional::IfMatchHeader),
    request_body(content = Option<RoomBody>, description = "The whole room; absent fields take their defaults (`id`, when given, is the room in the path). Semantic problems (an unknown or circular `requires`, `session_max` below `session_ttl`) answer 400 too."),
    responses(
        (status = 200, description = "Replaced", body = RoomBody, headers(("ETag" = String, description = "The room's new version"))),
        (status = 201, description = "Created", body = RoomBody, headers(("ETag" = String, description = "The room's version"))),
        problem_answers::BadRoomBody, problem_answers::WriteRefused, problem_answers::PutVersionMismatch,
    ))]
pub(crate) async fn put_room(
    _: WriteAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let if_match = IfMatch::from_headers(&headers)?;
    let fields = body_object(body)?;
    let mut problems = Vec::new();
    let mut raw = RawRoom {
        id: room.clone(),
        ..RawRoom::default()
    };
    apply_fields(&mut raw, &fields, &room, &mut problems);
    let config = validate(&admin, raw, problems).await?;
    let existed = if if_match.is_conditional() {
        // Only over the version the caller read: a room deleted meanwhile is not re-created.
        update_room(&admin, &config.id, &if_match, |_| Ok(config.clone()))
            .await
            .map_err(|error| match error.status() {
                StatusCode::NOT_FOUND => precondition_failed(&config.id, None),
                _ => error,
            })?;
        true
    } else {
        let existed = admin.app().store().room(&config.id).await.is_ok();
        admin.app().store().put_room(config.clone()).await?;
        existed
    };
    let action = if existed { "replaced" } else { "created" };
    admin
        .record(AdminEvent::room_updated(
            &config.id,
            action,
            admin.now(),
            room_json(&config),
        ))
        .await;
    let status = if existed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(room_response(status, &config))
}

/// `PATCH /admin/v1/rooms/{room}`: changes the fields given (JSON merge patch: `null` puts a
/// field back to its default).
#[utoipa::path(patch, path = "/admin/v1/rooms/{room}", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id"), super::conditional::IfMatchHeader),
    request_body(content = Option<RoomBody>, description = "The fields to change (JSON merge patch)", content_type = "application/json"),
    description = "Changes only the fields given, atomically: without `If-Match` the patch \
        is applied to the configuration in force when it is written (a concurrent change to \
        other fields is kept); with `If-Match` it is applied only if the room is still that \
        version, else 412.",
    responses(
        (status = 200, description = "The room after the change", body = RoomBody, headers(("ETag" = String, description = "The room's new version"))),
        problem_answers::BadRoomBody, problem_answers::WriteRefused, problem_answers::RoomNotFound, problem_answers::PatchKeptChanging, problem_answers::VersionMismatch,
    ))]
pub(crate) async fn patch_room(
    _: WriteAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = parse_room(&room)?;
    let if_match = IfMatch::from_headers(&headers)?;
    let fields = body_object(body)?;
    // `requires` is checked against the rooms as listed now; the patch itself is applied to
    // the configuration in force when it is written.
    let rooms = admin.app().store().rooms().await?;
    let (config, _) = update_room(&admin, &id, &if_match, |current| {
        let mut problems = Vec::new();
        let mut raw = RawRoom::from_config(&current);
        apply_fields(&mut raw, &fields, &room, &mut problems);
        validate_among(&admin, raw, problems, &rooms)
    })
    .await?;
    admin
        .record(AdminEvent::room_updated(
            &config.id,
            "updated",
            admin.now(),
            room_json(&config),
        ))
        .await;
    Ok(room_response(StatusCode::OK, &config))
}

/// `DELETE /admin/v1/rooms/{room}`: deletes the room with its queue and sessions.
#[utoipa::path(delete, path = "/admin/v1/rooms/{room}", tag = "admin",
    security(("admin_key" = [])),
    params(("room" = String, Path, description = "Room id")),
    responses(
        (status = 204, description = "Deleted"),
        problem_answers::WriteRefused, problem_answers::RoomNotFound, problem_answers::RoomInUse,
    ))]
pub(crate) async fn delete_room(
    _: WriteAccess,
    State(admin): State<AdminState>,
    Path(room): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_room(&room)?;
    let rooms = admin.app().store().rooms().await?;
    // A route naming a missing room answers 503, and a room requiring it cannot be joined.
    let routes = admin
        .routes_naming(&id)
        .into_iter()
        .map(|name| format!("route {name:?}"));
    let requiring = rooms
        .iter()
        .filter(|other| other.requires.contains(&id))
        .map(|other| format!("room {:?}", other.id.as_str()));
    let needed_by: Vec<String> = routes.chain(requiring).collect();
    if !needed_by.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "room_required",
            format!(
                "room {id} is still needed by {}; change their routes or requires first",
                needed_by.join(", ")
            ),
        ));
    }
    if !admin.app().store().delete_room(&id).await? {
        return Err(ApiError::room_not_found(&room));
    }
    admin
        .record(AdminEvent::room_updated(
            &id,
            "deleted",
            admin.now(),
            Value::Null,
        ))
        .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) fn room_json(config: &RoomConfig) -> Value {
    serde_json::to_value(RoomBody::from_config(config)).unwrap_or_default()
}

/// The body as a JSON object; an empty body is an empty object.
fn body_object(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Value>, ApiError> {
    let body = body_bytes(body)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(fields)) => Ok(fields),
        // `null` (no room given) is the same as an empty body.
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(ApiError::bad_request(
            "invalid_json",
            "the body must be a JSON object with SPEC §3 room fields",
        )),
        Err(error) => Err(ApiError::bad_request(
            "invalid_json",
            format!("the body is not valid JSON: {error}"),
        )),
    }
}

/// Overwrites `raw`'s fields with those in `fields` (`null` clears a field), recording a
/// problem for each unknown field and each value of the wrong type.
fn apply_fields(
    raw: &mut RawRoom,
    fields: &Map<String, Value>,
    path_id: &str,
    problems: &mut Vec<FieldProblem>,
) {
    for (name, value) in fields {
        let mut problem = |message: String| {
            problems.push(FieldProblem {
                field: name.clone(),
                message,
            });
        };
        match name.as_str() {
            "id" => match value {
                Value::Null => {}
                Value::String(id) if id == path_id => {}
                _ => problem(format!("must be the room in the path, {path_id:?}")),
            },
            "routes" => set(&mut raw.routes, value, "a list of paths", &mut problem),
            "max_active" => set(&mut raw.max_active, value, "a whole number", &mut problem),
            "admit_per_minute" => set(
                &mut raw.admit_per_minute,
                value,
                "a whole number",
                &mut problem,
            ),
            "admit_burst" => set(&mut raw.admit_burst, value, "a whole number", &mut problem),
            "session_ttl" => set(&mut raw.session_ttl, value, DURATION, &mut problem),
            "session_max" => set(&mut raw.session_max, value, DURATION, &mut problem),
            "claim_ttl" => set(&mut raw.claim_ttl, value, DURATION, &mut problem),
            "ticket_idle_ttl" => set(&mut raw.ticket_idle_ttl, value, DURATION, &mut problem),
            "history_retention" => set(&mut raw.history_retention, value, DURATION, &mut problem),
            "mode" => set(&mut raw.mode, value, "text", &mut problem),
            "order" => set(&mut raw.order, value, "text", &mut problem),
            "identity" => set(&mut raw.identity, value, "text", &mut problem),
            "requires" => set(&mut raw.requires, value, "a list of room ids", &mut problem),
            "page_template" => set(&mut raw.page_template, value, "text", &mut problem),
            "on_store_error" => set(&mut raw.on_store_error, value, "text", &mut problem),
            "before" => set(&mut raw.before, value, "text", &mut problem),
            "after" => set(&mut raw.after, value, "text", &mut problem),
            _ => apply_section(raw, name, value, &mut problem),
        }
    }
}

/// Applies one of the room's sections (objects and lists of objects) of a `PATCH`, or says
/// the field is unknown.
fn apply_section(raw: &mut RawRoom, name: &str, value: &Value, problem: &mut impl FnMut(String)) {
    match name {
        "identity_jwt" => {
            let mut body: Option<IdentityJwtBody> = None;
            set(&mut body, value, IDENTITY_JWT, problem);
            raw.identity_jwt = body.map(RawIdentityJwt::from);
        }
        "oidc" => set(
            &mut raw.oidc,
            value,
            "an object with client_secret, redirect_uris and code_ttl",
            problem,
        ),
        "adaptive" => {
            let mut body: Option<AdaptiveBody> = None;
            set(&mut body, value, ADAPTIVE, problem);
            raw.adaptive = body.map(RawAdaptive::from);
        }
        "challenge" => {
            let mut body: Option<ChallengeBody> = None;
            set(&mut body, value, CHALLENGE, problem);
            raw.challenge = body.map(|body| RawChallenge {
                kind: body.kind,
                difficulty: body.difficulty,
            });
        }
        "priority" => {
            let mut lanes: Option<Vec<PriorityBody>> = None;
            set(
                &mut lanes,
                value,
                "a list of {\"codes\": [...], \"uses\": n}",
                problem,
            );
            if value.is_null() || lanes.is_some() {
                raw.priority = lanes.map(|lanes| {
                    lanes
                        .into_iter()
                        .map(|lane| RawPriority {
                            codes: lane.codes,
                            uses: lane.uses,
                        })
                        .collect()
                });
            }
        }
        "schedule" => {
            let mut events: Option<Vec<EventBody>> = None;
            set(
                &mut events,
                value,
                "a list of events with opens_at and closes_at",
                problem,
            );
            if value.is_null() || events.is_some() {
                raw.schedule =
                    events.map(|events| events.into_iter().map(EventBody::into_raw).collect());
            }
        }
        _ => problem("unknown field".to_owned()),
    }
}

const ADAPTIVE: &str = "an object with target_p95_ms, max_error_rate, min_per_minute, \
     max_per_minute and interval";
const IDENTITY_JWT: &str = "an object with cookie or header, jwks_url or hs256_secret_file, \
                            issuer, audience and required";
const CHALLENGE: &str = "an object such as {\"kind\": \"pow\", \"difficulty\": 18}";
const DURATION: &str = "a duration such as \"90s\", \"10m\" or \"1h\"";

fn set<T: serde::de::DeserializeOwned>(
    field: &mut Option<T>,
    value: &Value,
    expected: &str,
    problem: &mut impl FnMut(String),
) {
    if value.is_null() {
        *field = None;
        return;
    }
    match T::deserialize(value) {
        Ok(parsed) => *field = Some(parsed),
        Err(_) => problem(format!("expected {expected}, found {value}")),
    }
}

/// Resolves the room, checks `requires` against the stored rooms and loads a custom page; any
/// problem (including those found while reading the body) is one 400 listing them all.
async fn validate(
    admin: &AdminState,
    raw: RawRoom,
    problems: Vec<FieldProblem>,
) -> Result<RoomConfig, ApiError> {
    let rooms = admin.app().store().rooms().await?;
    validate_among(admin, raw, problems, &rooms)
}

/// [`validate`] against `rooms`, the stored rooms as read.
fn validate_among(
    admin: &AdminState,
    raw: RawRoom,
    mut problems: Vec<FieldProblem>,
    rooms: &[RoomConfig],
) -> Result<RoomConfig, ApiError> {
    let resolved = raw.resolve();
    let config = match resolved {
        Ok(config) => Some(config),
        Err(found) => {
            problems.extend(found);
            None
        }
    };
    if let Some(config) = &config {
        check_requires(config, rooms, &mut problems);
        check_page_template(admin, config, &mut problems);
    }
    match config {
        Some(config) if problems.is_empty() => Ok(config),
        _ => Err(invalid_room(problems)),
    }
}

/// A custom page must be a readable, valid template inside the node's templates directory
/// (SPEC §6.4): the preview would otherwise serve any file the node can read.
fn check_page_template(admin: &AdminState, config: &RoomConfig, problems: &mut Vec<FieldProblem>) {
    if config.page_template.is_empty() {
        return;
    }
    if let Err(error) = admin.app().page().load(&config.page_template) {
        problems.push(FieldProblem {
            field: "page_template".to_owned(),
            message: error.to_string(),
        });
    }
}

/// Every required room must exist, and requirements must not go round in a cycle.
fn check_requires(config: &RoomConfig, rooms: &[RoomConfig], problems: &mut Vec<FieldProblem>) {
    let mut graph: BTreeMap<&RoomId, Vec<&RoomId>> = rooms
        .iter()
        .map(|room| (&room.id, room.requires.iter().collect()))
        .collect();
    for required in &config.requires {
        if !graph.contains_key(required) {
            problems.push(FieldProblem {
                field: "requires".to_owned(),
                message: format!("unknown room {:?}", required.as_str()),
            });
        }
    }
    graph.insert(&config.id, config.requires.iter().collect());
    // Depth-first from the room: reaching it again is a cycle.
    let mut stack: Vec<Vec<&RoomId>> = vec![vec![&config.id]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let Some(last) = path.last() else { continue };
        for next in graph.get(last).into_iter().flatten() {
            if *next == &config.id {
                let mut names: Vec<&str> = path.iter().map(|id| id.as_str()).collect();
                names.push(config.id.as_str());
                problems.push(FieldProblem {
                    field: "requires".to_owned(),
                    message: format!(
                        "rooms require each other in a cycle: {}",
                        names.join(" -> ")
                    ),
                });
                return;
            }
            if seen.insert(*next) {
                let mut longer = path.clone();
                longer.push(next);
                stack.push(longer);
            }
        }
    }
}

fn invalid_room(problems: Vec<FieldProblem>) -> ApiError {
    let summary = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    ApiError::bad_request("invalid_room", format!("the room is not valid: {summary}")).with_errors(
        problems
            .into_iter()
            .map(|problem| (problem.field, problem.message))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config(id: &str, requires: &[&str]) -> RoomConfig {
        RoomConfig {
            requires: requires.iter().map(|r| RoomId::new(r).unwrap()).collect(),
            ..RoomConfig::with_defaults(RoomId::new(id).unwrap())
        }
    }

    fn check(room: RoomConfig, rooms: &[RoomConfig]) -> Vec<String> {
        let mut problems = Vec::new();
        check_requires(&room, rooms, &mut problems);
        problems.into_iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn requires_names_existing_rooms_without_cycles() {
        let rooms = [config("a", &[]), config("b", &["a"])];
        assert!(check(config("c", &["b"]), &rooms).is_empty());
        assert_eq!(
            check(config("c", &["nope"]), &rooms),
            ["requires: unknown room \"nope\""]
        );
        // a -> c -> b -> a
        assert_eq!(
            check(
                config("a", &["c"]),
                &[config("a", &[]), config("b", &["a"]), config("c", &["b"])]
            ),
            ["requires: rooms require each other in a cycle: a -> c -> b -> a"]
        );
    }

    #[test]
    fn every_field_problem_is_listed() {
        let fields: Map<String, Value> = serde_json::from_str(
            r#"{"max_active": "many", "session_ttl": "soon", "mode": "fast", "colour": 1, "id": "other"}"#,
        )
        .unwrap();
        let mut raw = RawRoom {
            id: "r".to_owned(),
            ..RawRoom::default()
        };
        let mut problems = Vec::new();
        apply_fields(&mut raw, &fields, "r", &mut problems);
        problems.extend(raw.resolve().unwrap_err());
        let mut fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            ["colour", "id", "max_active", "mode", "session_ttl"]
        );
    }
}
