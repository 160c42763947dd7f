//! Reading and writing anteroom's cookies: `anteroom_t_<room>` (ticket) and
//! `anteroom_p_<room>` (pass), HttpOnly, SameSite=Lax, Path=/, Secure behind https.
//!
//! A room's cookie is read and written from the prefix and the room id, without building its
//! name, since every request through a protected route looks for one. `asked_passes` lists the
//! passes a request presents: the cookie, then `X-Anteroom-Pass`, then a bearer token.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use anteroom_core::RoomId;

/// What a room's ticket cookie's name starts with; the room id follows.
pub(crate) const TICKET_COOKIE_PREFIX: &str = "anteroom_t_";

/// What a room's pass cookie's name starts with; the room id follows.
pub(crate) const PASS_COOKIE_PREFIX: &str = "anteroom_p_";

/// The name of a room's pass cookie.
pub fn pass_cookie_name(room: &str) -> String {
    format!("{PASS_COOKIE_PREFIX}{room}")
}

/// The value of cookie `name` in the request, if any.
pub fn read_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    find_cookie(headers, |key| key == name.as_bytes())
}

/// The value of the cookie named `prefix` followed by `room`, without building the name.
pub(crate) fn read_room_cookie<'a>(
    headers: &'a HeaderMap,
    prefix: &str,
    room: &str,
) -> Option<&'a str> {
    find_cookie(headers, |key| {
        key.strip_prefix(prefix.as_bytes()) == Some(room.as_bytes())
    })
}

/// The value of the first cookie whose name `is_name` accepts, in `Cookie` lines of
/// `name=value` pairs separated by `;` (spaces around names and values ignored). Works on bytes and checks only the value found: pass
/// cookies are long, and every protected request reads one.
fn find_cookie(headers: &HeaderMap, is_name: impl Fn(&[u8]) -> bool) -> Option<&str> {
    headers.get_all(header::COOKIE).iter().find_map(|line| {
        let mut rest = line.as_bytes();
        loop {
            let end = memchr::memchr(b';', rest).unwrap_or(rest.len());
            let pair = &rest[..end];
            if let Some(equals) = memchr::memchr(b'=', pair)
                && is_name(pair[..equals].trim_ascii())
            {
                let value = trim_quotes(pair[equals + 1..].trim_ascii());
                return std::str::from_utf8(value).ok();
            }
            rest = rest.get(end + 1..)?;
        }
    })
}

/// `value` without the double quotes around it (`"abc"` and `abc` are the same cookie value).
fn trim_quotes(value: &[u8]) -> &[u8] {
    let start = value.iter().position(|&b| b != b'"').unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|&b| b != b'"')
        .map_or(start, |last| last + 1);
    &value[start..end]
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
        self.set_named(&[name], value, max_age_secs)
    }

    /// A `Set-Cookie` value that deletes `name`.
    pub fn clear(&self, name: &str) -> Option<HeaderValue> {
        self.set(name, "", 0)
    }

    /// [`set`](Self::set) for the cookie named `prefix` followed by `room`, without
    /// building the name first (every join and status answer sets one).
    pub(crate) fn set_for_room(
        &self,
        prefix: &str,
        room: &str,
        value: &str,
        max_age_secs: u64,
    ) -> Option<HeaderValue> {
        self.set_named(&[prefix, room], value, max_age_secs)
    }

    /// [`clear`](Self::clear) for the cookie named `prefix` followed by `room`.
    pub(crate) fn clear_for_room(&self, prefix: &str, room: &str) -> Option<HeaderValue> {
        self.set_for_room(prefix, room, "", 0)
    }

    /// The cookie whose name is `name`'s pieces in a row, in a buffer of exactly its size.
    fn set_named(&self, name: &[&str], value: &str, max_age_secs: u64) -> Option<HeaderValue> {
        const PATH: &str = "; Path=/; Max-Age=";
        const FLAGS: &str = "; HttpOnly; SameSite=Lax";
        const SECURE: &str = "; Secure";
        let mut digits = itoa::Buffer::new();
        let max_age = digits.format(max_age_secs).as_bytes();
        let length = name.iter().map(|piece| piece.len()).sum::<usize>()
            + 1
            + value.len()
            + PATH.len()
            + max_age.len()
            + FLAGS.len()
            + if self.secure { SECURE.len() } else { 0 };
        let mut text = Vec::with_capacity(length);
        for piece in name {
            text.extend_from_slice(piece.as_bytes());
        }
        text.push(b'=');
        text.extend_from_slice(value.as_bytes());
        text.extend_from_slice(PATH.as_bytes());
        text.extend_from_slice(max_age);
        text.extend_from_slice(FLAGS.as_bytes());
        if self.secure {
            text.extend_from_slice(SECURE.as_bytes());
        }
        // A buffer as long as its capacity becomes the header value's bytes without another
        // allocation or copy.
        HeaderValue::from_maybe_shared(axum::body::Bytes::from(text)).ok()
    }
}

