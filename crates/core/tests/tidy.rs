//! Tidy checks that keep the architecture honest (DESIGN.md conventions 3, 8, 13, 14):
//! the core stays free of I/O, async and clocks, derives `Serialize` only for the raw room
//! configuration, every Rust file opens with a `//!` doc, no test hides behind `#[ignore]`
//! or `#[should_panic]`, and inside every crate no module depends on a module that depends on
//! it (`module_graph`).

#![allow(clippy::unwrap_used)]

#[path = "tidy/module_graph.rs"]
mod module_graph;

use module_graph::CrateSource;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') && name != "node_modules" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn workspace_rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&workspace_root().join("crates"), &mut files);
    files
}

#[test]
fn core_depends_on_nothing_that_does_io() {
    let manifest =
        std::fs::read_to_string(workspace_root().join("crates/core/Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    let forbidden = [
        "tokio",
        "hyper",
        "axum",
        "redis",
        "redb",
        "reqwest",
        "mio",
        "async-std",
        "futures",
        "tower",
        "anteroom-store",
        "anteroom-api",
        "anteroom-edge",
        "anteroom-admin",
        "anteroom-token",
    ];
    for line in dependencies.lines() {
        let name = line.split(['=', '.']).next().unwrap().trim();
        assert!(
            !forbidden.contains(&name),
            "anteroom-core must not depend on {name}"
        );
    }
}

#[test]
fn core_reads_no_clock_environment_or_os_randomness() {
    let mut files = Vec::new();
    rust_files(&workspace_root().join("crates/core/src"), &mut files);
    let forbidden = [
        "SystemTime::now",
        "Instant::now",
        "thread_rng",
        "OsRng",
        "from_entropy",
        "std::env",
        "std::fs",
        "std::net::Tcp",
        "std::process",
        "async fn",
    ];
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for needle in forbidden {
            assert!(
                !text.contains(needle),
                "{} uses {needle}: the core does no I/O and reads no clock",
                file.display()
            );
        }
    }
}

/// The one exception to "core types do not derive `Serialize`": a room's configuration as
/// written (`RawRoom` and the `Raw*` parts it holds). SPEC §3 makes that one form the config
/// file's `[[room]]`, the admin API's body and the stored configuration; a wire or stored copy
/// elsewhere would be a second field list of the same record (DESIGN.md convention 22).
const SERIALIZED_RAW_ROOM_PARTS: [&str; 7] = [
    "RawRoom",
    "RawAdaptive",
    "RawChallenge",
    "RawPriority",
    "RawEvent",
    "RawIdentityJwt",
    "RawOidc",
];

#[test]
fn only_the_raw_room_configuration_derives_serialize_in_core() {
    let mut files = Vec::new();
    rust_files(&workspace_root().join("crates/core/src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let serializes = line.replace("Deserialize", "").contains("Serialize");
            if !serializes || line.starts_with("use serde::") {
                continue;
            }
            let declared = lines[index..]
                .iter()
                .find_map(|line| {
                    let line = line.trim_start();
                    let rest = line
                        .strip_prefix("pub struct ")
                        .or_else(|| line.strip_prefix("pub enum "))?;
                    rest.split([' ', '{', '<', '(']).next()
                })
                .unwrap_or_default();
            let is_derive = line.trim_start().starts_with("#[derive(");
            assert!(
                is_derive && SERIALIZED_RAW_ROOM_PARTS.contains(&declared),
                "{}:{}: only the raw room configuration derives Serialize in the core \
                 (wire types live in anteroom-api and anteroom-admin, persisted formats in anteroom-store)",
                file.display(),
                index + 1
            );
        }
    }
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    for file in workspace_rust_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("//!"),
            "{} must start with a `//!` doc comment",
            file.display()
        );
    }
}

#[test]
fn no_test_is_ignored_or_expects_a_panic() {
    let this_file = Path::new(file!()).file_name().unwrap().to_owned();
    for file in workspace_rust_files() {
        if file.file_name() == Some(this_file.as_os_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for attribute in ["#[ignore", "#[should_panic"] {
            assert!(
                !text.contains(attribute),
                "{} uses {attribute}]: assert the error instead",
                file.display()
            );
        }
    }
}

/// Inside every crate, the top-level modules (and the root, when it holds code) depend on each
/// other one way only, so each can be read knowing only those below it (issue 19); so do the
/// children of every module directory (and its `mod.rs`, when that holds code).
#[test]
fn no_module_depends_on_a_module_that_depends_on_it() {
    let mut crate_dirs: Vec<PathBuf> = std::fs::read_dir(workspace_root().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").is_file())
        .collect();
    crate_dirs.sort();
    let mut circles = String::new();
    for root in crate_dirs
        .iter()
        .flat_map(|dir| [dir.join("src/lib.rs"), dir.join("src/main.rs")])
        .filter(|root| root.is_file())
    {
        let crate_name = root
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .file_name()
            .unwrap();
        for module in CrateSource::read(&root) {
            let graph = module.graph();
            for circle in graph.circles() {
                let members: Vec<&str> = circle.iter().map(String::as_str).collect();
                let name = format!(
                    "{} {}: {}",
                    crate_name.to_string_lossy(),
                    module.name(),
                    members.join(", ")
                );
                circles.push_str(&format!("crates/{name}:\n"));
                circles.push_str(&graph.describe(&circle));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules that depend on each other (break each circle: move the shared item down into \
         a module of its own, or the assembly up):\n{circles}"
    );
}
