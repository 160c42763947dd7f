//! The small commands: `keys generate`, `keys hash`, `token inspect`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use sha2::{Digest, Sha256};

use anteroom_core::Clock;
use anteroom_core::duration::parse_duration;
use anteroom_token::{KeySet, SigningAlgorithm};

use crate::BadConfig;
use crate::clock::SystemClock;

/// `anteroom keys …`
#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Creates a signing key (the first one, or a new active one: older keys keep verifying
    /// the passes they signed until those expire). A rotation rotates the ticket secret too.
    Generate {
        /// The key directory.
        #[arg(long, default_value = "data/keys")]
        dir: PathBuf,
        /// EdDSA, ES256, RS256 or HS256.
        #[arg(long, default_value = "EdDSA")]
        algorithm: String,
        /// How long the ticket secret a rotation retires keeps verifying the tickets it made
        /// (as `[keys] ticket_secret_retention`).
        #[arg(long, default_value = "24h")]
        ticket_secret_retention: String,
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
        /// The key directory.
        #[arg(long, default_value = "data/keys")]
        keys: PathBuf,
    },
}

#[allow(clippy::print_stdout)]
pub(crate) fn keys(command: KeysCommand) -> anyhow::Result<ExitCode> {
    match command {
        KeysCommand::Generate {
            dir,
            algorithm,
            ticket_secret_retention,
        } => {
            let algorithm: SigningAlgorithm = algorithm
                .parse()
                .map_err(|error| BadConfig(format!("--algorithm: {error}")))?;
            let retention = parse_duration(&ticket_secret_retention)
                .map_err(|error| BadConfig(format!("--ticket-secret-retention: {error}")))?;
            let now = SystemClock.now().as_secs();
            let had_keys = KeySet::load(&dir).is_ok();
            let keys = if had_keys {
                KeySet::rotate(&dir, algorithm, retention, now)
            } else {
                KeySet::load_or_generate(&dir, algorithm, now)
            }
            .with_context(|| format!("writing keys in {}", dir.display()))?;
            println!(
                "active key {} ({}) in {}",
                keys.active_kid(),
                keys.algorithm().as_str(),
                dir.display()
            );
            if had_keys {
                println!(
                    "older keys stay for verification: {}",
                    keys.kids().join(", ")
                );
                println!(
                    "the ticket secret rotated; the retired one verifies for {ticket_secret_retention}"
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        KeysCommand::Hash { key } => {
            let digest = Sha256::digest(key.trim().as_bytes());
            let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
            println!("sha256:{hex}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[allow(clippy::print_stdout)]
pub(crate) fn token(command: TokenCommand) -> anyhow::Result<ExitCode> {
    match command {
        TokenCommand::Inspect { token, keys } => {
            let key_set = KeySet::load(&keys)
                .with_context(|| format!("loading keys from {}", keys.display()))?;
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
