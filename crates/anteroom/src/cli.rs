//! The command line: `anteroom`'s subcommands and their arguments, as `main` parses them and
//! `cli_docs` writes them into completions and man pages.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{commands, demo};

/// A self-hosted virtual waiting room and rate-limiting gateway.
#[derive(Debug, Parser)]
#[command(name = "anteroom", version)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Runs the waiting room with a config file.
    Serve {
        /// The config file.
        #[arg(long, short, env = "ANTEROOM_CONFIG", default_value = "anteroom.toml")]
        config: PathBuf,
    },
    /// Checks a config file and reports every problem with its line.
    CheckConfig {
        /// The config file.
        #[arg(long, short, env = "ANTEROOM_CONFIG", default_value = "anteroom.toml")]
        config: PathBuf,
    },
    /// Signing keys.
    Keys {
        #[command(subcommand)]
        command: commands::KeysCommand,
    },
    /// Tokens.
    Token {
        #[command(subcommand)]
        command: commands::TokenCommand,
    },
    /// Starts a self-contained demo: a room, a demo site behind it, and the URLs to try.
    Demo(demo::DemoArgs),
    /// Asks a node's health URL once: exits 0 when it answers 2xx, 1 otherwise (for a
    /// container's HEALTHCHECK).
    Health {
        /// A plain http:// URL, such as http://127.0.0.1:8080/_anteroom/readyz.
        #[arg(long)]
        url: String,
    },
    /// Prints the completion script for a shell.
    Completions {
        /// The shell to complete in.
        shell: clap_complete::Shell,
    },
    /// Prints the manual page (roff), or writes one page per subcommand with --dir.
    Man {
        /// Writes anteroom.1 and a page for every subcommand into this directory instead.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}
