//! Human-written durations as used in the config file and the admin API: `"500ms"`, `"30s"`,
//! `"10m"`, `"1h"`, `"1h30m"`, `"2d"`.

use std::time::Duration;

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: expected a number followed by ms, s, m, h or d (e.g. \"90s\", \"10m\", \"1h30m\")"
)]
pub struct DurationError {
    input: String,
}

/// Parses a duration such as `"10m"` or `"1h30m"`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let error = || DurationError {
        input: input.to_owned(),
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(error());
    }
    let mut total_millis: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits_end == 0 {
            return Err(error());
        }
        let amount: u64 = rest[..digits_end].parse().map_err(|_| error())?;
        rest = &rest[digits_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_millis: u64 = match &rest[..unit_end] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(error()),
        };
        rest = &rest[unit_end..];
        total_millis = amount
            .checked_mul(unit_millis)
            .and_then(|millis| total_millis.checked_add(millis))
            .ok_or_else(error)?;
    }
    Ok(Duration::from_millis(total_millis))
}

/// Formats a duration in the shortest form [`parse_duration`] reads back.
pub fn format_duration(duration: Duration) -> String {
    let millis = crate::clock::duration_millis(duration);
    if millis == 0 {
        return "0s".to_owned();
    }
    let units = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let mut remaining = millis;
    let mut out = String::new();
    for (name, size) in units {
        if remaining >= size {
            out.push_str(&format!("{}{name}", remaining / size));
            remaining %= size;
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn check(input: &str, expected_millis: Option<u64>) {
        let parsed = parse_duration(input).ok().map(|d| d.as_millis() as u64);
        assert_eq!(parsed, expected_millis, "input {input:?}");
    }

    #[test]
    fn parses_units_and_combinations() {
        check("500ms", Some(500));
        check("30s", Some(30_000));
        check("10m", Some(600_000));
        check("1h30m", Some(5_400_000));
        check("2d", Some(172_800_000));
        check("0s", Some(0));
    }

    #[test]
    fn refuses_malformed() {
        check("", None);
        check("10", None);
        check("m", None);
        check("10x", None);
        check("-5s", None);
        check("99999999999999999999d", None);
    }

    #[test]
    fn format_round_trips() {
        for text in ["500ms", "30s", "10m", "1h30m", "2d", "1h1m1s1ms"] {
            let parsed = parse_duration(text).expect("valid");
            assert_eq!(format_duration(parsed), text);
        }
    }
}
