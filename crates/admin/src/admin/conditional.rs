//! Room writes that cannot overwrite each other (RFC 9110 §8.8.3, §13.1.1).
//!
//! A room's `ETag` is a digest of its configuration as the API shows it: every node computes
//! the same tag for the same room, and any change to any field changes it. `GET`, `PUT` and
//! `PATCH` of a room and the mode controls (`pause`, `resume`, `close`, `open`) answer it.
//!
//! Every read-modify-write of a room ([`update_room`]) writes through the store's
//! compare-and-swap ([`RoomStore::replace_room_if`](anteroom_store::RoomStore::replace_room_if)):
//! the write happens only if the room still holds the configuration the change was computed
//! from, checked and written in one step (one lock on the embedded store, one script on Redis),
//! so two operators' changes never silently undo each other.
//!
//! `If-Match` is optional, and decides what happens when the room changed in between:
//! - absent: the change (a merge patch, or a mode) is applied again to the configuration now
//!   in force, so it keeps every field another writer set and changes only its own. Scripts,
//!   the CLI and an emergency `pause` keep working without reading the room first.
//! - present: the caller decided its change on the version it read, so a room that no longer
//!   matches answers 412 `precondition_failed` and nothing changes. The control panel always
//!   sends it. `*` matches any existing room; weak tags never match (strong comparison).

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};
use utoipa::openapi::Required;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};

use anteroom_core::RoomId;
use anteroom_core::engine::RoomSnapshot;
use anteroom_core::room::RoomConfig;
use anteroom_store::ConfigWrite;

use super::AdminState;
use super::room_body::RoomBody;
use anteroom_api::error::ApiError;

/// How many times an unconditional change is applied again after losing a race.
const MAX_ATTEMPTS: usize = 8;

/// The most entity tags one `If-Match` may list.
const MAX_TAGS: usize = 32;

/// A room's entity tag, with its quotes: `"<32 hex digits>"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RoomTag(String);

impl RoomTag {
    /// The tag of a configuration: the first 128 bits of the SHA-256 of its JSON form.
    pub(crate) fn of(config: &RoomConfig) -> RoomTag {
        let json = serde_json::to_vec(&RoomBody::from_config(config)).unwrap_or_default();
        let digest = Sha256::digest(&json);
        let hex: String = digest[..16]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        RoomTag(format!("\"{hex}\""))
    }

    /// The `ETag` header value.
    pub(crate) fn header_value(&self) -> HeaderValue {
        // Quotes and hex digits only: always a valid header value.
        HeaderValue::from_str(&self.0).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
    }

    /// Sets `ETag` on a response's headers.
    pub(crate) fn set_on(&self, headers: &mut HeaderMap) {
        headers.insert(header::ETAG, self.header_value());
    }
}

/// The `If-Match` header of the room writes, as the OpenAPI document lists it. Never built:
/// `#[utoipa::path]` names it in `params(...)`.
pub(crate) enum IfMatchHeader {}

impl utoipa::IntoParams for IfMatchHeader {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let schema = ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            .pattern(Some(r#"^(\*|(W/)?"[!#-~]*"( *, *(W/)?"[!#-~]*")*)$"#));
        let header = ParameterBuilder::new()
            .name("If-Match")
            .parameter_in(ParameterIn::Header)
            .description(Some(
                "The `ETag` of the room as read: the write happens only if the room is still that\n\
                 version, else 412 and nothing changes. `*` matches any existing room. Optional: without\n\
                 it the change is applied atomically to the version in force.",
            ))
            .required(Required::False)
            .schema(Some(schema))
            .example(Some("\"5d41402abc4b2a76b9719d911017c592\"".into()))
            .build();
        vec![header]
    }
}

/// What a request's `If-Match` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IfMatch {
    /// No `If-Match`: the write is unconditional (but still atomic).
    Absent,
    /// `*`: any current configuration.
    Any,
    /// One of these strong tags (quotes included); weak tags were dropped, they never match.
    Tags(Vec<String>),
}

impl IfMatch {
    /// Reads every `If-Match` header; a malformed one is a 400 (it cannot be honoured, and
    /// ignoring it would turn a conditional write into an unconditional one).
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<IfMatch, ApiError> {
        let mut values = headers.get_all(header::IF_MATCH).iter().peekable();
        if values.peek().is_none() {
            return Ok(IfMatch::Absent);
        }
        let mut tags = Vec::new();
        let mut any = false;
        for value in values {
            let text = value.to_str().map_err(|_| malformed())?;
            for item in text
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
            {
                if item == "*" {
                    any = true;
                } else if let Some(weak) = item.strip_prefix("W/") {
                    parse_opaque(weak)?;
                } else {
                    tags.push(parse_opaque(item)?.to_owned());
                }
                if tags.len() > MAX_TAGS {
                    return Err(malformed());
                }
            }
        }
        match (any, tags.is_empty()) {
            (true, true) => Ok(IfMatch::Any),
            // `*` is only valid alone (RFC 9110 §13.1.1).
            (true, false) => Err(malformed()),
            (false, _) => Ok(IfMatch::Tags(tags)),
        }
    }

