//! The text of `ratelimit check`: tables of profiles, route overrides and
//! rules, and what was not checked.

use std::fmt::{self, Write as _};
use std::time::Duration;

use super::CheckReport;
use crate::runtime::config::{Config, JwtKeySource, RuleConfig};
use crate::Quota;

/// `"30/min"`: a quota's rate, as the file writes it.
pub(super) fn rate(q: &Quota) -> String {
    let shown = q.to_string();
    shown.split(" (").next().unwrap_or(&shown).to_owned()
}

/// The time an empty bucket takes to refill: the `w` of `RateLimit-Policy`.
pub(super) fn window(q: &Quota) -> Duration {
    q.emission_interval().saturating_mul(q.burst())
}

/// `"250ms"`, `"10s"`, `"2.5s"`, `"5min"`, `"2h"`, `"1d"`.
pub(super) fn duration(d: Duration) -> String {
    let ns = d.as_nanos();
    const S: u128 = 1_000_000_000;
    for (unit, size) in [("d", 86_400 * S), ("h", 3_600 * S), ("min", 60 * S), ("s", S)] {
        if ns >= size && ns.is_multiple_of(size) {
            return format!("{}{unit}", ns / size);
        }
    }
    if ns >= S {
        let s = format!("{:.3}", d.as_secs_f64());
        return format!("{}s", s.trim_end_matches('0').trim_end_matches('.'));
    }
    if ns >= 1_000_000 && ns.is_multiple_of(1_000_000) {
        return format!("{}ms", ns / 1_000_000);
    }
    if ns >= 1_000 && ns.is_multiple_of(1_000) {
        return format!("{}us", ns / 1_000);
    }
    format!("{ns}ns")
}

/// How a rule's key is described: what the file says, and for a key the
/// checker cannot see (one extracted by code) that it is not checked.
pub(super) fn key_label(rule: &RuleConfig) -> String {
    match ratelimit_spec::key_text(rule.key_text()) {
        Ok(ratelimit_spec::KeyKind::Custom(name)) => {
            format!("custom key {name} (registered in code; not checked here)")
        }
        _ => rule.key_text().to_owned(),
    }
}

/// `jwt -> service -> default`.
pub(super) fn chain_label(rule: &RuleConfig) -> String {
    rule.resolve
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" -> ")
}

/// `GET, POST`, or `any`.
pub(super) fn methods_label(rule: &RuleConfig) -> String {
    if rule.methods.is_empty() {
        "any".to_owned()
    } else {
        rule.methods
            .iter()
            .map(http::Method::as_str)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The cost in force for a rule: its `[routes."<name>"] cost`, else its own.
pub(super) fn rule_cost(config: &Config, rule: &RuleConfig) -> (u32, bool) {
    match config.route(rule.name).and_then(|r| r.cost) {
        Some(c) => (c, true),
        None => (rule.cost, false),
    }
}

/// The shadow setting in force for a rule.
pub(super) fn rule_shadow(config: &Config, rule: &RuleConfig) -> (bool, bool) {
    match config.route(rule.name).and_then(|r| r.shadow) {
        Some(s) => (s, true),
        None => (rule.shadow, false),
    }
}

/// Columns padded to their widest cell.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::from("  ");
        for (i, cell) in cells.enumerate() {
            let _ = write!(text, "{cell:<width$}  ", width = widths[i]);
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(out, &mut header.iter().copied());
    for row in rows {
        line(out, &mut row.iter().map(String::as_str));
    }
}

/// What the check could not see.
pub(super) fn notes(config: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(j) = &config.jwt {
        match j.verification.as_ref().map(|v| &v.keys) {
            None => notes.push(
                "jwt: no key source in the file: tokens must be verified by a verifier set in code or by an upstream \
                 layer (VerifiedClaims); an unverified token is anonymous"
                    .to_owned(),
            ),
            Some(JwtKeySource::JwksUrl(url)) => notes.push(format!(
                "jwt.jwks_url: {} is not fetched here (startup fetches it and refuses to start without its keys)",
                redact(url)
            )),
            Some(_) => {}
        }
    }
    if let Some(s) = &config.service {
        notes.push(match &s.url {
            Some(url) => format!(
                "service.url: {} is not contacted here (startup does not contact it either: lookups start with \
                 requests)",
                redact(url)
            ),
            None => "service: no url: startup needs the application's LimitService, given in code \
                     (RateLimitBuilder::limit_service; not checked here)"
                .to_owned(),
        });
    }
    if let Some(g) = &config.global {
        notes.push(format!(
            "global.redis_url: {} is not contacted here (startup does not wait for Redis: local-only until the first \
             sync round succeeds)",
            redact(&g.redis_url)
        ));
    }
    for rule in &config.rules {
        if let crate::runtime::key::AnyKey::Custom(key) = &rule.key {
            notes.push(format!(
                "rules: {:?} keys by \"custom:{}\": startup refuses it unless the application registers that key \
                 (RateLimitBuilder::key)",
                rule.name,
                key.name()
            ));
        }
    }
    if !config.routes().is_empty() {
        notes.push(
            "routes: an override named like no [[rules]] entry is for an attribute route (#[rate_limit] in code), \
             which is not in the file: its name is not checked here"
                .to_owned(),
        );
    }
    notes
}

/// A URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => match url[scheme + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
            None => url.to_owned(),
        },
        _ => url.to_owned(),
    }
}

