//! What an operator deploys with (SPEC §14.8): the systemd unit passes `systemd-analyze verify`
//! with the binary and the manual pages it names, and keeps its hardening; the Dockerfile keeps
//! its shape (pinned builder, slim runtime, non-root, one volume), and its health check, run as
//! written, finds a live node healthy. The image itself is not built here: no base image can be
//! pulled.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::Site;

/// Where the unit expects the binary; the test points it at the one cargo built.
const INSTALLED_BINARY: &str = "/usr/local/bin/anteroom";

fn repository_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative)
}

fn read_repository_file(relative: &str) -> String {
    let path = repository_file(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The shipped unit in a scratch directory, its `ExecStart` pointed at the built binary, and
/// the manual pages its `Documentation=` names generated beside it (verify runs `man` on them).
struct ScratchUnit {
    dir: tempfile::TempDir,
}

impl ScratchUnit {
    fn new() -> ScratchUnit {
        let dir = tempfile::tempdir().unwrap();
        let shipped = read_repository_file("deploy/systemd/anteroom.service");
        assert!(
            shipped.contains(&format!("ExecStart={INSTALLED_BINARY} ")),
            "the unit starts {INSTALLED_BINARY}:\n{shipped}"
        );
        let unit = shipped.replace(INSTALLED_BINARY, env!("CARGO_BIN_EXE_anteroom"));
        std::fs::write(dir.path().join("anteroom.service"), unit).unwrap();
        let pages = dir.path().join("man/man1");
        std::fs::create_dir_all(&pages).unwrap();
        let output = support::run(&["man", "--dir", pages.to_str().unwrap()]);
        assert!(output.status.success(), "{}", printed(&output));
        ScratchUnit { dir }
    }

    fn unit_path(&self) -> PathBuf {
        self.dir.path().join("anteroom.service")
    }

    fn systemd_analyze(&self, args: &[&str]) -> Output {
        Command::new("systemd-analyze")
            .args(args)
            .arg(self.unit_path())
            .env("MANPATH", self.dir.path().join("man"))
            .output()
            .expect("run systemd-analyze (scripts/test installs the systemd package)")
    }
}

/// `systemd-analyze verify` exits 0 even for keys it ignores: any line about the unit fails.
#[test]
fn systemd_unit_passes_verify() {
    let unit = ScratchUnit::new();
    let output = unit.systemd_analyze(&["verify"]);
    let said = printed(&output);
    assert!(output.status.success(), "verify failed:\n{said}");
    let about_the_unit: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("anteroom"))
        .collect();
    assert!(
        about_the_unit.is_empty(),
        "verify warns about the unit:\n{said}"
    );
}

/// systemd's own reading of the sandbox: the exposure it scores stays low (0 is a unit that
/// can touch nothing, 10 one with no sandbox at all).
#[test]
fn systemd_unit_stays_sandboxed() {
    let unit = ScratchUnit::new();
    let output = unit.systemd_analyze(&["security", "--offline=true"]);
    let said = printed(&output);
    let exposure: f64 = said
        .lines()
        .find_map(|line| line.strip_prefix("→ Overall exposure level for anteroom.service: "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no overall exposure in:\n{said}"))
        .parse()
        .unwrap();
    assert!(exposure <= 2.0, "exposure {exposure}:\n{said}");
}

/// The unit's own settings that the node's limits depend on.
#[test]
fn systemd_unit_fits_the_node() {
    let unit = read_repository_file("deploy/systemd/anteroom.service");
    let setting = |key: &str| -> &str {
        unit.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key}= in the unit"))
    };
    // Every event stream holds a socket: the file limit covers the default stream cap with room
    // for as many proxied requests (two sockets each).
    let configuration = read_repository_file("docs/configuration.md");
    let sse_max_streams: u64 = configuration
        .lines()
        .find_map(|line| line.strip_prefix("| `sse_max_streams` | `"))
        .and_then(|rest| rest.split('`').next())
        .expect("docs/configuration.md documents sse_max_streams's default")
        .parse()
        .unwrap();
    let open_files: u64 = setting("LimitNOFILE").parse().unwrap();
    assert!(
        open_files >= 3 * sse_max_streams,
        "LimitNOFILE={open_files} for {sse_max_streams} streams"
    );
    assert_eq!(setting("ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(setting("KillSignal"), "SIGTERM");
    assert_eq!(
        setting("RestartPreventExitStatus"),
        "64",
        "a bad config is not retried"
    );
    assert_eq!(setting("StateDirectory"), "anteroom");
    assert_eq!(setting("WorkingDirectory"), "%S/anteroom");
}

/// One instruction of a Dockerfile: its keyword in capitals and the rest of its line(s).
struct Instruction {
    keyword: String,
    arguments: String,
}

/// The Dockerfile's instructions, comments dropped and continued lines joined.
fn dockerfile_instructions() -> Vec<Instruction> {
    let text = read_repository_file("Dockerfile");
    let mut instructions = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(continued) => {
                pending.push_str(continued);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                let (keyword, arguments) = pending.split_once(' ').unwrap();
                instructions.push(Instruction {
                    keyword: keyword.to_uppercase(),
                    arguments: arguments.trim().to_owned(),
                });
                pending.clear();
            }
        }
    }
    instructions
}

/// The runtime stage: the instructions after the last `FROM`.
fn runtime_stage(instructions: &[Instruction]) -> &[Instruction] {
    let last_from = instructions
        .iter()
        .rposition(|instruction| instruction.keyword == "FROM")
        .unwrap();
    &instructions[last_from + 1..]
}

fn only<'a>(stage: &'a [Instruction], keyword: &str) -> &'a str {
    let found: Vec<&Instruction> = stage
        .iter()
        .filter(|instruction| instruction.keyword == keyword)
        .collect();
    assert_eq!(found.len(), 1, "one {keyword} in the runtime stage");
    &found[0].arguments
}

