//! What a reload changed: the lines an operator reads after `SIGHUP`
//! (profiles, routes, rules, sections), and the sections a reload cannot
//! change because the runtime built them once (they take effect at restart).

use std::collections::BTreeMap;
use std::fmt;

use super::{Config, RuleConfig};
use crate::runtime::limits::{Profile, RouteConfig};

/// The differences between a running configuration and its replacement,
/// as [`Config::changes_from`] finds them.
///
/// ```
/// use ratelimit::config::Config;
///
/// let old = Config::from_toml_str("default_profile = \"std\"\n[profiles.std]\nrate = \"10/s\"\n").unwrap();
/// let new = Config::from_toml_str(
///     "default_profile = \"std\"\n[profiles.std]\nrate = \"20/s\"\n[profiles.gold]\nrate = \"100/s\"\n\
///      [store]\nmax_keys = 5000\n",
/// )
/// .unwrap();
/// let changes = new.changes_from(&old);
/// assert_eq!(
///     changes.applied(),
///     ["profile \"gold\" added: 100/s (burst 100)", "profile \"std\": 10/s (burst 10) -> 20/s (burst 20)"]
/// );
/// assert_eq!(changes.at_restart(), ["[store]"]);
/// assert!(!changes.is_empty());
/// println!("{changes}"); // one line, for a log
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigChanges {
    applied: Vec<String>,
    at_restart: Vec<&'static str>,
}

impl ConfigChanges {
    /// What the new configuration changes from the next request on, one
    /// entry per profile, route, rule or section.
    pub fn applied(&self) -> &[String] {
        &self.applied
    }

    /// Sections that differ but keep their running settings until restart:
    /// the runtime built them once (`[store]`, `[header_keys]`, the `[jwt]`
    /// verification settings, `[service]`, `[global]`, `[tls]`).
    pub fn at_restart(&self) -> &[&'static str] {
        &self.at_restart
    }

    /// Whether the two configurations are the same.
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.at_restart.is_empty()
    }
}

impl fmt::Display for ConfigChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("no changes");
        }
        if self.applied.is_empty() {
            f.write_str("nothing applied")?;
        } else {
            f.write_str(&self.applied.join("; "))?;
        }
        if !self.at_restart.is_empty() {
            write!(
                f,
                "; changed but in force only after a restart: {}",
                self.at_restart.join(", ")
            )?;
        }
        Ok(())
    }
}

fn profile(p: &Profile) -> String {
    match p.concurrency {
        Some(n) => format!("{}, at most {n} in flight", p.quota),
        None => p.quota.to_string(),
    }
}

fn route(r: &RouteConfig) -> String {
    let mut parts = Vec::new();
    if let Some(p) = &r.profile {
        parts.push(format!("profile {p:?}"));
    }
    if let Some(s) = r.shadow {
        parts.push(format!("shadow {s}"));
    }
    if let Some(c) = r.cost {
        parts.push(format!("cost {c}"));
    }
    if parts.is_empty() {
        "no overrides".to_owned()
    } else {
        parts.join(", ")
    }
}

fn rule(r: &RuleConfig) -> String {
    let methods = if r.methods.is_empty() {
        "any method".to_owned()
    } else {
        r.methods.iter().map(http::Method::as_str).collect::<Vec<_>>().join(",")
    };
    let resolve: Vec<String> = r.resolve.iter().map(ToString::to_string).collect();
    let mut s = format!(
        "{} {} key {} resolve [{}]",
        methods,
        r.path.as_str(),
        r.key_text(),
        resolve.join(", ")
    );
    if let Some(per) = r.bytes_per_unit {
        s.push_str(&format!(" cost response_bytes:{per}"));
    } else if r.cost != 1 {
        s.push_str(&format!(" cost {}", r.cost));
    }
    if r.shadow {
        s.push_str(" shadow");
    }
    if r.stack {
        s.push_str(" stack");
    }
    s
}

/// Added, removed and changed entries of two maps, each named by `label`
/// and described by `show`.
fn map_changes<V: PartialEq>(
    label: impl Fn(&str) -> String,
    old: &BTreeMap<String, V>,
    new: &BTreeMap<String, V>,
    show: impl Fn(&V) -> String,
    out: &mut Vec<String>,
) {
    for (name, v) in new {
        match old.get(name) {
            None => out.push(format!("{} added: {}", label(name), show(v))),
            Some(o) if o != v => out.push(format!("{}: {} -> {}", label(name), show(o), show(v))),
            Some(_) => {}
        }
    }
    for (name, v) in old {
        if !new.contains_key(name) {
            out.push(format!("{} removed (was: {})", label(name), show(v)));
        }
    }
}

