//! The `[[rate_limit]]` entries of the config file (SPEC §10.2), validated into
//! [`RateLimitRule`]s with every problem reported at its line.
//!
//! It also holds the built-in `join-per-ip` rule (SPEC §12), added unless a rule of that name
//! replaces it or `[server] join_rate_limit = false` removes it: an ordinary rule, so it goes
//! through the same engine, headers and metrics.

use std::collections::HashMap;
use std::time::Duration;

use super::tree::{Entry, Origin, Problems, Table, Value, closest};
use crate::duration::parse_duration;
use crate::ratelimit::rules::{
    Action, DEFAULT_IPV6_PREFIX, DEFAULT_MAX_KEYS, DEFAULT_STATUS, KeyPart, LimitBackend,
    MatcherField, OnKeysFull, OnStoreError, RateLimitRule, RequestMatcher, default_burst,
    is_valid_rule_name,
};
use crate::ratelimit::{Algorithm, LimitParams};

/// The fields of a `[[rate_limit]]`, in SPEC §10.2 order (then the ones it adds).
pub(super) const RATE_LIMIT_FIELDS: &[&str] = &[
    "name",
    "match",
    "key",
    "algorithm",
    "limit",
    "period",
    "burst",
    "cost",
    "delay",
    "nodelay",
    "action",
    "store",
    "status",
    "headers",
    "on_store_error",
    "ipv6_prefix",
    "max_keys",
    "on_keys_full",
];

/// The name of the built-in join rule (SPEC §12); a `[[rate_limit]]` of this name replaces it.
pub const JOIN_RULE_NAME: &str = "join-per-ip";
/// The built-in join rule's limit: joins per client address per [`JOIN_RULE_PERIOD`].
pub const JOIN_RULE_LIMIT: u64 = 10;
/// The built-in join rule's period.
pub const JOIN_RULE_PERIOD: Duration = Duration::from_secs(60);
/// The built-in join rule's burst: all ten at once, then one every six seconds.
pub const JOIN_RULE_BURST: u64 = 10;

/// The built-in per-IP join limit (SPEC §12), an ordinary rule: `POST
/// /_anteroom/v1/rooms/*/join`, keyed by client address, a token bucket of
/// [`JOIN_RULE_LIMIT`] per [`JOIN_RULE_PERIOD`] with a burst of [`JOIN_RULE_BURST`], counted
/// in this process, rejecting with 429 and the standard headers. Written as a rule:
///
/// ```toml
/// [[rate_limit]]
/// name = "join-per-ip"
/// match = { paths = ["/_anteroom/v1/rooms/*/join"], methods = ["POST"] }
/// key = ["ip"]
/// algorithm = "token_bucket"
/// limit = 10
/// period = "1m"
/// burst = 10
/// ```
pub fn default_join_rule() -> Option<RateLimitRule> {
    let matcher = RequestMatcher::default()
        .with_paths(["/_anteroom/v1/rooms/*/join"])
        .and_then(|matcher| matcher.with_methods(["POST"]))
        .ok()?;
    let params = LimitParams {
        algorithm: Algorithm::TokenBucket,
        limit: JOIN_RULE_LIMIT,
        period: JOIN_RULE_PERIOD,
        burst: JOIN_RULE_BURST,
        delay: 0,
        nodelay: false,
    };
    Some(RateLimitRule {
        matcher: Some(matcher),
        ..RateLimitRule::new(JOIN_RULE_NAME, params)
    })
}

/// The largest `max_keys` a rule may ask for (about 13 GB of counters).
const MAX_MAX_KEYS: usize = 100_000_000;

/// The fields of a rule's `match`.
const MATCH_FIELDS: &[&str] = &["hosts", "paths", "methods", "headers"];

