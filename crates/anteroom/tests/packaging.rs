//! What an operator deploys with (SPEC §14.8): the systemd unit passes `systemd-analyze verify`
//! with the binary and the manual pages it names, and keeps its hardening; the Dockerfile keeps
//! its shape (pinned builder, slim runtime, non-root, one volume), and its health check, run as
//! written, finds a live node healthy; the Kubernetes manifests parse, keep their pods
//! unprivileged and bounded, and agree with the binary (config, ports, probes, drain). The
//! image itself is not built here: no base image can be pulled, and the manifests are not
//! checked against the Kubernetes API schemas: no validator runs offline.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anteroom_test_support::redis::RedisServer;
use serde_json::Value;
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

/// Reads every `deploy/kubernetes/*.yaml` into JSON, file by file, each file's documents in
/// order. PyYAML reads the YAML (Debian's python3-yaml): no YAML crate is in the workspace.
fn kubernetes_manifests() -> Vec<(String, Vec<Value>)> {
    const TO_JSON: &str = "import json, sys, yaml\n\
        json.dump([[path, list(yaml.safe_load_all(open(path)))] for path in sys.argv[1:]], sys.stdout)";
    let dir = repository_file("deploy/kubernetes");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "yaml")
        })
        .collect();
    paths.sort();
    assert!(paths.len() >= 3, "the manifests: {paths:?}");
    let output = Command::new("python3")
        .arg("-c")
        .arg(TO_JSON)
        .args(&paths)
        .output()
        .expect("run python3 (scripts/test installs python3-yaml)");
    assert!(output.status.success(), "{}", printed(&output));
    let files: Vec<(String, Vec<Value>)> = serde_json::from_slice(&output.stdout).unwrap();
    files
        .into_iter()
        .map(|(path, documents)| {
            let name = Path::new(&path).file_name().unwrap().to_string_lossy();
            (name.into_owned(), documents)
        })
        .collect()
}

/// One anteroom workload (a Deployment or StatefulSet running the image) and its file's
/// ConfigMap.
struct Workload<'a> {
    file: &'a str,
    spec: &'a Value,
    config_text: String,
}