    /// Whether the request names a condition at all.
    pub(crate) fn is_conditional(&self) -> bool {
        *self != IfMatch::Absent
    }

    /// Ok when the condition holds for `current`; otherwise 412 with the tag now in force.
    pub(crate) fn check(&self, room: &RoomId, current: &RoomConfig) -> Result<(), ApiError> {
        let tag = RoomTag::of(current);
        match self {
            IfMatch::Absent | IfMatch::Any => Ok(()),
            IfMatch::Tags(tags) if tags.contains(&tag.0) => Ok(()),
            IfMatch::Tags(_) => Err(precondition_failed(room, Some(&tag))),
        }
    }
}

/// A quoted entity tag, returned with its quotes.
fn parse_opaque(text: &str) -> Result<&str, ApiError> {
    let inner = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .ok_or_else(malformed)?;
    // etagc = %x21 / %x23-7E / obs-text: no quote, space or control inside.
    if inner
        .bytes()
        .all(|byte| byte == 0x21 || byte >= 0x23 && byte != 0x7f)
    {
        Ok(text)
    } else {
        Err(malformed())
    }
}

fn malformed() -> ApiError {
    ApiError::bad_request(
        "invalid_if_match",
        "If-Match must be * or a list of quoted entity tags such as \"0123abcd\"",
    )
}

/// 412: the room is not the version the caller read (`current` is the tag now in force;
/// none when the room no longer exists).
pub(crate) fn precondition_failed(room: &RoomId, current: Option<&RoomTag>) -> ApiError {
    let detail = match current {
        Some(tag) => format!(
            "room {room} changed since it was read (its ETag is now {}); nothing was changed: \
             read it again and reapply the change",
            tag.0
        ),
        None => format!("room {room} does not exist; nothing was changed"),
    };
    ApiError::new(
        StatusCode::PRECONDITION_FAILED,
        "precondition_failed",
        detail,
    )
}

/// Applies `change` to the room's configuration and writes the result only over the
/// configuration it was computed from (see the module docs for `If-Match`). Answers the
/// configuration written and the room after.
pub(crate) async fn update_room(
    admin: &AdminState,
    room: &RoomId,
    if_match: &IfMatch,
    mut change: impl FnMut(RoomConfig) -> Result<RoomConfig, ApiError>,
) -> Result<(RoomConfig, RoomSnapshot), ApiError> {
    let store = admin.app().store();
    let mut current = store.room(room).await?;
    for _ in 0..MAX_ATTEMPTS {
        if_match.check(room, &current)?;
        let next = change(current.clone())?;
        match store.replace_room_if(&current, next.clone()).await? {
            ConfigWrite::Written(snapshot) => return Ok((next, snapshot)),
            ConfigWrite::Changed(latest) => current = latest,
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "room_busy",
        format!(
            "room {room} kept changing while this change was applied; nothing was changed, try again"
        ),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn if_match(values: &[&str]) -> Result<IfMatch, ApiError> {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header::IF_MATCH, HeaderValue::from_str(value).unwrap());
        }
        IfMatch::from_headers(&headers)
    }

    fn tags(tags: &[&str]) -> IfMatch {
        IfMatch::Tags(tags.iter().map(|tag| (*tag).to_owned()).collect())
    }

    #[test]
    fn if_match_lists_strong_tags_or_star() {
        assert_eq!(if_match(&[]).unwrap(), IfMatch::Absent);
        assert_eq!(if_match(&["*"]).unwrap(), IfMatch::Any);
        assert_eq!(if_match(&["\"a\""]).unwrap(), tags(&["\"a\""]));
        assert_eq!(
            if_match(&["\"a\", W/\"b\"", "\"c\""]).unwrap(),
            tags(&["\"a\"", "\"c\""])
        );
        assert_eq!(if_match(&["W/\"b\""]).unwrap(), tags(&[]));
        for bad in ["a", "\"a", "*, \"a\"", "\"a b\"", "W/b", "\"a\"\"b\""] {
            assert!(if_match(&[bad]).is_err(), "{bad}");
        }
        let many = vec!["\"a\""; MAX_TAGS + 1].join(",");
        assert!(if_match(&[&many]).is_err());
    }

    #[test]
    fn the_tag_follows_every_field() {
        let room = RoomId::new("r").unwrap();
        let config = RoomConfig::with_defaults(room.clone());
        let tag = RoomTag::of(&config);
        assert_eq!(tag, RoomTag::of(&config.clone()));
        assert_eq!(tag.0.len(), 34);
        let changed = RoomConfig {
            max_active: config.max_active + 1,
            ..config.clone()
        };
        assert_ne!(tag, RoomTag::of(&changed));
        let matching = IfMatch::Tags(vec![tag.0.clone()]);
        assert!(matching.check(&room, &config).is_ok());
        let refused = matching.check(&room, &changed).unwrap_err();
        assert_eq!(refused.status(), StatusCode::PRECONDITION_FAILED);
        assert_eq!(refused.code(), "precondition_failed");
        assert!(IfMatch::Any.check(&room, &changed).is_ok());
        assert!(IfMatch::Tags(Vec::new()).check(&room, &config).is_err());
    }
}
