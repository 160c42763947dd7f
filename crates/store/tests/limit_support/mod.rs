//! What the rate-limit tests share: a real `redis-server` on a free port (stopped when
//! dropped), and parameter helpers.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anteroom_core::ratelimit::{Algorithm, LimitParams};

/// A `redis-server` process with no persistence, killed on drop.
pub struct RedisServer {
    port: u16,
    child: Child,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers. Panics with a clear
    /// message when `redis-server` is not installed (`scripts/test` installs it).
    pub fn start() -> RedisServer {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = match Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                Ok(child) => child,
                Err(error) => panic!(
                    "cannot run redis-server ({error}): the rate-limit tests need it; \
                     install the Debian package redis-server (scripts/test does)"
                ),
            };
            let mut server = RedisServer { port, child };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if server.ping() {
                    return server;
                }
                if let Ok(Some(status)) = server.child.try_wait() {
                    last_error = format!("redis-server on port {port} exited: {status}");
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if last_error.is_empty() {
                last_error = format!("redis-server on port {port} did not answer PING");
            }
        }
        panic!("{last_error}");
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A plain synchronous connection, for looking at what the store wrote.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_millis(200))
        else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut connection).is_ok()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parameters with no burst, delay or nodelay.
pub fn params(algorithm: Algorithm, limit: u64, period: Duration) -> LimitParams {
    LimitParams {
        algorithm,
        limit,
        period,
        burst: 0,
        delay: 0,
        nodelay: false,
    }
}

/// How many requests of cost 1 each algorithm allows at once from a fresh key: the token
/// bucket and GCRA their capacity, the leaky bucket the one at the rate plus its burst, the
/// windows their limit.
pub fn capacity(params: &LimitParams) -> u64 {
    match params.algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra => params.capacity(),
        Algorithm::LeakyBucket => params.burst + 1,
        Algorithm::FixedWindow | Algorithm::SlidingLog | Algorithm::SlidingWindow => params.limit,
    }
}
