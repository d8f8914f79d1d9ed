//! `ratelimit explain`: which `[[rules]]` entry a request meets, who it
//! limits, which resolver answers and with what numbers, computed with the
//! runtime's own code (rule matching, the client address after trusted
//! proxies, the resolvers), without a secret: a bearer token is decoded
//! without verification, only to show what it would do if it verifies.

use std::fmt::{self, Write as _};
use std::net::IpAddr;

use http::HeaderValue;

use super::report::{chain_label, duration, key_label, methods_label, rate, rule_cost, rule_shadow, window};
use super::request::Request;
use crate::runtime::claims::VerifiedClaims;
use crate::runtime::config::{Config, RuleConfig};
use crate::runtime::plan::Ask;
use crate::runtime::resolve::{JwtTier, ResolveContext, Resolved, Resolver, Step};
use ratelimit_spec::KeyKind;

/// What a request would get: the rules that apply (the first match, and
/// the rules stacked under it), the key, the steps and the numbers.
/// `Display` is the text `ratelimit explain` prints.
#[derive(Debug, Clone)]
pub struct Explanation {
    rules: Vec<AppliedRule>,
    text: String,
}

/// One `[[rules]]` entry that applies to the request, and the numbers it
/// would apply. A request meets several when the first match says `stack =
/// true`: one decision then admits it only if every one of them admits it.
///
/// ```
/// use ratelimit::config::{check, Config};
///
/// let config = Config::from_toml_str(
///     "default_profile = \"standard\"\n[profiles.standard]\nrate = \"60/min\"\n[profiles.tight]\nrate = \"1/s\"\nburst = 1\n\
///      [[rules]]\nname = \"all\"\npath = \"/{*rest}\"\nkey = \"ip\"\nresolve = [\"default\"]\nstack = true\n\
///      [[rules]]\nname = \"login\"\npath = \"/login\"\nkey = \"ip\"\nresolve = [\"profile:tight\", \"default\"]\n",
/// )
/// .unwrap();
/// let e = check::explain(&config, &check::Request::new(http::Method::POST, "/login"));
/// let names: Vec<&str> = e.rules().iter().map(|r| r.name()).collect();
/// assert_eq!(names, ["all", "login"]);
/// assert_eq!(e.rules()[1].anonymous().quota.burst(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct AppliedRule {
    name: &'static str,
    verified: Option<Applied>,
    anonymous: Applied,
}

impl AppliedRule {
    /// The rule's name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// What this rule applies to a request whose token (if any) does not
    /// verify, or that has none.
    pub fn anonymous(&self) -> &Applied {
        &self.anonymous
    }

    /// What this rule applies if the request's bearer token verifies;
    /// `None` without a token the rule reads.
    pub fn if_verified(&self) -> Option<&Applied> {
        self.verified.as_ref()
    }
}

/// The numbers that would apply.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Applied {
    /// The profile, when a profile answered (token or service numbers have
    /// none).
    pub profile: Option<String>,
    /// The quota.
    pub quota: crate::Quota,
    /// Units the request costs.
    pub cost: u32,
    /// Decided and counted, never rejected.
    pub shadow: bool,
    /// A probe (`[responses] probe_methods`): decided at `cost` as if
    /// charged, but nothing is charged and the handler does not run (the
    /// limiter answers 204 with the headers, or the 429).
    pub probe: bool,
}

impl Explanation {
    /// The first matching rule's name (the one "first match wins" picks);
    /// `None` when no rule matches.
    pub fn rule(&self) -> Option<&str> {
        self.rules.first().map(AppliedRule::name)
    }

    /// Every rule that applies, in the order the runtime decides them: the
    /// first match, then each rule stacked under it; empty when no rule
    /// matches.
    pub fn rules(&self) -> &[AppliedRule] {
        &self.rules
    }

    /// What the first matching rule applies to a request whose token (if
    /// any) does not verify, or that has none.
    pub fn anonymous(&self) -> Option<&Applied> {
        self.rules.first().map(AppliedRule::anonymous)
    }

