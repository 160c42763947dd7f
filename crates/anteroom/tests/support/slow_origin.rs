//! An origin that answers each request after a delay and records, for each, whether it
//! answered or the node closed the connection first (the node dropped the request).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The body of the origin's answers.
pub(crate) const SLOW_BODY: &str = "slow answer";

/// What became of one request the origin read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Answered after the delay.
    Answered,
    /// The node closed the connection before the delay was over.
    ClosedBefore,
}

/// The origin (see the module documentation); it stops when the test's runtime does.
pub(crate) struct SlowOrigin {
    pub(crate) port: u16,
    fates: Arc<Mutex<Vec<Fate>>>,
}

impl SlowOrigin {
    /// Listens on a free port; every request is answered `delay` after its head came.
    pub(crate) async fn start(delay: Duration) -> SlowOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let fates = Arc::new(Mutex::new(Vec::new()));
        let recorded = fates.clone();
        tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                tokio::spawn(serve(connection, delay, recorded.clone()));
            }
        });
        SlowOrigin { port, fates }
    }

    /// `http://127.0.0.1:<port>`.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The fates of the first `count` requests, waiting up to `limit` for them.
    pub(crate) async fn fates(&self, count: usize, limit: Duration) -> Vec<Fate> {
        let started = Instant::now();
        loop {
            let fates = self.fates.lock().unwrap().clone();
            if fates.len() >= count || started.elapsed() > limit {
                return fates;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Serves one connection's requests (heads only, no bodies) one after the other.
async fn serve(mut connection: TcpStream, delay: Duration, fates: Arc<Mutex<Vec<Fate>>>) {
    let mut input = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(at) = input.windows(4).position(|window| window == b"\r\n\r\n") {
                break at + 4;
            }
            match connection.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => input.extend_from_slice(&buffer[..read]),
            }
        };
        input.drain(..end);
        // A read that ends before the answer is due is the node closing the connection.
        let due = tokio::time::Instant::now() + delay;
        let closed = loop {
            tokio::select! {
                () = tokio::time::sleep_until(due) => break false,
                read = connection.read(&mut buffer) => match read {
                    Ok(0) | Err(_) => break true,
                    Ok(read) => input.extend_from_slice(&buffer[..read]),
                },
            }
        };
        if closed {
            fates.lock().unwrap().push(Fate::ClosedBefore);
            return;
        }
        fates.lock().unwrap().push(Fate::Answered);
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{SLOW_BODY}",
            SLOW_BODY.len()
        );
        if connection.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}
