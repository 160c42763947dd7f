//! Rate limiting at the door (SPEC §10.2-§10.3, §10.5): the rules that apply to a request are
//! decided in one all-or-nothing store call, and the request is refused, held or let through
//! with the standard headers.
//!
//! [`RateLimiter`] is the engine: rules (from `[[rate_limit]]` or built in code), the stores
//! their counters live in, and the trusted proxies. [`RateLimitLayer`] puts it in front of any
//! tower service; [`RateLimiter::check`] is the same decision for callers that are not a
//! layer (the gateway's verify endpoint).
//!
//! # One request
//! 1. The client address is the peer's, or, from a trusted proxy, the right-most untrusted
//!    address of `X-Forwarded-For` / `Forwarded` (see
//!    [`anteroom_core::ratelimit::client_ip`]).
//! 2. The rules whose `match` selects the request, and the route-only rules its route lists
//!    ([`RouteRateLimits`]), apply, each at most once per request, even behind several layers.
//!    A rule whose key the request lacks (no such header, cookie or claim) does not count it.
//! 3. One `reserve` call per store decides every applying rule at once. A request refused by
//!    one rule consumes nothing from the others, across stores too: rules on the local store
//!    are decided first (all or nothing among themselves), then rules on the redis store; when
//!    the redis rules refuse the request (or their store fails and one of them says `deny`),
//!    what the local rules took is refunded, so the request has consumed nothing anywhere.
//!    (Between the local reservation and its refund, a round trip to redis, other requests on
//!    this node see the local counters one higher.) One local `reject` rule alone, the
//!    usual per-IP limit, is decided by a shortcut with the same outcome and one store call,
//!    without the lists the general case keeps (`RateLimiter::check_lone_rule`).
//! 4. Then, by the refusing rules' `action`:
//!    - `reject`: answer `status` (429) problem+json `rate_limited` with `Retry-After` and the
//!      rate-limit headers;
//!    - `delay`: hold the request until the limit allows it (`retry_after`) and decide again,
//!      as long as the total wait stays within `max_delay`; refuse it otherwise;
//!    - `shadow`: never refuse: log, count as `shadow_rejected`, and decide again without the
//!      shadow rule so the other rules still count the request.
//! 5. An allowed request whose decision carries a delay (leaky bucket within its burst, nginx
//!    semantics) waits that long (within `max_delay`) before it proceeds. Its response carries
//!    the rate-limit headers of every rule with `headers = true`.
//! 6. When a store fails, each of its rules follows `on_store_error`: `allow` lets the request
//!    through as if the rule did not exist, `deny` answers 503 `store_unavailable`.
//! 7. In the local store each rule's keys are counted in the rule's own budget (`max_keys`,
//!    kept across reloads by name): a rule flooded with fresh keys refuses its own new clients
//!    (or lets them through uncounted, `on_keys_full = "allow"`) and no other rule's.
//!
//! # Peer address
//! The layer reads the peer from `ConnectInfo<SocketAddr>` (serve the app with
//! `into_make_service_with_connect_info::<SocketAddr>()`), or `MockConnectInfo<SocketAddr>` in
//! tests. Without either, the peer is unknown and taken as `0.0.0.0`: every such request
//! shares one per-IP counter (limits stay in force rather than vanish), and a warning is logged
//! once.

mod headers;
mod layer;
mod metrics;
pub(crate) mod view;

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use anteroom_core::config::Cidr;
use anteroom_core::duration::format_duration;
use anteroom_core::inline_text::InlineText;
use anteroom_core::ratelimit::Decision;
use anteroom_core::ratelimit::rules::{
    Action, LimitBackend, OnStoreError, RateLimitRule, applicable_rules,
};
use anteroom_store::limit::{KeyBudget, LimitRequest, LimitStore, Reservation};

use crate::error::ApiError;
use headers::Reported;
use metrics::RuleCounters;
use view::{AppliedRateLimits, HttpView};

pub use layer::{LayerFuture, add_headers, call_at_once, take_ready};
pub use layer::{RateLimitLayer, RateLimitService};
pub use metrics::{RateLimitMetrics, RuleMetrics, RuleResult};
pub use view::{ClientIp, RateLimitClaims, RouteRateLimits};
pub use view::{UNKNOWN_PEER, peer_address, resolve_client_ip};

