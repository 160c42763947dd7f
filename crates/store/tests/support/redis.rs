//! Real Redis for tests: a standalone `redis-server`, or a 3-master Redis Cluster made with
//! `redis-cli --cluster create`, on free loopback ports.
//!
//! Each server runs under a small shell that holds a pipe from the test process: when the
//! handle is dropped, or the test process exits in any way (a static is never dropped), the
//! pipe closes and the shell stops the server and deletes its directory. Servers write no
//! snapshots or append-only files.

use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;

/// Runs the server in the background, waits for the test process to close our stdin, then
/// stops the server and removes its directory.
const WATCHDOG: &str = r#"redis-server "$@" </dev/null >/dev/null 2>&1 &
server=$!
cat >/dev/null
kill "$server" 2>/dev/null
wait "$server"
rm -rf "$ANTEROOM_TEST_REDIS_DIR""#;

/// One `redis-server` process.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    watchdog: Child,
}

impl RedisServer {
    /// A standalone server.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A server with extra arguments; retried on other ports if the chosen ones were taken.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        require_redis();
        let mut failures = Vec::new();
        for _ in 0..5 {
            let port = free_port_pair();
            match RedisServer::try_start(port, extra) {
                Ok(server) => return server,
                Err(failure) => failures.push(failure),
            }
        }
        panic!("redis-server did not start:\n{}", failures.join("\n---\n"));
    }

    /// A server on `port` again (after this handle was dropped), for restart tests.
    pub fn restart_on(port: u16) -> RedisServer {
        RedisServer::try_start(port, &[]).unwrap_or_else(|failure| panic!("{failure}"))
    }

    fn try_start(port: u16, extra: &[&str]) -> Result<RedisServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("anteroom-redis-")
            .tempdir()
            .unwrap()
            .keep();
        let log = dir.join("redis.log");
        let port_text = port.to_string();
        let mut args: Vec<&str> = vec![
            "--port",
            &port_text,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.to_str().unwrap(),
            "--logfile",
            log.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("redis-watchdog")
            .args(&args)
            .env("ANTEROOM_TEST_REDIS_DIR", &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = RedisServer {
            port,
            dir,
            watchdog,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if cli(port, &["PING"]).is_some_and(|answer| answer.trim() == "PONG") {
                return Ok(server);
            }
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            if Instant::now() > deadline || log.contains("# Could not create server") {
                server.stop();
                return Err(format!("redis-server on port {port}:\n{log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs a `redis-cli` command against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args).unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    fn stop(&mut self) {
        drop(self.watchdog.stdin.take());
        let _ = self.watchdog.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Three masters holding all 16 384 slots, no replicas.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers and joins them into one cluster.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(addresses.iter().map(String::as_str));
        create.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        let output = Command::new("redis-cli").args(&create).output().unwrap();
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            loop {
                let info = node.cli(&["CLUSTER", "INFO"]);
                if info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && info.contains("cluster_known_nodes:3")
                {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "cluster did not become ready:\n{info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        RedisCluster { nodes }
    }

    /// The nodes' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}

/// One standalone server shared by every test of this process (tests keep apart by key
/// prefix, see [`unique_prefix`]).
pub fn shared_server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

/// One cluster shared by every test of this process.
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}

/// A key prefix no other store of this test process uses.
pub fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "anteroom-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn require_redis() {
    for tool in ["redis-server", "redis-cli"] {
        if let Err(error) = Command::new(tool).arg("--version").output() {
            panic!(
                "{tool} is needed by the Redis store tests and could not be run ({error}): \
                 install Debian's redis-server package (scripts/test does it)"
            );
        }
    }
}

/// A port `P` below the ephemeral range whose cluster bus port `P + 10000` is free too.
fn free_port_pair() -> u16 {
    let mut rng = rand::thread_rng();
    loop {
        let port: u16 = rng.gen_range(10_000..22_000);
        let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
}

fn cli(port: u16, args: &[&str]) -> Option<String> {
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut answer = String::new();
    child.stdout.take()?.read_to_string(&mut answer).ok()?;
    child.wait().ok()?.success().then_some(answer)
}
