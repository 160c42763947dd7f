//! Keeps a node's signing keys in step with where they are kept, shared with other nodes (a
//! key directory on a shared disk, or the store's Redis), and prunes the keys no pass can need
//! any more.
//!
//! A key rotation (`POST /admin/v1/keys/rotate` on any node, or `anteroom keys generate`)
//! adds a key and changes which one is active. Every node looks once a second (a directory's
//! listing, or the version of the entries in Redis) and loads the key set again when it
//! changed, so passes signed with the new key verify everywhere, and every node's JWKS lists
//! it, within about a second. A pass whose `kid` this node does not know yet makes it look at
//! once (at most once a second, so unknown `kid`s sent on purpose cannot turn into reads per
//! request).
//!
//! At start-up and every `KEY_PRUNE_INTERVAL` each node prunes: a retired key leaves the set once no pass
//! it signed can still be valid ([`key_retention_secs`] of the rooms in the store). Pruning is
//! idempotent, so nodes doing it at once only repeat each other.

use std::time::Duration;

use tokio::time::Instant;

use crate::AppState;
use crate::key_source::{KEY_DIR_CHECK_INTERVAL, key_retention_secs};

/// How often each node prunes keys whose passes have all expired.
pub(crate) const KEY_PRUNE_INTERVAL: Duration = Duration::from_secs(600);

/// Looks at the keys every `KEY_DIR_CHECK_INTERVAL` and prunes them at start-up and every
/// `KEY_PRUNE_INTERVAL` for as long as the node runs. Does nothing on a node built without
/// a key source.
pub async fn follow_key_dir(app: AppState) {
    let Some(reload) = app.key_reload() else {
        return;
    };
    // The start-up already loaded the keys: this look only records what it saw.
    if let Ok(fingerprint) = reload.source.fingerprint().await {
        reload.seen.lock().fingerprint = Some(fingerprint);
    }
    let mut interval = tokio::time::interval(KEY_DIR_CHECK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first prune comes with the first look, at start-up.
    let mut pruned_at: Option<Instant> = None;
    loop {
        interval.tick().await;
        if pruned_at.is_none_or(|at| at.elapsed() >= KEY_PRUNE_INTERVAL) {
            pruned_at = Some(Instant::now());
            prune(&app).await;
        }
        reload_if_changed(&app).await;
    }
}

/// Prunes the keys no pass can need any more, with the rooms in the store; logs what went.
async fn prune(app: &AppState) {
    let Some(reload) = app.key_reload() else {
        return;
    };
    let rooms = match app.store().rooms().await {
        Ok(rooms) => rooms,
        Err(error) => {
            tracing::warn!(%error, "cannot read the rooms to prune keys; trying again later");
            return;
        }
    };
    let keep_secs = key_retention_secs(&rooms);
    let change = app.change_keys().await;
    match reload.source.prune(keep_secs, app.now().as_secs()).await {
        Ok((keys, report)) if !report.removed.is_empty() => {
            tracing::info!(removed = ?report.removed, kept = keys.kids().len(), "pruned signing keys no pass can need");
            change.install(keys);
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "cannot prune the signing keys; trying again later"),
    }
}

/// Loads the key set again if it changed and no look happened in the last interval. Returns
/// whether the keys were replaced.
pub async fn reload_if_changed(app: &AppState) -> bool {
    let Some(reload) = app.key_reload() else {
        return false;
    };
    if !reload.take_turn() {
        return false;
    }
    // The look and the load are one change: a rotation on this node waits for it, or it for
    // the rotation, so keys read before a rotation are never installed after it.
    let change = app.change_keys().await;
    let fingerprint = match reload.source.fingerprint().await {
        Ok(fingerprint) => fingerprint,
        Err(error) => {
            tracing::warn!(%error, keys = %reload.source.describe(), "cannot look at the signing keys; keeping the loaded ones");
            return false;
        }
    };
    if reload.seen.lock().fingerprint.as_ref() == Some(&fingerprint) {
        return false;
    }
    match reload.source.load().await {
        Ok(keys) => {
            tracing::info!(
                active_kid = keys.active_kid(),
                kids = keys.kids().len(),
                "signing keys reloaded"
            );
            change.install(keys);
            reload.seen.lock().fingerprint = Some(fingerprint);
            true
        }
        // A rotation on another node may be half written to a directory: the next look tries
        // again.
        Err(error) => {
            tracing::warn!(%error, "the signing keys changed but do not load; keeping the loaded ones");
            false
        }
    }
}
