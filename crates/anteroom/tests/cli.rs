//! The `anteroom` command line as an operator meets it (SPEC §4, §13): `check-config`,
//! `keys generate`, `keys hash`, `token inspect`, and `serve`'s exit codes on a bad config
//! and on SIGTERM.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use support::{Site, printed_kid, run};

/// EX_USAGE: the exit code of a bad config or bad arguments.
const EXIT_BAD_CONFIG: i32 = 64;

const OPEN_ROOM: &str = r#"
[[room]]
id = "shop"
"#;

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn path_arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn check_config_accepts_a_valid_file() {
    let site = Site::new();
    let config = site.write_config("EdDSA", OPEN_ROOM);
    let output = run(&["check-config", "--config", path_arg(&config)]);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
    assert!(
        stdout(&output).contains("ok (1 room(s))"),
        "stdout: {}",
        stdout(&output)
    );
}

#[test]
fn check_config_names_every_problem_with_its_line() {
    let site = Site::new();
    let config = site.path().join("broken.toml");
    // One mistake on each of lines 2, 3, 6, 7 and 8.
    let text = "[server]\n\
                listen = \"127.0.0.1:notaport\"\n\
                lisen = \"127.0.0.1:8080\"\n\
                \n\
                [[room]]\n\
                id = \"Not A Room\"\n\
                max_active = -5\n\
                mode = \"sometimes\"\n";
    std::fs::write(&config, text).unwrap();
    let output = run(&["check-config", "--config", path_arg(&config)]);
    let errors = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(EXIT_BAD_CONFIG),
        "stderr: {errors}"
    );
    for (line, word) in [
        (2, "listen"),
        (3, "lisen"),
        (6, "invalid room id"),
        (7, "max_active"),
        (8, "unknown mode"),
    ] {
        let reported = errors
            .lines()
            .find(|text| text.contains(&format!("line {line}:")))
            .unwrap_or_else(|| panic!("line {line} is reported; stderr:\n{errors}"));
        assert!(
            reported.contains(word),
            "the problem on line {line} names `{word}`: {reported}"
        );
    }
    assert!(
        errors.contains("did you mean `listen`?"),
        "a typo gets a suggestion: {errors}"
    );
}

#[test]
fn check_config_refuses_a_missing_file() {
    let site = Site::new();
    let missing = site.path().join("nowhere.toml");
    let output = run(&["check-config", "--config", path_arg(&missing)]);
    assert_eq!(output.status.code(), Some(EXIT_BAD_CONFIG));
    assert!(
        stderr(&output).contains("nowhere.toml"),
        "the error names the file: {}",
        stderr(&output)
    );
}

#[test]
fn keys_generate_creates_then_rotates() {
    let site = Site::new();
    let dir = site.keys_dir();
    let first = run(&["keys", "generate", "--dir", path_arg(&dir)]);
    assert_eq!(first.status.code(), Some(0), "stderr: {}", stderr(&first));
    let first_kid = printed_kid(&first);
    assert!(
        dir.join(format!("{first_kid}.eddsa.pem")).is_file(),
        "the key file exists"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("active")).unwrap().trim(),
        first_kid
    );

    let second = run(&["keys", "generate", "--dir", path_arg(&dir)]);
    assert_eq!(second.status.code(), Some(0), "stderr: {}", stderr(&second));
    let second_kid = printed_kid(&second);
    assert_ne!(first_kid, second_kid, "a second run makes a new key");
    let kept = stdout(&second)
        .lines()
        .find(|line| line.starts_with("older keys stay for verification:"))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("rotation lists the kept keys: {}", stdout(&second)));
    assert!(
        kept.contains(&first_kid),
        "the old kid is still listed: {kept}"
    );
    assert!(dir.join(format!("{first_kid}.eddsa.pem")).is_file());
    assert_eq!(
        std::fs::read_to_string(dir.join("active")).unwrap().trim(),
        second_kid
    );

    let bad = run(&[
        "keys",
        "generate",
        "--dir",
        path_arg(&dir),
        "--algorithm",
        "none",
    ]);
    assert_eq!(
        bad.status.code(),
        Some(EXIT_BAD_CONFIG),
        "`none` is no algorithm"
    );
}

