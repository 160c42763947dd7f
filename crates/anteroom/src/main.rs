//! The `anteroom` binary: command-line parsing and wiring, nothing more.
//!
//! `run()` picks the exit code: 0 on success, 64 for a bad configuration (EX_USAGE), 1 for
//! anything else.
//!
//! `main` first turns transparent huge pages off for the process (and mimalloc is built with
//! `no_thp`): with them, the sparsely touched memory of idle event streams was backed by 2 MiB
//! pages (docs/benchmarks.md, "SSE soak").

mod admin;
mod bad_config;
mod cli;
mod cli_docs;
mod clock;
mod commands;
mod demo;
mod health;
mod keys;
mod node;
mod process;
mod reload;
mod serve;
mod store;

use std::process::ExitCode;

use clap::Parser;

use bad_config::BadConfig;
use cli::{Cli, Command};
use process::{runtime, shutdown_signal};

/// mimalloc: a request allocates many small short-lived buffers, which glibc's allocator
/// serves with more lock traffic and fragmentation.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for a bad configuration or bad arguments (EX_USAGE).
const EXIT_BAD_CONFIG: u8 = 64;

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
            runtime()?.block_on(node::serve(loaded, config))?;
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
