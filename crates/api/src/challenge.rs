//! The proof-of-work gate of a join (SPEC §12), kept apart from the join handler so a room
//! without `challenge` pays nothing.
//!
//! - `POST /_anteroom/v1/rooms/{room}/challenge` hands out a signed challenge
//!   (`anteroom_token::ChallengeSigner`: room, random nonce, expiry, difficulty). Nothing is
//!   stored: any node sharing the key directory checks any node's challenge.
//! - A join of a room with `challenge` must carry `"challenge": {"token": "...", "counter":
//!   N}` such that SHA-256(token || N in decimal) has `difficulty` leading zero bits
//!   (`anteroom_core::challenge`). Only a join that makes a new ticket needs one (the join
//!   gate, `join_gate.rs`, resumes a live ticket first): one solution per ticket, and a left,
//!   expired or other-generation ticket never stands in for one.
//! - Each challenge is good for one join: its nonce is marked used in the node's one-time
//!   marks ([`AppState::mark_once`]: in Redis when the node has a Redis store, so the mark
//!   holds across nodes, else in the node's own bounded marks, apart from the rate-limit
//!   counters) for as long as the challenge could still be presented. When the node's own
//!   marks are full, a solved join is refused with 503 `challenge_unavailable` and
//!   `Retry-After` (a mark that cannot be recorded cannot stop a replay).
//! - Refusals are 403 problem+json: `challenge_required` (none sent), `challenge_failed`
//!   (forged, expired, for another room, or a wrong counter) and `challenge_used` (a replay),
//!   each with `challenge_url` and a `Link: <…>; rel="challenge"` header saying where to get
//!   one. Nothing about the room changes.
//!
//! Counted in `anteroom_challenges_issued_total`, `anteroom_challenges_solved_total` (by room)
//! and `anteroom_challenges_failed_total` (by room and reason).

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics::counter;
use rand::RngCore as _;
use serde::{Deserialize, Serialize};

use anteroom_core::RoomId;
use anteroom_core::challenge::ProofOfWork;
use anteroom_core::challenge::solves;
use anteroom_store::marks::Marked;
use anteroom_token::{ChallengeClaims, ChallengeError};

use crate::AppState;
use crate::error::ApiError;
use crate::ticket_request::parse_room;

/// How long a challenge may be presented after it was issued.
pub(crate) const CHALLENGE_TTL: Duration = Duration::from_secs(300);

/// What a join refused because the node's marks are full is told to wait: the sweep of
/// expired marks runs at most once a second.
const MARKS_FULL_RETRY_AFTER_SECS: u64 = 5;

/// The answer to `POST …/challenge`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ChallengeBody {
    /// The challenge: hash it, then the counter in decimal, with SHA-256.
    challenge: String,
    /// Leading zero bits the hash must have.
    difficulty: u8,
    /// Always `sha256-leading-zero-bits`.
    algorithm: &'static str,
    /// When the challenge expires, in seconds since the epoch.
    expires_at: u64,
}

/// The `challenge` member of a join body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Solution {
    /// The challenge as it was handed out.
    token: String,
    /// The counter found.
    counter: u64,
}

/// A proof-of-work challenge for a room with `challenge` (SPEC §12): find a counter such that
/// SHA-256 of the challenge followed by the counter in decimal has `difficulty` leading zero
/// bits, then join with `{"challenge": {"token": <challenge>, "counter": <counter>}}`. Each
/// challenge is good for one join, for five minutes.
#[utoipa::path(post, path = "/_anteroom/v1/rooms/{room}/challenge", tag = "public", operation_id = "challenge",
    params(("room" = String, Path, description = "Room id")),
    responses(
        (status = 200, description = "A challenge", body = crate::challenge::ChallengeBody),
        crate::problem_answers::ChallengeProblems,
    ))]
