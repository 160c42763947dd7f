//! A rule's `match`: hosts, path globs, methods and header conditions, compiled once.
//!
//! Each list that is not empty must be satisfied: the host is one of `hosts`, the path matches
//! one of `paths`, the method is one of `methods`, and *every* header condition holds. An empty
//! matcher selects every request.

use super::glob::{GlobError, PathGlob};
use super::request_view::RequestView;

/// Which requests a rule selects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestMatcher {
    /// Any of these hosts; empty = any host.
    pub hosts: Vec<HostPattern>,
    /// Any of these path globs; empty = any path.
    pub paths: Vec<PathGlob>,
    /// Any of these methods (upper case, matched without case, `GET` selecting `HEAD` too);
    /// empty = any method.
    pub methods: Vec<String>,
    /// All of these conditions.
    pub headers: Vec<HeaderCondition>,
}

/// One list of a `match`, as the configuration names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatcherField {
    /// `hosts`.
    Hosts,
    /// `paths`.
    Paths,
    /// `methods`.
    Methods,
    /// `headers`.
    Headers,
}

impl MatcherField {
    /// Every field, in the order the configuration documents them.
    pub const ALL: [MatcherField; 4] = [
        MatcherField::Hosts,
        MatcherField::Paths,
        MatcherField::Methods,
        MatcherField::Headers,
    ];

    /// The field's key in a configuration table.
    pub fn key(self) -> &'static str {
        match self {
            MatcherField::Hosts => "hosts",
            MatcherField::Paths => "paths",
            MatcherField::Methods => "methods",
            MatcherField::Headers => "headers",
        }
    }

    /// The field written as `key`, if it is one.
    pub fn from_key(key: &str) -> Option<MatcherField> {
        MatcherField::ALL
            .into_iter()
            .find(|field| field.key() == key)
    }
}

/// A host a rule selects: exact (`shop.example`) or every subdomain (`*.shop.example`, which
/// does not select `shop.example` itself). Compared case-insensitively, without the port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// This host only.
    Exact(String),
    /// Any host ending in `.` + this suffix.
    Subdomains(String),
}

/// A condition on a request header; names are compared case-insensitively, values exactly
/// (the first value of the header, trimmed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HeaderCondition {
    /// `"X-Api-Key"`: the header is present (with any value).
    Present(String),
    /// `"X-Tier=free"`: the header's value is exactly this.
    Equals(String, String),
}

/// Why part of a `match` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatcherError {
    /// A path glob is malformed.
    #[error(transparent)]
    Glob(#[from] GlobError),
    /// A host is malformed.
    #[error(
        "invalid host {0:?}: expected a host name such as \"shop.example\" or \"*.shop.example\""
    )]
    Host(String),
    /// A method is not an HTTP token.
    #[error("invalid method {0:?}: expected an HTTP method such as \"POST\"")]
    Method(String),
    /// A header condition is malformed.
    #[error("invalid header condition {0:?}: expected \"Name\" or \"Name=value\"")]
    Header(String),
}

impl RequestMatcher {
    /// This matcher, also requiring one of `globs`.
    pub fn with_paths<'a>(
        mut self,
        globs: impl IntoIterator<Item = &'a str>,
    ) -> Result<RequestMatcher, MatcherError> {
        for glob in globs {
            self.paths.push(PathGlob::new(glob)?);
        }
        Ok(self)
    }

    /// This matcher, also requiring one of `hosts`.
    pub fn with_hosts<'a>(
        mut self,
        hosts: impl IntoIterator<Item = &'a str>,
    ) -> Result<RequestMatcher, MatcherError> {
        for host in hosts {
            self.hosts.push(host.parse()?);
        }
        Ok(self)
    }

    /// This matcher, also requiring one of `methods`.
    pub fn with_methods<'a>(
        mut self,
        methods: impl IntoIterator<Item = &'a str>,
    ) -> Result<RequestMatcher, MatcherError> {
        for method in methods {
            self.methods.push(parse_method(method)?);
        }
        Ok(self)
    }

    /// This matcher, also requiring every one of `conditions`.
    pub fn with_headers<'a>(
        mut self,
        conditions: impl IntoIterator<Item = &'a str>,
    ) -> Result<RequestMatcher, MatcherError> {
        for condition in conditions {
            self.headers.push(condition.parse()?);
        }
        Ok(self)
    }

    /// Adds one entry written under `field`, checked as the `with_*` builder of that list checks
    /// it; on an error the matcher is unchanged.
    pub fn add(&mut self, field: MatcherField, text: &str) -> Result<(), MatcherError> {
        match field {
            MatcherField::Hosts => self.hosts.push(text.parse()?),
            MatcherField::Paths => self.paths.push(PathGlob::new(text)?),
            MatcherField::Methods => self.methods.push(parse_method(text)?),
            MatcherField::Headers => self.headers.push(text.parse()?),
        }
        Ok(())
    }

    /// Whether `request` satisfies every list of the matcher.
    pub fn matches(&self, request: &impl RequestView) -> bool {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| selects(m, request.method())) {
            return false;
        }
        if !self.hosts.is_empty() {
            let Some(host) = request.host() else {
                return false;
            };
            if !self.hosts.iter().any(|pattern| pattern.matches(host)) {
                return false;
            }
        }
        if !self.paths.is_empty() {
            let path = request.path();
            if !self.paths.iter().any(|glob| glob.matches_normalized(path)) {
                return false;
            }
        }
        self.headers
            .iter()
            .all(|condition| condition.holds(request))
    }
}