/// The longest a request is held by `delay` rules and leaky-bucket delays, unless configured.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(10);

/// How many times one request is decided again (after a `delay` wait or a shadow refusal)
/// before it is refused; a bound against a store that keeps answering "retry now".
const MAX_ATTEMPTS: usize = 16;

/// Room on the stack for the lone rule's counter key: its name (at most 64 bytes) and a
/// client address; longer keys (header or cookie values) spill to the heap.
const LONE_RULE_KEY: usize = 112;

/// Settings of a [`RateLimiter`] besides its rules and local store.
#[derive(Clone)]
pub struct RateLimitOptions {
    /// Peers whose `X-Forwarded-For` / `Forwarded` headers are believed.
    pub trusted_proxies: Vec<Cidr>,
    /// The store of rules with `store = "redis"`; they cannot be installed without it.
    pub redis_store: Option<Arc<dyn LimitStore>>,
    /// The longest one request is held (`delay` rules and leaky-bucket delays together).
    pub max_delay: Duration,
}

impl Default for RateLimitOptions {
    fn default() -> Self {
        RateLimitOptions {
            trusted_proxies: Vec::new(),
            redis_store: None,
            max_delay: DEFAULT_MAX_DELAY,
        }
    }
}

impl fmt::Debug for RateLimitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitOptions")
            .field("trusted_proxies", &self.trusted_proxies)
            .field("redis_store", &self.redis_store.is_some())
            .field("max_delay", &self.max_delay)
            .finish()
    }
}

/// Why a set of rules cannot be installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateLimitSetupError {
    /// Two rules share a name.
    DuplicateName(String),
    /// A rule uses the redis store and none was given.
    NoRedisStore(String),
}

impl fmt::Display for RateLimitSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateLimitSetupError::DuplicateName(name) => {
                write!(f, "two rate limits are named {name:?}")
            }
            RateLimitSetupError::NoRedisStore(name) => write!(
                f,
                "rate limit {name:?} uses the redis store, and no redis store is configured"
            ),
        }
    }
}

impl std::error::Error for RateLimitSetupError {}

/// The rate-limit engine; cheap to clone (clones share rules, stores and counters).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use anteroom_core::ratelimit::Algorithm;
/// use anteroom_core::ratelimit::rules::{RateLimitRule, RequestMatcher, default_params};
/// use anteroom_api::ratelimit::RateLimiter;
/// # use anteroom_core::{ManualClock, Timestamp};
/// # use anteroom_store::limit::{LimitStore, LocalLimitConfig, LocalLimitStore};
/// # let clock = Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)));
/// # let store: Arc<dyn LimitStore> = Arc::new(LocalLimitStore::new(clock, LocalLimitConfig::default()));
///
/// let mut rule = RateLimitRule::new(
///     "api-per-ip",
///     default_params(Algorithm::Gcra, 100, Duration::from_secs(60)),
/// );
/// rule.matcher = Some(RequestMatcher::default().with_paths(["/api/**"]).expect("valid"));
/// let limiter = RateLimiter::new(vec![rule], store).expect("valid rules");
///
/// let app: axum::Router = axum::Router::new()
///     .route("/api/hello", axum::routing::get(|| async { "hello" }))
///     .layer(limiter.layer());
/// assert_eq!(limiter.rules().len(), 1);
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    shared: Arc<Shared>,
}

struct Shared {
    rules: RwLock<Arc<RuleSet>>,
    local: Arc<dyn LimitStore>,
    redis: Option<Arc<dyn LimitStore>>,
    trusted_proxies: Vec<Cidr>,
    max_delay: Duration,
    metrics: RateLimitMetrics,
    warned_unknown_peer: AtomicBool,
}

/// The installed rules, each with its counters and its budget of keys in the local store.
struct RuleSet {
    rules: Vec<RateLimitRule>,
    counters: Vec<Arc<RuleCounters>>,
    budgets: Vec<Arc<KeyBudget>>,
    /// One rule only, counted in the local store and rejecting at its limit: the common setup
    /// (a per-IP limit in front of a site), which [`RateLimiter::check_lone_rule`] decides
    /// without the general engine's lists. Holds that rule's name, shared: marking a request
    /// with the rule applied copies none.
    lone_rule: Option<Arc<str>>,
}

