//! Reading and writing anteroom's cookies: `anteroom_t_<room>` (ticket) and
//! `anteroom_p_<room>` (pass), HttpOnly, SameSite=Lax, Path=/, Secure behind https.

use axum::http::{HeaderMap, HeaderValue, header};

/// The name of a room's ticket cookie.
pub fn ticket_cookie_name(room: &str) -> String {
    format!("anteroom_t_{room}")
}

/// The name of a room's pass cookie.
pub fn pass_cookie_name(room: &str) -> String {
    format!("anteroom_p_{room}")
}

/// The value of cookie `name` in the request, if any.
pub fn read_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim_matches('"'))
}

/// How cookies are written for this deployment.
#[derive(Debug, Clone, Copy)]
pub struct CookiePolicy {
    /// Add `Secure` (the public URL is https).
    pub secure: bool,
}

impl CookiePolicy {
    /// A `Set-Cookie` value for `name=value` living `max_age_secs`.
    pub fn set(&self, name: &str, value: &str, max_age_secs: u64) -> Option<HeaderValue> {
        use std::fmt::Write as _;
        const ATTRIBUTES: &str = "; Path=/; Max-Age=; HttpOnly; SameSite=Lax; Secure";
        let mut text = String::with_capacity(name.len() + value.len() + ATTRIBUTES.len() + 21);
        text.push_str(name);
        text.push('=');
        text.push_str(value);
        // Writing into a String cannot fail.
        let _ = write!(
            text,
            "; Path=/; Max-Age={max_age_secs}; HttpOnly; SameSite=Lax"
        );
        if self.secure {
            text.push_str("; Secure");
        }
        // The header value takes the text as it is, without another copy.
        HeaderValue::from_maybe_shared(axum::body::Bytes::from(text)).ok()
    }

    /// A `Set-Cookie` value that deletes `name`.
    pub fn clear(&self, name: &str) -> Option<HeaderValue> {
        self.set(name, "", 0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_one_cookie_among_many() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; anteroom_t_sale=t1.x; b=2"),
        );
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("anteroom_p_sale=\"jwt\""),
        );
        assert_eq!(read_cookie(&headers, "anteroom_t_sale"), Some("t1.x"));
        assert_eq!(read_cookie(&headers, "anteroom_p_sale"), Some("jwt"));
        assert_eq!(read_cookie(&headers, "anteroom_t_other"), None);
    }

    #[test]
    fn writes_hardened_cookies() {
        let policy = CookiePolicy { secure: true };
        let value = policy.set("anteroom_t_sale", "abc", 60).unwrap();
        assert_eq!(
            value,
            "anteroom_t_sale=abc; Path=/; Max-Age=60; HttpOnly; SameSite=Lax; Secure"
        );
    }
}
