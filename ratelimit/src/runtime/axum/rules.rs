//! The layer's `[[rules]]`: which entries of the configuration apply to a
//! request, their decision (one limit, or a stack of them) and their probe.

use bytes::Bytes;
use http::request::Parts;

use super::outcome::{Outcome, OuterWait, RouteName};
use super::permits::Permits;
use super::runtime::{probe_answer, Pending, Route, Runtime};
use crate::runtime::config::RuleConfig;
use crate::runtime::config::MAX_STACK;
use crate::runtime::plan::RoutePlan;

impl Runtime {
    /// A probe through the layer: the answer when `[[rules]]` apply to the
    /// request (as [`Self::answer_probe`]), else `None` (the request goes on
    /// to the inner service, which may answer it with its own limits).
    pub(crate) fn probe_rules(&self, parts: &Parts) -> Option<http::Response<Bytes>> {
        let config = self.config.load();
        let plan = self.plan(&config);
        let mut pending: Vec<Pending<'_>> =
            crate::runtime::config::applying(&config.rules, &parts.method, parts.uri.path())
                .take(MAX_STACK)
                .filter_map(|(i, rule)| Some(self.prepare(&config, parts, rule_route(plan.rules.get(i)?), &rule.key)))
                .collect();
        if pending.is_empty() {
            return None;
        }
        self.peek_permits(&mut pending);
        let admitted = self.peek_all(&mut pending);
        let outcomes: Vec<Outcome> = pending.into_iter().map(|p| p.outcome).collect();
        if !admitted {
            let outer = parts.extensions.get::<OuterWait>().copied();
            return Some(self.reject_rule(&outcomes, parts, outer));
        }
        let mut response = http::Response::new(Bytes::new());
        probe_answer(&outcomes, &mut response);
        Some(response)
    }

    /// Before an attribute route's decision: with `[[rules]]` in force and no
    /// request ever seen by this runtime's layer, the request did not pass
    /// through it (the layer wraps every route below it, and runs first), so
    /// the rules limit nothing the application meant them to. Said once
    /// per runtime: the flag is then set as if the layer had been seen. (A
    /// layer wrapping only part of the routes, once it has seen a request,
    /// is not told apart: that would take a mark on every request.)
    #[inline(always)]
    pub(crate) fn check_layer_wired(&self, route: &'static str) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.has_rules.load(Relaxed) && !self.layer_seen.load(Relaxed) && !self.layer_seen.swap(true, Relaxed) {
            layer_not_wired(route);
        }
    }

    /// Applies the `[[rules]]` entries that match the request, if any: the
    /// first matching one, and the next ones while a rule says `stack`.
    /// When one of them is charged by the response's size, `charged_at`
    /// gets a clock reading taken before the decision (what bounds a later
    /// refund); the others read no clock for it.
    pub(crate) fn decide_rules(&self, parts: &Parts, charged_at: &mut u64) -> Option<(Decided, Permits)> {
        // Seen whether or not rules are in force: a reload that adds rules
        // while a request is between this layer and its handler must not
        // read as a missing layer.
        if !self.layer_seen.load(std::sync::atomic::Ordering::Relaxed) {
            self.layer_seen.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        // Most layers carry no rules: one load says so.
        if !self.has_rules.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let config = super::config_cache::local(&self.config);
        if config.rules.is_empty() {
            return None;
        }
        // (The plan holds one route per rule of this configuration: an
        // index never misses.)
        let plan = self.plan(&config);
        let mut applying = crate::runtime::config::applying(&config.rules, &parts.method, parts.uri.path());
        let (i, first) = applying.next()?;
        // One rule (the common case, no allocation) unless it stacks and
        // another matching rule follows.
        let second = if first.stack { applying.next() } else { None };
        let Some(second) = second else {
            let route = rule_route(plan.rules.get(i)?);
            if route.plan.bytes_per_unit.is_some() {
                *charged_at = self.now();
            }
            return Some(
                self.decide_then(&config, parts, route, &first.key, |outcome, permits, _| {
                    (Decided::One(std::mem::replace(outcome, Outcome::vacant())), permits)
                }),
            );
        };
        let rules: Vec<(usize, &RuleConfig)> = [(i, first), second]
            .into_iter()
            .chain(applying)
            .take(MAX_STACK)
            .collect();
        let routes: Vec<(Route<'_>, &RuleConfig)> = rules
            .iter()
            .filter_map(|&(i, rule)| Some((rule_route(plan.rules.get(i)?), rule)))
            .collect();
        if routes.iter().any(|(r, _)| r.plan.bytes_per_unit.is_some()) {
            *charged_at = self.now();
        }
        let mut pending: Vec<Pending<'_>> = routes
            .iter()
            .map(|&(route, rule)| self.prepare(&config, parts, route, &rule.key))
            .collect();
        let permits = self.decide_all(&mut pending).unwrap_or_default();
        Some((Decided::Many(pending.into_iter().map(|p| p.outcome).collect()), permits))
    }
}

/// A `[[rules]]` entry's plan as the runtime decides on it (its metrics in
/// the runtime's map).
fn rule_route(plan: &RoutePlan) -> Route<'_> {
    Route {
        plan,
        name: RouteName::Rule(plan.name),
        series: None,
    }
}

/// What the rules of a request decided: one limit (the common case, no
/// allocation) or a stack of them.
#[derive(Debug)]
pub(crate) enum Decided {
    One(Outcome),
    Many(Vec<Outcome>),
}

impl Decided {
    /// The outcomes, in the order the limits were declared.
    pub(crate) fn outcomes(&self) -> &[Outcome] {
        match self {
            Decided::One(o) => std::slice::from_ref(o),
            Decided::Many(v) => v,
        }
    }

    pub(crate) fn outcomes_mut(&mut self) -> &mut [Outcome] {
        match self {
            Decided::One(o) => std::slice::from_mut(o),
            Decided::Many(v) => v,
        }
    }
}

/// The warning of [`Runtime::check_layer_wired`].
#[cold]
#[inline(never)]
fn layer_not_wired(route: &'static str) {
    tracing::warn!(
        target: "ratelimit",
        route,
        "[[rules]] are in force, but a request to this #[rate_limit] route did not pass through \
         RateLimit::layer(): the rules limit only what it wraps. Add .layer(rate_limit.layer()) to the \
         outermost router, after every .route and .nest (if only part of the application is meant to be \
         wrapped, ignore this)"
    );
}