/// What the rate limiter decided for one request.
#[derive(Debug)]
pub enum RateLimitVerdict {
    /// Go on, and add these headers to the response (empty when no rule reports).
    Allowed {
        /// The rate-limit headers.
        headers: HeaderMap,
    },
    /// A rule refused the request: answer with this response (429 or the rule's status).
    Refused(Response),
    /// A rule's store failed and the rule says `deny`: answer with this 503.
    Unavailable(Response),
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("rules", &self.rules().len())
            .field("trusted_proxies", &self.shared.trusted_proxies)
            .field("max_delay", &self.shared.max_delay)
            .finish()
    }
}

impl RateLimiter {
    /// A rate limiter over `rules` keeping its counters in `store`, with default options (no
    /// trusted proxies, no redis store, [`DEFAULT_MAX_DELAY`]).
    pub fn new(
        rules: Vec<RateLimitRule>,
        store: Arc<dyn LimitStore>,
    ) -> Result<RateLimiter, RateLimitSetupError> {
        RateLimiter::with_options(rules, store, RateLimitOptions::default())
    }

    /// A rate limiter over `rules`: `store` holds the counters of `store = "local"` rules.
    pub fn with_options(
        rules: Vec<RateLimitRule>,
        store: Arc<dyn LimitStore>,
        options: RateLimitOptions,
    ) -> Result<RateLimiter, RateLimitSetupError> {
        let metrics = RateLimitMetrics::default();
        let set = rule_set(rules, options.redis_store.is_some(), &metrics)?;
        Ok(RateLimiter {
            shared: Arc::new(Shared {
                rules: RwLock::new(Arc::new(set)),
                local: store,
                redis: options.redis_store,
                trusted_proxies: options.trusted_proxies,
                max_delay: options.max_delay,
                metrics,
                warned_unknown_peer: AtomicBool::new(false),
            }),
        })
    }

    /// The store shared by every node, when there is one (redis): where one-time marks go
    /// (used challenges, adaptive decisions), so they hold across nodes.
    pub fn redis_store(&self) -> Option<Arc<dyn LimitStore>> {
        self.shared.redis.clone()
    }

    /// The store counting what every node should count together: redis when there is one,
    /// else this node's own.
    pub(crate) fn shared_store(&self) -> Arc<dyn LimitStore> {
        self.redis_store()
            .unwrap_or_else(|| self.shared.local.clone())
    }

    /// The installed rules.
    pub fn rules(&self) -> Vec<RateLimitRule> {
        self.current().rules.clone()
    }

    /// Replaces the rules (a configuration reload). Counters of rules that keep their name
    /// keep counting; the stores keep their state, so a rule whose key and limit did not
    /// change goes on where it was.
    pub fn replace_rules(&self, rules: Vec<RateLimitRule>) -> Result<(), RateLimitSetupError> {
        let set = rule_set(rules, self.shared.redis.is_some(), &self.shared.metrics)?;
        let mut current = self
            .shared
            .rules
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *current = Arc::new(set);
        Ok(())
    }

    /// The decision counters, by rule and result.
    pub fn metrics(&self) -> &RateLimitMetrics {
        &self.shared.metrics
    }

    /// Decides `request` (holding it when a rule delays it). Leaves [`ClientIp`] in its
    /// extensions and records which rules were applied, so a later check of the same request
    /// applies none of them again.
    pub async fn check(&self, request: &mut Parts) -> RateLimitVerdict {
        self.check_with_route(request, &[]).await
    }

    async fn check_with_route(
        &self,
        parts: &mut Parts,
        route_rules: &[String],
    ) -> RateLimitVerdict {
        let peer = view::peer_address(&parts.extensions);
        let (verdict, settled) = self.decide_from(parts, route_rules, peer).await;
        parts.extensions.insert(ClientIp(settled.client_ip));
        if let Some(name) = settled.lone_rule {
            parts.extensions.insert(AppliedRateLimits::One(name));
        }
        verdict
    }