    /// What the first matching rule applies if the request's bearer token
    /// verifies; `None` without a token the rule reads.
    pub fn if_verified(&self) -> Option<&Applied> {
        self.rules.first().and_then(AppliedRule::if_verified)
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What the request would get under `config`.
pub fn explain(config: &Config, request: &Request) -> Explanation {
    explain_with(config, request, &[])
}

/// What the request would get under `config`, from its `[[rules]]` and
/// from the attribute routes the application's router sent it to (each a
/// line saying which, and the route as a rule: see
/// [`RuleConfig::of_attribute`]).
pub(crate) fn explain_with(config: &Config, request: &Request, attributes: &[(String, RuleConfig)]) -> Explanation {
    let mut out = String::new();
    let _ = writeln!(out, "request: {} {}", request.method, request.path);
    // The path as the runtime sees it: a request target's path (an
    // absolute-form target, `http://h/k`, is `/k`; a query is dropped).
    let path = match request.path.parse::<http::Uri>() {
        Ok(uri) => uri.path().to_owned(),
        Err(_) => request.path.clone(),
    };
    // The rules the runtime applies: the first match, and the ones stacked
    // under it (the runtime's own selection).
    let rules: Vec<(usize, &RuleConfig)> =
        crate::runtime::config::applying(&config.rules, &request.method, &path).collect();
    let Some(&(index, first)) = rules.first() else {
        if !attributes.is_empty() {
            let _ = writeln!(
                out,
                "rule: none of the {} [[rules]] entries matches: the config-driven layer does not limit this request",
                config.rules.len()
            );
            return attributes_only(config, request, attributes, out);
        }
        let _ = writeln!(
            out,
            "rule: none of the {} [[rules]] entries matches: the config-driven layer does not limit this request",
            config.rules.len()
        );
        out.push_str(
            "  (attribute routes, #[rate_limit] in code, are not in the file: a handler's own limit may still apply; \
             the application's own binary explains them, see docs/config.md)\n",
        );
        return Explanation {
            rules: Vec::new(),
            text: out,
        };
    };
    let _ = writeln!(
        out,
        "rule: #{} {:?} ({} {}; first match wins{}{})",
        index + 1,
        first.name,
        methods_label(first),
        first.path.as_str(),
        if index == 0 {
            String::new()
        } else {
            format!(
                ", {} did not match",
                if index == 1 {
                    "rule #1".to_owned()
                } else {
                    format!("rules #1..#{index}")
                }
            )
        },
        if first.stack {
            "; stack = true: the next matching rule applies too"
        } else {
            ""
        }
    );
    let probe = crate::runtime::config::ResponseConfig::probe_mask(&config.responses.probe_methods)
        .is_ok_and(|mask| crate::runtime::config::ResponseConfig::mask_has(mask, &request.method));
    if probe {
        let _ = writeln!(
            out,
            "probe: {} is a probe method ([responses] probe_methods): the limiter answers it itself, 204 with the \
             headers the request would get (or the 429), decided at the rule's cost but charging nothing; the \
             handler does not run",
            request.method
        );
    }

    // The token: read only when a rule's key or chain reads claims, as the
    // runtime does.
    let readers = rules.iter().map(|(_, r)| *r).chain(attributes.iter().map(|(_, r)| r));
    let claims = super::token::read_token(config, request, readers, &mut out);

    let address = client_address(config, request, &mut out);
    let mut applied = Vec::with_capacity(rules.len());
    for (n, &(index, rule)) in rules.iter().enumerate() {
        if n > 0 {
            let _ = writeln!(
                out,
                "rule: #{} {:?} ({} {}; stacked under #{}: one decision, admitted only if every rule of the stack \
                 admits, none charged otherwise{})",
                index + 1,
                rule.name,
                methods_label(rule),
                rule.path.as_str(),
                rules[n - 1].0 + 1,
                if rule.stack {
                    "; stack = true: the next matching rule applies too"
                } else {
                    ""
                }
            );
        }
        let claims = claims.as_ref().filter(|_| super::token::reads_claims(rule));
        applied.push(explain_rule(config, rule, request, claims, &address, probe, &mut out));
    }
    for (line, rule) in attributes {
        let _ = writeln!(out, "{line}");
        let claims = claims.as_ref().filter(|_| super::token::reads_claims(rule));
        applied.push(explain_rule(config, rule, request, claims, &address, probe, &mut out));
    }
    Explanation {
        rules: applied,
        text: out,
    }
}

/// Only attribute routes apply: the token and the address as for rules,
/// then each route.
fn attributes_only(
    config: &Config,
    request: &Request,
    attributes: &[(String, RuleConfig)],
    mut out: String,
) -> Explanation {
    let probe = crate::runtime::config::ResponseConfig::probe_mask(&config.responses.probe_methods)
        .is_ok_and(|mask| crate::runtime::config::ResponseConfig::mask_has(mask, &request.method));
    let claims = super::token::read_token(config, request, attributes.iter().map(|(_, r)| r), &mut out);
    let address = client_address(config, request, &mut out);
    let mut applied = Vec::with_capacity(attributes.len());
    for (line, rule) in attributes {
        let _ = writeln!(out, "{line}");
        let claims = claims.as_ref().filter(|_| super::token::reads_claims(rule));
        applied.push(explain_rule(config, rule, request, claims, &address, probe, &mut out));
    }
    Explanation {
        rules: applied,
        text: out,
    }
}

/// One applying rule: its key, its steps and its numbers.
fn explain_rule(
    config: &Config,
    rule: &RuleConfig,
    request: &Request,
    claims: Option<&VerifiedClaims>,
    address: &Option<IpAddr>,
    probe: bool,
    out: &mut String,
) -> AppliedRule {
    key(config, rule, request, claims, address, out);

    let verified_ctx = claims.map(|c| ResolveContext::new(config, rule.name, Some(c)));
    let anonymous_ctx = ResolveContext::new(config, rule.name, None);
    let _ = writeln!(
        out,
        "resolve: {} (tried in order, the first answer wins)",
        chain_label(rule)
    );
    steps(config, rule, verified_ctx.as_ref(), &anonymous_ctx, out);

    // The plan the runtime compiles for the rule: what it says is what
    // requests get (a limit service's answer is not known here).
    let plan = rule.plan(crate::runtime::limits::LimitTable::limits(config));
    let applied = |ctx: &ResolveContext<'_>| {
        let r: Resolved = plan.resolve(|ask| match ask {
            Ask::Jwt => JwtTier.resolve(ctx),
            Ask::Service => None,
        });
        Applied {
            profile: r.profile.map(str::to_owned),
            quota: r.quota,
            cost: plan.cost,
            shadow: plan.shadow,
            probe,
        }
    };
    let anonymous = applied(&anonymous_ctx);
    let verified = verified_ctx.as_ref().map(applied);
    if let Some(v) = &verified {
        let _ = writeln!(out, "would apply if the token verifies: {}", numbers(config, rule, v));
        let _ = writeln!(
            out,
            "would apply otherwise (anonymous): {}",
            numbers(config, rule, &anonymous)
        );
    } else {
        let _ = writeln!(out, "would apply: {}", numbers(config, rule, &anonymous));
    }
    if rule.resolve.contains(&Step::Service) {
        out.push_str(
            "  unless the limit service has answered for this client before (its cached answer comes at the \
             service step)\n",
        );
    }
    AppliedRule {
        name: rule.name,
        verified,
        anonymous,
    }
}

/// `profile standard: rate 600/min, burst 60, cost 1, window 6s, enforced`.
fn numbers(config: &Config, rule: &RuleConfig, a: &Applied) -> String {
    let who = match &a.profile {
        Some(p) => format!("profile {p}"),
        None => "the token's numbers".to_owned(),
    };
    let (_, cost_override) = rule_cost(config, rule);
    // A rule charged by its response's size reserves one unit; an override
    // in [routes] replaces the metering with its number.
    let metered = match rule.bytes_per_unit {
        _ if a.probe => " (a probe: decided at this cost, never charged)".to_owned(),
        Some(per) if !cost_override => format!(" (reserved; settled at 1 per {per} response bytes)"),
        _ => String::new(),
    };
    let (_, shadow_override) = rule_shadow(config, rule);
    let from_routes = |o: bool| {
        if o {
            format!(" ([routes.{:?}])", &*rule.name)
        } else {
            String::new()
        }
    };
    // A profile's requests in flight (numbers from a token carry none).
    let in_flight = a
        .profile
        .as_deref()
        .and_then(|p| config.profile(p)?.concurrency)
        .map_or_else(String::new, |n| format!(", at most {n} in flight"));
    format!(
        "{who}: rate {}, burst {}{in_flight}, cost {}{}{}, window {}, {}{}",
        rate(&a.quota),
        a.quota.burst(),
        a.cost,
        metered,
        from_routes(cost_override),
        duration(window(&a.quota)),
        if a.shadow {
            "shadow (never rejected)"
        } else {
            "enforced"
        },
        from_routes(shadow_override),
    )
}

/// The client's address as the runtime finds it, with how it was found.
fn client_address(config: &Config, request: &Request, out: &mut String) -> Option<IpAddr> {
    let header = config.ip.header();
    let values: Vec<&[u8]> = request
        .headers
        .get_all(header.header_name())
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    let Some(peer) = request.peer else {
        let _ = writeln!(
            out,
            "client address: unknown here (no --peer): the runtime takes the connection's peer address{}",
            if config.ip.trusted_proxies().is_empty() {
                String::new()
            } else {
                format!(", and {} when the peer is a trusted proxy", header.name())
            }
        );
        return None;
    };
    // `client_addr` without forwarded values is the normalised peer.
    let normalised = config.ip.client_addr(peer, std::iter::empty());
    let trusted = config.ip.trusted_proxies().iter().any(|n| n.contains(&normalised));
    let client = config.ip.client_addr(peer, values.iter().copied());
    let keyed = config.ip.client_key(peer, &request.headers);
    match (trusted, values.is_empty()) {
        (true, false) => {
            let _ = writeln!(
                out,
                "client address: {client} (peer {peer} is a trusted proxy, [ip] trusted_proxies: read from {}, \
                 right to left, skipping trusted hops)",
                header.name()
            );
        }
        (true, true) => {
            let _ = writeln!(
                out,
                "client address: {client} (peer {peer} is a trusted proxy but sent no {} header)",
                header.name()
            );
        }
        (false, false) => {
            let _ = writeln!(
                out,
                "client address: {client} (peer {peer} is not a trusted proxy: its {} header is ignored)",
                header.name()
            );
        }
        (false, true) => {
            let _ = writeln!(out, "client address: {client} (the peer; it is not a trusted proxy)");
        }
    }
    if keyed != client {
        let _ = writeln!(
            out,
            "  keyed as {keyed} ([ip] prefixes: addresses in one prefix share a bucket)"
        );
    }
    Some(keyed)
}

/// The key the rule would use, and its fallback.
fn key(
    config: &Config,
    rule: &RuleConfig,
    request: &Request,
    claims: Option<&VerifiedClaims>,
    address: &Option<IpAddr>,
    out: &mut String,
) {
    let address_text = match address {
        Some(a) => format!("the client address {a}"),
        None => "the client address".to_owned(),
    };
    // The rule's key as the rule language reads it (validated when the
    // configuration was loaded).
    let kind = ratelimit_spec::key_text(rule.key_text()).ok();
    let line = match &kind {
        Some(KeyKind::Ip) => format!("key: ip: {address_text}"),
        Some(KeyKind::Header(name)) => match http::HeaderName::from_bytes(name.as_bytes())
            .ok()
            .and_then(|n| crate::runtime::key::single_value(&request.headers, &n))
        {
            Some(_) => format!(
                "key: header {name}: present (its value, hashed, is the key; at most {} new values per client \
                 address per {})",
                config.header_keys.per_ip,
                duration(config.header_keys.window)
            ),
            None => format!(
                "key: header {name}: absent, empty or sent more than once, so the key falls back to {address_text}"
            ),
        },
        Some(KeyKind::Claim(path)) => match claims.and_then(|c| c.get_text(path).map(|v| v.into_owned())) {
            Some(value) => format!(
                "key: claim {path} = {value:?} from the token (unverified: the key if the token verifies; \
                 otherwise {address_text})"
            ),
            None => format!("key: claim {path}: no such claim (or no token), so the key falls back to {address_text}"),
        },
        Some(KeyKind::Route | KeyKind::Custom(_)) | None => format!("key: {}", key_label(rule)),
    };
    out.push_str(&line);
    out.push('\n');
}

/// Each step of the chain and what it would do, until one answers.
fn steps(
    config: &Config,
    rule: &RuleConfig,
    verified: Option<&ResolveContext<'_>>,
    anonymous: &ResolveContext<'_>,
    out: &mut String,
) {
    let mut answered_anonymous = false;
    let mut answered_verified = false;
    for (i, step) in rule.resolve.iter().enumerate() {
        let _ = write!(out, "  {}. {step}: ", i + 1);
        let under = |ctx: &ResolveContext<'_>, answered: bool| {
            if answered {
                ("not reached".to_owned(), true)
            } else {
                describe(config, rule, step, ctx)
            }
        };
        let (a_text, a_answers) = under(anonymous, answered_anonymous);
        answered_anonymous |= a_answers;
        match verified {
            Some(v) => {
                let (v_text, v_answers) = under(v, answered_verified);
                answered_verified |= v_answers;
                if v_text == a_text {
                    let _ = writeln!(out, "{a_text}");
                } else {
                    let _ = writeln!(out, "if the token verifies: {v_text}; otherwise: {a_text}");
                }
            }
            None => {
                let _ = writeln!(out, "{a_text}");
            }
        }
    }
}

