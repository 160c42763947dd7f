//! The control panel (SPEC §8.3) in headless Chromium against the real `anteroom serve`: it
//! opens with an admin key, a room's chart moves while visitors join, its upstream latency
//! chart shows the requests a pass holder sends through the gateway, its Pause button stops
//! admission, and revoking that visitor's session from the panel makes the gateway refuse the
//! pass. Saves a screenshot under `<target>/browser-artifacts/panel.png` (and one with the
//! session list open, `panel-sessions.png`); with `ANTEROOM_WRITE_SCREENSHOTS=1`, also the
//! documentation's `docs/screenshots/panel.png`.
//!
//! Chromium is driven through chromedriver on a free port, in its own process group, killed
//! when the test ends. Needs Debian's `chromium` and `chromium-driver` (`scripts/test`
//! installs them).
#![allow(clippy::unwrap_used)]

#[path = "support/admin.rs"]
mod admin_support;
#[path = "support/axe.rs"]
mod axe;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use admin_support::{ADMIN_KEY, AdminClient, AdminSite};

/// How long the whole test may take.
const TEST_LIMIT: Duration = Duration::from_secs(150);

/// How long the page may take to show a change.
const SEEN_WITHIN: Duration = Duration::from_secs(15);

/// One admission a second, one at a time in burst: visitors joining faster than that queue.
/// `/show/…` on the public listener is the room's protected site, proxied to `{origin}`.
const SHOW: &str = r#"
[upstream]
url = "{origin}"

[[room]]
id = "show"
routes = ["/show/**"]
admit_per_minute = 60
admit_burst = 1
session_ttl = "10m"
ticket_idle_ttl = "10m"
"#;

/// What the origin answers: the gateway proxied the request.
const FROM_ORIGIN: &str = "from the origin";

