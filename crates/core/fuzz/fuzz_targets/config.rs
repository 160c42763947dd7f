//! Fuzz target `config`: the config loader never panics on any text, and every problem it
//! reports names a line of that text (no environment is given, so every value comes from a
//! line).
#![no_main]

use anteroom_core::config::parse_config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Err(errors) = parse_config(text, &[]) else {
        return;
    };
    let lines = text.lines().count().max(1);
    for problem in &errors.0 {
        let line = problem.line.unwrap_or_else(|| panic!("no line: {problem}"));
        // A syntax error at the very end of the text may point one past its last line.
        assert!(
            (1..=lines + 1).contains(&line),
            "line {line} of {lines}: {problem}"
        );
    }
});