    /// Decides a request from `peer` as [`check_with_route`](Self::check_with_route) does, but
    /// leaves what it settled (the client address, the lone rule's mark) to the caller
    /// instead of the request's extensions: a caller that carries them beside the request
    /// saves the extensions' allocations. The general engine still records the rules it
    /// applied in the extensions.
    async fn decide_from(
        &self,
        parts: &mut Parts,
        route_rules: &[String],
        peer: Option<IpAddr>,
    ) -> (RateLimitVerdict, Settled) {
        let set = self.current();
        let client_ip = self.client_ip(&parts.headers, peer);
        let mut settled = Settled {
            client_ip,
            lone_rule: None,
        };
        // No rules installed (the common case for the reserved API routes when only the
        // built-in join rule is off): nothing to match, so no request view is built.
        if set.rules.is_empty() {
            let verdict = RateLimitVerdict::Allowed {
                headers: HeaderMap::new(),
            };
            return (verdict, settled);
        }
        if let Some(name) = &set.lone_rule
            && route_rules.is_empty()
            && !needs_general_engine(&parts.extensions)
        {
            let verdict = self.check_lone_rule(&set, name, parts, &mut settled).await;
            return (verdict, settled);
        }
        let pending = self.applying(&set, parts, client_ip, route_rules);
        if pending.is_empty() {
            let verdict = RateLimitVerdict::Allowed {
                headers: HeaderMap::new(),
            };
            return (verdict, settled);
        }
        let mut request = Evaluation {
            limiter: self,
            set: &set,
            client_ip,
            budget: self.shared.max_delay,
            held_by: Vec::new(),
        };
        (request.decide(pending).await, settled)
    }

    /// [`check_with_route`](Self::check_with_route) for a rule set of one local rejecting rule
    /// and a request no route adds rules to: the same decision as the general engine's (the
    /// rule applies when its `match` selects the request and the request has its key; one
    /// store call, all or nothing; a refusal rejects at once, as `reject` does), without its
    /// lists of pending, requested and decided rules.
    async fn check_lone_rule(
        &self,
        set: &RuleSet,
        name: &Arc<str>,
        parts: &Parts,
        settled: &mut Settled,
    ) -> RateLimitVerdict {
        let client_ip = settled.client_ip;
        let rule = &set.rules[0];
        // The key on the stack, and only while a store in this process decides at once (no
        // boxed future, no vectors of one decision and one reservation: one rule, all or
        // nothing, nothing to refund): a `String` key was an allocation a request, and a key
        // kept across the store's wait below would make every request's future larger.
        let now = {
            let mut key = InlineText::<LONE_RULE_KEY>::new();
            let view = HttpView::new(parts, client_ip);
            if !(rule.selects(&view) && rule.write_key(&view, &mut key).is_some()) {
                return RateLimitVerdict::Allowed {
                    headers: HeaderMap::new(),
                };
            }
            let request = LimitRequest {
                key: key.as_str(),
                params: &rule.params,
                cost: rule.cost,
                budget: Some(&set.budgets[0]),
            };
            // A store elsewhere decides after a wait: the key, already written, goes on as a
            // `String` of its own.
            self.shared
                .local
                .acquire_one_now(&request)
                .ok_or_else(|| key.as_str().to_owned())
        };
        settled.lone_rule = Some(name.clone());
        let decision = match now {
            Ok(Ok(decision)) => Some(decision),
            Ok(Err(error)) => {
                tracing::warn!(%error, "rate-limit store failed");
                None
            }
            Err(key) => {
                let request = LimitRequest {
                    key: &key,
                    params: &rule.params,
                    cost: rule.cost,
                    budget: Some(&set.budgets[0]),
                };
                reserve(self.shared.local.as_ref(), std::slice::from_ref(&request))
                    .await
                    .and_then(|reserved| reserved.decisions.first().copied())
            }
        };
        let mut evaluation = Evaluation {
            limiter: self,
            set,
            client_ip,
            budget: self.shared.max_delay,
            held_by: Vec::new(),
        };
        let Some(decision) = decision else {
            return match evaluation.store_failed([0]) {
                Some(verdict) => verdict,
                None => evaluation.allow(&[]).await,
            };
        };
        let decided = [Decided { index: 0, decision }];
        if decision.allowed {
            evaluation.allow(&decided).await
        } else {
            evaluation.refuse(&decided, &[])
        }
    }

