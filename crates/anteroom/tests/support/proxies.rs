//! Real proxies running the snippets shipped in `deploy/` (ports and paths changed, one
//! process each, stopped when dropped): nginx (`auth_request`) and Caddy (`forward_auth`),
//! both Debian packages that `scripts/test` installs.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// The shipped snippet `name` of `deploy/`.
fn shipped(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// Waits until something listens on `port`, or panics with `log()` when `child` exited.
fn wait_listening(child: &mut Child, port: u16, what: &str, log: impl Fn() -> String) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited ({status}): {}", log());
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{what} not listening: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

const NGINX: &str = "/usr/sbin/nginx";

/// nginx running in the foreground on its own prefix; stopped when dropped.
pub(crate) struct Nginx {
    child: Child,
    pub(crate) port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    pub(crate) fn start(anteroom_port: u16, site_port: u16) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let path = dir.path().display().to_string();
        let shipped = shipped("nginx.conf");
        let running_as_root = std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(2) == Some("0"));
        let user = if running_as_root { "user root;\n" } else { "" };
        let config = shipped
            .replace(
                "worker_processes auto;",
                // One process and no workers: killing it leaves nothing behind.
                &format!("{user}daemon off;\nmaster_process off;\npid {path}/nginx.pid;\nerror_log {path}/error.log warn;\nworker_processes 1;"),
            )
            .replace(
                "http {",
                &format!("http {{\n    access_log off;\n    client_body_temp_path {path}/body;\n    proxy_temp_path {path}/proxy;\n    fastcgi_temp_path {path}/fastcgi;\n    uwsgi_temp_path {path}/uwsgi;\n    scgi_temp_path {path}/scgi;"),
            )
            .replace("listen 80;", &format!("listen 127.0.0.1:{port};"))
            .replace("server 127.0.0.1:8080;", &format!("server 127.0.0.1:{anteroom_port};"))
            .replace("server 127.0.0.1:3000;", &format!("server 127.0.0.1:{site_port};"));
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config).unwrap();
        let child = Command::new(NGINX)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx (Debian package `nginx`; scripts/test installs it)");
        let mut nginx = Nginx { child, port, dir };
        let log_path = nginx.dir.path().join("error.log");
        wait_listening(&mut nginx.child, port, "nginx", || {
            std::fs::read_to_string(&log_path).unwrap_or_default()
        });
        nginx
    }

    pub(crate) fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

const CADDY: &str = "/usr/bin/caddy";

/// Caddy running the shipped `deploy/Caddyfile` in the foreground; stopped when dropped.
pub(crate) struct Caddy {
    child: Child,
    pub(crate) port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Caddy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Caddy {
    /// Caddy on a free port of 127.0.0.1 (plain HTTP) in front of the site at `site_port`,
    /// asking anteroom at `anteroom_port`.
    pub(crate) fn start(anteroom_port: u16, site_port: u16) -> Caddy {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = shipped("Caddyfile")
            .replace(
                "shop.example {",
                &format!(
                    "{{\n\tadmin off\n\tauto_https off\n\tstorage file_system {}\n}}\n\nhttp://127.0.0.1:{port} {{",
                    dir.path().display()
                ),
            )
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{anteroom_port}"))
            .replace("127.0.0.1:3000", &format!("127.0.0.1:{site_port}"));
        let file = dir.path().join("Caddyfile");
        std::fs::write(&file, config).unwrap();
        let log = dir.path().join("caddy.log");
        let child = Command::new(CADDY)
            .arg("run")
            .arg("--config")
            .arg(&file)
            .arg("--adapter")
            .arg("caddyfile")
            .env("HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start caddy (Debian package `caddy`; scripts/test installs it)");
        let mut caddy = Caddy { child, port, dir };
        wait_listening(&mut caddy.child, port, "caddy", || {
            std::fs::read_to_string(&log).unwrap_or_default()
        });
        caddy
    }

    /// What Caddy logged.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("caddy.log")).unwrap_or_default()
    }
}