/// Reads an algorithm's name (`[[rate_limit]]`, `[websocket]`); the error names them all, and
/// the likely one.
pub(super) fn parse_algorithm(text: &str) -> Result<Algorithm, String> {
    Algorithm::parse(text).ok_or_else(|| {
        let names = Algorithm::ALL.map(Algorithm::as_str);
        let mut message = format!(
            "unknown algorithm {text:?}: expected one of {}",
            names.join(", ")
        );
        if let Some(suggestion) = closest(text, names.into_iter()) {
            message.push_str(&format!("; did you mean {suggestion:?}?"));
        }
        message
    })
}

/// Whether `[store]` names a redis (one server or a Cluster: rules with `store = "redis"` can
/// use either; on a Cluster a request's limits are reserved then refunded across slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RedisStore {
    /// `[store]` is not the redis backend.
    None,
    /// `[store]` is the redis backend.
    Redis,
}

/// Reads and validates every `[[rate_limit]]`. `redis_store` says which redis `[store]` names,
/// which rules with `store = "redis"` need.
pub(super) fn read_rate_limits(
    entry: Option<&Entry>,
    redis_store: RedisStore,
    problems: &mut Problems,
) -> Vec<RateLimitRule> {
    let Some(entry) = entry else {
        return Vec::new();
    };
    let Value::Array(elements) = &entry.item.value else {
        problems.add(
            &entry.key_origin,
            "`rate_limit` must be an array of tables, written [[rate_limit]]",
        );
        return Vec::new();
    };
    let mut names: HashMap<String, Origin> = HashMap::new();
    let mut rules = Vec::new();
    for element in elements {
        let Value::Table(table) = &element.value else {
            problems.add(
                &element.origin,
                "each rate limit must be a table, written [[rate_limit]]",
            );
            continue;
        };
        let before = problems.list.len();
        let mut reader = RuleReader {
            table,
            header: &element.origin,
            label: "rate limit without a name".to_owned(),
            problems,
        };
        let rule = reader.read(redis_store, &mut names);
        if problems.list.len() == before
            && let Some(rule) = rule
        {
            rules.push(rule);
        }
    }
    rules
}

/// Reads one rule, reporting each problem with the rule's name and the field's line.
struct RuleReader<'a> {
    table: &'a Table,
    /// The `[[rate_limit]]` header.
    header: &'a Origin,
    /// How messages name the rule.
    label: String,
    problems: &'a mut Problems,
}

impl<'a> RuleReader<'a> {
    fn report(&mut self, entry: &Entry, message: impl std::fmt::Display) {
        let message = format!("{}: {}: {message}", self.label, entry.key);
        self.problems.add(&entry.key_origin, message);
    }

    fn report_rule(&mut self, message: impl std::fmt::Display) {
        let message = format!("{}: {message}", self.label);
        self.problems.add(self.header, message);
    }

