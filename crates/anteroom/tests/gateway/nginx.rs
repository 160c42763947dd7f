//! Real nginx with `auth_request` against `/_anteroom/verify` (SPEC §7.3), configured with the
//! shipped `deploy/nginx.conf` (ports and paths changed, one process): allow, the waiting redirect, and
//! the rate limit.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use super::support::{Site, free_port};
use super::upstream::Upstream;
use super::{Jar, client, echoed};

const NGINX: &str = "/usr/sbin/nginx";

/// nginx running in the foreground on its own prefix; stopped when dropped.
struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    fn start(anteroom_port: u16, site_port: u16) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let path = dir.path().display().to_string();
        let shipped = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/nginx.conf"
        ))
        .unwrap();
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
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = nginx.child.try_wait().unwrap() {
                panic!("nginx exited ({status}): {}", nginx.error_log());
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "nginx not listening"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_allows_sends_to_the_waiting_page_and_rate_limits() {
    let upstream = Upstream::start().await;
    let site = Site::new();
    site.write_config(
        "EdDSA",
        r#"
[server]
trusted_proxies = ["127.0.0.1/32"]

[[room]]
id = "shop"
max_active = 1

[[rate_limit]]
name = "search"
key = ["ip"]
limit = 2
period = "1m"

[[route]]
paths = ["/search/**"]
rate_limits = ["search"]

[[route]]
paths = ["/**"]
rooms = ["shop"]
"#,
    );
    // [server] is already written by the helper: fold the trusted proxy into it.
    let path = site.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text
        .replacen(
            "[server]\n",
            "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
            1,
        )
        .replace(
            "\n[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[[room]]",
            "\n[[room]]",
        );
    std::fs::write(&path, text).unwrap();
    let mut server = site.start();
    let client = client();
    server.wait_ready(&client).await;
    let nginx = Nginx::start(server.port, upstream.addr.port());
    let base = format!("http://127.0.0.1:{}", nginx.port);
    let get = |path: &str, jar: &Jar| {
        let mut request = client
            .get(format!("{base}{path}"))
            .header("accept", "text/html");
        if let Some(cookies) = jar.header() {
            request = request.header("cookie", cookies);
        }
        request.send()
    };

    // Allow: the room has room, the visitor is admitted on the spot and nginx proxies.
    let mut first = Jar::default();
    let response = get("/products", &first).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "log: {}",
        nginx.error_log()
    );
    first.absorb(response.headers());
    assert!(
        first.get("anteroom_p_shop").is_some(),
        "the pass cookie came through nginx"
    );
    assert!(echoed(response).await.is_some());
    let response = get("/products", &first).await.unwrap();
    assert!(
        echoed(response).await.is_some(),
        "the pass lets the visitor through"
    );

    // Waiting: the room is full; nginx turns the 401 into a redirect to the waiting page.
    let mut second = Jar::default();
    let response = get("/products?id=3", &second).await.unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    // nginx makes the location absolute.
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        location.ends_with("/_anteroom/wait/shop?return=/products%3Fid%3D3"),
        "{location}"
    );
    second.absorb(response.headers());
    // The waiting page itself is served through nginx.
    let page = get("/_anteroom/wait/shop?return=/products", &second)
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("<html"));

    // Rate limited: the third search in a minute gets 429 with the rate-limit headers.
    for _ in 0..2 {
        let response = get("/search/q", &Jar::default()).await.unwrap();
        assert!(echoed(response).await.is_some());
    }
    let response = get("/search/q", &Jar::default()).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "log: {}",
        nginx.error_log()
    );
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    assert!(response.headers().contains_key("ratelimit-policy"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "rate_limited");
}

/// The forms Envoy (`path_prefix`: the visitor's path appended, its method), Traefik and Caddy
/// (`X-Forwarded-Uri`, `X-Forwarded-Method`) send, and the redirect answer they pass on as is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reads_every_proxy_s_form_and_can_answer_with_the_redirect() {
    let site = Site::new();
    site.write_config(
        "EdDSA",
        "[[room]]\nid = \"shop\"\nmax_active = 1\n\n[[route]]\npaths = [\"/**\"]\nrooms = [\"shop\"]\n",
    );
    let mut server = site.start();
    let client = client();
    server.wait_ready(&client).await;
    let verify = format!("{}/_anteroom/verify", server.url());

    // Envoy: POST /_anteroom/verify/cart?x=1 is the visitor's POST /cart?x=1. Admitted.
    let response = client
        .post(format!("{verify}/cart?x=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut holder = Jar::default();
    holder.absorb(response.headers());
    assert!(holder.get("anteroom_p_shop").is_some());

    // Traefik / Caddy: headers, and the redirect answers for navigations: held back, the
    // waiting page; admitted on the spot, back to the page with the pass.
    let response = client
        .get(format!("{verify}?wait=redirect"))
        .header("x-forwarded-uri", "/cart")
        .header("accept", "text/html")
        .header(
            "cookie",
            format!("anteroom_p_shop={}", holder.get("anteroom_p_shop").unwrap()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "a valid pass, nothing to set"
    );
    let response = client
        .get(format!("{verify}?wait=redirect"))
        .header("x-forwarded-uri", "/cart")
        .header("x-forwarded-method", "GET")
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(
        response.headers()["location"],
        "/_anteroom/wait/shop?return=/cart"
    );
    // The same from an API client: 429 waiting_room.
    let response = client
        .get(&verify)
        .header("x-anteroom-verify", "redirect")
        .header("x-forwarded-uri", "/api/cart")
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "waiting_room");

    // Without a URI anywhere: 400.
    let response = client.get(&verify).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}