impl HostPattern {
    /// Whether `host` (normalised with [`normalize_host`]) is selected.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(exact) => host == exact,
            HostPattern::Subdomains(suffix) => host
                .strip_suffix(suffix.as_str())
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|head| !head.is_empty()),
        }
    }
}

impl std::str::FromStr for HostPattern {
    type Err = MatcherError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || MatcherError::Host(text.to_owned());
        let (subdomains, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let name = name.to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name);
        let valid = !name.is_empty()
            && name.len() <= 253
            && !name.starts_with('.')
            && !name.contains("..")
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
        if !valid {
            return Err(error());
        }
        Ok(if subdomains {
            HostPattern::Subdomains(name.to_owned())
        } else {
            HostPattern::Exact(name.to_owned())
        })
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPattern::Exact(host) => f.write_str(host),
            HostPattern::Subdomains(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

impl HeaderCondition {
    /// The header's name, in lower case.
    pub fn name(&self) -> &str {
        match self {
            HeaderCondition::Present(name) | HeaderCondition::Equals(name, _) => name,
        }
    }

    /// Whether the condition holds for `request`.
    pub fn holds(&self, request: &impl RequestView) -> bool {
        match self {
            HeaderCondition::Present(name) => request.header(name).is_some(),
            HeaderCondition::Equals(name, value) => request
                .header(name)
                .is_some_and(|found| found.trim() == value),
        }
    }
}

impl std::str::FromStr for HeaderCondition {
    type Err = MatcherError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = || MatcherError::Header(text.to_owned());
        let (name, value) = match text.split_once('=') {
            Some((name, value)) => (name.trim(), Some(value.trim())),
            None => (text.trim(), None),
        };
        if !is_token(name) {
            return Err(error());
        }
        let name = name.to_ascii_lowercase();
        match value {
            None => Ok(HeaderCondition::Present(name)),
            Some(value)
                if value
                    .bytes()
                    .all(|b| b == b'\t' || (b' '..=b'~').contains(&b)) =>
            {
                Ok(HeaderCondition::Equals(name, value.to_owned()))
            }
            Some(_) => Err(error()),
        }
    }
}

impl std::fmt::Display for HeaderCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderCondition::Present(name) => f.write_str(name),
            HeaderCondition::Equals(name, value) => write!(f, "{name}={value}"),
        }
    }
}

/// Whether the listed method `listed` (upper case) selects a request sent with `method`.
/// Compared without case: an origin that reads `post` as `POST` must not see it pass a rule or
/// route written for `POST` unchecked. `GET` selects `HEAD` too: a HEAD is the GET without its
/// body (RFC 9110 §9.3.2), and origins run the GET's handler for it, so a route protecting
/// GET must not let HEAD walk past.
fn selects(listed: &str, method: &str) -> bool {
    listed.eq_ignore_ascii_case(method) || (listed == "GET" && method.eq_ignore_ascii_case("HEAD"))
}

/// A method as matched: an HTTP token, upper-cased (methods are conventionally upper case and
/// a config that says `post` means `POST`).
fn parse_method(text: &str) -> Result<String, MatcherError> {
    let method = text.trim();
    if is_token(method) {
        Ok(method.to_ascii_uppercase())
    } else {
        Err(MatcherError::Method(text.to_owned()))
    }
}

/// An HTTP token (RFC 9110 §5.6.2), as header names and methods are.
pub(super) fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A `Host` header (or URI authority) in the form rules compare: lower case, without the port
/// or a trailing dot. An IPv6 literal keeps its brackets.
///
/// ```
/// use anteroom_core::ratelimit::rules::normalize_host;
///
/// assert_eq!(normalize_host("Shop.Example.:8443"), "shop.example");
/// assert_eq!(normalize_host("[::1]:8080"), "[::1]");
/// ```
pub fn normalize_host(raw: &str) -> String {
    let raw = raw.trim();
    let host = if raw.starts_with('[') {
        match raw.find(']') {
            Some(end) => &raw[..=end],
            None => raw,
        }
    } else {
        match raw.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => raw,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    host.to_ascii_lowercase()
}

/// A request's host as sent, normalised with [`normalize_host`] on first use: most rules and
/// routes never look at the host, and normalising allocates. Request views keep one.
#[derive(Debug, Default)]
pub struct LazyHost<'a> {
    raw: Option<&'a str>,
    normalized: std::cell::OnceCell<Option<String>>,
}

impl<'a> LazyHost<'a> {
    /// The host `raw` as sent (the target's authority or the `Host` header), if any.
    pub fn new(raw: Option<&'a str>) -> LazyHost<'a> {
        LazyHost {
            raw,
            normalized: std::cell::OnceCell::new(),
        }
    }

    /// The normalised host; `None` when there is none or it normalises to nothing.
    pub fn get(&self) -> Option<&str> {
        self.normalized
            .get_or_init(|| self.raw.map(normalize_host).filter(|host| !host.is_empty()))
            .as_deref()
    }
}
