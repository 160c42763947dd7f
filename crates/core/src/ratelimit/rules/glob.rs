//! Path globs (`/events/*/book/**`) compiled once, and the path normalisation every match runs
//! on, so `//api/./x/` and `/api/x` are the same path to a rule.
//!
//! - `*` as a whole segment matches exactly one non-empty segment; inside a segment
//!   (`*.css`, `v*`) it matches any run of characters other than `/`.
//! - `**` as a whole segment matches any number of segments, none included: `/api/**`
//!   matches `/api`, `/api/x` and `/api/x/y`.
//! - Everything else matches itself, case-sensitively; a glob made
//!   [`ignoring_ascii_case`](PathGlob::ignoring_ascii_case) (a route with
//!   `case_insensitive = true`, for origins such as IIS) matches it in any ASCII case.

use std::borrow::Cow;
use std::fmt;

/// A compiled path glob.
///
/// ```
/// use anteroom_core::ratelimit::rules::PathGlob;
///
/// let glob = PathGlob::new("/_anteroom/v1/rooms/*/join").expect("valid");
/// assert!(glob.matches("/_anteroom/v1/rooms/launch/join"));
/// assert!(!glob.matches("/_anteroom/v1/rooms/launch/status"));
/// assert!(PathGlob::new("/static/**").expect("valid").matches("/static/css/site.css"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathGlob {
    source: String,
    segments: Vec<Segment>,
    case: Case,
}

/// How a glob's literal text compares with a path's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Case {
    /// Byte for byte.
    Sensitive,
    /// ASCII letters in either case (the glob's literals are kept in lower case).
    IgnoreAscii,
}

impl Case {
    fn eq(self, literal: &str, text: &str) -> bool {
        match self {
            Case::Sensitive => literal == text,
            Case::IgnoreAscii => literal.eq_ignore_ascii_case(text),
        }
    }

    fn starts_with(self, text: &str, piece: &str) -> bool {
        text.get(..piece.len())
            .is_some_and(|start| self.eq(piece, start))
    }

    fn ends_with(self, text: &str, piece: &str) -> bool {
        text.len() >= piece.len()
            && text
                .get(text.len() - piece.len()..)
                .is_some_and(|end| self.eq(piece, end))
    }

