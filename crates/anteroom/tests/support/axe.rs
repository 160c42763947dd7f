//! axe-core, the accessibility rules the browser tests hold every page to (WCAG 2.1 A and AA,
//! plus axe's best practices such as landmarks). `scripts/axe-core` installs the pinned version
//! into the build directory when it is missing; the tests run it from here, so a test started
//! on its own installs what it needs.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// What a test runs in the page (after axe's own source): every rule axe enables by default,
/// the violations returned as `{id, impact, help, nodes: ["<selector>: <why>"]}`.
const RUN: &str = r#"
return axe.run(document, { resultTypes: ["violations"] }).then(function (result) {
  return result.violations.map(function (violation) {
    return { id: violation.id, impact: violation.impact, help: violation.help,
             nodes: violation.nodes.map(function (node) { return node.target.join(" ") + ": " + node.failureSummary; }) };
  });
});
"#;

/// The script that loads axe into the current page and returns its violations.
pub(crate) fn script() -> String {
    format!("{}\n{RUN}", source())
}

/// Fails the test listing every violation `page` has.
pub(crate) fn assert_no_violations(page: &str, violations: &Value) {
    let list = violations.as_array().expect("axe returns a list");
    if list.is_empty() {
        return;
    }
    let mut report = format!("{page}: {} accessibility violations\n", list.len());
    for violation in list {
        report.push_str(&format!(
            "- {} ({}): {}\n",
            violation["id"].as_str().unwrap_or("?"),
            violation["impact"].as_str().unwrap_or("?"),
            violation["help"].as_str().unwrap_or("?"),
        ));
        for node in violation["nodes"].as_array().into_iter().flatten() {
            report.push_str(&format!("    {}\n", node.as_str().unwrap_or("?")));
        }
    }
    panic!("{report}");
}

/// axe-core's browser bundle, installed on first use.
fn source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let output = Command::new(root.join("scripts/axe-core"))
            .output()
            .expect("run scripts/axe-core");
        assert!(
            output.status.success(),
            "scripts/axe-core could not install axe-core (npm):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let bundle = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        std::fs::read_to_string(root.join(&bundle))
            .unwrap_or_else(|error| panic!("cannot read {bundle}: {error}"))
    })
}
