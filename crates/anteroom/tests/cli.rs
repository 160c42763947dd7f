//! The `anteroom` command line as an operator meets it (SPEC §4, §13, §14.8): `check-config`,
//! `keys generate`, `keys hash`, `token inspect`, `health`, the shell completions and manual
//! pages generated from the CLI, and `serve`'s exit codes on a bad config and on SIGTERM.
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
    // One mistake on each of lines 2, 3, 6, 7, 8 and 9.
    let text = "[server]\n\
                listen = \"127.0.0.1:notaport\"\n\
                lisen = \"127.0.0.1:8080\"\n\
                \n\
                [[room]]\n\
                id = \"Not A Room\"\n\
                max_active = -5\n\
                mode = \"sometimes\"\n\
                history_retention = \"10s\"\n";
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
        (9, "history_retention: must be between 1m and 7d"),
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

/// The operator's bounds on `[server]`: the ticker's periods and the connection timeouts are
/// refused out of range, each problem on its line; the same keys in range pass.
#[test]
fn check_config_refuses_server_bounds_out_of_range_with_their_lines() {
    let site = Site::new();
    let config = site.path().join("bounds.toml");
    let text = "[server]\n\
                tick_interval = \"5s\"\n\
                sse_touch_interval = \"100ms\"\n\
                drain_timeout = \"2h\"\n\
                header_timeout = \"0s\"\n\
                sse_max_streams = 0\n";
    std::fs::write(&config, text).unwrap();
    let output = run(&["check-config", "--config", path_arg(&config)]);
    let errors = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(EXIT_BAD_CONFIG),
        "stderr: {errors}"
    );
    for (line, expected) in [
        (2, "`tick_interval` must be between 50ms and 1s, found 5s"),
        (
            3,
            "`sse_touch_interval` must be between 1s and 300s, found 100ms",
        ),
        (4, "`drain_timeout` must be at most 3600s, found 7200s"),
        (5, "`header_timeout` must be longer than zero"),
        (
            6,
            "`sse_max_streams` must be between 1 and 100000000, found 0",
        ),
    ] {
        assert!(
            errors
                .lines()
                .any(|text| text.contains(&format!("line {line}:")) && text.contains(expected)),
            "line {line}: {expected}; stderr:\n{errors}"
        );
    }

    let in_range = site.path().join("in-range.toml");
    let text = "[server]\n\
                tick_interval = \"1s\"\n\
                sse_touch_interval = \"5m\"\n\
                drain_timeout = \"1h\"\n\
                header_timeout = \"10s\"\n\
                sse_max_streams = 1\n\
                [store]\nbackend = \"memory\"\n";
    std::fs::write(&in_range, text).unwrap();
    let output = run(&["check-config", "--config", path_arg(&in_range)]);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
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

/// The subcommands `anteroom <parents…> --help` lists, clap's own `help` aside: the CLI itself
/// says what the completions and manual pages must cover.
fn subcommands_of(parents: &[&str]) -> Vec<String> {
    let mut args = parents.to_vec();
    args.push("--help");
    let output = run(&args);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
    let help = stdout(&output);
    let listed: Vec<String> = help
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect();
    assert!(!listed.is_empty(), "no subcommands listed in:\n{help}");
    listed
}

/// Every subcommand as the words that reach it: `["serve"]`, `["keys", "generate"]`, …
fn every_subcommand_path() -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for name in subcommands_of(&[]) {
        paths.push(vec![name.clone()]);
        let help = stdout(&run(&[&name, "--help"]));
        if help.contains("Commands:") {
            for nested in subcommands_of(&[&name]) {
                paths.push(vec![name.clone(), nested]);
            }
        }
    }
    assert!(
        paths.contains(&vec!["keys".to_owned(), "generate".to_owned()]),
        "nested subcommands found: {paths:?}"
    );
    paths
}

