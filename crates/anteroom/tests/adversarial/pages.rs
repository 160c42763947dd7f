//! Custom waiting pages: what a visitor sends is escaped, and what a room may name as its
//! template is confined to the templates directory.

use std::path::{Path, PathBuf};
use std::process::Output;

use reqwest::StatusCode;

use super::limits::gate_with_server;
use super::support::{self, Site, key_hash, toml_string};

const ADMIN_KEY: &str = "pages-admin-key-0123456789abcdef";

/// A templates directory in `site` holding `sale.html` (printing `return_path` and `room` as
/// they are); its path.
fn templates_dir(site_path: &Path) -> PathBuf {
    let dir = site_path.join("pages");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("sale.html"),
        "<!doctype html><a href=\"{{ return_path }}\">back to {{ room }}</a>",
    )
    .unwrap();
    dir
}

/// The attacker sends a victim to the waiting page with `?return=` holding markup. Must hold:
/// a custom template printing `return_path` shows it escaped, never as a script. Before: the
/// templates were not escaped (minijinja escapes by file extension, and they are named `page`),
/// so this was reflected XSS.
#[tokio::test]
async fn a_return_path_cannot_script_a_custom_page() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = templates_dir(scratch.path());
    let gate = gate_with_server(
        &format!("templates_dir = {}", toml_string(&dir)),
        false,
        "[[room]]\nid = \"shop\"\nmode = \"queue_all\"\npage_template = \"sale.html\"\n",
    )
    .await;
    let answer = gate
        .client
        // ?return=/"><script>alert(1)</script>
        .get(gate.url("/_anteroom/wait/shop?return=%2F%22%3E%3Cscript%3Ealert(1)%3C%2Fscript%3E"))
        .header("Accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let html = answer.text().await.unwrap();
    assert!(html.contains("back to shop"), "the custom page: {html}");
    assert!(!html.contains("<script>"), "reflected markup: {html}");
    assert!(
        html.contains("&quot;&gt;&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
        "escaped: {html}"
    );
}

fn check_config(path: &Path) -> Output {
    support::run(&["check-config", "--config", path.to_str().unwrap()])
}

/// Writes a config whose room `shop` (on line 3 of the rooms) names `template`, with the
/// templates directory `dir`; its path.
fn config_naming(site: &Site, dir: &Path, template: &str) -> PathBuf {
    let path = site.write_config(
        "EdDSA",
        &format!("\n[[room]]\nid = \"shop\"\npage_template = {template}\n"),
    );
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "[server]\n",
        &format!("[server]\ntemplates_dir = {}\n", toml_string(dir)),
        1,
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The line of `needle` in the file at `path` (1-based).
fn line_of(path: &Path, needle: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().position(|line| line.contains(needle)).unwrap() + 1
}

/// An operator (or whoever edits the config) names the signing keys as a room's page: by an
/// absolute path, by `..`, and by a symbolic link placed in the templates directory. Must
/// hold: `check-config` refuses each, naming `page_template` (with its line where the name
/// alone shows it), and exits 64. Before: any readable file was accepted, and the preview
/// served it.
#[test]
fn check_config_refuses_templates_outside_the_templates_dir() {
    let site = Site::new();
    let dir = templates_dir(site.path());
    std::fs::create_dir_all(site.keys_dir()).unwrap();
    let secret = site.keys_dir().join("ticket.key");
    std::fs::write(&secret, "not for visitors").unwrap();
    for template in [toml_string(&secret), "\"../keys/ticket.key\"".to_owned()] {
        let path = config_naming(&site, &dir, &template);
        let output = check_config(&path);
        let errors = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{template}: {errors}");
        let line = line_of(&path, "page_template");
        assert!(
            errors.contains(&format!("line {line}")) && errors.contains("page_template"),
            "{template}: {errors}"
        );
    }
    std::os::unix::fs::symlink(&secret, dir.join("link.html")).unwrap();
    let path = config_naming(&site, &dir, "\"link.html\"");
    let output = check_config(&path);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{errors}");
    assert!(errors.contains("symbolic link"), "{errors}");

    let path = config_naming(&site, &dir, "\"sale.html\"");
    let output = check_config(&path);
    assert!(output.status.success(), "{output:?}");
}

/// An admin key holder sets a room's `page_template` to the signing keys through the admin
/// API, to read them back through the page preview. Must hold: 400 `invalid_room` naming
/// `page_template`, nothing stored (the room does not exist afterwards). Before: the room was
/// stored and `/_anteroom/wait/{room}/preview` rendered the key file.
#[tokio::test]
async fn the_admin_api_refuses_templates_outside_the_templates_dir() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = templates_dir(scratch.path());
    let admin_port = support::free_port();
    // The harness opens the admin listener on any port; this site names its own.
    let site = Site::new();
    let path = site.write_config(
        "EdDSA",
        &format!(
            "admin_keys = [\"{}\"]\n\n[[room]]\nid = \"shop\"\n",
            key_hash(ADMIN_KEY)
        ),
    );
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replacen(
            "admin_listen = \"127.0.0.1:0\"",
            &format!("admin_listen = \"127.0.0.1:{admin_port}\""),
            1,
        )
        .replacen(
            "[server]\n",
            &format!("[server]\ntemplates_dir = {}\n", toml_string(&dir)),
            1,
        );
    std::fs::write(&path, text).unwrap();
    let mut server = site.start();
    let client = support::client();
    server.wait_ready(&client).await;
    let admin = format!("http://127.0.0.1:{admin_port}/admin/v1/rooms");
    // The admin listener starts right after the public one.
    let mut listed = false;
    for _ in 0..100 {
        let answer = client.get(&admin).bearer_auth(ADMIN_KEY).send().await;
        if answer.is_ok_and(|answer| answer.status() == StatusCode::OK) {
            listed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(listed, "the admin listener answers");
    let key_file = std::fs::read_dir(site.keys_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.is_file())
        .expect("a key file");
    std::os::unix::fs::symlink(&key_file, dir.join("link.html")).unwrap();
    for template in [
        key_file.to_str().unwrap().to_owned(),
        "../keys/x".to_owned(),
        "link.html".to_owned(),
    ] {
        let answer = client
            .put(format!("{admin}/evil"))
            .bearer_auth(ADMIN_KEY)
            .json(&serde_json::json!({"page_template": template}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{template}");
        let problem: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(problem["code"], "invalid_room", "{template}: {problem}");
        assert!(
            problem.to_string().contains("page_template"),
            "{template}: {problem}"
        );
    }
    let stored = client
        .get(format!("{admin}/evil"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status(), StatusCode::NOT_FOUND, "nothing stored");
    let allowed = client
        .put(format!("{admin}/good"))
        .bearer_auth(ADMIN_KEY)
        .json(&serde_json::json!({"page_template": "sale.html"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        allowed.status(),
        StatusCode::CREATED,
        "a template inside the directory"
    );
}