    fn current(&self) -> Arc<RuleSet> {
        self.shared
            .rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The layer's way around [`check`](Self::check) while no rule is installed: then a
    /// request needs no decision, no store and no future of its own. Leaves [`ClientIp`] in
    /// the request's extensions and answers `true`; with rules installed it does nothing and
    /// answers `false`.
    pub(crate) fn allows_without_rules<B>(&self, request: &mut axum::http::Request<B>) -> bool {
        let no_rules = self
            .shared
            .rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .rules
            .is_empty();
        if no_rules {
            let peer = view::peer_address(request.extensions());
            let client_ip = self.client_ip(request.headers(), peer);
            request.extensions_mut().insert(ClientIp(client_ip));
        }
        no_rules
    }

    fn client_ip(&self, headers: &HeaderMap, peer: Option<IpAddr>) -> IpAddr {
        let peer = peer.unwrap_or_else(|| {
            if !self.shared.warned_unknown_peer.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "rate limiting a request without a peer address (serve with connect info): such requests share one per-IP counter"
                );
            }
            view::UNKNOWN_PEER
        });
        view::resolve_client_ip(headers, peer, &self.shared.trusted_proxies)
    }

    /// The rules applying to the request that no earlier check applied, with their keys; and
    /// records them as applied.
    fn applying(
        &self,
        set: &RuleSet,
        parts: &mut Parts,
        client_ip: IpAddr,
        layer_route_rules: &[String],
    ) -> Vec<Pending> {
        let pending: Vec<Pending> = {
            let mut route_rules: Vec<&str> = layer_route_rules.iter().map(String::as_str).collect();
            if let Some(RouteRateLimits(names)) = parts.extensions.get::<RouteRateLimits>() {
                route_rules.extend(names.iter().map(String::as_str));
            }
            let done = parts.extensions.get::<AppliedRateLimits>();
            let view = HttpView::new(parts, client_ip);
            applicable_rules(&set.rules, &view, &route_rules)
                .filter(|applied| done.is_none_or(|done| !done.contains(&applied.rule.name)))
                .map(|applied| Pending {
                    index: applied.index,
                    key: applied.key,
                })
                .collect()
        };
        if !pending.is_empty() {
            let names = pending.iter().map(|p| set.rules[p.index].name.clone());
            match parts.extensions.get_mut::<AppliedRateLimits>() {
                Some(done) => done.extend(names),
                None => {
                    parts
                        .extensions
                        .insert(AppliedRateLimits::Several(names.collect()));
                }
            }
        }
        pending
    }
}

fn rule_set(
    rules: Vec<RateLimitRule>,
    has_redis: bool,
    metrics: &RateLimitMetrics,
) -> Result<RuleSet, RateLimitSetupError> {
    for (index, rule) in rules.iter().enumerate() {
        if rules[..index].iter().any(|other| other.name == rule.name) {
            return Err(RateLimitSetupError::DuplicateName(rule.name.clone()));
        }
        if rule.store == LimitBackend::Redis && !has_redis {
            return Err(RateLimitSetupError::NoRedisStore(rule.name.clone()));
        }
    }
    let counters = rules
        .iter()
        .map(|rule| metrics.counters(&rule.name))
        .collect();
    let budgets = rules.iter().map(|rule| metrics.budget(rule)).collect();
    let lone_rule = match rules.as_slice() {
        [rule] if rule.store == LimitBackend::Local && rule.action == Action::Reject => {
            Some(Arc::from(rule.name.as_str()))
        }
        _ => None,
    };
    Ok(RuleSet {
        rules,
        counters,
        budgets,
        lone_rule,
    })
}

/// Whether a route has named rules for this request, or an earlier check applied some: then
/// the general engine decides it.
fn needs_general_engine(extensions: &Extensions) -> bool {
    extensions
        .get::<RouteRateLimits>()
        .is_some_and(|RouteRateLimits(names)| !names.is_empty())
        || extensions.get::<AppliedRateLimits>().is_some()
}

/// What a decision settled about a request beyond its verdict, for a caller that carries it
/// beside the request rather than in its extensions ([`RateLimitLayer::decide_from`]).
#[derive(Debug, Clone)]
pub struct Settled {
    /// The client address the limiter settled on (what [`ClientIp`] would hold).
    pub client_ip: IpAddr,
    /// The lone rule's name when its shortcut applied it: a later check of the same request
    /// must not apply it again.
    lone_rule: Option<Arc<str>>,
}