/// The header a client without cookies presents its pass in.
static PASS_HEADER: HeaderName = HeaderName::from_static("x-anteroom-pass");

/// The most pass tokens examined for a room in one request. Each costs a signature check when
/// it is not a cached pass, and every `X-Anteroom-Pass` or `Authorization` line is one more:
/// without a cap, one request of a hundred forged lines would cost a hundred checks. A browser
/// sends one cookie per room; the bearer token may be the site's own, hence room for a few.
const MAX_ASKED_PASSES: usize = 4;

/// The pass tokens a request presents for `room`, at most `MAX_ASKED_PASSES` (4): its cookie,
/// then `X-Anteroom-Pass`, then a bearer token (which may be the site's own token, not a
/// pass: it then simply does not verify). The fields after the cookie are looked up only
/// when the caller asks for more than the cookie (a valid cookie pass ends most searches).
pub fn asked_passes<'a>(headers: &'a HeaderMap, room: &RoomId) -> impl Iterator<Item = &'a str> {
    let cookie = read_room_cookie(headers, PASS_COOKIE_PREFIX, room.as_str());
    let header = text_lines(headers, &PASS_HEADER);
    let bearer = text_lines(headers, header::AUTHORIZATION)
        .filter_map(|value| value.strip_prefix("Bearer "));
    cookie
        .into_iter()
        .chain(header)
        .chain(bearer)
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .take(MAX_ASKED_PASSES)
}

/// The text values of field `name`, looked up when first asked for.
fn text_lines<'a>(
    headers: &'a HeaderMap,
    name: impl header::AsHeaderName + 'a,
) -> impl Iterator<Item = &'a str> {
    std::iter::once(name)
        .flat_map(|name| headers.get_all(name))
        .filter_map(|value| value.to_str().ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The name of a room's ticket cookie.
    fn ticket_cookie_name(room: &str) -> String {
        format!("{TICKET_COOKIE_PREFIX}{room}")
    }

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
    fn reads_cookies_in_odd_but_valid_lines() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static(";; novalue ;  spaced=  v1  ;empty=;q=\"\";last=x=y;"),
        );
        headers.append(header::COOKIE, HeaderValue::from_static("later=2"));
        assert_eq!(read_cookie(&headers, "spaced"), Some("v1"));
        assert_eq!(read_cookie(&headers, "empty"), Some(""));
        assert_eq!(read_cookie(&headers, "q"), Some(""));
        assert_eq!(read_cookie(&headers, "last"), Some("x=y"));
        assert_eq!(read_cookie(&headers, "later"), Some("2"));
        assert_eq!(read_cookie(&headers, "novalue"), None);
        assert_eq!(read_cookie(&headers, ""), None);
        // A value that is not text is skipped, and the search goes on in the next line.
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_bytes(b"k=\xff\xfe").expect("a valid header value"),
        );
        headers.append(header::COOKIE, HeaderValue::from_static("k=ok"));
        assert_eq!(read_cookie(&headers, "k"), Some("ok"));
    }

    #[test]
    fn reads_a_room_s_cookie_by_prefix() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("anteroom_t_sale2=no; anteroom_t_sale=t1.x; anteroom_t_=e"),
        );
        assert_eq!(
            read_room_cookie(&headers, TICKET_COOKIE_PREFIX, "sale"),
            Some("t1.x")
        );
        assert_eq!(read_room_cookie(&headers, PASS_COOKIE_PREFIX, "sale"), None);
        assert_eq!(
            read_room_cookie(&headers, TICKET_COOKIE_PREFIX, "sale"),
            read_cookie(&headers, &ticket_cookie_name("sale"))
        );
    }

    #[test]
    fn a_room_s_cookie_is_written_like_any_other() {
        for secure in [false, true] {
            let policy = CookiePolicy { secure };
            for max_age in [0, 7, 86_400, u64::MAX] {
                assert_eq!(
                    policy.set_for_room(PASS_COOKIE_PREFIX, "sale", "jwt", max_age),
                    policy.set(&pass_cookie_name("sale"), "jwt", max_age)
                );
            }
            assert_eq!(
                policy.clear_for_room(TICKET_COOKIE_PREFIX, "sale").unwrap(),
                format!(
                    "anteroom_t_sale=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax{}",
                    if secure { "; Secure" } else { "" }
                )
            );
        }
    }

    #[test]
    fn at_most_four_passes_are_examined_in_the_order_presented() {
        let room: RoomId = "sale".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("anteroom_p_sale=c"),
        );
        for token in ["h1", "h2", "h3", "h4", "h5"] {
            headers.append(&PASS_HEADER, HeaderValue::from_static(token));
        }
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        let asked: Vec<&str> = asked_passes(&headers, &room).collect();
        assert_eq!(asked, ["c", "h1", "h2", "h3"]);
        assert_eq!(asked.len(), MAX_ASKED_PASSES);
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
