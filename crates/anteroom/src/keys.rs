//! The configured signing keys: where they are (`[keys] dir`, or the store's Redis with
//! `storage = "redis"`), opened with the key-encryption key from `kek_file`, and loaded or
//! made at start-up.

use anteroom_api::{KeySource, KeySourceError};
use anteroom_core::config::{Config, StoreConfig};
use anteroom_token::{KeyEncryptionKey, KeySet, SigningAlgorithm, TokenError};

use crate::BadConfig;
use crate::store::redis_config;

/// Where the configured keys are; reads and checks the key-encryption key file, so a missing
/// or malformed one is a configuration error before anything starts.
pub(crate) fn key_source(config: &Config) -> Result<KeySource, BadConfig> {
    let Some(shared) = &config.keys.shared else {
        return Ok(KeySource::Dir(config.keys.dir.clone()));
    };
    let StoreConfig::Redis {
        urls,
        cluster,
        timeout,
    } = &config.store
    else {
        // The config parser refuses `storage = "redis"` without a Redis store.
        return Err(BadConfig(
            "[keys] storage = \"redis\" needs [store] backend = \"redis\"".into(),
        ));
    };
    let path = &shared.kek_file;
    let text = std::fs::read_to_string(path).map_err(|error| {
        BadConfig(format!(
            "[keys] kek_file: cannot read {}: {error}",
            path.display()
        ))
    })?;
    let kek = KeyEncryptionKey::from_text(&text)
        .map_err(|error| BadConfig(format!("[keys] kek_file {}: {error}", path.display())))?;
    KeySource::redis(&redis_config(urls, *cluster, *timeout), kek)
        .map_err(|error| BadConfig(format!("[store] redis for the signing keys: {error}")))
}

/// The configured algorithm.
pub(crate) fn algorithm(config: &Config) -> Result<SigningAlgorithm, BadConfig> {
    config
        .keys
        .algorithm
        .parse()
        .map_err(|error| BadConfig(format!("[keys] algorithm: {error}")))
}

/// Loads the keys at `source`, making the first ones when there are none. Keys sealed with
/// another key-encryption key stop the start as a configuration error: making new keys
/// instead would split the nodes into two sets that do not verify each other's passes.
pub(crate) async fn load_or_generate(
    source: &KeySource,
    config: &Config,
    now_secs: u64,
) -> anyhow::Result<KeySet> {
    let algorithm = algorithm(config)?;
    match source.load_or_generate(algorithm, now_secs).await {
        Ok(keys) => Ok(keys),
        Err(KeySourceError::Token(error @ TokenError::Unsealable { .. })) => {
            Err(BadConfig(format!(
                "[keys] kek_file: {error}; start with the key-encryption key the other nodes use"
            ))
            .into())
        }
        Err(error) => Err(anyhow::Error::new(error)
            .context(format!("loading signing keys from {}", source.describe()))),
    }
}
