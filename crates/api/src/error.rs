//! The one place HTTP errors are made: every failure becomes an RFC 9457
//! `application/problem+json` body with a stable `code` (SPEC §6.1).
//!
//! Client mistakes are answered plainly and not logged as errors; backend failures are logged
//! with their cause and answered with a generic body, never a stack trace: a store that
//! cannot be reached is 503 `store_unavailable` with `Retry-After` (saying, for an
//! `on_store_error = "open"` room, that its protected pages are open meanwhile). Bad input is
//! never answered 500.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use anteroom_core::RoomId;
use anteroom_core::engine::EngineError;
use anteroom_store::StoreError;

use crate::site_identity::{REFETCH_COOLDOWN, SiteTokenError};

/// An error answered as problem+json.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    detail: String,
    retry_after_secs: Option<u64>,
    /// Field-by-field problems of a request body: (field, message).
    errors: Vec<(String, String)>,
    /// Where to get a proof-of-work challenge (SPEC §12), for `challenge_*` problems.
    challenge_url: Option<String>,
}

/// An RFC 9457 problem document (`application/problem+json`).
#[derive(Serialize, utoipa::ToSchema)]
pub struct Problem<'a> {
    /// Always `about:blank`: the `code` says what went wrong.
    #[serde(rename = "type")]
    kind: String,
    /// The HTTP status text.
    title: &'a str,
    /// The HTTP status.
    status: u16,
    /// A stable, machine-readable code such as `room_not_found`.
    code: &'a str,
    /// What went wrong, for people.
    detail: &'a str,
    /// Every problem with a request body's fields, when there were some.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    errors: &'a [FieldError],
    /// Where to `POST` for a proof-of-work challenge, when a join needs one.
    #[serde(skip_serializing_if = "Option::is_none")]
    challenge_url: Option<&'a str>,
}

/// One problem with one field of a request body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FieldError {
    /// The field's name.
    field: String,
    /// What is wrong with it.
    message: String,
}

impl ApiError {
    /// An error with an explicit status, stable code and human-readable detail.
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            detail: detail.into(),
            retry_after_secs: None,
            errors: Vec::new(),
            challenge_url: None,
        }
    }

    /// Says where to get a proof-of-work challenge (the `challenge_url` member and a `Link`
    /// header).
    pub(crate) fn with_challenge_url(mut self, url: String) -> ApiError {
        self.challenge_url = Some(url);
        self
    }

    /// Adds the problems of a request body's fields, as (field, message).
    pub fn with_errors(mut self, errors: Vec<(String, String)>) -> ApiError {
        self.errors = errors;
        self
    }

    /// Adds a `Retry-After` header.
    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after_secs = Some(seconds);
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// 400 for a request the server cannot make sense of.
    pub fn bad_request(code: &'static str, detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// 404 for a room that does not exist.
    pub fn room_not_found(room: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "room_not_found",
            format!("no room named {room:?}"),
        )
    }

    /// 400 for a ticket token that does not verify.
    pub fn ticket_invalid() -> ApiError {
        ApiError::bad_request("ticket_invalid", "the ticket is not valid for this room")
    }

    /// 401 for a missing or wrong service key.
    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid service key is required",
        )
    }

    /// 503 when the store cannot be reached.
    pub fn store_unavailable() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            "the waiting room is temporarily unavailable",
        )
        .retry_after(STORE_RETRY_AFTER_SECS)
    }

    /// 503 when the store cannot be reached in a room with `on_store_error = "open"`: there
    /// is no place in line to give, but the room's protected pages are open meanwhile.
    pub(crate) fn store_unavailable_open() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            "the waiting room is temporarily unavailable; meanwhile this room lets visitors \
             through without a pass",
        )
        .retry_after(STORE_RETRY_AFTER_SECS)
    }

    /// 503 for a closed room.
    pub fn room_closed() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "room_closed",
            "this room is closed",
        )
    }

    /// 403 `pass_required`: join `required` first.
    pub fn pass_required(required: &RoomId) -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "pass_required",
            format!(
                "this room needs a pass of room {:?} first: join it at \
                 /_anteroom/v1/rooms/{}/join",
                required.as_str(),
                required.as_str()
            ),
        )
    }
}

/// What `Retry-After` says while the store cannot be reached.
const STORE_RETRY_AFTER_SECS: u64 = 5;

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> ApiError {
        match error {
            EngineError::RoomClosed => ApiError::room_closed(),
            EngineError::TicketUnknown | EngineError::TicketExpired => ApiError::new(
                StatusCode::GONE,
                "ticket_expired",
                "this ticket has expired, left or been replaced; join again",
            ),
            EngineError::SessionUnknown => ApiError::new(
                StatusCode::NOT_FOUND,
                "session_not_found",
                "no such session in this room",
            ),
            EngineError::RoomFull => ApiError::new(
                StatusCode::CONFLICT,
                "room_full",
                "every slot of this room is taken; a pass can be issued once one frees",
            ),
            EngineError::SessionEnded => {
                ApiError::new(StatusCode::GONE, "session_ended", "this session has ended")
            }
            EngineError::InvalidPriorityCode => ApiError::new(
                StatusCode::FORBIDDEN,
                "invalid_priority_code",
                "this priority access code is not valid for this room, or has been used up",
            ),
            // Only the join gate asks to resume only, and it handles the answer itself.
            EngineError::NothingToResume => ApiError::new(
                StatusCode::GONE,
                "ticket_expired",
                "this ticket has expired, left or been replaced; join again",
            ),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::RoomNotFound(room) => ApiError::room_not_found(room.as_str()),
            StoreError::Engine(engine) => engine.into(),
            // Handlers count and log backend failures at a bounded rate (store_failure.rs).
            StoreError::Backend { .. } => {
                tracing::debug!(%error, "store operation failed");
                ApiError::store_unavailable()
            }
        }
    }
}

/// 401 for the visitor's token, 503 when the site's keys cannot be had.
impl From<SiteTokenError> for ApiError {
    fn from(error: SiteTokenError) -> ApiError {
        match error {
            SiteTokenError::Missing => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "identity_required",
                "this room needs you to be signed in to the site: its token was not sent",
            ),
            SiteTokenError::KeysUnavailable(_) => {
                tracing::warn!(%error, "cannot verify site tokens");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "identity_unavailable",
                    "the site's sign-in keys cannot be checked just now; try again shortly",
                )
                .retry_after(REFETCH_COOLDOWN.as_secs())
            }
            other => ApiError::new(
                StatusCode::UNAUTHORIZED,
                "identity_invalid",
                other.to_string(),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let errors: Vec<FieldError> = self
            .errors
            .iter()
            .map(|(field, message)| FieldError {
                field: field.clone(),
                message: message.clone(),
            })
            .collect();
        let problem = Problem {
            errors: &errors,
            kind: "about:blank".to_owned(),
            title,
            status: self.status.as_u16(),
            code: self.code,
            detail: &self.detail,
            challenge_url: self.challenge_url.as_deref(),
        };
        let mut response = (self.status, Json(problem)).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"anteroom\""),
            );
        }
        if let Some(link) = self
            .challenge_url
            .as_deref()
            .and_then(|url| HeaderValue::from_str(&format!("<{url}>; rel=\"challenge\"")).ok())
        {
            response.headers_mut().insert(header::LINK, link);
        }
        if let Some(seconds) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
