//! The small commands: `keys generate`, `keys prune`, `keys hash`, `token inspect`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use sha2::{Digest, Sha256};

use std::time::Duration;

use anteroom_api::{KeySource, key_retention_secs};
use anteroom_core::config::{Config, format_time};
use anteroom_core::duration::{format_duration, parse_duration};
use anteroom_core::{Clock, Timestamp};
use anteroom_token::{KeptBecause, SigningAlgorithm};

use crate::BadConfig;
use crate::clock::SystemClock;
use crate::serve::load_config;

/// `anteroom keys …`
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Creates a signing key (the first one, or a new active one: older keys keep verifying
    /// the passes they signed until those expire). A rotation rotates the ticket secret too.
    Generate {
        /// The key directory (when no --config names where the keys are).
        #[arg(long, default_value = "data/keys", conflicts_with = "config")]
        dir: PathBuf,
        /// A config file: its `[keys]` say where the keys are (a directory, or Redis), the
        /// algorithm and the ticket secret retention, unless given here.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// EdDSA, ES256, RS256 or HS256 [default: the config's, else EdDSA].
        #[arg(long)]
        algorithm: Option<String>,
        /// How long the ticket secret a rotation retires keeps verifying the tickets it made
        /// (as `[keys] ticket_secret_retention`) [default: the config's, else 24h].
        #[arg(long)]
        ticket_secret_retention: Option<String>,
    },
    /// Removes the retired keys no pass can still need (they leave the JWKS) and says which
    /// it removed and which it kept and why. A key is kept for the longest pass lifetime
    /// (the config's rooms, passes issued by hand, OpenID Connect tokens) plus leeway and
    /// clock skew after it stopped signing; the active key is always kept.
    Prune {
        /// The config file: where the keys are, and the rooms whose passes count.
        #[arg(long, short, env = "ANTEROOM_CONFIG", default_value = "anteroom.toml")]
        config: PathBuf,
    },
    /// Prints the `sha256:<hex>` form of an API key, for `[auth]` in the config file.
    Hash {
        /// The key as clients will send it.
        key: String,
    },
}

/// `anteroom token …`
#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Decodes a pass and says whether its signature verifies with the key directory.
    Inspect {
        /// The pass (a JWT).
        token: String,
        /// The key directory (when no --config names where the keys are).
        #[arg(long, default_value = "data/keys", conflicts_with = "config")]
        keys: PathBuf,
        /// A config file: its `[keys]` say where the keys are (a directory, or Redis).
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

#[allow(clippy::print_stdout)]
pub(crate) fn keys(command: KeysCommand) -> anyhow::Result<ExitCode> {
    match command {
        KeysCommand::Generate {
            dir,
            config,
            algorithm,
            ticket_secret_retention,
        } => {
            let config = config.as_deref().map(load_config).transpose()?;
            let settings =
                GenerateSettings::new(config.as_ref(), algorithm, ticket_secret_retention)?;
            let source = match &config {
                Some(config) => crate::keys::key_source(config)?,
                None => KeySource::Dir(dir),
            };
            crate::runtime()?.block_on(generate(&source, &settings))
        }
        KeysCommand::Prune { config } => {
            let config = load_config(&config)?;
            let source = crate::keys::key_source(&config)?;
            crate::runtime()?.block_on(prune(&source, &config))
        }
        KeysCommand::Hash { key } => {
            let digest = Sha256::digest(key.trim().as_bytes());
            let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
            println!("sha256:{hex}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What `keys generate` makes: the arguments, else the config's `[keys]`, else the defaults.
struct GenerateSettings {
    algorithm: SigningAlgorithm,
    retention: Duration,
    retention_text: String,
}

impl GenerateSettings {
    fn new(
        config: Option<&Config>,
        algorithm: Option<String>,
        retention: Option<String>,
    ) -> Result<GenerateSettings, BadConfig> {
        let keys = config.map(|config| config.keys.clone()).unwrap_or_default();
        let algorithm: SigningAlgorithm = algorithm
            .unwrap_or(keys.algorithm)
            .parse()
            .map_err(|error| BadConfig(format!("--algorithm: {error}")))?;
        let (retention, retention_text) = match retention {
            Some(text) => (
                parse_duration(&text)
                    .map_err(|error| BadConfig(format!("--ticket-secret-retention: {error}")))?,
                text,
            ),
            None => (
                keys.ticket_secret_retention,
                format_duration(keys.ticket_secret_retention),
            ),
        };
        Ok(GenerateSettings {
            algorithm,
            retention,
            retention_text,
        })
    }
}

#[allow(clippy::print_stdout)]
async fn generate(source: &KeySource, settings: &GenerateSettings) -> anyhow::Result<ExitCode> {
    let now = SystemClock.now().as_secs();
    let had_keys = source.load().await.is_ok();
    let keys = if had_keys {
        source
            .rotate(settings.algorithm, settings.retention, now)
            .await
    } else {
        source.load_or_generate(settings.algorithm, now).await
    }
    .with_context(|| format!("writing keys in {}", source.describe()))?;
    println!(
        "active key {} ({}) in {}",
        keys.active_kid(),
        keys.algorithm().as_str(),
        source.describe()
    );
    if had_keys {
        println!(
            "older keys stay for verification: {}",
            keys.kids().join(", ")
        );
        println!(
            "the ticket secret rotated; the retired one verifies for {}",
            settings.retention_text
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::print_stdout)]
async fn prune(source: &KeySource, config: &Config) -> anyhow::Result<ExitCode> {
    let keep_secs = key_retention_secs(&config.rooms);
    let (_, report) = source
        .prune(keep_secs, SystemClock.now().as_secs())
        .await
        .with_context(|| format!("pruning keys in {}", source.describe()))?;
    let at = |secs: u64| format_time(Timestamp(secs.saturating_mul(1000)));
    for kid in &report.removed {
        println!("removed {kid}: no pass it signed can still be valid");
    }
    for (kid, because) in &report.kept {
        match because {
            KeptBecause::Active => println!("kept {kid}: active, it signs new passes"),
            KeptBecause::PassesMayBeValid {
                retired_at,
                prunable_at,
            } => println!(
                "kept {kid}: retired at {}, a pass it signed may be valid until {}",
                at(*retired_at),
                at(*prunable_at)
            ),
        }
    }
    println!(
        "keys stay {} after they stop signing (longest pass lifetime, leeway and clock skew)",
        format_duration(Duration::from_secs(keep_secs))
    );
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::print_stdout)]
pub(crate) fn token(command: TokenCommand) -> anyhow::Result<ExitCode> {
    match command {
        TokenCommand::Inspect {
            token,
            keys,
            config,
        } => {
            let source = match config {
                Some(config) => crate::keys::key_source(&load_config(&config)?)?,
                None => KeySource::Dir(keys),
            };
            let key_set = crate::runtime()?
                .block_on(source.load())
                .with_context(|| format!("loading keys from {}", source.describe()))?;
            let inspection = key_set
                .inspect(token.trim(), SystemClock.now().as_secs())
                .map_err(|error| BadConfig(format!("not a token: {error}")))?;
            println!(
                "header: {}",
                serde_json::to_string_pretty(&inspection.header)?
            );
            println!(
                "claims: {}",
                serde_json::to_string_pretty(&inspection.claims)?
            );
            match &inspection.signature {
                Ok(()) => println!("signature: valid"),
                Err(error) => println!("signature: INVALID ({error})"),
            }
            match &inspection.validity {
                Ok(()) => println!("time: valid now"),
                Err(error) => println!("time: {error}"),
            }
            Ok(if inspection.signature.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
    }
}