impl Config {
    /// What replacing `old` with this configuration changes (what a reload
    /// logs): profiles, route overrides and rules one by one, other
    /// sections by name, and the sections that only change at restart.
    /// Entries are in a stable order: profiles, routes, rules, sections.
    pub fn changes_from(&self, old: &Config) -> ConfigChanges {
        let mut applied = Vec::new();
        if self.default_profile != old.default_profile {
            applied.push(format!(
                "default_profile: {:?} -> {:?}",
                old.default_profile, self.default_profile
            ));
        }
        map_changes(
            |n| format!("profile {n:?}"),
            &old.profiles,
            &self.profiles,
            profile,
            &mut applied,
        );
        // A route's settings are its `[routes."name"]` section: named as the
        // file writes it (a route is not "added" by a section for it).
        map_changes(
            |n| format!("[routes.{n:?}]"),
            &old.routes,
            &self.routes,
            route,
            &mut applied,
        );
        // Rules by name (names are unique): the first match applies, so
        // an order change is a change too.
        let rules = |c: &Config| -> BTreeMap<String, RuleConfig> {
            c.rules.iter().map(|r| (r.name.to_string(), r.clone())).collect()
        };
        map_changes(|n| format!("rule {n:?}"), &rules(old), &rules(self), rule, &mut applied);
        let order = |c: &Config| c.rules.iter().map(|r| r.name).collect::<Vec<_>>();
        let (before, after) = (order(old), order(self));
        let kept =
            |a: &[&'static str], b: &[&'static str]| a.iter().filter(|n| b.contains(n)).copied().collect::<Vec<_>>();
        if kept(&before, &after) != kept(&after, &before) {
            applied.push(format!("rules reordered: {}", after.join(", ")));
        }
        let mut section = |changed: bool, name: &str| {
            if changed {
                applied.push(format!("[{name}] changed"));
            }
        };
        section(self.headers != old.headers, "headers");
        section(self.ip != old.ip, "ip");
        section(self.responses != old.responses, "responses");
        // The caps and claim names of [jwt] apply at once; its key source
        // was built into the verifier.
        let jwt_limits = |c: &Config| {
            c.jwt.as_ref().map(|j| {
                (
                    j.tier_claim.clone(),
                    j.rate_claim.clone(),
                    j.burst_claim.clone(),
                    j.max_rate,
                    j.max_burst,
                )
            })
        };
        section(jwt_limits(self) != jwt_limits(old), "jwt");

        let mut at_restart = Vec::new();
        let mut restart = |changed: bool, name: &'static str| {
            if changed {
                at_restart.push(name);
            }
        };
        restart(self.store != old.store, "[store]");
        restart(self.header_keys != old.header_keys, "[header_keys]");
        let verification = |c: &Config| c.jwt.as_ref().and_then(|j| j.verification.clone());
        restart(
            verification(self) != verification(old),
            "[jwt] verification (key source, algorithm, issuer, audience, leeway, JWKS and failure settings)",
        );
        restart(self.service != old.service, "[service]");
        restart(self.global != old.global, "[global]");
        restart(self.tls != old.tls, "[tls]");
        ConfigChanges { applied, at_restart }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_toml_str(text).expect("valid")
    }

    const BASE: &str = r#"
default_profile = "std"
[profiles.std]
rate = "10/s"
[profiles.old]
rate = "1/s"
[routes."a"]
profile = "std"
[[rules]]
name = "one"
path = "/one"
key = "ip"
resolve = ["default"]
[[rules]]
name = "two"
path = "/two/*"
key = "header:x-api-key"
resolve = ["default"]
"#;

    #[test]
    fn the_same_file_changes_nothing() {
        let c = config(BASE);
        let changes = c.changes_from(&c.clone());
        assert!(changes.is_empty());
        assert_eq!(changes.to_string(), "no changes");
    }

    #[test]
    fn profiles_routes_rules_and_sections_are_named() {
        let new = BASE
            .replace(
                "[profiles.old]\nrate = \"1/s\"\n",
                "[profiles.new]\nrate = \"5/min\"\nburst = 2\n",
            )
            .replace("profile = \"std\"\n[[rules]]", "profile = \"std\"\ncost = 2\n[[rules]]")
            .replace("path = \"/two/*\"", "path = \"/two/*\"\ncost = 3")
            + "[headers]\nstyle = \"structured\"\n[store]\nmax_keys = 5000\n";
        let changes = config(&new).changes_from(&config(BASE));
        assert_eq!(
            changes.applied(),
            [
                "profile \"new\" added: 5/min (burst 2)",
                "profile \"old\" removed (was: 1/s (burst 1))",
                "[routes.\"a\"]: profile \"std\" -> profile \"std\", cost 2",
                "rule \"two\": any method /two/* key header:x-api-key resolve [default] -> any method /two/* key header:x-api-key resolve [default] cost 3",
                "[headers] changed",
            ]
        );
        assert_eq!(changes.at_restart(), ["[store]"]);
        let line = changes.to_string();
        assert!(
            line.ends_with("changed but in force only after a restart: [store]"),
            "{line}"
        );
    }

    #[test]
    fn a_rule_moved_ahead_is_a_change() {
        // BASE with its two [[rules]] entries in the other order.
        let (head, rules) = BASE.split_once("[[rules]]").unwrap();
        let (one, two) = rules.split_once("[[rules]]").unwrap();
        let swapped = format!("{head}[[rules]]{two}[[rules]]{one}");
        assert!(swapped.find("\"two\"") < swapped.find("\"one\""));
        let changes = config(&swapped).changes_from(&config(BASE));
        assert_eq!(changes.applied(), ["rules reordered: two, one"]);
    }
}
