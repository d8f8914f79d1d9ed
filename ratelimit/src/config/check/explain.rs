//! `ratelimit explain`: which `[[rules]]` entry a request meets, who it
//! limits, which resolver answers and with what numbers, computed with the
//! runtime's own code (rule matching, the client address after trusted
//! proxies, the resolvers), without a secret: a bearer token is decoded
//! without verification, only to show what it would do if it verifies.

use std::fmt::{self, Write as _};
use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::report::{
    chain_label, duration, key_label, methods_label, rate, rule_cost, rule_shadow, step_label, window,
};
use crate::config::{Config, RuleConfig};
use crate::resolve::{AnyStep, FinalResolver, ResolveContext, Resolved, Resolver, VerifiedClaims};
use ratelimit_spec::KeyKind;

/// A request to explain.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The path (a query is ignored, as by the rules).
    pub path: String,
    /// The request's headers.
    pub headers: HeaderMap,
    /// The connection's peer address.
    pub peer: Option<IpAddr>,
}

/// Why a header line was refused: the line, and what HTTP refuses in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderLineError(String);

impl fmt::Display for HeaderLineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HeaderLineError {}

impl Request {
    /// A request without headers or peer address.
    pub fn new(method: Method, path: impl Into<String>) -> Request {
        Request {
            method,
            path: path.into(),
            headers: HeaderMap::new(),
            peer: None,
        }
    }

    /// Adds a header from `"name: value"`, refusing what HTTP refuses.
    ///
    /// ```
    /// use ratelimit::config::check::Request;
    ///
    /// let request = Request::new(http::Method::GET, "/").with_header_line("x-api-key: k1").unwrap();
    /// # let _ = request;
    /// let err = Request::new(http::Method::GET, "/").with_header_line("no colon").unwrap_err();
    /// assert_eq!(err.to_string(), "header \"no colon\": expected \"name: value\"");
    /// ```
    pub fn with_header_line(self, line: &str) -> Result<Request, HeaderLineError> {
        self.add_header_line(line).map_err(HeaderLineError)
    }

    fn add_header_line(mut self, line: &str) -> Result<Request, String> {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("header {line:?}: expected \"name: value\""));
        };
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("header {line:?}: invalid header name {:?}", name.trim()))?;
        let value = HeaderValue::from_str(value.trim()).map_err(|_| format!("header {line:?}: invalid value"))?;
        self.headers.append(name, value);
        Ok(self)
    }

    /// Sets the peer address.
    #[must_use]
    pub fn with_peer(mut self, peer: IpAddr) -> Request {
        self.peer = Some(peer);
        self
    }
}

/// What a request would get: the rule, the key, the steps and the numbers.
/// `Display` is the text `ratelimit explain` prints.
#[derive(Debug, Clone)]
pub struct Explanation {
    rule: Option<Arc<str>>,
    verified: Option<Applied>,
    anonymous: Option<Applied>,
    text: String,
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
}

impl Explanation {
    /// The matching rule's name; `None` when no rule matches.
    pub fn rule(&self) -> Option<&str> {
        self.rule.as_deref()
    }

    /// What applies to a request whose token (if any) does not verify, or
    /// that has none.
    pub fn anonymous(&self) -> Option<&Applied> {
        self.anonymous.as_ref()
    }