impl Workload<'_> {
    fn pod(&self) -> &Value {
        &self.spec["spec"]["template"]["spec"]
    }

    fn container(&self) -> &Value {
        self.pod()["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|container| container["name"] == "anteroom")
            .unwrap_or_else(|| panic!("{}: no container named anteroom", self.file))
    }

    fn container_port(&self, name: &str) -> u16 {
        self.container()["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|port| port["name"] == name)
            .and_then(|port| port["containerPort"].as_u64())
            .and_then(|port| u16::try_from(port).ok())
            .unwrap_or_else(|| panic!("{}: no container port {name}", self.file))
    }

    /// The container's environment, each Secret reference given `secret_value`.
    fn environment(&self, secret_value: &str) -> Vec<(String, String)> {
        self.container()["env"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|variable| {
                let name = variable["name"].as_str().unwrap().to_owned();
                let value = match variable["value"].as_str() {
                    Some(value) => value.to_owned(),
                    None => {
                        assert!(
                            variable["valueFrom"]["secretKeyRef"]["name"].is_string(),
                            "{}: {name} has a value or a Secret reference",
                            self.file
                        );
                        secret_value.to_owned()
                    }
                };
                (name, value)
            })
            .collect()
    }

    /// `(path, port name)` of the startup, liveness and readiness probes.
    fn probes(&self) -> Vec<(&'static str, String, String)> {
        ["startupProbe", "livenessProbe", "readinessProbe"]
            .into_iter()
            .filter_map(|probe| {
                let get = &self.container()[probe]["httpGet"];
                Some((
                    probe,
                    get["path"].as_str()?.to_owned(),
                    get["port"].as_str()?.to_owned(),
                ))
            })
            .collect()
    }

    /// Whether an init container copies the signing keys in (the keys come from a Secret).
    fn keys_from_secret(&self) -> bool {
        self.pod()["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|volume| volume["secret"]["secretName"] == "anteroom-keys")
    }
}

fn anteroom_workloads(manifests: &[(String, Vec<Value>)]) -> Vec<Workload<'_>> {
    let mut workloads = Vec::new();
    for (file, documents) in manifests {
        let config_text = documents
            .iter()
            .find(|document| document["kind"] == "ConfigMap")
            .and_then(|config_map| config_map["data"]["anteroom.toml"].as_str());
        for document in documents {
            let is_workload =
                ["Deployment", "StatefulSet"].contains(&document["kind"].as_str().unwrap());
            let runs_anteroom = document["spec"]["template"]["spec"]["containers"]
                .as_array()
                .is_some_and(|containers| {
                    containers
                        .iter()
                        .any(|container| container["name"] == "anteroom")
                });
            if is_workload && runs_anteroom {
                workloads.push(Workload {
                    file,
                    spec: document,
                    config_text: config_text
                        .unwrap_or_else(|| panic!("{file}: no ConfigMap with anteroom.toml"))
                        .to_owned(),
                });
            }
        }
    }
    workloads
}

fn seconds(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not a count of seconds: {value}"))
}

/// Every manifest parses; every pod runs unprivileged on a read-only root with requests and
/// limits; the anteroom pods probe health and readiness, outlast their drain, keep their state
/// where the image's volume is, and a PodDisruptionBudget selects the replicated nodes.
#[test]
fn kubernetes_manifests_hold_their_shape() {
    let manifests = kubernetes_manifests();
    let image_user: u64 = only(runtime_stage(&dockerfile_instructions()), "USER")
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for (file, documents) in &manifests {
        for document in documents {
            for field in ["apiVersion", "kind"] {
                assert!(document[field].is_string(), "{file}: {field} in {document}");
            }
            assert!(document["metadata"]["name"].is_string(), "{file}: a name");
            let Some(pod) = document["spec"]["template"]["spec"].as_object() else {
                continue;
            };
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{file}");
            let containers = pod["containers"].as_array().unwrap().iter();
            let init_containers = pod
                .get("initContainers")
                .and_then(Value::as_array)
                .map(|list| list.iter())
                .unwrap_or_default();
            for container in containers.chain(init_containers) {
                let name = &container["name"];
                let security = &container["securityContext"];
                assert_eq!(security["readOnlyRootFilesystem"], true, "{file} {name}");
                assert_eq!(security["allowPrivilegeEscalation"], false, "{file} {name}");
                assert_eq!(
                    security["capabilities"]["drop"],
                    serde_json::json!(["ALL"]),
                    "{file} {name}"
                );
                for bound in ["requests", "limits"] {
                    assert!(
                        container["resources"][bound]["memory"].is_string(),
                        "{file} {name}: memory {bound}"
                    );
                }
                assert!(
                    container["resources"]["requests"]["cpu"].is_string(),
                    "{file} {name}"
                );
            }
        }
    }

    let workloads = anteroom_workloads(&manifests);
    let kinds: Vec<&str> = workloads
        .iter()
        .map(|workload| workload.spec["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["Deployment", "StatefulSet"],
        "multi-node, then single-node"
    );
    for workload in &workloads {
        let file = workload.file;
        assert_eq!(
            seconds(&workload.pod()["securityContext"]["runAsUser"]),
            image_user,
            "{file}"
        );
        let probes = workload.probes();
        let path_of = |probe: &str| {
            probes
                .iter()
                .find(|(name, _, _)| *name == probe)
                .map(|(_, path, _)| path.as_str())
                .unwrap_or_else(|| panic!("{file}: no {probe}"))
        };
        assert_eq!(path_of("readinessProbe"), "/_anteroom/readyz", "{file}");
        assert_eq!(path_of("livenessProbe"), "/_anteroom/healthz", "{file}");
        for (probe, _, port) in &probes {
            assert_eq!(port, "http", "{file}: {probe} asks the public listener");
        }
        let data_mount = workload.container()["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|mount| mount["mountPath"] == "/var/lib/anteroom")
            .unwrap_or_else(|| panic!("{file}: the working directory is a volume"));
        let config_mount = workload.container()["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|mount| mount["mountPath"] == "/etc/anteroom");
        assert!(
            config_mount.is_some(),
            "{file}: the ConfigMap at /etc/anteroom"
        );
        assert_eq!(
            workload.container()["args"],
            serde_json::json!(["serve", "--config", "/etc/anteroom/anteroom.toml"]),
            "{file}"
        );
        if workload.spec["kind"] == "StatefulSet" {
            assert_eq!(
                workload.spec["spec"]["replicas"], 1,
                "one writer of the embedded store"
            );
            let claims = workload.spec["spec"]["volumeClaimTemplates"]
                .as_array()
                .unwrap();
            assert!(
                claims
                    .iter()
                    .any(|claim| claim["metadata"]["name"] == data_mount["name"]),
                "{file}: the store lives on a claimed volume"
            );
        }
    }

    // The replicated nodes have a budget, and it selects their pods.
    let (_, multi_node) = manifests
        .iter()
        .find(|(file, _)| file == "multi-node.yaml")
        .unwrap();
    let budget = multi_node
        .iter()
        .find(|document| document["kind"] == "PodDisruptionBudget")
        .expect("multi-node.yaml has a PodDisruptionBudget");
    let deployment = multi_node
        .iter()
        .find(|document| document["kind"] == "Deployment")
        .unwrap();
    assert!(seconds(&deployment["spec"]["replicas"]) >= 2);
    let labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    for (key, value) in budget["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(labels.get(key), Some(value), "the budget selects the nodes");
    }
}

/// What must agree with the binary: each ConfigMap's config passes `anteroom check-config`
/// with the pod's environment (its variable names included), listens on the ports the pod and
/// the example config declare, and drains within the pod's grace period after the preStop
/// pause; every Service targets a port the pods name.
#[test]
fn kubernetes_config_maps_pass_check_config_and_fit_their_pods() {
    let manifests = kubernetes_manifests();
    let example =
        anteroom_core::config::parse_config(&read_repository_file("examples/anteroom.toml"), &[])
            .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let secret = support::key_hash("a key from the Secret");
    for workload in anteroom_workloads(&manifests) {
        let file = workload.file;
        let environment = workload.environment(&secret);
        let config_path = scratch.path().join(format!("{file}.toml"));
        std::fs::write(&config_path, &workload.config_text).unwrap();
        let output = support::anteroom()
            .args(["check-config", "--config", config_path.to_str().unwrap()])
            .envs(environment.iter().map(|(name, value)| (name, value)))
            .output()
            .unwrap();
        assert!(output.status.success(), "{file}: {}", printed(&output));

        let config = anteroom_core::config::parse_config(&workload.config_text, &environment)
            .unwrap_or_else(|errors| panic!("{file}: {errors}"));
        assert_eq!(
            config.auth.admin_keys.len(),
            1,
            "{file}: admin key from the Secret"
        );
        assert_eq!(
            config.server.listen.port(),
            workload.container_port("http"),
            "{file}"
        );
        assert_eq!(
            config.server.admin_listen.port(),
            workload.container_port("admin"),
            "{file}"
        );
        assert_eq!(
            config.server.listen.port(),
            example.server.listen.port(),
            "{file}"
        );
        assert_eq!(
            config.server.admin_listen.port(),
            example.server.admin_listen.port(),
            "{file}"
        );
        assert!(
            config.server.listen.ip().is_unspecified(),
            "{file}: reachable from the Service"
        );

        let pause = workload.container()["lifecycle"]["preStop"]["exec"]["command"]
            .as_array()
            .and_then(|command| command.get(1))
            .and_then(Value::as_str)
            .map_or(0, |seconds| seconds.parse::<u64>().unwrap());
        let grace = seconds(&workload.pod()["terminationGracePeriodSeconds"]);
        let drain = config.server.connections.drain_timeout.as_secs();
        assert!(
            grace > pause + drain,
            "{file}: grace {grace}s for a {pause}s pause and a {drain}s drain"
        );
    }

    for (file, documents) in &manifests {
        let port_names: Vec<&Value> = documents
            .iter()
            .filter_map(|document| document["spec"]["template"]["spec"]["containers"].as_array())
            .flatten()
            .filter_map(|container| container["ports"].as_array())
            .flatten()
            .map(|port| &port["name"])
            .collect();
        for service in documents
            .iter()
            .filter(|document| document["kind"] == "Service")
        {
            for port in service["spec"]["ports"].as_array().unwrap() {
                assert!(
                    port_names.contains(&&port["targetPort"]),
                    "{file}: Service {} targets {}",
                    service["metadata"]["name"],
                    port["targetPort"]
                );
            }
        }
    }
}

/// A node started as each pod starts it (the ConfigMap's config, the pod's environment, the
/// volume as working directory; the keys copied in first when a Secret holds them; a real
/// Redis for the Redis store) answers every probe of the pod with 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_probes_answer_on_a_live_node() {
    let manifests = kubernetes_manifests();
    let secret = support::key_hash("a key from the Secret");
    let client = support::client();
    for workload in anteroom_workloads(&manifests) {
        let file = workload.file;
        let work = tempfile::tempdir().unwrap();
        let config_path = work.path().join("anteroom.toml");
        std::fs::write(&config_path, &workload.config_text).unwrap();
        if workload.keys_from_secret() {
            let output = support::anteroom()
                .current_dir(work.path())
                .args(["keys", "generate", "--dir", "data/keys"])
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", printed(&output));
        }
        let port = support::free_port();
        let mut environment = workload.environment(&secret);
        environment.push((
            "ANTEROOM_SERVER__LISTEN".into(),
            format!("127.0.0.1:{port}"),
        ));
        environment.push(("ANTEROOM_SERVER__ADMIN_LISTEN".into(), "127.0.0.1:0".into()));
        let redis = workload
            .config_text
            .contains("backend = \"redis\"")
            .then(RedisServer::start);
        if let Some(redis) = &redis {
            environment.push(("ANTEROOM_STORE__URL".into(), redis.url()));
        }
        let log = work.path().join("serve.log");
        let node = support::anteroom()
            .current_dir(work.path())
            .envs(environment)
            .args(["serve", "--config", config_path.to_str().unwrap()])
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let _node = KilledOnDrop(node);
        for (probe, path, _) in workload.probes() {
            let url = format!("http://127.0.0.1:{port}{path}");
            let started = std::time::Instant::now();
            loop {
                let answer = client.get(&url).send().await;
                if answer.as_ref().is_ok_and(|answer| answer.status() == 200) {
                    break;
                }
                assert!(
                    started.elapsed() < support::READY_TIMEOUT,
                    "{file}: {probe} {path} answered {answer:?}; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// A child process killed and reaped when dropped.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
