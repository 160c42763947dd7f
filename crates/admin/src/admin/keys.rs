//! The signing keys: rotation (a new active key) and pruning (retired keys whose passes have
//! all expired leave the set and the JWKS).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use anteroom_core::Timestamp;
use anteroom_core::config::format_time;
use anteroom_token::{KeptBecause, PruneReport, SigningAlgorithm};

use super::AdminState;
use super::auth::WriteAccess;
use super::bodies::json_body;
use crate::admin_event::AdminEvent;
use anteroom_api::error::ApiError;
use anteroom_api::key_retention_secs;
use anteroom_api::problem_answers;

/// `POST /admin/v1/keys/rotate` body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateBody {
    /// `EdDSA`, `ES256`, `RS256` or `HS256`; the configured algorithm when absent.
    #[serde(default)]
    #[schema(pattern = "^(EdDSA|ES256|RS256|HS256)$")]
    pub(crate) algorithm: Option<String>,
}

/// `POST /admin/v1/keys/rotate` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RotatedKeys {
    /// The key that signs from now on.
    pub(crate) active_kid: String,
    /// Its algorithm.
    pub(crate) algorithm: String,
    /// Every key that verifies, the active one first.
    pub(crate) kids: Vec<String>,
}

/// `POST /admin/v1/keys/prune` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PrunedKeys {
    /// The keys removed: no pass they signed can still be valid. They left the JWKS.
    pub(crate) removed: Vec<String>,
    /// The keys kept, the active one first, each with why.
    pub(crate) kept: Vec<KeptKey>,
    /// How long a key is kept after it stops signing, in seconds: the longest pass lifetime
    /// (rooms' `session_ttl`, passes issued by hand, OpenID Connect tokens) plus the
    /// verification leeway and the clock skew between nodes.
    pub(crate) keep_secs: u64,
}

/// A key a prune kept.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KeptKey {
    /// The key's id (the `kid` of its passes and JWKS entry).
    pub(crate) kid: String,
    /// `active`: it signs new passes; `passes_may_be_valid`: it stopped signing at
    /// `retired_at`, and a pass it signed may be valid until `prunable_at`.
    pub(crate) reason: KeptReason,
    /// When it stopped signing (RFC 3339); absent for the active key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retired_at: Option<String>,
    /// From when a prune removes it (RFC 3339); absent for the active key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prunable_at: Option<String>,
}

/// Why a key was kept.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum KeptReason {
    Active,
    PassesMayBeValid,
}

/// `POST /admin/v1/keys/rotate`
#[utoipa::path(post, path = "/admin/v1/keys/rotate", tag = "admin",
    security(("admin_key" = [])),
    request_body(content = Option<RotateBody>, description = "Optional algorithm of the new key"),
    description = "Generates a new signing key and makes it active; older keys keep verifying \
        (they stay in the JWKS) until pruned. The ticket secret rotates too: the retired one \
        keeps verifying the tickets it made for `[keys] ticket_secret_retention`. Other nodes \
        sharing the keys (directory or Redis) follow within a second.",
    responses(
        (status = 200, description = "The key set after", body = RotatedKeys),
        problem_answers::BadBody, problem_answers::WriteRefused,
    ))]
pub(crate) async fn rotate_keys(
    _: WriteAccess,
    State(admin): State<AdminState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<RotatedKeys>, ApiError> {
    let request: RotateBody = json_body(body)?.unwrap_or_default();
    let algorithm = match &request.algorithm {
        None => admin.settings().algorithm,
        Some(text) => text.parse::<SigningAlgorithm>().map_err(|error| {
            ApiError::bad_request("invalid_body", format!("algorithm: {error}"))
        })?,
    };
    let retention = admin.settings().ticket_secret_retention;
    // The rotation and its install are one change: a reload in flight on this node cannot
    // put the retired key back over it.
    let change = admin.app().change_keys().await;
    let rotated = admin
        .settings()
        .key_source
        .rotate(algorithm, retention, admin.now().as_secs())
        .await
        .map_err(|error| internal("rotated", &error))?;
    change.install(rotated.clone());
    drop(change);
    admin
        .record(AdminEvent::new(
            "keys.rotated",
            None,
            admin.now(),
            serde_json::json!({"active_kid": rotated.active_kid()}),
        ))
        .await;
    Ok(Json(RotatedKeys {
        active_kid: rotated.active_kid().to_owned(),
        algorithm: rotated.algorithm().as_str().to_owned(),
        kids: rotated.kids(),
    }))
}

/// `POST /admin/v1/keys/prune`
#[utoipa::path(post, path = "/admin/v1/keys/prune", tag = "admin",
    security(("admin_key" = [])),
    description = "Removes the retired signing keys no pass can still need: a key goes once \
        the longest pass lifetime (every room's `session_ttl`, passes issued by hand, OpenID \
        Connect tokens) plus the verification leeway and clock skew has passed since it \
        stopped signing. The active key is never removed. Removed keys leave the JWKS on \
        every node within a second. Nodes also prune by themselves every ten minutes.",
    responses(
        (status = 200, description = "Which keys were removed, and which were kept and why", body = PrunedKeys),
        problem_answers::WriteRefused, problem_answers::StoreDidNotAnswer,
    ))]
pub(crate) async fn prune_keys(
    _: WriteAccess,
    State(admin): State<AdminState>,
) -> Result<Json<PrunedKeys>, ApiError> {
    let rooms = admin.app().store().rooms().await.map_err(|error| {
        tracing::warn!(%error, "cannot read the rooms to prune keys");
        ApiError::store_unavailable()
    })?;
    let keep_secs = key_retention_secs(&rooms);
    let change = admin.app().change_keys().await;
    let (keys, report) = admin
        .settings()
        .key_source
        .prune(keep_secs, admin.now().as_secs())
        .await
        .map_err(|error| internal("pruned", &error))?;
    change.install(keys);
    drop(change);
    admin
        .record(AdminEvent::new(
            "keys.pruned",
            None,
            admin.now(),
            serde_json::json!({"removed": report.removed}),
        ))
        .await;
    Ok(Json(pruned_keys(report, keep_secs)))
}

fn pruned_keys(report: PruneReport, keep_secs: u64) -> PrunedKeys {
    let at = |secs: u64| Some(format_time(Timestamp(secs.saturating_mul(1000))));
    let kept = report
        .kept
        .into_iter()
        .map(|(kid, because)| match because {
            KeptBecause::Active => KeptKey {
                kid,
                reason: KeptReason::Active,
                retired_at: None,
                prunable_at: None,
            },
            KeptBecause::PassesMayBeValid {
                retired_at,
                prunable_at,
            } => KeptKey {
                kid,
                reason: KeptReason::PassesMayBeValid,
                retired_at: at(retired_at),
                prunable_at: at(prunable_at),
            },
        })
        .collect();
    PrunedKeys {
        removed: report.removed,
        kept,
        keep_secs,
    }
}

fn internal(done: &str, error: &dyn std::fmt::Display) -> ApiError {
    tracing::error!(%error, "the keys could not be {done}");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("the keys could not be {done}"),
    )
}