#[test]
fn keys_hash_prints_the_sha256_form() {
    let output = run(&["keys", "hash", "secret"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        stdout(&output).trim(),
        "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
    );
    assert_eq!(stdout(&output).trim(), support::key_hash("secret"));
}

/// The same JWT with its `pos` claim changed and re-encoded: well formed, wrongly signed.
fn forge_position(pass: &str) -> String {
    let parts: Vec<&str> = pass.split('.').collect();
    let mut claims = support::jwt_claims(pass);
    claims["pos"] = serde_json::json!(claims["pos"].as_u64().unwrap() + 1000);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
    format!("{}.{payload}.{}", parts[0], parts[2])
}

/// The same JWT with one character of its signature changed.
fn tamper_signature(pass: &str) -> String {
    let (signed, signature) = pass.rsplit_once('.').unwrap();
    let mut signature = signature.to_owned();
    // A middle character: the last one may carry only padding bits.
    let index = signature.len() / 2;
    let new = if signature.as_bytes()[index] == b'A' {
        "B"
    } else {
        "A"
    };
    signature.replace_range(index..=index, new);
    format!("{signed}.{signature}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_inspect_checks_a_served_pass_against_the_key_directory() {
    let site = Site::new();
    site.write_config("EdDSA", OPEN_ROOM);
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let status = support::join(&client, &server.url(), "shop").await;
    let pass = status.pass.expect("an empty room admits at once");
    server.kill();

    let keys = site.keys_dir();
    let genuine = run(&["token", "inspect", &pass, "--keys", path_arg(&keys)]);
    let text = stdout(&genuine);
    assert_eq!(
        genuine.status.code(),
        Some(0),
        "stdout: {text}; stderr: {}",
        stderr(&genuine)
    );
    assert!(text.contains("signature: valid"), "stdout: {text}");
    assert!(text.contains("time: valid now"), "stdout: {text}");
    assert!(
        text.contains("\"aud\": \"shop\""),
        "the claims are shown: {text}"
    );

    for tampered in [forge_position(&pass), tamper_signature(&pass)] {
        let refused = run(&["token", "inspect", &tampered, "--keys", path_arg(&keys)]);
        let text = stdout(&refused);
        assert_eq!(
            refused.status.code(),
            Some(2),
            "a tampered pass exits 2; stdout: {text}; stderr: {}",
            stderr(&refused)
        );
        assert!(text.contains("signature: INVALID"), "stdout: {text}");
    }

    // A payload that no longer decodes is not reported as a pass at all, and never as valid.
    let parts: Vec<&str> = pass.split('.').collect();
    let garbled = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode("not json"),
        parts[2]
    );
    let refused = run(&["token", "inspect", &garbled, "--keys", path_arg(&keys)]);
    assert_ne!(refused.status.code(), Some(0), "a garbled pass fails");
    assert!(!stdout(&refused).contains("signature: valid"));
    assert!(
        stderr(&refused).contains("not a token"),
        "stderr: {}",
        stderr(&refused)
    );
}

#[test]
fn serve_refuses_a_bad_config_before_touching_anything() {
    let site = Site::new();
    // A valid file with one mistake in the room (line 19 of what `write_config` writes).
    let config = site.write_config("EdDSA", "[[room]]\nid = \"shop\"\nmax_active = \"lots\"\n");
    let started = Instant::now();
    let output = support::anteroom()
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let errors = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(EXIT_BAD_CONFIG),
        "stderr: {errors}"
    );
    assert!(
        errors.contains("max_active"),
        "the problem is named: {errors}"
    );
    assert!(
        errors
            .lines()
            .any(|line| line.contains("line ") && line.contains("max_active")),
        "with its line: {errors}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a bad config fails fast"
    );
    // Nothing was opened, generated or bound.
    assert!(!site.store_path().exists(), "no store file was created");
    assert!(!site.keys_dir().exists(), "no keys were generated");
    std::net::TcpListener::bind(("127.0.0.1", site.port)).expect("the port is still free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exits_zero_on_sigterm() {
    let site = Site::new();
    site.write_config("EdDSA", OPEN_ROOM);
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    // One real request first, so shutdown has something to have served.
    let status = support::join(&client, &server.url(), "shop").await;
    assert_eq!(status.state, "admitted");
    drop(client);

    let signalled = Instant::now();
    let kill = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success(), "kill -TERM was delivered");
    let exit = server
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| {
            panic!(
                "serve did not stop within 10 s of SIGTERM; log:\n{}",
                server.log()
            )
        });
    let took = signalled.elapsed();
    assert!(
        exit.success(),
        "graceful shutdown exits 0, got {exit}; log:\n{}",
        server.log()
    );
    eprintln!("serve stopped {took:.2?} after SIGTERM");
    std::net::TcpListener::bind(("127.0.0.1", site.port)).expect("the port is released");
}

/// The soft and hard limits on open files of a running process, from `/proc/<pid>/limits`.
fn open_file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap()
        .to_owned();
    let mut numbers = line["Max open files".len()..].split_whitespace();
    (
        numbers.next().unwrap().to_owned(),
        numbers.next().unwrap().to_owned(),
    )
}

/// Started with a low soft limit on open files (as many systems start processes), `serve`
/// raises it to the hard limit: every visitor with an event stream holds a socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_raises_its_open_file_limit_to_the_hard_limit() {
    let site = Site::new();
    let config = site.write_config("EdDSA", OPEN_ROOM);
    let mut child = support::anteroom_command("sh")
        .args([
            "-c",
            "ulimit -S -n 256 && exec \"$0\" serve --config \"$1\"",
        ])
        .arg(env!("CARGO_BIN_EXE_anteroom"))
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let client = support::client();
    let started = Instant::now();
    loop {
        let ready = client
            .get(format!("{}/_anteroom/healthz", site.public_url()))
            .send()
            .await
            .is_ok_and(|answer| answer.status().is_success());
        if ready {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "serve starts");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (soft, hard) = open_file_limits(pid);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_ne!(soft, "256", "the soft limit was raised");
    assert_eq!(soft, hard, "up to the hard limit");
}

/// A field of `/proc/<pid>/status` or `/proc/<pid>/smaps_rollup`, as written there.
fn proc_field(pid: u32, file: &str, field: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap();
    let line = text
        .lines()
        .find(|line| line.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/{file}:\n{text}"));
    line[field.len()..].trim().to_owned()
}

/// `serve` turns transparent huge pages off for its process (each idle stream's memory would
/// otherwise be backed by 2 MiB pages), and none back its memory after a request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_without_transparent_huge_pages() {
    let site = Site::new();
    site.write_config("EdDSA", OPEN_ROOM);
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let status = support::join(&client, &server.url(), "shop").await;
    assert_eq!(status.state, "admitted");
    let pid = server.pid();
    assert_eq!(proc_field(pid, "status", "THP_enabled:"), "0");
    assert_eq!(proc_field(pid, "smaps_rollup", "AnonHugePages:"), "0 kB");
}