impl Settled {
    /// Puts what was settled into `extensions`, as [`RateLimiter::check`] leaves it there,
    /// for the steps that read it from them (a later check, the join gate).
    pub fn mark(&self, extensions: &mut Extensions) {
        extensions.insert(ClientIp(self.client_ip));
        if let Some(name) = &self.lone_rule {
            extensions.insert(AppliedRateLimits::One(name.clone()));
        }
    }
}

/// A rule that applies to the request, not yet decided.
#[derive(Debug, Clone)]
struct Pending {
    /// The rule's index in the rule set.
    index: usize,
    key: String,
}

/// A decided rule.
#[derive(Debug, Clone, Copy)]
struct Decided {
    index: usize,
    decision: Decision,
}

/// What one store's rules took from it, to hand back if another store refuses the request.
struct Taken {
    /// The rules of the call that counted the request.
    rules: Vec<Pending>,
    /// What each took (the store's answer).
    reservations: Vec<Option<Reservation>>,
}

/// How one store's rules came out.
enum GroupOutcome {
    /// Every (non-shadow) rule allowed the request: the decisions of the rules that counted it,
    /// and what they took when it was asked for.
    Allowed(Vec<Decided>, Option<Taken>),
    /// Refused: the refusing rules, and the other rules' decisions of the same attempt.
    Refused {
        refusing: Vec<Decided>,
        others: Vec<Decided>,
    },
    /// The store could not decide.
    Failed,
}

/// The decision of one request, in progress.
struct Evaluation<'a> {
    limiter: &'a RateLimiter,
    set: &'a RuleSet,
    client_ip: IpAddr,
    /// What is left of `max_delay`.
    budget: Duration,
    /// Rules that held the request (a `delay` wait).
    held_by: Vec<usize>,
}