pub(crate) async fn issue(
    State(app): State<AppState>,
    Path(room): Path<String>,
) -> Result<Response, ApiError> {
    let room = parse_room(&room)?;
    let config = app.api_room_config(&room).await?;
    let Some(pow) = config.challenge else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "challenge_not_used",
            "this room does not ask for a proof of work; join directly",
        ));
    };
    let mut nonce = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let expires_at = app.now().as_secs() + CHALLENGE_TTL.as_secs();
    let challenge = app.keys().challenge_signer().sign(&ChallengeClaims {
        room: room.to_string(),
        nonce: nonce.iter().map(|byte| format!("{byte:02x}")).collect(),
        expires_at,
        difficulty: pow.difficulty,
    });
    counter!("anteroom_challenges_issued_total", "room" => room.to_string()).increment(1);
    let mut response = Json(ChallengeBody {
        challenge,
        difficulty: pow.difficulty,
        algorithm: "sha256-leading-zero-bits",
        expires_at,
    })
    .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The proof of work a new ticket of a room with `challenge` needs (the join gate asks only
/// for new tickets, `join_gate.rs`): passes a fresh, correct, unused solution (which it then
/// marks used); refuses everything else.
pub(crate) async fn check_solution(
    app: &AppState,
    room: &RoomId,
    pow: ProofOfWork,
    solution: Option<serde_json::Value>,
) -> Result<(), ApiError> {
    let Some(solution) = solution.filter(|value| !value.is_null()) else {
        return Err(refuse(
            room,
            "missing",
            "challenge_required",
            "this room asks for a proof of work before a join: get a challenge, solve it, and \
             join with {\"challenge\": {\"token\": …, \"counter\": …}}",
        ));
    };
    let solution: Solution = serde_json::from_value(solution).map_err(|error| {
        refuse(
            room,
            "malformed",
            "challenge_failed",
            format!("the challenge member is not valid: {error}"),
        )
    })?;
    let nonce = verify_solution(app, room, pow, &solution)?;
    spend_solution(app, room, &nonce).await?;
    counter!("anteroom_challenges_solved_total", "room" => room.to_string()).increment(1);
    Ok(())
}

/// Checks that `solution` solves a challenge issued for `room`, unexpired and as hard as the
/// room asks now; the challenge's nonce when it does.
fn verify_solution(
    app: &AppState,
    room: &RoomId,
    pow: ProofOfWork,
    solution: &Solution,
) -> Result<String, ApiError> {
    let signer = app.keys().challenge_signer().clone();
    let claims = match signer.verify(&solution.token, room.as_str(), app.now().as_secs()) {
        Ok(claims) => claims,
        Err(ChallengeError::Expired) => {
            return Err(refuse(
                room,
                "expired",
                "challenge_failed",
                "the challenge has expired; get a new one",
            ));
        }
        Err(ChallengeError::Invalid | ChallengeError::WrongRoom) => {
            return Err(refuse(
                room,
                "invalid",
                "challenge_failed",
                "the challenge was not issued for this room",
            ));
        }
    };
    if claims.difficulty < pow.difficulty {
        return Err(refuse(
            room,
            "invalid",
            "challenge_failed",
            "the challenge is easier than this room now asks; get a new one",
        ));
    }
    if !solves(&solution.token, solution.counter, claims.difficulty) {
        return Err(refuse(
            room,
            "wrong_solution",
            "challenge_failed",
            "the counter does not solve the challenge",
        ));
    }
    Ok(claims.nonce)
}

/// Marks the challenge of `nonce` used, refusing it when it already was (a replay).
async fn spend_solution(app: &AppState, room: &RoomId, nonce: &str) -> Result<(), ApiError> {
    let key = format!("challenge|{room}|{nonce}");
    match app.mark_once(&key, CHALLENGE_TTL).await {
        Ok(Marked::First) => Ok(()),
        Ok(Marked::Full) => {
            counter!("anteroom_challenges_failed_total", "room" => room.to_string(), "reason" => "marks_full")
                .increment(1);
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "challenge_unavailable",
                "this node cannot record more solved challenges right now; try again shortly",
            )
            .retry_after(MARKS_FULL_RETRY_AFTER_SECS))
        }
        Ok(Marked::Seen) => Err(refuse(
            room,
            "replayed",
            "challenge_used",
            "this challenge was already used for a join; get a new one",
        )),
        Err(error) => {
            tracing::warn!(%room, %error, "cannot record a used challenge");
            Err(ApiError::store_unavailable())
        }
    }
}

/// Where to get a challenge for `room`.
pub(crate) fn challenge_url(room: &RoomId) -> String {
    format!("/_anteroom/v1/rooms/{room}/challenge")
}

fn refuse(
    room: &RoomId,
    reason: &'static str,
    code: &'static str,
    detail: impl Into<String>,
) -> ApiError {
    counter!("anteroom_challenges_failed_total", "room" => room.to_string(), "reason" => reason)
        .increment(1);
    ApiError::new(StatusCode::FORBIDDEN, code, detail).with_challenge_url(challenge_url(room))
}