/// The protected site: every answer takes a few milliseconds.
async fn start_origin() -> (String, tokio::task::JoinHandle<()>) {
    let app = Router::new().route(
        "/show/{*rest}",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(8)).await;
            FROM_ORIGIN
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// Whether `pass` gets its holder through the gateway to the origin now.
async fn pass_works(client: &reqwest::Client, base: &str, pass: &str) -> bool {
    let Ok(answer) = client
        .get(format!("{base}/show/item"))
        .header("x-anteroom-pass", pass)
        .send()
        .await
    else {
        return false;
    };
    answer.status() == StatusCode::OK && answer.text().await.is_ok_and(|body| body == FROM_ORIGIN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_panel_charts_a_room_live_and_its_pause_button_stops_admission() {
    tokio::time::timeout(TEST_LIMIT, run())
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {TEST_LIMIT:?}"));
}

async fn run() {
    let (origin, origin_task) = start_origin().await;
    let site = AdminSite::new(&SHOW.replace("{origin}", &origin));
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;

    // One visitor holds a pass and uses the protected site, ten requests a second.
    let (status, issued) = admin
        .admin(
            Method::POST,
            "/rooms/show/passes",
            Some(json!({"uid": "visitor-1"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let pass = issued["pass"].as_str().unwrap().to_owned();
    let session = issued["session"].as_str().unwrap().to_owned();
    assert!(
        pass_works(&client, &server.url(), &pass).await,
        "the pass lets its holder in"
    );
    let browsing = tokio::spawn({
        let (client, base, pass) = (client.clone(), server.url(), pass.clone());
        async move {
            loop {
                pass_works(&client, &base, &pass).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    // Visitors keep joining, three a second, while the test watches.
    let crowd = tokio::spawn({
        let client = client.clone();
        let base = server.url();
        async move {
            for _ in 0..400 {
                let _ = client
                    .post(format!("{base}/_anteroom/v1/rooms/show/join"))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(330)).await;
            }
        }
    });

    let browser = Browser::start().await;
    browser.goto(&format!("{}/", site.admin_url())).await;
    assert!(
        browser.find("#key").await.is_some(),
        "the panel asks for the key"
    );
    // A wrong key is refused and the panel stays closed.
    browser.type_into("#key", "not-the-key").await;
    browser.click("#key-form button").await;
    browser
        .wait_for_text("#login-error", "That key is not valid.")
        .await;
    browser.type_into("#key", ADMIN_KEY).await;
    browser.click("#key-form button").await;
    let card = "article.room[data-room=show]";
    browser.wait_for(&format!("{card}[data-mode=queue]")).await;
    assert_eq!(
        browser.eval("return window.localStorage.length + window.sessionStorage.length + document.cookie.length").await,
        json!(0),
        "the key is kept in memory only"
    );

    // The chart moves while people join.
    let points = format!("{card} polyline.waiting");
    let before = browser.attribute(&points, "points").await;
    let samples_before = samples(&browser, card).await;
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let after = browser.attribute(&points, "points").await;
    assert_ne!(before, after, "the waiting line of the chart moved");
    assert!(
        samples(&browser, card).await > samples_before,
        "more seconds charted"
    );
    let waiting: u64 = browser
        .text(&format!("{card} .figure b"))
        .await
        .parse()
        .unwrap();
    assert!(waiting > 0, "people wait: {waiting}");
    let admitted_before = admitted(&admin).await;
    assert!(admitted_before > 0, "the room admits before the pause");

    // The upstream latency chart shows the pass holder's requests, and says so in words.
    let latency = format!("{card} svg.latency");
    browser
        .wait_for(&format!("{latency}[aria-label*=\"latest p95\"]"))
        .await;
    let p95_points = browser
        .attribute(&format!("{latency} polyline.p95"), "points")
        .await;
    assert!(!p95_points.is_empty(), "the p95 line has points");
    assert_eq!(browser.attribute(&latency, "role").await, "img");
    let (_, stats) = admin
        .admin(Method::GET, "/rooms/show/stats?history=60", None)
        .await;
    let responses: u64 = stats["history"]["upstream_responses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|count| count.as_u64().unwrap())
        .sum();
    assert!(responses > 0, "the stats count upstream responses: {stats}");

    for path in screenshot_paths() {
        browser.screenshot(&path).await;
    }

    // Pause: admission stops while people keep joining.
    browser.click(&format!("{card} button.pause")).await;
    browser
        .wait_for(&format!("{card}[data-mode=queue_all]"))
        .await;
    let paused_at = admitted(&admin).await;
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(
        admitted(&admin).await,
        paused_at,
        "nobody is admitted while paused"
    );
    let (_, stats) = admin
        .admin(Method::GET, "/rooms/show/stats?history=0", None)
        .await;
    assert_eq!(stats["mode"], "queue_all");
    assert!(
        stats["waiting"].as_u64().unwrap() > waiting,
        "the line grows while paused"
    );

    // Revoking the visitor's session from the panel: the gateway refuses the pass within a
    // second (the room is paused, so the visitor is not simply let in again).
    browsing.abort();
    assert!(
        pass_works(&client, &server.url(), &pass).await,
        "still in before the revocation"
    );
    browser
        .eval("window.confirm = () => true; return null")
        .await;
    browser
        .click(&format!("{card} details.session-list summary"))
        .await;
    let row = format!("{card} li[data-session=\"{session}\"]");
    browser.wait_for(&row).await;
    browser.screenshot(&artifact("panel-sessions.png")).await;
    browser.click(&format!("{row} button.revoke")).await;
    let revoked_at = Instant::now();
    while pass_works(&client, &server.url(), &pass).await {
        assert!(
            revoked_at.elapsed() < Duration::from_secs(2),
            "the revoked pass still works"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, revoked) = admin
        .admin(Method::GET, "/rooms/show/sessions?state=revoked", None)
        .await;
    assert_eq!(revoked["sessions"][0]["id"], session.as_str(), "{revoked}");
    browser.wait_for_gone(&row).await;

    // Resume starts admission again.
    browser.click(&format!("{card} button.resume")).await;
    browser.wait_for(&format!("{card}[data-mode=queue]")).await;
    let started = Instant::now();
    while admitted(&admin).await == paused_at {
        assert!(started.elapsed() < SEEN_WITHIN, "admission resumes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The live event feed showed the operator's actions.
    let log = browser.text("#event-log").await;
    assert!(log.contains("room.updated"), "event log: {log}");

    crowd.abort();
    origin_task.abort();
    browser.close().await;
    server.kill();
}

/// The panel signed out and signed in passes axe-core's rules (WCAG 2.1 AA and best
/// practices: one main landmark, everything in a landmark, charts with a text alternative),
/// and a keyboard alone reaches a room's controls with a visible focus ring.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_panel_passes_axe_signed_out_and_in_and_works_by_keyboard() {
    tokio::time::timeout(TEST_LIMIT, accessible())
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {TEST_LIMIT:?}"));
}

async fn accessible() {
    let (origin, origin_task) = start_origin().await;
    let site = AdminSite::new(&SHOW.replace("{origin}", &origin));
    let client = support::client();
    let mut server = site.site.start();
    server.wait_ready(&client).await;
    let admin = AdminClient::new(&site.admin_url());
    admin.wait_ready().await;
    for _ in 0..5 {
        let _ = client
            .post(format!("{}/_anteroom/v1/rooms/show/join", server.url()))
            .send()
            .await;
    }

    let browser = Browser::start().await;
    browser.goto(&format!("{}/", site.admin_url())).await;
    browser.assert_accessible("the panel signed out").await;
    // The key field is the first stop of the keyboard.
    assert_eq!(browser.tab().await, "key");
    browser.type_into("#key", ADMIN_KEY).await;
    browser.click("#key-form button").await;
    let card = "article.room[data-room=show]";
    browser.wait_for(&format!("{card}[data-mode=queue]")).await;
    // Let the charts draw a few seconds.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    browser.assert_accessible("the panel signed in").await;
    let titles = browser
        .eval(&format!(
            "return Array.from(document.querySelectorAll('{card} svg')).map(function (svg) {{ return svg.querySelector('title').textContent; }})"
        ))
        .await;
    assert!(
        titles
            .as_array()
            .unwrap()
            .iter()
            .all(|title| title.as_str().is_some_and(|text| text.contains("show"))),
        "each chart says what it shows: {titles}"
    );

    // Tab from the top of the page to the room's Pause button.
    browser
        .run("document.activeElement.blur(); window.scrollTo(0, 0)")
        .await;
    let mut stops = Vec::new();
    while stops.len() < 40 {
        let focused = browser.tab().await;
        let on_pause = browser
            .eval(&format!(
                "return document.activeElement === document.querySelector('{card} button.pause')"
            ))
            .await;
        stops.push(focused);
        if on_pause == true {
            break;
        }
    }
    assert!(stops.len() < 40, "Tab never reached Pause: {stops:?}");
    let ring = browser
        .eval(
            "var style = getComputedStyle(document.activeElement);              return { visible: document.activeElement.matches(':focus-visible'), style: style.outlineStyle, width: parseFloat(style.outlineWidth) };",
        )
        .await;
    assert_eq!(ring["visible"], true, "{ring}");
    assert_ne!(ring["style"], "none", "{ring}");
    assert!(ring["width"].as_f64().unwrap() >= 2.0, "{ring}");
    browser.close().await;
    server.kill();
    origin_task.abort();
}

async fn admitted(admin: &AdminClient) -> u64 {
    let (_, stats) = admin
        .admin(Method::GET, "/rooms/show/stats?history=0", None)
        .await;
    stats["totals"]["admitted"].as_u64().unwrap()
}

async fn samples(browser: &Browser, card: &str) -> u64 {
    browser
        .attribute(card, "data-samples")
        .await
        .parse()
        .unwrap_or(0)
}

/// `<target>/browser-artifacts/<name>`.
fn artifact(name: &str) -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_anteroom"));
    let target = binary
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf);
    target.join("browser-artifacts").join(name)
}

/// `<target>/browser-artifacts/panel.png`, and the documentation's copy when asked for.
fn screenshot_paths() -> Vec<PathBuf> {
    let mut paths = vec![artifact("panel.png")];
    if std::env::var_os("ANTEROOM_WRITE_SCREENSHOTS").is_some() {
        paths.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots/panel.png"));
    }
    paths
}

/// One headless Chromium session behind its own chromedriver.
struct Browser {
    client: Client,
    _driver: Driver,
}

impl Browser {
    async fn start() -> Browser {
        let driver = Driver::start().await;
        let args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--lang=en-US".to_owned(),
            "--force-device-scale-factor=1".to_owned(),
            "--window-size=1280,900".to_owned(),
            format!("--user-data-dir={}", driver.profile.path().display()),
        ];
        let mut chrome_options = json!({ "args": args });
        if let Some(binary) = find_program(&["chromium", "chromium-browser", "google-chrome"]) {
            chrome_options["binary"] = json!(binary.display().to_string());
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".to_owned(), json!("chrome"));
        capabilities.insert("goog:chromeOptions".to_owned(), chrome_options);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&driver.url())
            .await
            .unwrap_or_else(|error| panic!("cannot start headless Chromium: {error}"));
        Browser {
            client,
            _driver: driver,
        }
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    async fn find(&self, css: &str) -> Option<fantoccini::elements::Element> {
        self.client.find(Locator::Css(css)).await.ok()
    }

    async fn text(&self, css: &str) -> String {
        let element = self
            .find(css)
            .await
            .unwrap_or_else(|| panic!("no element {css} on the page"));
        element.text().await.unwrap()
    }

    async fn attribute(&self, css: &str, name: &str) -> String {
        let element = self
            .find(css)
            .await
            .unwrap_or_else(|| panic!("no element {css} on the page"));
        element.attr(name).await.unwrap().unwrap_or_default()
    }

    async fn click(&self, css: &str) {
        self.find(css)
            .await
            .unwrap_or_else(|| panic!("no element {css} to click"))
            .click()
            .await
            .unwrap();
    }

    async fn type_into(&self, css: &str, text: &str) {
        let element = self
            .find(css)
            .await
            .unwrap_or_else(|| panic!("no element {css}"));
        element.clear().await.unwrap();
        element.send_keys(text).await.unwrap();
    }

    async fn eval(&self, script: &str) -> Value {
        self.client.execute(script, Vec::new()).await.unwrap()
    }

    async fn run(&self, script: &str) {
        self.client.execute(script, Vec::new()).await.unwrap();
    }

    /// Runs axe-core on the current page and fails the test listing any violation.
    async fn assert_accessible(&self, page: &str) {
        let violations = self
            .client
            .execute(&axe::script(), Vec::new())
            .await
            .unwrap_or_else(|error| panic!("axe-core did not run on {page}: {error}"));
        axe::assert_no_violations(page, &violations);
    }

    /// Presses Tab once; returns the id (or tag) of the element focused then.
    async fn tab(&self) -> String {
        let actions = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down {
                value: Key::Tab.into(),
            })
            .then(KeyAction::Up {
                value: Key::Tab.into(),
            });
        self.client.perform_actions(actions).await.unwrap();
        let focused = self
            .eval("var el = document.activeElement; return el ? (el.id || el.tagName.toLowerCase()) : '';")
            .await;
        focused.as_str().unwrap_or_default().to_owned()
    }

    /// Waits until an element matches `css`.
    async fn wait_for(&self, css: &str) {
        let started = Instant::now();
        while self.find(css).await.is_none() {
            assert!(
                started.elapsed() < SEEN_WITHIN,
                "nothing matched {css} within {SEEN_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until nothing matches `css`.
    async fn wait_for_gone(&self, css: &str) {
        let started = Instant::now();
        while self.find(css).await.is_some() {
            assert!(
                started.elapsed() < SEEN_WITHIN,
                "{css} still matched after {SEEN_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_for_text(&self, css: &str, expected: &str) {
        let started = Instant::now();
        loop {
            if let Some(element) = self.find(css).await
                && element.text().await.ok().as_deref() == Some(expected)
            {
                return;
            }
            assert!(
                started.elapsed() < SEEN_WITHIN,
                "{css} did not read {expected:?} within {SEEN_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// A chromedriver on a free port, in its own process group with the browsers it starts.
struct Driver {
    child: Child,
    port: u16,
    profile: tempfile::TempDir,
}

impl Driver {
    async fn start() -> Driver {
        let chromedriver = find_program(&["chromedriver"]).unwrap_or_else(|| {
            panic!("chromedriver is not installed: scripts/test installs chromium-driver")
        });
        let profile = tempfile::tempdir().unwrap();
        let port = support::free_port();
        let mut command = Command::new(chromedriver);
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().expect("start chromedriver");
        let driver = Driver {
            child,
            port,
            profile,
        };
        let client = support::client();
        let started = Instant::now();
        loop {
            let ready = client
                .get(format!("{}/status", driver.url()))
                .send()
                .await
                .ok();
            if let Some(response) = ready
                && let Ok(body) = response.json::<Value>().await
                && body["value"]["ready"] == true
            {
                return driver;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromedriver not ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        #[cfg(unix)]
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}