/// What `step` does under `ctx`, and whether it answers.
fn describe(config: &Config, rule: &RuleConfig, step: &Step, ctx: &ResolveContext<'_>) -> (String, bool) {
    let answer = match step {
        Step::Jwt => JwtTier.resolve(ctx),
        Step::Service => None,
        settled => {
            crate::runtime::plan::settled_by(crate::runtime::limits::LimitTable::limits(config), rule.name, settled)
        }
    };
    let answered = |r: &Resolved| match &r.profile {
        Some(p) => format!("answers: profile {p}"),
        None => format!(
            "answers: {}, burst {} (the token's numbers, capped by [jwt])",
            rate(&r.quota),
            r.quota.burst()
        ),
    };
    match (step, &answer) {
        (Step::Jwt, Some(r)) => {
            let via = config
                .jwt
                .as_ref()
                .map(|j| {
                    format!(
                        " (from claim {})",
                        if r.profile.is_some() {
                            &j.tier_claim
                        } else {
                            &j.rate_claim
                        }
                    )
                })
                .unwrap_or_default();
            (format!("{}{via}", answered(r)), true)
        }
        (Step::Jwt, None) if !ctx_has_claims(ctx) => ("no verified token: no answer, next step".to_owned(), false),
        (Step::Jwt, None) => {
            let claims = config.jwt.as_ref().map_or_else(String::new, |j| {
                format!(" ({} naming a profile, or {})", j.tier_claim, j.rate_claim)
            });
            (
                format!("the token carries no usable limit claim{claims}: no answer, next step"),
                false,
            )
        }
        (Step::Service, _) => (
            "the limit service's cached answer for this client, if it has one (not contacted here; a miss starts a \
             background lookup and the next step answers)"
                .to_owned(),
            false,
        ),
        (Step::Profile(_), Some(r)) => (format!("{} (always answers)", answered(r)), true),
        (Step::Default, Some(r)) => {
            let whence = match config.route(rule.name).and_then(|r| r.profile.as_deref()) {
                Some(p) => format!("[routes.{:?}] profile = {p:?}", rule.name),
                None => format!("default_profile = {:?}", config.default_profile()),
            };
            (format!("{} ({whence}; always answers)", answered(r)), true)
        }
        // A step added to the rule language later.
        #[allow(unreachable_patterns)]
        (_, Some(r)) => (answered(r), true),
        (_, None) => ("no answer, next step".to_owned(), false),
    }
}

/// Whether `ctx` carries claims (a token that would verify).
fn ctx_has_claims(ctx: &ResolveContext<'_>) -> bool {
    ctx.claims().is_some()
}