impl CheckReport {
    /// The tables `ratelimit check` prints for a configuration that
    /// passed: profiles (rate, burst, window), route overrides and rules
    /// (name, methods and path, key, resolve chain, cost, shadow), and what
    /// was not checked. Empty when the file did not load.
    pub fn summary(&self) -> String {
        let Some(config) = &self.config else {
            return String::new();
        };
        let mut out = String::new();
        let _ = writeln!(out, "profiles (default: {}):", config.default_profile());
        let rows: Vec<Vec<String>> = config
            .profiles()
            .iter()
            .map(|(name, p)| {
                vec![
                    name.clone(),
                    rate(&p.quota),
                    p.quota.burst().to_string(),
                    duration(window(&p.quota)),
                ]
            })
            .collect();
        table(&mut out, &["name", "rate", "burst", "window"], &rows);

        out.push_str(
            "\nroutes (overrides by route name; attribute routes, #[rate_limit] in code, are not in the file):\n",
        );
        if config.routes().is_empty() {
            out.push_str("  (none)\n");
        } else {
            let rows: Vec<Vec<String>> = config
                .routes()
                .iter()
                .map(|(name, r)| {
                    let applies = if config.rules.iter().any(|rule| rule.name == name) {
                        format!("rule {name}")
                    } else {
                        "an attribute route (checked by the application's own check)".to_owned()
                    };
                    vec![
                        name.clone(),
                        r.profile.clone().unwrap_or_else(|| "-".to_owned()),
                        r.cost.map_or_else(|| "-".to_owned(), |c| c.to_string()),
                        r.shadow.map_or_else(|| "-".to_owned(), |s| s.to_string()),
                        applies,
                    ]
                })
                .collect();
            table(&mut out, &["name", "profile", "cost", "shadow", "applies to"], &rows);
        }

        out.push_str("\nrules (first match wins):\n");
        if config.rules.is_empty() {
            out.push_str("  (none)\n");
        } else {
            let rows: Vec<Vec<String>> = config
                .rules
                .iter()
                .enumerate()
                .map(|(i, rule)| {
                    let (cost, cost_override) = rule_cost(config, rule);
                    let (shadow, shadow_override) = rule_shadow(config, rule);
                    let mark = |overridden: bool| if overridden { " (routes)" } else { "" };
                    vec![
                        (i + 1).to_string(),
                        rule.name.to_string(),
                        format!("{} {}", methods_label(rule), rule.path.as_str()),
                        key_label(rule),
                        chain_label(rule),
                        match rule.bytes_per_unit {
                            Some(per) if !cost_override => format!("response_bytes:{per}"),
                            _ => format!("{cost}{}", mark(cost_override)),
                        },
                        format!("{shadow}{}", mark(shadow_override)),
                    ]
                })
                .collect();
            table(
                &mut out,
                &["#", "name", "methods path", "key", "resolve", "cost", "shadow"],
                &rows,
            );
        }
        if !self.notes.is_empty() {
            out.push_str("\nnot checked here:\n");
            for note in &self.notes {
                let _ = writeln!(out, "  {note}");
            }
        }
        out
    }
}

impl fmt::Display for CheckReport {
    /// Every problem, one `FILE:LINE:COL: field: message` line each, or the
    /// summary when there is none; warnings (`FILE:LINE:COL: field:
    /// warning: ...`) before either.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for w in &self.warnings {
            writeln!(f, "{w}")?;
        }
        if self.is_ok() {
            return f.write_str(&self.summary());
        }
        for e in &self.errors {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_the_file_writes_them() {
        assert_eq!(duration(Duration::from_secs(10)), "10s");
        assert_eq!(duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(duration(Duration::from_secs(300)), "5min");
        assert_eq!(duration(Duration::from_secs(86_400)), "1d");
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
        assert_eq!(duration(Duration::from_nanos(333_333_334)), "333333334ns");
        assert_eq!(redact("redis://u:secret@h:6379/0"), "redis://u:***@h:6379/0");
        assert_eq!(redact("redis://h:6379/0"), "redis://h:6379/0");
    }
}