    /// What applies if the request's bearer token verifies; `None` without a
    /// token the rule reads.
    pub fn if_verified(&self) -> Option<&Applied> {
        self.verified.as_ref()
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The bearer token of `authorization`, as the runtime reads it (one
/// header, the `Bearer` scheme), if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    crate::claims::bearer_of(headers)
}

/// The token's claims, read WITHOUT verifying anything.
#[cfg(feature = "jwt")]
fn unverified_claims(token: &str) -> Result<(String, VerifiedClaims), String> {
    let data = jsonwebtoken::dangerous::insecure_decode::<serde_json::Map<String, serde_json::Value>>(token)
        .map_err(|e| e.to_string())?;
    Ok((format!("{:?}", data.header.alg), VerifiedClaims::new(data.claims)))
}

#[cfg(not(feature = "jwt"))]
fn unverified_claims(_token: &str) -> Result<(String, VerifiedClaims), String> {
    Err("reading tokens needs the `jwt` feature of ratelimit".to_owned())
}

/// What the request would get under `config`.
pub fn explain(config: &Config, request: &Request) -> Explanation {
    let mut out = String::new();
    let _ = writeln!(out, "request: {} {}", request.method, request.path);
    // The path as the runtime sees it: a request target's path (an
    // absolute-form target, `http://h/k`, is `/k`; a query is dropped).
    let path = match request.path.parse::<http::Uri>() {
        Ok(uri) => uri.path().to_owned(),
        Err(_) => request.path.clone(),
    };
    let found = config
        .rules
        .iter()
        .enumerate()
        .find(|(_, r)| r.matches(&request.method, &path));
    let Some((index, rule)) = found else {
        let _ = writeln!(
            out,
            "rule: none of the {} [[rules]] entries matches: the config-driven layer does not limit this request",
            config.rules.len()
        );
        out.push_str(
            "  (attribute routes, #[rate_limit] in code, are not in the file: a handler's own limit may still apply)\n",
        );
        return Explanation {
            rule: None,
            verified: None,
            anonymous: None,
            text: out,
        };
    };
    let _ = writeln!(
        out,
        "rule: #{} {:?} ({} {}; first match wins{})",
        index + 1,
        &*rule.name,
        methods_label(rule),
        rule.path.as_str(),
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
        }
    );

    // The token: read only when the rule's key or chain reads claims, as
    // the runtime does.
    let reads_claims = rule.resolve.wants_claims() || rule.key_text().starts_with("jwt_claim:");
    let token = bearer(&request.headers);
    let claims = match token {
        None => None,
        Some(_) if !reads_claims => {
            out.push_str("token: a bearer token, not read by this rule (no jwt step, and the key is not a claim)\n");
            None
        }
        Some(t) => match unverified_claims(t) {
            Ok((alg, claims)) => {
                let _ = writeln!(
                    out,
                    "token: a bearer token ({alg}), decoded WITHOUT verification: its claims below would apply only \
                     if the token verifies (signature, exp, iss/aud); otherwise the request is anonymous"
                );
                if let Some(j) = &config.jwt {
                    match claims.get(&j.tier_claim) {
                        Some(v) => {
                            let _ = writeln!(out, "  tier claim {}: {v} (unverified)", j.tier_claim);
                        }
                        None => {
                            let _ = writeln!(out, "  tier claim {}: absent", j.tier_claim);
                        }
                    }
                }
                Some(claims)
            }
            Err(e) => {
                let _ = writeln!(out, "token: not a readable JWT ({e}): the request is anonymous");
                None
            }
        },
    };

    let address = client_address(config, request, &mut out);
    key(config, rule, request, claims.as_ref(), &address, &mut out);

    let verified_ctx = claims
        .as_ref()
        .map(|c| ResolveContext::new(config, &rule.name, Some(c)));
    let anonymous_ctx = ResolveContext::new(config, &rule.name, None);
    let _ = writeln!(
        out,
        "resolve: {} (tried in order, the first answer wins)",
        chain_label(rule)
    );
    steps(config, rule, verified_ctx.as_ref(), &anonymous_ctx, &mut out);

    let applied = |ctx: &ResolveContext<'_>| {
        let r: Resolved = rule.resolve.resolve_final(ctx);
        Applied {
            profile: r.profile.as_deref().map(str::to_owned),
            quota: r.quota,
            cost: rule_cost(config, rule).0,
            shadow: rule_shadow(config, rule).0,
        }
    };
    let anonymous = applied(&anonymous_ctx);
    let verified = verified_ctx.as_ref().map(applied);
    let service_first = rule.resolve.wants_service();
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
    if service_first {
        out.push_str(
            "  unless the limit service has answered for this client before (its cached answer comes at the \
             service step)\n",
        );
    }
    Explanation {
        rule: Some(Arc::clone(&rule.name)),
        verified,
        anonymous: Some(anonymous),
        text: out,
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
    format!(
        "{who}: rate {}, burst {}, cost {}{}{}, window {}, {}{}",
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
            .and_then(|n| crate::key::single_value(&request.headers, &n))
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
        Some(KeyKind::Global | KeyKind::Custom(_)) | None => format!("key: {}", key_label(rule)),
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
    for (i, step) in rule.resolve.steps().iter().enumerate() {
        let _ = write!(out, "  {}. {}: ", i + 1, step_label(step));
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
fn describe(config: &Config, rule: &RuleConfig, step: &AnyStep, ctx: &ResolveContext<'_>) -> (String, bool) {
    let answer = step.resolve(ctx);
    let answered = |r: &Resolved| match &r.profile {
        Some(p) => format!("answers: profile {p}"),
        None => format!(
            "answers: {}, burst {} (the token's numbers, capped by [jwt])",
            rate(&r.quota),
            r.quota.burst()
        ),
    };
    match (step, &answer) {
        (AnyStep::Jwt(_), Some(r)) => {
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
        (AnyStep::Jwt(_), None) if !ctx_has_claims(ctx) => {
            ("no verified token: no answer, next step".to_owned(), false)
        }
        (AnyStep::Jwt(_), None) => {
            let claims = config.jwt.as_ref().map_or_else(String::new, |j| {
                format!(" ({} naming a profile, or {})", j.tier_claim, j.rate_claim)
            });
            (
                format!("the token carries no usable limit claim{claims}: no answer, next step"),
                false,
            )
        }
        (AnyStep::Service, _) => (
            "the limit service's cached answer for this client, if it has one (not contacted here; a miss starts a \
             background lookup and the next step answers)"
                .to_owned(),
            false,
        ),
        (AnyStep::Profile(_), Some(r)) => (format!("{} (always answers)", answered(r)), true),
        (AnyStep::Default(_), Some(r)) => {
            let whence = match config.route(&rule.name).and_then(|r| r.profile.as_deref()) {
                Some(p) => format!("[routes.{:?}] profile = {p:?}", &*rule.name),
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
