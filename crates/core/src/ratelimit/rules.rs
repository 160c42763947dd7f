//! Rate-limit rules (SPEC §10.2): which requests a rule selects, which key it counts them
//! under, and what happens when its limit is reached.
//!
//! A rule is plain data. Evaluating it against a request goes through [`RequestView`], which
//! the HTTP layer implements over a real request: the core never sees HTTP types. Everything
//! here is a pure function of its arguments.
//!
//! - [`RequestMatcher`] selects requests by host, path glob, method and headers.
//! - [`KeyPart`]s build the counter key: client IP (IPv6 by prefix), header, cookie, claim,
//!   path, host. A request that lacks one of the parts is not counted by the rule (as nginx
//!   does with an empty key); pair such rules with a per-IP rule.
//! - [`applicable_rules`] picks the rules that apply to one request, each at most once, with
//!   its key.
//!
//! Path globs are compiled once (`rules/glob.rs`) and matched against the path normalised by
//! [`normalize_path`], so a rule cannot be spelled around; key parts are joined with their
//! separators escaped and long values hashed (`rules/key.rs`).
//!
//! ```
//! use std::time::Duration;
//! use anteroom_core::ratelimit::Algorithm;
//! use anteroom_core::ratelimit::rules::{RateLimitRule, RequestMatcher, default_params};
//!
//! let mut rule = RateLimitRule::new("api", default_params(Algorithm::Gcra, 100, Duration::from_secs(60)));
//! rule.matcher = Some(RequestMatcher::default().with_paths(["/api/**"]).expect("valid globs"));
//! assert!(!rule.route_only());
//! assert_eq!(rule.params.burst, 100);
//! ```

mod glob;
mod key;
mod matcher;
mod request_view;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use glob::{GlobError, PathGlob, normalize_path};
pub use key::{KeyPart, KeyPartError, MAX_KEY_PART_LEN};
pub use matcher::{
    HeaderCondition, HostPattern, LazyHost, MatcherError, MatcherField, RequestMatcher,
    normalize_host,
};
pub use request_view::RequestView;

use super::{Algorithm, LimitParams};

/// What a rule does when its limit is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Refuse the request (status `status`, 429 by default).
    Reject,
    /// Hold the request until the limit allows it (up to the caller's bound), then let it
    /// through; refuse it when the wait would be longer than the bound.
    Delay,
    /// Never block: log and count what the rule would have done (a dry run).
    Shadow,
}

impl Action {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Reject => "reject",
            Action::Delay => "delay",
            Action::Shadow => "shadow",
        }
    }

    /// Reads the config spelling.
    pub fn parse(text: &str) -> Option<Action> {
        [Action::Reject, Action::Delay, Action::Shadow]
            .into_iter()
            .find(|action| action.as_str() == text)
    }
}

/// Where a rule's counters live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitBackend {
    /// In this process: each node counts on its own.
    Local,
    /// In the shared Redis store: every node counts together.
    Redis,
}

impl LimitBackend {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitBackend::Local => "local",
            LimitBackend::Redis => "redis",
        }
    }

    /// Reads the config spelling.
    pub fn parse(text: &str) -> Option<LimitBackend> {
        [LimitBackend::Local, LimitBackend::Redis]
            .into_iter()
            .find(|backend| backend.as_str() == text)
    }
}

/// What a rule does when its store cannot decide (SPEC §9.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnStoreError {
    /// Let the request through as if the rule did not exist (fail open).
    Allow,
    /// Refuse the request with 503 `store_unavailable` (fail closed).
    Deny,
}

impl OnStoreError {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnStoreError::Allow => "allow",
            OnStoreError::Deny => "deny",
        }
    }

    /// Reads the config spelling.
    pub fn parse(text: &str) -> Option<OnStoreError> {
        [OnStoreError::Allow, OnStoreError::Deny]
            .into_iter()
            .find(|policy| policy.as_str() == text)
    }
}

/// What a new client of a rule gets while the rule's counters hold [`RateLimitRule::max_keys`]
/// keys in the local store (SPEC §10.2: local state is never evicted to make room).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OnKeysFull {
    /// Refused as if at the limit (fail closed): a flood of fresh keys locks out only this
    /// rule's new clients, never opens the door.
    Reject,
    /// Let through uncounted, as if the rule did not apply (fail open).
    Allow,
}

impl OnKeysFull {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OnKeysFull::Reject => "reject",
            OnKeysFull::Allow => "allow",
        }
    }

    /// Reads the config spelling.
    pub fn parse(text: &str) -> Option<OnKeysFull> {
        [OnKeysFull::Reject, OnKeysFull::Allow]
            .into_iter()
            .find(|policy| policy.as_str() == text)
    }
}

/// The most keys one rule's counters hold in the local store unless configured: about 130 MB
/// at most, and room for a million distinct clients within the time a counter is remembered.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The default IPv6 prefix length client addresses are keyed by: one /64 is one subscriber.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// The default status of a rejection.
pub const DEFAULT_STATUS: u16 = 429;