/// Whether `text` holds `word` as a word of its own (`man`, not the `man` in `command`).
fn names_word(text: &str, word: &str) -> bool {
    let is_word_byte = |byte: u8| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_';
    text.match_indices(word).any(|(start, _)| {
        let before = start
            .checked_sub(1)
            .map(|previous| text.as_bytes()[previous]);
        let after = text.as_bytes().get(start + word.len()).copied();
        !before.is_some_and(is_word_byte) && !after.is_some_and(is_word_byte)
    })
}

fn completion_script(shell: &str) -> String {
    let output = run(&["completions", shell]);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
    stdout(&output)
}

#[test]
fn completion_scripts_name_every_subcommand_in_every_shell() {
    let paths = every_subcommand_path();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = completion_script(shell);
        for path in &paths {
            let name = path.last().unwrap();
            assert!(
                names_word(&script, name),
                "the {shell} script never names `{}`",
                path.join(" ")
            );
        }
    }
    let output = run(&["completions", "tcsh"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "clap refuses an unknown shell"
    );
    assert!(
        stderr(&output).contains("possible values"),
        "{}",
        stderr(&output)
    );
}

/// What bash offers after `anteroom <words…> ` with the completion script loaded.
fn bash_completions(script: &Path, words: &[&str]) -> Vec<String> {
    let previous = words.last().copied().unwrap_or("anteroom");
    let program = format!(
        "source \"$1\"\n\
         COMP_WORDS=(anteroom {words} \"\")\n\
         COMP_CWORD={index}\n\
         _anteroom anteroom \"\" {previous}\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = words.join(" "),
        index = words.len() + 1,
    );
    let output = Command::new("bash")
        .args(["-c", &program, "bash", path_arg(script)])
        .output()
        .unwrap();
    assert!(output.status.success(), "bash: {}", stderr(&output));
    assert_eq!(stderr(&output), "", "bash complained");
    stdout(&output).lines().map(str::to_owned).collect()
}

/// The bash script, sourced into a real bash, completes every subcommand at every level.
#[test]
fn bash_completes_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("anteroom.bash");
    std::fs::write(&script, completion_script("bash")).unwrap();
    for path in every_subcommand_path() {
        let (name, parents) = path.split_last().unwrap();
        let parents: Vec<&str> = parents.iter().map(String::as_str).collect();
        let offered = bash_completions(&script, &parents);
        assert!(
            offered.contains(name),
            "after `anteroom {}` bash offers {offered:?}, not `{name}`",
            parents.join(" ")
        );
    }
    let shells = bash_completions(&script, &["completions"]);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(
            shells.contains(&shell.to_owned()),
            "shells offered: {shells:?}"
        );
    }
}

/// Renders a roff page with groff's manual macros, every warning on; returns the text.
fn render_roff(page: &Path) -> String {
    let output = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww"])
        .arg(page)
        .output()
        .unwrap();
    assert!(output.status.success(), "groff: {}", stderr(&output));
    assert_eq!(stderr(&output), "", "groff warns about {}", page.display());
    stdout(&output)
}

/// The name of a page as its roff source writes it (`anteroom\-keys\-generate(1)`).
fn roff_page_name(path: &[String]) -> String {
    format!("anteroom-{}(1)", path.join("-")).replace('-', "\\-")
}