fn exec_form(arguments: &str) -> Vec<String> {
    serde_json::from_str(arguments)
        .unwrap_or_else(|error| panic!("not an exec-form array ({error}): {arguments}"))
}

#[test]
fn dockerfile_builds_in_one_stage_and_runs_unprivileged_in_another() {
    let instructions = dockerfile_instructions();
    let images: Vec<&str> = instructions
        .iter()
        .filter(|instruction| instruction.keyword == "FROM")
        .map(|instruction| instruction.arguments.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(images.len(), 2, "a builder and a runtime: {images:?}");
    for image in &images {
        let (_, tag) = image
            .split_once(':')
            .unwrap_or_else(|| panic!("{image} is not pinned to a tag"));
        assert_ne!(tag, "latest", "{image} is not pinned");
    }
    assert!(
        images[0].starts_with("rust:"),
        "official Rust builder: {}",
        images[0]
    );
    assert!(images[1].ends_with("-slim"), "slim runtime: {}", images[1]);
    assert!(
        instructions
            .iter()
            .any(|instruction| instruction.keyword == "RUN"
                && instruction
                    .arguments
                    .contains("cargo build --release --locked -p anteroom")),
        "a locked release build"
    );

    let runtime = runtime_stage(&instructions);
    let user = only(runtime, "USER");
    let user_id = user.split(':').next().unwrap();
    assert!(
        !["root", "0"].contains(&user_id),
        "the node does not run as root: USER {user}"
    );
    assert_eq!(only(runtime, "VOLUME"), "/var/lib/anteroom");
    assert_eq!(
        only(runtime, "WORKDIR"),
        "/var/lib/anteroom",
        "relative data paths land in the volume"
    );
    let exposed: Vec<&str> = only(runtime, "EXPOSE").split_whitespace().collect();
    assert_eq!(exposed, ["8080", "9090"]);
    assert_eq!(exec_form(only(runtime, "ENTRYPOINT")), ["anteroom"]);
    assert_eq!(
        exec_form(only(runtime, "CMD")),
        ["serve", "--config", "/etc/anteroom/anteroom.toml"]
    );

    let ignored = read_repository_file(".dockerignore");
    let ignored: Vec<&str> = ignored
        .lines()
        .filter(|line| !line.starts_with('#'))
        .collect();
    assert!(ignored.contains(&"target"), "{ignored:?}");
    for needed in ["crates", "web", "Cargo.toml", "Cargo.lock"] {
        assert!(!ignored.contains(&needed), "the build needs {needed}");
    }
}

/// The image's HEALTHCHECK command, run as written (the installed `anteroom`, the listener's
/// port swapped for the test node's), finds a live node healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dockerfile_health_check_passes_against_a_live_node() {
    let instructions = dockerfile_instructions();
    let health_check = only(runtime_stage(&instructions), "HEALTHCHECK");
    let (_, command) = health_check
        .split_once("CMD ")
        .unwrap_or_else(|| panic!("HEALTHCHECK runs a command: {health_check}"));
    let argv = exec_form(command);
    assert_eq!(argv[0], "anteroom", "the binary probes itself: {argv:?}");

    let site = Site::new();
    site.write_config("EdDSA", "[[room]]\nid = \"shop\"\n");
    let client = support::client();
    let mut server = site.start();
    server.wait_ready(&client).await;
    let listener = format!("127.0.0.1:{}", server.port);
    let arguments: Vec<String> = argv[1..]
        .iter()
        .map(|argument| argument.replace("127.0.0.1:8080", &listener))
        .collect();
    assert!(
        arguments
            .iter()
            .any(|argument| argument.contains(&listener)),
        "the check asks the public listener on 8080: {argv:?}"
    );
    let output = support::anteroom().args(&arguments).output().unwrap();
    assert!(
        output.status.success(),
        "the health check fails on a live node:\n{}",
        printed(&output)
    );
}