    fn get(&self, field: &str) -> Option<&'a Entry> {
        self.table.get(field)
    }

    fn read(
        &mut self,
        redis_store: RedisStore,
        names: &mut HashMap<String, Origin>,
    ) -> Option<RateLimitRule> {
        self.problems
            .unknown_keys(self.table, RATE_LIMIT_FIELDS, "[[rate_limit]]");
        let name = self.read_name(names);

        let algorithm = self.read_algorithm();
        let limit = self.read_limit();
        let period = self.read_period();
        let cost = self.read_positive("cost").unwrap_or(Some(1));
        let params = match (algorithm, limit, period) {
            (Some(algorithm), Some(limit), Some(period)) => {
                self.read_shape(algorithm, limit, period, cost)
            }
            _ => None,
        };

        let action = self.read_choice("action", Action::parse, &["reject", "delay", "shadow"]);
        let store = self.read_store(redis_store);
        let on_store_error =
            self.read_choice("on_store_error", OnStoreError::parse, &["allow", "deny"]);
        let on_keys_full =
            self.read_choice("on_keys_full", OnKeysFull::parse, &["reject", "allow"]);
        let max_keys = self.read_max_keys();
        let status = self.read_status();
        let headers = match self.get("headers") {
            None => Some(true),
            Some(entry) => entry.boolean(self.problems),
        };
        let ipv6_prefix = self.read_ipv6_prefix();
        let key = self.read_key();
        let matcher = self.read_match();

        Some(RateLimitRule {
            name: name?,
            matcher: matcher?,
            key: key?,
            ipv6_prefix: ipv6_prefix?,
            params: params?,
            cost: cost?,
            action: action?.unwrap_or(Action::Reject),
            store: store?.unwrap_or(LimitBackend::Local),
            status: status?,
            headers: headers?,
            on_store_error: on_store_error?.unwrap_or(OnStoreError::Allow),
            max_keys: max_keys?,
            on_keys_full: on_keys_full?.unwrap_or(OnKeysFull::Reject),
        })
    }

    /// `store`: `redis` only where `[store]` is a redis.
    fn read_store(&mut self, redis_store: RedisStore) -> Option<Option<LimitBackend>> {
        let store = self.read_choice("store", LimitBackend::parse, &["local", "redis"]);
        if let (Some(Some(LimitBackend::Redis)), Some(entry)) = (store, self.get("store")) {
            match redis_store {
                RedisStore::Redis => {}
                RedisStore::None => self.report(
                    entry,
                    "store = \"redis\" needs the redis store: set [store] backend = \"redis\", or use store = \"local\"",
                ),
            }
        }
        store
    }

    fn read_algorithm(&mut self) -> Option<Algorithm> {
        let Some(entry) = self.get("algorithm") else {
            return Some(Algorithm::TokenBucket);
        };
        let text = entry.string(self.problems)?;
        parse_algorithm(&text)
            .map_err(|message| self.report(entry, message))
            .ok()
    }

    fn read_name(&mut self, names: &mut HashMap<String, Origin>) -> Option<String> {
        let Some(entry) = self.get("name") else {
            self.problems
                .add(self.header, "[[rate_limit]] has no `name`");
            return None;
        };
        let name = entry.string(self.problems)?;
        if !is_valid_rule_name(&name) {
            let message = format!(
                "invalid rate limit name {name:?}: use 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit"
            );
            self.problems.add(&entry.key_origin, message);
            return None;
        }
        self.label = format!("rate limit {name:?}");
        if let Some(first) = names.get(&name) {
            let message = format!(
                "duplicate rate limit name {name:?}, first defined at {}",
                first.describe()
            );
            self.problems.add(&entry.key_origin, message);
            return None;
        }
        names.insert(name.clone(), entry.key_origin.clone());
        Some(name)
    }

    fn read_limit(&mut self) -> Option<u64> {
        match self.read_positive("limit") {
            None => {
                self.report_rule("needs a `limit` (requests per `period`)");
                None
            }
            Some(limit) => limit,
        }
    }

    fn read_period(&mut self) -> Option<Duration> {
        let Some(entry) = self.get("period") else {
            self.report_rule("needs a `period`, such as \"1m\"");
            return None;
        };
        let text = entry.duration_text(self.problems)?;
        match parse_duration(&text) {
            Ok(period) if period.is_zero() => {
                self.report(entry, format!("must be longer than zero, found {text:?}"));
                None
            }
            Ok(period) => Some(period),
            Err(error) => {
                self.report(entry, error);
                None
            }
        }
    }

    /// `burst`, `delay` and `nodelay`, which depend on the algorithm, and whether one request's
    /// `cost` can ever pass.
    fn read_shape(
        &mut self,
        algorithm: Algorithm,
        limit: u64,
        period: Duration,
        cost: Option<u64>,
    ) -> Option<LimitParams> {
        let burst = self.read_burst(algorithm, limit);
        let delay = self.read_delay(algorithm);
        let nodelay = self.read_nodelay(algorithm, delay);
        let (Some(burst), Some(delay), Some(nodelay)) = (burst, delay, nodelay) else {
            return None;
        };
        let params = LimitParams {
            algorithm,
            limit,
            period,
            burst,
            delay,
            nodelay,
        };
        self.cost_can_pass(&params, cost).then_some(params)
    }

    fn read_burst(&mut self, algorithm: Algorithm, limit: u64) -> Option<u64> {
        let leaky = algorithm == Algorithm::LeakyBucket;
        let bucket = matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra);
        let Some(entry) = self.get("burst") else {
            return Some(default_burst(algorithm, limit));
        };
        match entry.unsigned(self.problems) {
            None => None,
            Some(_) if !leaky && !bucket => {
                let message = format!(
                    "does not apply to the {} algorithm, which allows `limit` per `period`; remove it",
                    algorithm.as_str()
                );
                self.report(entry, message);
                None
            }
            Some(0) if bucket => {
                self.report(entry, "must be at least 1");
                None
            }
            Some(burst) => Some(burst),
        }
    }

    fn read_delay(&mut self, algorithm: Algorithm) -> Option<u64> {
        let Some(entry) = self.get("delay") else {
            return Some(0);
        };
        match entry.unsigned(self.problems) {
            Some(delay) if delay > 0 && algorithm != Algorithm::LeakyBucket => {
                let message = format!(
                    "applies only to the leaky_bucket algorithm, not {}; remove it",
                    algorithm.as_str()
                );
                self.report(entry, message);
                None
            }
            other => other,
        }
    }

    fn read_nodelay(&mut self, algorithm: Algorithm, delay: Option<u64>) -> Option<bool> {
        let Some(entry) = self.get("nodelay") else {
            return Some(false);
        };
        match entry.boolean(self.problems) {
            Some(true) if algorithm != Algorithm::LeakyBucket => {
                let message = format!(
                    "applies only to the leaky_bucket algorithm, not {}; remove it",
                    algorithm.as_str()
                );
                self.report(entry, message);
                None
            }
            Some(true) if delay.is_some_and(|delay| delay > 0) => {
                self.report(
                    entry,
                    "`nodelay = true` lets the whole burst through at once, so it cannot be combined with `delay`",
                );
                None
            }
            other => other,
        }
    }

    /// A request costing more than the limit can ever hold would never pass.
    fn cost_can_pass(&mut self, params: &LimitParams, cost: Option<u64>) -> bool {
        let capacity = match params.algorithm {
            Algorithm::TokenBucket | Algorithm::Gcra => Some(("burst", params.burst)),
            Algorithm::FixedWindow | Algorithm::SlidingLog | Algorithm::SlidingWindow => {
                Some(("limit", params.limit))
            }
            Algorithm::LeakyBucket => None,
        };
        if let (Some(cost), Some((field, capacity)), Some(entry)) =
            (cost, capacity, self.get("cost"))
            && cost > capacity
        {
            let message = format!(
                "{cost} is more than the rule's {field} ({capacity}), so no request could ever pass"
            );
            self.report(entry, message);
            return false;
        }
        true
    }

    /// `None`: the field is absent. `Some(None)`: present but wrong (reported).
    fn read_positive(&mut self, field: &str) -> Option<Option<u64>> {
        let entry = self.get(field)?;
        Some(match entry.unsigned(self.problems) {
            Some(0) => {
                self.report(entry, "must be at least 1");
                None
            }
            other => other,
        })
    }

    /// `Some(None)`: absent. `None`: present but wrong (reported).
    fn read_choice<T>(
        &mut self,
        field: &str,
        parse: fn(&str) -> Option<T>,
        choices: &[&str],
    ) -> Option<Option<T>> {
        let Some(entry) = self.get(field) else {
            return Some(None);
        };
        let text = entry.string(self.problems)?;
        match parse(&text) {
            Some(value) => Some(Some(value)),
            None => {
                let mut message = format!(
                    "unknown {field} {text:?}: expected one of {}",
                    choices.join(", ")
                );
                if let Some(suggestion) = closest(&text, choices.iter().copied()) {
                    message.push_str(&format!("; did you mean {suggestion:?}?"));
                }
                self.report(entry, message);
                None
            }
        }
    }

    fn read_status(&mut self) -> Option<u16> {
        let Some(entry) = self.get("status") else {
            return Some(DEFAULT_STATUS);
        };
        let status = entry.unsigned(self.problems)?;
        match u16::try_from(status) {
            Ok(status) if (400..=599).contains(&status) => Some(status),
            _ => {
                self.report(
                    entry,
                    format!("must be an error status between 400 and 599, found {status}"),
                );
                None
            }
        }
    }

    fn read_max_keys(&mut self) -> Option<usize> {
        let Some(entry) = self.get("max_keys") else {
            return Some(DEFAULT_MAX_KEYS);
        };
        let max_keys = entry.unsigned(self.problems)?;
        match usize::try_from(max_keys) {
            Ok(max_keys) if (1..=MAX_MAX_KEYS).contains(&max_keys) => Some(max_keys),
            _ => {
                self.report(
                    entry,
                    format!("must be between 1 and {MAX_MAX_KEYS}, found {max_keys}"),
                );
                None
            }
        }
    }

    fn read_ipv6_prefix(&mut self) -> Option<u8> {
        let Some(entry) = self.get("ipv6_prefix") else {
            return Some(DEFAULT_IPV6_PREFIX);
        };
        let prefix = entry.unsigned(self.problems)?;
        match u8::try_from(prefix) {
            Ok(prefix) if (1..=128).contains(&prefix) => Some(prefix),
            _ => {
                self.report(entry, format!("must be between 1 and 128, found {prefix}"));
                None
            }
        }
    }

    fn read_key(&mut self) -> Option<Vec<KeyPart>> {
        let Some(entry) = self.get("key") else {
            return Some(vec![KeyPart::Ip]);
        };
        // A single part may be written without the brackets.
        let texts = match &entry.item.value {
            Value::String(text) if !entry.item.origin.is_env() => {
                vec![(text.clone(), entry.key_origin.clone())]
            }
            _ => entry.strings(self.problems)?,
        };
        if texts.is_empty() {
            self.report(entry, "must list at least one part, such as [\"ip\"]");
            return None;
        }
        let mut parts = Vec::new();
        let mut valid = true;
        for (text, origin) in texts {
            match text.trim().parse::<KeyPart>() {
                Ok(part) if parts.contains(&part) => {
                    let message = format!("{}: key: lists {text:?} more than once", self.label);
                    self.problems.add(&origin, message);
                    valid = false;
                }
                Ok(part) => parts.push(part),
                Err(error) => {
                    let message = format!("{}: key: {error}", self.label);
                    self.problems.add(&origin, message);
                    valid = false;
                }
            }
        }
        valid.then_some(parts)
    }

    /// `Some(None)`: no `match`, a route-only rule (whether a route lists it is checked with
    /// the routes). `None`: a problem was reported.
    fn read_match(&mut self) -> Option<Option<RequestMatcher>> {
        let Some(entry) = self.get("match") else {
            return Some(None);
        };
        let table = entry.table(self.problems)?;
        self.problems
            .unknown_keys(table, MATCH_FIELDS, "`match` of [[rate_limit]]");
        let mut matcher = RequestMatcher::default();
        let mut valid = true;
        for inner in &table.entries {
            let Some(field) = MatcherField::from_key(&inner.key) else {
                // Already reported as an unknown key.
                valid = false;
                continue;
            };
            let Some(texts) = inner.strings(self.problems) else {
                valid = false;
                continue;
            };
            for (text, origin) in texts {
                if let Err(error) = matcher.add(field, &text) {
                    let message = format!("{}: match.{}: {error}", self.label, inner.key);
                    self.problems.add(&origin, message);
                    valid = false;
                }
            }
        }
        valid.then_some(Some(matcher))
    }
}

/// Which redis the tree's `[store]` (after environment overrides) selects.
pub(super) fn redis_store_selected(root: &Table) -> RedisStore {
    let Some(Value::Table(store)) = root.get("store").map(|entry| &entry.item.value) else {
        return RedisStore::None;
    };
    let is_redis = store.get("backend").is_some_and(
        |backend| matches!(&backend.item.value, Value::String(text) if text == "redis"),
    );
    if is_redis {
        RedisStore::Redis
    } else {
        RedisStore::None
    }
}

#[cfg(test)]
mod tests;