/// One `[[rate_limit]]` rule, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitRule {
    /// Unique among the rules; names the policy in the `RateLimit` headers and metrics.
    pub name: String,
    /// Which requests the rule selects. `None`: the rule applies only on the routes that list
    /// it (see [`RateLimitRule::route_only`]).
    pub matcher: Option<RequestMatcher>,
    /// The parts of the counter key, in order; never empty.
    pub key: Vec<KeyPart>,
    /// IPv6 client addresses are keyed by this many leading bits (1-128).
    pub ipv6_prefix: u8,
    /// The limit.
    pub params: LimitParams,
    /// What one request costs.
    pub cost: u64,
    /// What happens at the limit.
    pub action: Action,
    /// Where the counters live.
    pub store: LimitBackend,
    /// The status of a rejection (400-599).
    pub status: u16,
    /// Whether allowed responses carry the rate-limit headers (rejections always do).
    pub headers: bool,
    /// What happens when the store cannot decide.
    pub on_store_error: OnStoreError,
    /// The most keys the rule's counters hold at once in the local store (its budget: one
    /// rule filled leaves the others' clients untouched).
    pub max_keys: usize,
    /// What a new key gets while the rule holds `max_keys` keys.
    pub on_keys_full: OnKeysFull,
}

impl RateLimitRule {
    /// A rule named `name` limiting every request per client IP with `params`; every other
    /// field at its default (cost 1, reject with 429, local store, headers on, fail open on a
    /// store failure, [`DEFAULT_MAX_KEYS`] keys then new ones rejected).
    pub fn new(name: impl Into<String>, params: LimitParams) -> RateLimitRule {
        RateLimitRule {
            name: name.into(),
            matcher: Some(RequestMatcher::default()),
            key: vec![KeyPart::Ip],
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            params,
            cost: 1,
            action: Action::Reject,
            store: LimitBackend::Local,
            status: DEFAULT_STATUS,
            headers: true,
            on_store_error: OnStoreError::Allow,
            max_keys: DEFAULT_MAX_KEYS,
            on_keys_full: OnKeysFull::Reject,
        }
    }

    /// Whether the rule has no `match` and so applies only on the routes that list it.
    pub fn route_only(&self) -> bool {
        self.matcher.is_none()
    }

    /// Whether the rule's `match` selects `request`. Always `false` for a route-only rule.
    pub fn selects(&self, request: &impl RequestView) -> bool {
        self.matcher
            .as_ref()
            .is_some_and(|matcher| matcher.matches(request))
    }

    /// The counter key of `request` under this rule: the rule's name and every key part, or
    /// `None` when the request lacks one of the parts (it is then not counted by this rule).
    pub fn key_for(&self, request: &impl RequestView) -> Option<String> {
        let mut key = String::with_capacity(self.name.len() + 48);
        self.write_key(request, &mut key)?;
        Some(key)
    }

    /// Writes [`key_for`](Self::key_for)'s key into `key` (text on the stack, for a request
    /// decided at once, where a `String` would be allocated and freed again); `None` when the
    /// request lacks a part, and then what was written is no key.
    pub fn write_key(
        &self,
        request: &impl RequestView,
        key: &mut impl std::fmt::Write,
    ) -> Option<()> {
        key::write_key(&self.name, &self.key, self.ipv6_prefix, request, key)
    }
}

/// A rule that applies to one request, with the request's key under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedRule<'r> {
    /// The rule's position in the rules it was picked from.
    pub index: usize,
    /// The rule.
    pub rule: &'r RateLimitRule,
    /// The request's counter key under the rule.
    pub key: String,
}

/// The rules of `rules` that apply to `request`, in order: those whose `match` selects it,
/// and the route-only rules named in `route_rules` (the rules the matched route lists). A
/// rule applies at most once however it is selected; a rule whose key the request lacks does
/// not apply.
pub fn applicable_rules<'r, 'q, V: RequestView>(
    rules: &'r [RateLimitRule],
    request: &'q V,
    route_rules: &'q [&str],
) -> impl Iterator<Item = AppliedRule<'r>> + use<'r, 'q, V> {
    rules
        .iter()
        .enumerate()
        .filter(|(_, rule)| rule.selects(request) || route_rules.contains(&rule.name.as_str()))
        .filter_map(|(index, rule)| {
            let key = rule.key_for(request)?;
            Some(AppliedRule { index, rule, key })
        })
}

/// The parameters of a limit of `limit` requests per `period` with `algorithm`, every other
/// field at its SPEC §10.1 default: `burst` is `limit` for token bucket and GCRA (and unused by
/// the window algorithms), 0 for the leaky bucket (nginx: no excess allowed); no `delay`,
/// no `nodelay`.
pub fn default_params(algorithm: Algorithm, limit: u64, period: Duration) -> LimitParams {
    LimitParams {
        algorithm,
        limit,
        period,
        burst: default_burst(algorithm, limit),
        delay: 0,
        nodelay: false,
    }
}

/// The default `burst` of `algorithm` (see [`default_params`]).
pub fn default_burst(algorithm: Algorithm, limit: u64) -> u64 {
    match algorithm {
        Algorithm::LeakyBucket => 0,
        _ => limit,
    }
}

/// Whether `name` is a valid rule name: 1-64 of `A-Z a-z 0-9 - _ .`, starting with a letter
/// or digit. Names appear in response headers and metrics, so they are kept plain.
pub fn is_valid_rule_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}
