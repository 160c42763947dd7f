//! `anteroom-bench`: the peers and tools anteroom's benchmarks measure against.
//!
//! `trivial-server` is the baseline of the HTTP benchmarks (`bench/http-throughput`): an axum
//! handler on the same runtime settings as anteroom, answering a small JSON body with no work
//! behind it. anteroom's join and status are reported as a ratio to it.
//!
//! `sse-soak` holds thousands of waiting visitors' event streams open on one anteroom process
//! and measures how fast a serving change reaches all of them, and what they cost the server
//! (`bench/sse-soak`).
//!
//! `crowd` sends a flash crowd of virtual visitors through one or several anteroom nodes to an
//! origin it runs itself, checks the room's invariants from the outside and writes a report
//! with charts (`bench/crowd-*`).

mod crowd;
mod event_stream;
mod sse_soak;
mod stream_followers;

use std::net::SocketAddr;
use std::process::ExitCode;

use axum::Json;
use axum::routing::{get, post};
use clap::{Parser, Subcommand};

/// The same allocator as anteroom, so the comparison measures the handlers, not allocators.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "anteroom-bench",
    about = "Benchmark peers and load tools for anteroom"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serves a trivial JSON handler on GET and POST `/trivial` (the HTTP benchmarks' peer).
    TrivialServer {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8090")]
        listen: SocketAddr,
    },
    /// Holds many SSE waiters on one anteroom and measures update delay, memory and CPU.
    SseSoak(sse_soak::SseSoakArgs),
    /// One process holding a share of `sse-soak`'s streams (started by it).
    #[command(hide = true)]
    SseSoakStreams(stream_followers::FollowerArgs),
    /// Runs a flash crowd of virtual visitors from a scenario file and writes a report.
    Crowd(crowd::CrowdArgs),
    /// One worker process of `crowd` (started by it).
    #[command(hide = true)]
    CrowdWorker(crowd::WorkerArgs),
}

fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().command {
        Command::TrivialServer { listen } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(trivial_server(listen))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::SseSoak(args) => sse_soak::run(args).map(|()| ExitCode::SUCCESS),
        Command::SseSoakStreams(args) => stream_followers::run(args).map(|()| ExitCode::SUCCESS),
        Command::Crowd(args) => crowd::run(args),
        Command::CrowdWorker(args) => crowd::run_worker(args),
    }
}

async fn trivial_server(listen: SocketAddr) -> anyhow::Result<()> {
    let router = axum::Router::new().route("/trivial", get(trivial).merge(post(trivial)));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    axum::serve(listener, router).await?;
    Ok(())
}

/// A body of the same shape and about the size of a status answer, built per request.
async fn trivial() -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "room": "bench", "state": "waiting", "position": 1234, "ahead": 57,
        "serving": 1177, "waiting": 9000, "eta_seconds": 42, "next_poll_ms": 2000
    }))
}
