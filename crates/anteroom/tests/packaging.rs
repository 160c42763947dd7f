//! What an operator deploys with (SPEC §14.8): the systemd unit passes `systemd-analyze verify`
//! with the binary and the manual pages it names, and keeps its hardening.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