#[test]
fn man_prints_a_roff_page_naming_every_subcommand() {
    let output = run(&["man"]);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
    let page = stdout(&output);
    assert!(page.contains("\n.TH ANTEROOM 1 "), "title line:\n{page}");
    for heading in [".SH NAME", ".SH SYNOPSIS", ".SH SUBCOMMANDS"] {
        assert!(page.contains(heading), "no {heading}:\n{page}");
    }
    for path in every_subcommand_path()
        .iter()
        .filter(|path| path.len() == 1)
    {
        assert!(
            page.contains(&roff_page_name(path)),
            "anteroom(1) never names {}",
            roff_page_name(path)
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("anteroom.1");
    std::fs::write(&file, &page).unwrap();
    let text = render_roff(&file);
    assert!(text.starts_with("ANTEROOM(1)"), "rendered:\n{text}");
    assert!(text.contains("anteroom-serve(1)"), "rendered:\n{text}");
}

/// `man --dir` writes every page anteroom(1) and its sections refer to, each valid roff.
#[test]
fn man_dir_writes_a_page_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&["man", "--dir", path_arg(dir.path())]);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
    let mut expected = vec!["anteroom.1".to_owned()];
    for path in every_subcommand_path() {
        let title = format!("ANTEROOM-{}", path.join("-").to_uppercase());
        let file = dir.path().join(format!("anteroom-{}.1", path.join("-")));
        let page = std::fs::read_to_string(&file)
            .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        assert!(page.contains(&format!("\n.TH {title} 1 ")), "{page}");
        let text = render_roff(&file);
        assert!(
            text.starts_with(&format!("{title}(1)")),
            "rendered:\n{text}"
        );
        assert!(
            text.contains("anteroom 0.1.0"),
            "the release in the footer:\n{text}"
        );
        expected.push(format!("anteroom-{}.1", path.join("-")));
    }
    let mut written: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    expected.sort();
    assert_eq!(written, expected, "one page per subcommand, and no other");
    render_roff(&dir.path().join("anteroom.1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_exits_zero_only_when_the_url_answers_2xx() {
    let site = Site::new();
    site.write_config("EdDSA", OPEN_ROOM);
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;

    let healthy = run(&[
        "health",
        "--url",
        &format!("{}/_anteroom/healthz", server.url()),
    ]);
    assert_eq!(
        healthy.status.code(),
        Some(0),
        "stderr: {}",
        stderr(&healthy)
    );
    assert!(stdout(&healthy).contains(" 200 "), "{}", stdout(&healthy));

    let missing = run(&[
        "health",
        "--url",
        &format!("{}/_anteroom/no-such-page", server.url()),
    ]);
    assert_eq!(
        missing.status.code(),
        Some(1),
        "stderr: {}",
        stderr(&missing)
    );
    assert!(stdout(&missing).contains(" 404 "), "{}", stdout(&missing));

    let secure = run(&[
        "health",
        "--url",
        &format!("https://127.0.0.1:{}/", server.port),
    ]);
    assert_eq!(secure.status.code(), Some(EXIT_BAD_CONFIG));
    assert!(
        stderr(&secure).contains("not an http:// URL"),
        "{}",
        stderr(&secure)
    );

    server.kill();
    let down = run(&[
        "health",
        "--url",
        &format!("{}/_anteroom/healthz", server.url()),
    ]);
    assert_eq!(down.status.code(), Some(1));
    assert!(stderr(&down).contains("connecting to"), "{}", stderr(&down));
}

/// `readyz` says 503 to a request still in flight when the shutdown starts (SPEC §14.6): the
/// request's head is in, its one-byte body comes after SIGTERM, and only then is it answered.
/// The own engine reads such a body before it calls the handler (hyper calls it at once), so
/// this test runs it whatever `ANTEROOM_TEST_HTTP_ENGINE` says; the drain itself is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_503_while_the_node_drains() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let site = Site::new();
    let path = site.write_config("EdDSA", OPEN_ROOM);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("http_engine = \"hyper\"", "http_engine = \"own\""),
    )
    .unwrap();
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let ready = client
        .get(format!("{}/_anteroom/readyz", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200, "ready before the shutdown");

    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    stream
        .write_all(b"GET /_anteroom/readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kill = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream.write_all(b"x").await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer));
    read.await.expect("answered within the drain").unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("draining"), "{answer}");
    let exit = server.wait_exit(Duration::from_secs(10));
    assert!(exit.is_some_and(|exit| exit.success()), "{}", server.log());
}