    /// Where `piece` first appears in `text`.
    fn find(self, text: &str, piece: &str) -> Option<usize> {
        match self {
            Case::Sensitive => text.find(piece),
            Case::IgnoreAscii => (0..=text.len().checked_sub(piece.len())?).find(|&at| {
                text.get(at..at + piece.len())
                    .is_some_and(|window| window.eq_ignore_ascii_case(piece))
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Segment {
    /// Matches this exact segment.
    Literal(String),
    /// `*`: exactly one non-empty segment.
    One,
    /// `**`: zero or more segments.
    AnyDepth,
    /// A segment with `*` inside: the literal pieces between the stars, in order.
    Wildcard(Vec<String>),
}

/// Why a path glob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// The glob does not start with `/`.
    #[error("path glob {0:?} must start with '/'")]
    NotAbsolute(String),
    /// `**` was used inside a segment.
    #[error("path glob {0:?}: `**` must be a whole segment, as in \"/api/**\"")]
    DoubleStarInSegment(String),
    /// The glob holds a character that never appears in a request path.
    #[error("path glob {0:?} must not contain spaces, control characters, '?' or '#'")]
    InvalidCharacter(String),
}

impl PathGlob {
    /// Compiles `pattern`. The pattern is normalised like a request path (see
    /// [`normalize_path`]), so `/api/x/` and `/api//x` mean `/api/x`.
    pub fn new(pattern: &str) -> Result<PathGlob, GlobError> {
        if !pattern.starts_with('/') {
            return Err(GlobError::NotAbsolute(pattern.to_owned()));
        }
        if pattern
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
        {
            return Err(GlobError::InvalidCharacter(pattern.to_owned()));
        }
        let normalized = normalize_path(pattern);
        let mut segments = Vec::new();
        for text in path_segments(&normalized) {
            let segment = match text {
                "**" => Segment::AnyDepth,
                "*" => Segment::One,
                _ if text.contains("**") => {
                    return Err(GlobError::DoubleStarInSegment(pattern.to_owned()));
                }
                _ if text.contains('*') => {
                    Segment::Wildcard(text.split('*').map(str::to_owned).collect())
                }
                _ => Segment::Literal(text.to_owned()),
            };
            // `**/**` means the same as `**`; one keeps matching linear.
            if segment == Segment::AnyDepth && segments.last() == Some(&Segment::AnyDepth) {
                continue;
            }
            segments.push(segment);
        }
        Ok(PathGlob {
            source: pattern.to_owned(),
            segments,
            case: Case::Sensitive,
        })
    }

    /// This glob, matching paths in any ASCII case (`/admin/**` then matches `/ADMIN/x`).
    ///
    /// ```
    /// use anteroom_core::ratelimit::rules::PathGlob;
    ///
    /// let glob = PathGlob::new("/Admin/*.aspx").expect("valid").ignoring_ascii_case();
    /// assert!(glob.matches("/aDMIN/Users.ASPX"));
    /// ```
    pub fn ignoring_ascii_case(mut self) -> PathGlob {
        for segment in &mut self.segments {
            match segment {
                Segment::Literal(literal) => literal.make_ascii_lowercase(),
                Segment::Wildcard(pieces) => pieces
                    .iter_mut()
                    .for_each(|piece| piece.make_ascii_lowercase()),
                Segment::One | Segment::AnyDepth => {}
            }
        }
        self.case = Case::IgnoreAscii;
        self
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether `path`, as a request sent it, matches: it is normalised with
    /// [`normalize_path`] first.
    pub fn matches(&self, path: &str) -> bool {
        self.matches_normalized(&normalize_path(path))
    }

    /// Whether `normalized`, a path [`normalize_path`] returned, matches. It is not
    /// normalised again: decoded text is taken as it is (normalising twice would decode
    /// twice, and cut `/a%3F/b` at the decoded `?`).
    pub fn matches_normalized(&self, normalized: &str) -> bool {
        if let Some(matched) = self.matches_literally(normalized) {
            return matched;
        }
        let path: Vec<&str> = path_segments(normalized).collect();
        self.matches_segments(&path)
    }

    /// The match of a glob of literal segments, perhaps ending in `**` (`/api/**`, `/**`,
    /// `/login`: most globs), segment by segment; `None` for other globs.
    fn matches_literally(&self, normalized: &str) -> Option<bool> {
        let (literals, any_depth_after) = match self.segments.split_last() {
            Some((Segment::AnyDepth, before)) => (before, true),
            _ => (self.segments.as_slice(), false),
        };
        let mut path = path_segments(normalized);
        for segment in literals {
            let Segment::Literal(literal) = segment else {
                return None;
            };
            // Every segment before this one is literal: this one's place in the path is fixed.
            if !path.next().is_some_and(|text| self.case.eq(literal, text)) {
                return Some(false);
            }
        }
        Some(any_depth_after || path.next().is_none())
    }

    /// The general match, over the path's segments.
    fn matches_segments(&self, path: &[&str]) -> bool {
        // reachable[i]: the glob's segments so far can consume exactly the first i path segments.
        let mut reachable = vec![false; path.len() + 1];
        reachable[0] = true;
        for segment in &self.segments {
            match segment {
                Segment::AnyDepth => {
                    // Once some prefix is reachable, every longer one is too.
                    let mut seen = false;
                    for slot in reachable.iter_mut() {
                        seen |= *slot;
                        *slot = seen;
                    }
                }
                _ => {
                    for i in (0..path.len()).rev() {
                        reachable[i + 1] = reachable[i] && segment.matches_one(path[i], self.case);
                    }
                    reachable[0] = false;
                }
            }
            if !reachable.contains(&true) {
                return false;
            }
        }
        reachable[path.len()]
    }
}

impl fmt::Display for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl Segment {
    fn matches_one(&self, text: &str, case: Case) -> bool {
        match self {
            Segment::Literal(literal) => case.eq(literal, text),
            Segment::One => !text.is_empty(),
            Segment::AnyDepth => true,
            Segment::Wildcard(pieces) => wildcard_matches(pieces, text, case),
        }
    }
}

/// `pieces` are the literal parts of a segment split at its stars: the first must be a prefix,
/// the last a suffix, and the middle ones must appear in order between them.
fn wildcard_matches(pieces: &[String], text: &str, case: Case) -> bool {
    let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else {
        return true;
    };
    if text.len() < first.len() + last.len() || !case.starts_with(text, first) {
        return false;
    }
    if !case.ends_with(text, last) {
        return false;
    }
    let mut middle = &text[first.len()..text.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match case.find(middle, piece) {
            Some(at) => middle = &middle[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// The segments of a normalised path: none for `/`.
fn path_segments(normalized: &str) -> impl Iterator<Item = &str> {
    normalized
        .strip_prefix('/')
        .unwrap_or(normalized)
        .split('/')
        .filter(|segment| !segment.is_empty())
}

/// Puts a request path in the one form rules match against, so the same resource cannot be
/// spelled past a rule:
/// - anything from `?` or `#` on is dropped;
/// - percent-encodings are decoded, once, `%2F` included: a site behind anteroom may well
///   treat `/a%2Fb` as `/a/b`, and a rule had better select too many spellings than too few
///   (bytes that do not form UTF-8 become U+FFFD);
/// - empty segments (`//`) and `.` segments are removed, `..` removes the segment before it
///   (never going above `/`);
/// - a trailing `/` is dropped (except for `/` itself); an empty path is `/`.
///
/// ```
/// use anteroom_core::ratelimit::rules::normalize_path;
///
/// assert_eq!(normalize_path("//api/./v1/../%6Aoin/?x=1"), "/api/join");
/// assert_eq!(normalize_path("/api%2Fjoin"), "/api/join");
/// ```
pub fn normalize_path(raw: &str) -> Cow<'_, str> {
    let path = raw.split(['?', '#']).next().unwrap_or_default();
    if is_normal(path) {
        return Cow::Borrowed(path);
    }
    let decoded = percent_decode(path);
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(segment),
        }
    }
    let mut out = String::with_capacity(decoded.len() + 1);
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    if out.is_empty() {
        out.push('/');
    }
    Cow::Owned(out)
}

/// Whether `path` is already normal: the common case costs no allocation.
fn is_normal(path: &str) -> bool {
    if path == "/" {
        return true;
    }
    if !path.starts_with('/') || path.ends_with('/') || path.contains('%') {
        return false;
    }
    path[1..]
        .split('/')
        .all(|segment| !matches!(segment, "" | "." | ".."))
}

fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) = (
                bytes.get(i + 1).and_then(|b| hex_value(*b)),
                bytes.get(i + 2).and_then(|b| hex_value(*b)),
            )
        {
            out.push(high * 16 + low);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn literal_globs_match_as_the_general_algorithm_does() {
        let globs = [
            "/",
            "/**",
            "/api",
            "/api/**",
            "/api/v1",
            "/api/v1/**",
            "/a/b/c",
            "/x/**",
            "/*",
        ];
        let paths = [
            "/",
            "/api",
            "/api/",
            "/api/v1",
            "/api/v1/x",
            "/apis",
            "/a/b",
            "/a/b/c",
            "/a/b/c/d",
            "/x",
            "/x/y",
            "//api//v1/",
            "/api/../x/y",
        ];
        for glob in globs {
            let compiled = PathGlob::new(glob).unwrap();
            for path in paths {
                let normalized = normalize_path(path);
                let segments: Vec<&str> = path_segments(&normalized).collect();
                let general = compiled.matches_segments(&segments);
                if let Some(literally) = compiled.matches_literally(&normalized) {
                    assert_eq!(literally, general, "{glob:?} against {path:?}");
                } else {
                    assert_eq!(glob, "/*", "only `/*` is not literal here");
                }
                assert_eq!(compiled.matches(path), general, "{glob:?} against {path:?}");
            }
        }
    }

    #[test]
    fn decoded_text_is_matched_as_it_is() {
        let glob = PathGlob::new("/events/*/book/**").unwrap();
        for path in [
            "/events/1%3F/book",
            "/events/1%23/book/x",
            "/events/%3F/book",
        ] {
            assert!(glob.matches(path), "{path}");
        }
    }

    #[test]
    fn a_glob_ignoring_case_matches_as_on_lower_cased_text() {
        let globs = ["/Admin/**", "/a/*.ASPX", "/x/v*Z*q", "/*/Users", "/é/B"];
        let paths = [
            "/admin",
            "/ADMIN/x",
            "/aDmIn/Users",
            "/a/Default.aspx",
            "/A/x.AsPx",
            "/x/VzZQ",
            "/x/vq",
            "/x/v-z-Q",
            "/1/USERS",
            "/é/b",
            "/É/b",
            "/adminx",
        ];
        for glob in globs {
            let insensitive = PathGlob::new(glob).unwrap().ignoring_ascii_case();
            let lower = PathGlob::new(&glob.to_ascii_lowercase()).unwrap();
            for path in paths {
                assert_eq!(
                    insensitive.matches(path),
                    lower.matches(&path.to_ascii_lowercase()),
                    "{glob:?} against {path:?}"
                );
            }
        }
    }
}
