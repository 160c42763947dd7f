//! Thread-per-core serving of the public listener over real sockets: connections spread over
//! the workers' `SO_REUSEPORT` sockets, a port already in use is refused instead of shared,
//! and a shutdown lets a request in flight finish before the workers stop.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use anteroom_edge::{PublicListeners, start_workers};

/// Answers with the name of the thread that served the request.
fn router() -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { std::thread::current().name().unwrap_or("?").to_owned() }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                "slow"
            }),
        )
}

/// One request on its own connection; the body of the answer.
async fn get_body(address: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap()
}

#[tokio::test]
async fn connections_spread_over_the_workers_and_a_shutdown_drains_them() {
    let listeners = PublicListeners::bind("127.0.0.1:0".parse().unwrap(), 2).unwrap();
    assert_eq!(listeners.workers(), 2);
    let address = listeners.local_addr();
    assert_ne!(address.port(), 0);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut workers = start_workers(listeners, router, async {
        let _ = stopped.await;
    })
    .unwrap();

    // The kernel hashes each connection to one of the two sockets: 32 connections all on
    // one worker would happen once in two billion runs.
    let mut threads = BTreeSet::new();
    for _ in 0..32 {
        threads.insert(get_body(address, "/").await);
    }
    assert_eq!(
        threads,
        BTreeSet::from([
            "anteroom-worker-0".to_owned(),
            "anteroom-worker-1".to_owned()
        ])
    );

    // A request in flight when the shutdown comes is answered; then the port is free.
    let slow = tokio::spawn(get_body(address, "/slow"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), workers.drained())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(slow.await.unwrap(), "slow");
    workers.stop().await;
    assert!(TcpStream::connect(address).await.is_err());
}

#[tokio::test]
async fn a_port_in_use_is_refused_not_shared() {
    let first = PublicListeners::bind("127.0.0.1:0".parse().unwrap(), 2).unwrap();
    let error = PublicListeners::bind(first.local_addr(), 2).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse);
    let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let error = PublicListeners::bind(plain.local_addr().unwrap(), 1).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse);
}
