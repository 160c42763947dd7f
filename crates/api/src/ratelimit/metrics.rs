//! Rate-limit decisions counted by rule and result (SPEC §8.4), as plain atomics a metrics
//! endpoint can read at any time.
//!
//! Each request counts once for each rule that decided it: `allowed` (passed at once),
//! `delayed` (passed after waiting because of this rule), `rejected` (refused because of this
//! rule), `shadow_rejected` (a shadow rule that would have refused it). A rule whose verdict
//! did not matter, because another rule refused the request first, is not counted. Store
//! failures are counted per rule as `store_errors`.
//!
//! The registry also keeps each rule's [`KeyBudget`] in the local store, by name, so a reload
//! that keeps a rule's name keeps counting the keys its counters already hold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use anteroom_core::ratelimit::rules::RateLimitRule;
use anteroom_store::limit::KeyBudget;

/// What a rule decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleResult {
    /// Passed at once.
    Allowed,
    /// Passed after waiting.
    Delayed,
    /// Refused.
    Rejected,
    /// A shadow rule that would have refused it.
    ShadowRejected,
}

impl RuleResult {
    /// The label used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleResult::Allowed => "allowed",
            RuleResult::Delayed => "delayed",
            RuleResult::Rejected => "rejected",
            RuleResult::ShadowRejected => "shadow_rejected",
        }
    }
}

/// The counters of one rule.
#[derive(Debug, Default)]
pub(crate) struct RuleCounters {
    allowed: AtomicU64,
    delayed: AtomicU64,
    rejected: AtomicU64,
    shadow_rejected: AtomicU64,
    store_errors: AtomicU64,
}

impl RuleCounters {
    pub(crate) fn record(&self, result: RuleResult) {
        let counter = match result {
            RuleResult::Allowed => &self.allowed,
            RuleResult::Delayed => &self.delayed,
            RuleResult::Rejected => &self.rejected,
            RuleResult::ShadowRejected => &self.shadow_rejected,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn record_store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// A reading of one rule's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleMetrics {
    /// Requests the rule let through at once.
    pub allowed: u64,
    /// Requests the rule let through after a wait.
    pub delayed: u64,
    /// Requests the rule refused.
    pub rejected: u64,
    /// Requests a shadow rule would have refused.
    pub shadow_rejected: u64,
    /// Requests the rule could not decide because its store failed.
    pub store_errors: u64,
}

impl RuleMetrics {
    /// The count of `result`.
    pub fn count(&self, result: RuleResult) -> u64 {
        match result {
            RuleResult::Allowed => self.allowed,
            RuleResult::Delayed => self.delayed,
            RuleResult::Rejected => self.rejected,
            RuleResult::ShadowRejected => self.shadow_rejected,
        }
    }
}

/// Every rule's counters, by rule name. Counters survive a reload of the rules that keeps the
/// rule's name.
#[derive(Debug, Default)]
pub struct RateLimitMetrics {
    rules: Mutex<HashMap<String, Arc<RuleCounters>>>,
    budgets: Mutex<HashMap<String, Arc<KeyBudget>>>,
}

impl RateLimitMetrics {
    /// The counters of rule `name`, created on first use. Called when rules are installed,
    /// never per request.
    pub(crate) fn counters(&self, name: &str) -> Arc<RuleCounters> {
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        rules.entry(name.to_owned()).or_default().clone()
    }

    /// The key budget of `rule`, created on first use and set to the rule's `max_keys` and
    /// `on_keys_full`. Called when rules are installed, never per request.
    pub(crate) fn budget(&self, rule: &RateLimitRule) -> Arc<KeyBudget> {
        let mut budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let budget = budgets
            .entry(rule.name.clone())
            .or_insert_with(|| {
                Arc::new(KeyBudget::new(
                    rule.name.as_str(),
                    rule.max_keys,
                    rule.on_keys_full,
                ))
            })
            .clone();
        budget.reconfigure(rule.max_keys, rule.on_keys_full);
        budget
    }

    /// Every rule's key budget (keys held in the local store, requests that met it full), by
    /// name.
    pub fn key_budgets(&self) -> Vec<Arc<KeyBudget>> {
        let budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<Arc<KeyBudget>> = budgets.values().cloned().collect();
        all.sort_by(|left, right| left.name().cmp(right.name()));
        all
    }

    /// A reading of rule `name`'s counters, if the rule was ever installed.
    pub fn rule(&self, name: &str) -> Option<RuleMetrics> {
        let rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        rules.get(name).map(|counters| read(counters))
    }

    /// A reading of every rule's counters, by name.
    pub fn snapshot(&self) -> Vec<(String, RuleMetrics)> {
        let rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<(String, RuleMetrics)> = rules
            .iter()
            .map(|(name, counters)| (name.clone(), read(counters)))
            .collect();
        all.sort_by(|left, right| left.0.cmp(&right.0));
        all
    }
}

fn read(counters: &RuleCounters) -> RuleMetrics {
    RuleMetrics {
        allowed: counters.allowed.load(Ordering::Relaxed),
        delayed: counters.delayed.load(Ordering::Relaxed),
        rejected: counters.rejected.load(Ordering::Relaxed),
        shadow_rejected: counters.shadow_rejected.load(Ordering::Relaxed),
        store_errors: counters.store_errors.load(Ordering::Relaxed),
    }
}
