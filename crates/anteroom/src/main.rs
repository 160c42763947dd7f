//! The `anteroom` binary: command-line parsing and wiring, nothing more.
//!
//! `run()` picks the exit code: 0 on success, 64 for a bad configuration (EX_USAGE), 1 for
//! anything else.
//!
//! `main` first turns transparent huge pages off for the process (and mimalloc is built with
//! `no_thp`): with them, the sparsely touched memory of idle event streams was backed by 2 MiB
//! pages (docs/benchmarks.md, "SSE soak").

mod admin;
mod cli_docs;
mod clock;
mod commands;
mod demo;
mod health;
mod keys;
mod reload;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc: a request allocates many small short-lived buffers, which glibc's allocator
/// serves with more lock traffic and fragmentation.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A self-hosted virtual waiting room and rate-limiting gateway.
#[derive(Debug, Parser)]
#[command(name = "anteroom", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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

/// Exit code for a bad configuration or bad arguments (EX_USAGE).
const EXIT_BAD_CONFIG: u8 = 64;

/// A failure that has its own exit code.
#[derive(Debug)]
struct BadConfig(String);

impl std::fmt::Display for BadConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadConfig {}

fn main() -> ExitCode {
    keep_memory_in_small_pages();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            if let Some(bad) = error.downcast_ref::<BadConfig>() {
                eprintln!("{bad}");
                return ExitCode::from(EXIT_BAD_CONFIG);
            }
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve { config } => {
            init_tracing();
            raise_open_file_limit();
            let loaded = serve::load_config(&config)?;
            runtime()?.block_on(serve::serve(loaded, config))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig { config } => check_config(&config),
        Command::Keys { command } => commands::keys(command),
        Command::Token { command } => commands::token(command),
        Command::Demo(args) => {
            init_tracing();
            raise_open_file_limit();
            runtime()?.block_on(demo::run(args))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Health { url } => health::probe(&url),
        Command::Completions { shell } => cli_docs::completions(shell),
        Command::Man { dir: None } => cli_docs::man_page(),
        Command::Man { dir: Some(dir) } => cli_docs::man_pages_into(&dir),
    }
}

/// Turns transparent huge pages off for this process, first thing in `main`, before the node
/// allocates its memory (mimalloc is built never to ask for them either). A node holds thousands of small
/// long-lived allocations spread over its heap (every open event stream, every idle
/// connection); on a kernel with THP in `always` or `madvise` mode a sparsely touched 2 MiB
/// range is backed whole, which cost about 8 KiB per event stream (docs/benchmarks.md).
fn keep_memory_in_small_pages() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::thread::disable_transparent_huge_pages(true) {
        // Tracing is not set up yet; the node works the same, with more memory per stream.
        eprintln!("cannot turn transparent huge pages off: {error}");
    }
}

/// Every waiting visitor with an event stream holds a socket: raise the soft limit on open files
/// to the hard limit (many systems start processes at 1,024), as nginx's
/// `worker_rlimit_nofile` does, and say what the node can hold.
fn raise_open_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::info!(open_files = limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "cannot raise the open-file limit"),
    }
}

#[allow(clippy::print_stdout)]
fn check_config(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let loaded = serve::load_config(path)?;
    serve::page_renderer(&loaded)?;
    serve::site_secrets(&loaded)?;
    serve::tls_server(&loaded)?;
    serve::check_upstream_tls(&loaded)?;
    keys::key_source(&loaded)?;
    println!("{}: ok ({} room(s))", path.display(), loaded.rooms.len());
    Ok(ExitCode::SUCCESS)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Logs to stderr; `ANTEROOM_LOG` (or `RUST_LOG`) filters, `ANTEROOM_LOG_FORMAT=json` for
/// one JSON object per line.
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("ANTEROOM_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("ANTEROOM_LOG_FORMAT")
        .is_ok_and(|format| format.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
    }
}

/// Resolves when SIGINT or SIGTERM arrives.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    tracing::info!("shutting down: finishing requests in flight");
}