impl Evaluation<'_> {
    fn rule(&self, index: usize) -> &RateLimitRule {
        &self.set.rules[index]
    }

    async fn decide(&mut self, pending: Vec<Pending>) -> RateLimitVerdict {
        // Most requests meet the rules of one store only: then there is one group, nothing to
        // hand back, and the rules are neither split nor copied.
        let Some(first) = pending.first() else {
            return self.allow(&[]).await;
        };
        let first_backend = self.rule(first.index).store;
        let groups: [(LimitBackend, Vec<Pending>); 2] = if pending
            .iter()
            .all(|p| self.rule(p.index).store == first_backend)
        {
            [(first_backend, pending), (LimitBackend::Redis, Vec::new())]
        } else {
            let (local, redis) = pending
                .into_iter()
                .partition(|p| self.rule(p.index).store == LimitBackend::Local);
            [(LimitBackend::Local, local), (LimitBackend::Redis, redis)]
        };
        let more_after_first = !groups[1].1.is_empty();
        let mut allowed: Vec<Decided> = Vec::new();
        // What the stores decided so far took, handed back if a later store refuses.
        let mut taken: Vec<(Arc<dyn LimitStore>, Taken)> = Vec::new();
        for (position, (backend, group)) in groups.into_iter().enumerate() {
            if group.is_empty() {
                continue;
            }
            let store = match backend {
                LimitBackend::Local => Some(self.limiter.shared.local.clone()),
                LimitBackend::Redis => self.limiter.shared.redis.clone(),
            };
            let keep_taken = position == 0 && more_after_first;
            let outcome = match &store {
                Some(store) => self.decide_group(store.as_ref(), &group, keep_taken).await,
                None => GroupOutcome::Failed,
            };
            let verdict = match outcome {
                GroupOutcome::Allowed(decided, took) => {
                    if allowed.is_empty() {
                        allowed = decided;
                    } else {
                        allowed.extend(decided);
                    }
                    if let (Some(store), Some(took)) = (store, took) {
                        taken.push((store, took));
                    }
                    continue;
                }
                GroupOutcome::Refused { refusing, others } => self.refuse(&refusing, &others),
                GroupOutcome::Failed => match self.store_failed(group.iter().map(|p| p.index)) {
                    Some(verdict) => verdict,
                    None => continue,
                },
            };
            self.refund(&taken).await;
            return verdict;
        }
        self.allow(&allowed).await
    }

    /// Hands back what the stores decided so far took: the request is refused after all. A
    /// refund that fails leaves the counters consumed (logged): the limiter errs towards
    /// limiting.
    async fn refund(&self, taken: &[(Arc<dyn LimitStore>, Taken)]) {
        for (store, took) in taken {
            let requests = self.limit_requests(&took.rules);
            if let Err(error) = store.refund(&requests, &took.reservations).await {
                tracing::warn!(%error, "a rate-limit refund failed; the request stays counted");
            }
        }
    }

    /// What the store is asked for `rules`: each rule's key, parameters, cost and key budget.
    #[inline]
    fn limit_requests<'a>(&'a self, rules: &'a [Pending]) -> Vec<LimitRequest<'a>> {
        rules
            .iter()
            .map(|p| {
                let rule = self.rule(p.index);
                LimitRequest {
                    key: &p.key,
                    params: &rule.params,
                    cost: rule.cost,
                    budget: Some(&self.set.budgets[p.index]),
                }
            })
            .collect()
    }

    /// Decides one store's rules, holding the request for `delay` rules and deciding again
    /// without shadow rules that refused. What the rules took is kept (for a refund) when
    /// `keep_taken`: another store's rules are still to be decided.
    async fn decide_group(
        &mut self,
        store: &dyn LimitStore,
        group: &[Pending],
        keep_taken: bool,
    ) -> GroupOutcome {
        let mut active: Cow<'_, [Pending]> = Cow::Borrowed(group);
        for attempt in 0..MAX_ATTEMPTS {
            let Some(reserved) = reserve(store, &self.limit_requests(&active)).await else {
                return GroupOutcome::Failed;
            };
            let decided: Vec<Decided> = active
                .iter()
                .zip(reserved.decisions)
                .map(|(p, decision)| Decided {
                    index: p.index,
                    decision,
                })
                .collect();
            if decided.iter().all(|d| d.decision.allowed) {
                let taken = keep_taken.then(|| Taken {
                    rules: active.into_owned(),
                    reservations: reserved.reservations,
                });
                return GroupOutcome::Allowed(decided, taken);
            }
            let refused_shadow = self.record_shadow_refusals(&decided);
            let (refusing, others): (Vec<Decided>, Vec<Decided>) = decided
                .into_iter()
                .filter(|d| !refused_shadow.contains(&d.index))
                .partition(|d| !d.decision.allowed);
            // Shadow rules that refused are left out from now on: their refusal is recorded,
            // and the request must still count against the other rules.
            active
                .to_mut()
                .retain(|p| !refused_shadow.contains(&p.index));
            if refusing.is_empty() {
                if active.is_empty() {
                    return GroupOutcome::Allowed(Vec::new(), None);
                }
                continue;
            }
            match self.delay_for(&refusing) {
                Some(wait) if wait <= self.budget && attempt + 1 < MAX_ATTEMPTS => {
                    tokio::time::sleep(wait).await;
                    self.budget -= wait;
                    self.held_by.extend(refusing.iter().map(|d| d.index));
                }
                _ => return GroupOutcome::Refused { refusing, others },
            }
        }
        // Only shadow refusals and delay waits decide again, and both are bounded above.
        tracing::warn!("a request was decided too many times; treating it as a store failure");
        GroupOutcome::Failed
    }

    /// Records (and logs) the refusals of shadow rules, which refuse nothing: their indexes.
    fn record_shadow_refusals(&self, decided: &[Decided]) -> Vec<usize> {
        let refused_shadow: Vec<usize> = decided
            .iter()
            .filter(|d| !d.decision.allowed && self.rule(d.index).action == Action::Shadow)
            .map(|d| d.index)
            .collect();
        for &index in &refused_shadow {
            let rule = self.rule(index);
            tracing::info!(rule = %rule.name, client = %self.client_ip, "shadow rate limit would have refused the request");
            self.set.counters[index].record(RuleResult::ShadowRejected);
        }
        refused_shadow
    }

    /// How long to hold the request: only when every refusing rule says `delay` and each can
    /// tell when it would pass (no `retry_after`: never at this cost), the longest of their
    /// waits.
    fn delay_for(&self, refusing: &[Decided]) -> Option<Duration> {
        refusing
            .iter()
            .map(|d| {
                (self.rule(d.index).action == Action::Delay)
                    .then_some(d.decision.retry_after)
                    .flatten()
            })
            .try_fold(Duration::ZERO, |longest, wait| Some(longest.max(wait?)))
            // A store answering "retry now" gets a moment, not a busy loop.
            .map(|wait| wait.max(Duration::from_millis(1)))
    }

    /// The store of `group` failed: 503 if one of its rules says `deny`, else the rules are
    /// skipped.
    fn store_failed(&self, group: impl IntoIterator<Item = usize>) -> Option<RateLimitVerdict> {
        let mut deny = false;
        for index in group {
            self.set.counters[index].record_store_error();
            let rule = self.rule(index);
            deny |= rule.on_store_error == OnStoreError::Deny && rule.action != Action::Shadow;
        }
        deny.then(|| {
            let response = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "rate limiting is temporarily unavailable; retry shortly",
            )
            .retry_after(5)
            .into_response();
            RateLimitVerdict::Unavailable(response)
        })
    }

    fn refuse(&self, refusing: &[Decided], others: &[Decided]) -> RateLimitVerdict {
        for d in refusing {
            self.set.counters[d.index].record(RuleResult::Rejected);
        }
        let reported = |list: &[Decided], all: bool| -> Vec<Reported<'_>> {
            list.iter()
                .filter(|d| {
                    let rule = self.rule(d.index);
                    rule.action != Action::Shadow && (all || rule.headers)
                })
                .map(|d| Reported {
                    rule: self.rule(d.index),
                    decision: d.decision,
                })
                .collect()
        };
        let refusing = reported(refusing, true);
        let others = reported(others, false);
        let rejection = headers::rejection_headers(&refusing, &others);
        let rule = refusing[rejection.binding].rule;
        tracing::debug!(rule = %rule.name, client = %self.client_ip, "rate limited");
        let status = StatusCode::from_u16(rule.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        let detail = format!(
            "too many requests: rate limit {:?} allows {} per {}; retry in {} s",
            rule.name,
            rule.params.limit,
            format_duration(rule.params.period),
            rejection.retry_after
        );
        let mut response = ApiError::new(status, "rate_limited", detail)
            .retry_after(rejection.retry_after)
            .into_response();
        response.headers_mut().extend(rejection.headers);
        RateLimitVerdict::Refused(response)
    }

    /// Every rule allowed the request: wait out the longest delay a decision asks for, count,
    /// and report.
    async fn allow(&mut self, allowed: &[Decided]) -> RateLimitVerdict {
        let enforcing = |d: &&Decided| self.rule(d.index).action != Action::Shadow;
        let delay = allowed
            .iter()
            .filter(enforcing)
            .map(|d| d.decision.delay)
            .max()
            .unwrap_or_default()
            .min(self.budget);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        for d in allowed {
            let held = self.held_by.contains(&d.index)
                || (!d.decision.delay.is_zero() && self.rule(d.index).action != Action::Shadow);
            let result = if held {
                RuleResult::Delayed
            } else {
                RuleResult::Allowed
            };
            self.set.counters[d.index].record(result);
        }
        let reported: Vec<Reported<'_>> = allowed
            .iter()
            .filter(enforcing)
            .filter(|d| self.rule(d.index).headers)
            .map(|d| Reported {
                rule: self.rule(d.index),
                decision: d.decision,
            })
            .collect();
        RateLimitVerdict::Allowed {
            headers: headers::allowed_headers(&reported),
        }
    }
}

/// One call to a store for `requests`; `None` (logged) when it failed or answered a number
/// of decisions other than the number asked.
#[inline]
async fn reserve(
    store: &dyn LimitStore,
    requests: &[LimitRequest<'_>],
) -> Option<anteroom_store::limit::Reserved> {
    match store.reserve(requests).await {
        Ok(reserved)
            if reserved.decisions.len() == requests.len()
                && reserved.reservations.len() == requests.len() =>
        {
            Some(reserved)
        }
        Ok(reserved) => {
            tracing::error!(
                asked = requests.len(),
                answered = reserved.decisions.len(),
                "the rate-limit store answered the wrong number of decisions"
            );
            None
        }
        Err(error) => {
            tracing::warn!(%error, "rate-limit store failed");
            None
        }
    }
}
