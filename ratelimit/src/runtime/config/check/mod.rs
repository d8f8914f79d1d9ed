//! Checking a configuration before deploy: everything startup checks,
//! without starting anything (`ratelimit check FILE`), and what a request
//! would get (`ratelimit explain FILE ...`, [`explain`]).
//!
//! [`Config::check_startup`] holds the checks startup makes beyond the file
//! itself: the store and header-key settings build, the JWT key source can
//! be read (the HMAC secret's variable is set, the PEM or JWKS file parses),
//! the limit service's id secret variable is set and long enough and its URL
//! is one the client takes, the fleet secret is set and the Redis URL
//! parses. The runtime calls the same constructors (and, for the limit
//! service's id secret, this module's own function), so the two cannot
//! disagree about what starts. URLs are not fetched and Redis is not
//! contacted.
//!
//! ```
//! use ratelimit::config::check;
//!
//! let report = check::check_toml_str("[profiles.a]\nrate = \"10/s\"\n[service]\nurl = \"http://limits\"\nid_secret_env = \"RL_DOC_UNSET_SECRET\"\n", "limits.toml");
//! assert!(!report.is_ok());
//! let first = &report.errors()[0];
//! assert_eq!(first.field(), Some("service.id_secret_env"));
//! assert_eq!((first.line(), first.column()), (Some(5), Some(1)));
//! assert!(first.to_string().starts_with("limits.toml:5:1: service.id_secret_env: the environment variable RL_DOC_UNSET_SECRET is not set"), "{first}");
//! ```

mod explain;
mod report;
mod request;
mod token;

use std::path::Path;

#[cfg(feature = "axum")]
pub(crate) use explain::explain_with;
pub use explain::{explain, Applied, AppliedRule, Explanation};
pub use request::{HeaderLineError, Request};

use super::{Config, ConfigError};

/// A problem startup would refuse the configuration for, found beyond the
/// file: an unset variable, an unreadable key file, a URL the client
/// refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartupProblem {
    /// The field the problem is about, as a dotted path
    /// (`service.id_secret_env`, `jwt.pem_file`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for StartupProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Something startup accepts but that may not do what was meant: a profile
/// the fleet gate limits locally only ([`Config::check_warnings`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckWarning {
    /// The field the warning is about, as a dotted path
    /// (`profiles.daily.rate`).
    pub field: String,
    /// What it means and how to change it.
    pub message: String,
}

impl std::fmt::Display for CheckWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: warning: {}", self.field, self.message)
    }
}

/// The outcome of checking a file: the configuration when it loaded, and
/// every problem found, each located in the file when it has a place there.
#[derive(Debug, Clone)]
pub struct CheckReport {
    source: String,
    config: Option<Config>,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    notes: Vec<String>,
}

impl CheckReport {
    /// The file's name, as errors name it.
    pub fn source_name(&self) -> &str {
        &self.source
    }

    /// The configuration, when the file loaded (it may still have startup
    /// problems).
    pub fn config(&self) -> Option<&Config> {
        self.config.as_ref()
    }

    /// Every problem, in the file's order. When the file does not load:
    /// every value refused (each section, profile, route and rule is read on
    /// its own), or else validation's errors: every `[[rules]]` entry it
    /// refuses (each rule is checked with the refused ones set aside), and
    /// the first error of the other checks across sections. When it loads:
    /// every startup problem.
    pub fn errors(&self) -> &[ConfigError] {
        &self.errors
    }

    /// Warnings, located like errors (`FILE:LINE:COL: field: warning:
    /// ...`): startup accepts the file, but something in it may not do what
    /// was meant ([`Config::check_warnings`]). They do not make the report
    /// fail.
    pub fn warnings(&self) -> &[ConfigError] {
        &self.warnings
    }

    /// What was not checked, and why (a JWKS URL is not fetched, attribute
    /// routes live in code).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// No problem found: startup would accept this configuration.
    pub fn is_ok(&self) -> bool {
        self.config.is_some() && self.errors.is_empty()
    }
}

/// Checks a file as [`Config::from_file`] reads it (with `RATELIMIT__*`
/// environment overrides), then as startup would.
pub fn check_file(path: impl AsRef<Path>) -> CheckReport {
    let path = path.as_ref();
    let source = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => return failed(source, ConfigError::io(path, e)),
    };
    let overrides = match super::raw::env_overrides() {
        Ok(vars) => vars,
        Err(e) => return failed(source, e),
    };
    check_text(&text, source, overrides)
}

/// Checks TOML text (no environment overrides); errors name `source_name`.
pub fn check_toml_str(text: &str, source_name: &str) -> CheckReport {
    check_text(text, source_name.to_owned(), Vec::new())
}

fn failed(source: String, error: ConfigError) -> CheckReport {
    CheckReport {
        source,
        config: None,
        errors: vec![error],
        warnings: Vec::new(),
        notes: Vec::new(),
    }
}

fn check_text(text: &str, source: String, overrides: Vec<(String, String)>) -> CheckReport {
    let config = match super::raw::load_all(text, &source, overrides) {
        Ok(config) => config,
        Err(errors) => {
            return CheckReport {
                source,
                config: None,
                errors,
                warnings: Vec::new(),
                notes: Vec::new(),
            }
        }
    };
    let mut errors: Vec<ConfigError> = config
        .check_startup()
        .into_iter()
        .map(|p| super::raw::locate(text, &source, &p.field, p.message))
        .collect();
    // In the file's order; problems without a place (from the environment)
    // last.
    errors.sort_by_key(|e| (e.line().is_none(), e.line(), e.column()));
    let mut warnings: Vec<ConfigError> = config
        .check_warnings()
        .into_iter()
        .map(|w| super::raw::locate(text, &source, &w.field, format!("warning: {}", w.message)))
        .collect();
    warnings.sort_by_key(|e| (e.line().is_none(), e.line(), e.column()));
    let notes = report::notes(&config);
    CheckReport {
        source,
        config: Some(config),
        errors,
        warnings,
        notes,
    }
}

/// The profiles a fleet gate with this window limits locally only
/// (`FleetGate::limits_locally`): a period longer than an hour and a
/// burst the window cannot hold. Startup logs them; the checker warns.
pub(crate) fn locally_limited_profiles(
    profiles: &std::collections::BTreeMap<String, crate::runtime::limits::Profile>,
    window: std::time::Duration,
) -> Vec<(&str, &crate::Quota)> {
    profiles
        .iter()
        .filter(|(_, p)| crate::engine::window::limited_locally(&p.quota, window))
        .map(|(name, p)| (name.as_str(), &p.quota))
        .collect()
}

/// `"10000/d"`: a quota's rate, as the file writes it (for the startup
/// warning of the HTTP runtime's fleet gate).
#[cfg_attr(not(all(feature = "axum", feature = "redis")), allow(dead_code))]
pub(crate) fn rate_text(q: &crate::Quota) -> String {
    report::rate(q)
}

impl Config {
    /// What startup accepts but may not do what was meant, one warning per
    /// field: with `[global]`, each profile the fleet gate limits locally
    /// only (a period longer than an hour whose burst the window cannot
    /// hold, `FleetGate::limits_locally`), with its period, the
    /// window and the fix. Startup logs the same profiles once, at warn
    /// level.
    ///
    /// ```
    /// use ratelimit::config::Config;
    ///
    /// let config = Config::from_toml_str(
    ///     "default_profile = \"daily\"\n[profiles.daily]\nrate = \"10000/d\"\nburst = 20\n\
    ///      [profiles.standard]\nrate = \"600/min\"\n\
    ///      [global]\nredis_url = \"redis://127.0.0.1/\"\nkey_secret_env = \"FLEET_SECRET\"\n",
    /// )
    /// .unwrap();
    /// let warnings = config.check_warnings();
    /// assert_eq!(warnings.len(), 1);
    /// assert_eq!(warnings[0].field, "profiles.daily.rate");
    /// assert!(warnings[0].message.contains("locally only"), "{}", warnings[0]);
    /// ```
    pub fn check_warnings(&self) -> Vec<CheckWarning> {
        let mut warnings: Vec<CheckWarning> = match &self.global {
            Some(g) => locally_limited_profiles(self.profiles(), g.window)
                .into_iter()
                .map(|(name, q)| CheckWarning {
                    field: format!("profiles.{name}.rate"),
                    message: long_period_message(q, g.window),
                })
                .collect(),
            None => Vec::new(),
        };
        // A `[routes]` profile that the rules of its name never reach: the
        // application's startup refuses it unless an attribute route of
        // that name (which this file cannot see) reaches `default`.
        let limits = crate::runtime::limits::LimitTable::limits(self);
        for name in self.routes().keys() {
            // (Located at the first rule of the name: a route name's dots
            // would read as the field path's.)
            let Some(at) = self.rules.iter().position(|r| r.name == name.as_str()) else {
                continue;
            };
            let rules = self
                .rules
                .iter()
                .filter(|r| r.name == name.as_str())
                .map(|r| r.plan(limits));
            if let Some(unused) = crate::runtime::plan::RoutePlan::unreached_by_all(rules, limits) {
                warnings.push(CheckWarning {
                    field: format!("rules[{at}].resolve"),
                    message: format!(
                        "{unused}; startup refuses it unless an attribute route named {name:?} reaches `default`"
                    ),
                });
            }
        }
        warnings
    }

    /// What startup would refuse beyond the file itself, every problem
    /// found (see the [module docs](crate::config::check)). Reads the
    /// environment variables and key files the configuration names; fetches
    /// nothing.
    pub fn check_startup(&self) -> Vec<StartupProblem> {
        let mut problems = Vec::new();
        let mut fail = |field: &str, message: String| {
            problems.push(StartupProblem {
                field: field.to_owned(),
                message,
            })
        };
        for (_, field, message) in missing_features(self) {
            fail(&field, message);
        }
        // What building the store and the header tracker would refuse,
        // without allocating them (`max_keys` reserves 32 bytes a key).
        if let Err(e) = crate::MemoryStore::builder().max_keys(self.store.max_keys).validate() {
            fail("store", e.to_string());
        }
        // Built by the HTTP runtime only.
        #[cfg(feature = "axum")]
        if let Err(e) = crate::runtime::key::HeaderBudget::validate(self.header_keys) {
            fail("header_keys", e.to_string());
        }
        #[cfg(feature = "jwt")]
        if let Some(v) = self.jwt.as_ref().and_then(|j| j.verification.as_ref()) {
            if let Err((field, message)) = jwt_keys(v) {
                fail(field, message);
            }
        }
        #[cfg(feature = "service")]
        if let Some(s) = &self.service {
            for (field, message) in service(s) {
                fail(field, message);
            }
        }
        #[cfg(feature = "redis")]
        if let Some(g) = &self.global {
            for (field, message) in global(g) {
                fail(field, message);
            }
        }
        problems
    }
}

/// What `config` asks of a cargo feature this build of ratelimit lacks:
/// the section and the field at fault (`jwt.pem_file`, `rules[0].key`,
/// `service`) and a message naming the feature. Startup, a reload and [`Config::check_startup`]
/// refuse such a configuration: a token the build cannot verify, or a step
/// it cannot run, is never skipped in silence (a `jwt_claim` key would
/// otherwise limit every client by address, a `service` step never answer).
#[cfg_attr(
    all(feature = "jwt", feature = "service", feature = "redis"),
    allow(unused_mut, unused_variables)
)]
pub(crate) fn missing_features(config: &Config) -> Vec<(&'static str, String, String)> {
    let mut problems = Vec::new();
    let mut missing = |section: &'static str, field: String, message: String| problems.push((section, field, message));
    #[cfg(not(feature = "jwt"))]
    if let Some(v) = config.jwt.as_ref().and_then(|j| j.verification.as_ref()) {
        use super::JwtKeySource;
        let key = match &v.keys {
            JwtKeySource::HmacSecretEnv(_) => "hmac_secret_env",
            JwtKeySource::PemFile(_) => "pem_file",
            JwtKeySource::JwksFile(_) => "jwks_file",
            JwtKeySource::JwksUrl(_) => "jwks_url",
        };
        missing(
            "jwt",
            format!("jwt.{key}"),
            format!(
                "[jwt] {key}: verifying tokens with it needs the `jwt` feature of ratelimit, which this build \
                 lacks (enable it in Cargo.toml, or remove the key source)"
            ),
        );
    }
    #[cfg(not(all(feature = "jwt", feature = "service")))]
    for (i, rule) in config.rules.iter().enumerate() {
        let entry = || format!("[[rules]] entry {} ({:?})", i + 1, &*rule.name);
        #[cfg(not(feature = "jwt"))]
        if matches!(rule.key, crate::runtime::key::AnyKey::Claim(_)) {
            missing(
                "rules",
                format!("rules[{i}].key"),
                format!(
                    "{}: key {:?} needs the `jwt` feature of ratelimit, which this build lacks (claims are \
                     never read from an unverified token)",
                    entry(),
                    rule.key_text()
                ),
            );
        }
        #[cfg(not(feature = "jwt"))]
        if rule.resolve.contains(&crate::runtime::resolve::Step::Jwt) {
            missing(
                "rules",
                format!("rules[{i}].resolve"),
                format!(
                    "{}: the `jwt` step needs the `jwt` feature of ratelimit, which this build lacks",
                    entry()
                ),
            );
        }
        #[cfg(not(feature = "service"))]
        if rule.resolve.contains(&crate::runtime::resolve::Step::Service) {
            missing(
                "rules",
                format!("rules[{i}].resolve"),
                format!(
                    "{}: the `service` step needs the `service` feature of ratelimit, which this build lacks",
                    entry()
                ),
            );
        }
    }
    #[cfg(not(feature = "service"))]
    if config.service.is_some() {
        missing(
            "service",
            "service".to_owned(),
            "[service]: the limit service needs the `service` feature of ratelimit, which this build lacks \
             (enable it in Cargo.toml, or remove the section)"
                .to_owned(),
        );
    }
    #[cfg(not(feature = "redis"))]
    if config.global.is_some() {
        missing(
            "global",
            "global".to_owned(),
            "[global] needs the `redis` feature of ratelimit (or remove the section for local-only limiting)"
                .to_owned(),
        );
    }
    problems
}

/// The JWT key source can be read: the same constructors
/// [`JwtVerifier::from_settings`](crate::jwt::JwtVerifier::from_settings) calls (a JWKS URL's syntax only: it is not
/// fetched).
#[cfg(feature = "jwt")]
fn jwt_keys(v: &super::JwtVerification) -> Result<(), (&'static str, String)> {
    use super::JwtKeySource;
    use crate::runtime::jwt::JwtVerifier;
    let field = match &v.keys {
        JwtKeySource::HmacSecretEnv(_) => "jwt.hmac_secret_env",
        JwtKeySource::PemFile(_) => "jwt.pem_file",
        JwtKeySource::JwksFile(_) => "jwt.jwks_file",
        JwtKeySource::JwksUrl(_) => "jwt.jwks_url",
    };
    if let JwtKeySource::JwksUrl(url) = &v.keys {
        return http_url_syntax(url).map_err(|m| (field, m));
    }
    let alg = || match v.algorithm.as_deref() {
        None => Err((field, crate::runtime::limits::MISSING_ALGORITHM.to_owned())),
        Some(name) => name
            .parse::<jsonwebtoken::Algorithm>()
            .map_err(|_| (field, format!("unknown algorithm {name:?}"))),
    };
    let built = match &v.keys {
        JwtKeySource::HmacSecretEnv(var) => {
            match std::env::var_os(var) {
                None => {
                    return Err((
                        field,
                        format!("the environment variable {var} is not set (the JWT HMAC secret)"),
                    ))
                }
                Some(value) if value.is_empty() => {
                    return Err((
                        field,
                        format!("the environment variable {var} is empty (the JWT HMAC secret)"),
                    ))
                }
                Some(_) => {}
            }
            JwtVerifier::hmac_from_env(var, alg()?)
        }
        JwtKeySource::PemFile(path) => JwtVerifier::pem_file(path, alg()?),
        JwtKeySource::JwksFile(path) => JwtVerifier::jwks_file(path),
        JwtKeySource::JwksUrl(_) => return Ok(()),
    };
    built.map(drop).map_err(|e| (field, e.to_string()))
}

/// `http://` or `https://`, a host, and a URI `http` parses.
#[cfg(feature = "jwt")]
fn http_url_syntax(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() => Ok(()),
        _ => Err(format!("invalid URL {url:?}: expected http:// or https:// and a host")),
    }
}

/// Why the limit service's client id key cannot be built: the key of the
/// `[service]` field at fault and what is wrong. Startup
/// (`ratelimit::axum`) and [`Config::check_startup`] both call it.
#[cfg(feature = "service")]
pub(crate) fn service_id_key(
    s: &super::ServiceConfig,
) -> Result<crate::runtime::service::ServiceIdKey, (&'static str, String)> {
    use crate::runtime::service::ServiceIdKey;
    let least = crate::runtime::service::MIN_ID_SECRET_LEN;
    if let Some(secret) = &s.id_secret {
        return ServiceIdKey::new(&secret.0).map_err(|e| ("id_secret", e.to_string()));
    }
    let Some(var) = &s.id_secret_env else {
        return Err((
            "id_secret_env",
            format!(
                "name the environment variable holding the secret client ids are keyed with (at least {least} \
                 bytes, shared with the limit service)"
            ),
        ));
    };
    let secret = match std::env::var_os(var) {
        None => {
            return Err((
                "id_secret_env",
                format!(
                    "the environment variable {var} is not set (the secret client ids are keyed with: at least \
                     {least} bytes, shared with the limit service)"
                ),
            ))
        }
        Some(v) if v.is_empty() => {
            return Err(("id_secret_env", format!("the environment variable {var} is empty")));
        }
        Some(v) => v.into_encoded_bytes(),
    };
    ServiceIdKey::new(&secret).map_err(|e| ("id_secret_env", format!("{var}: {e}")))
}

#[cfg(feature = "service")]
fn service(s: &super::ServiceConfig) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if let Err((key, message)) = service_id_key(s) {
        problems.push((
            if key == "id_secret" {
                "service"
            } else {
                "service.id_secret_env"
            },
            message,
        ));
    }
    if let Some(url) = &s.url {
        if let Err(e) = crate::runtime::service::HttpLimitService::new(url) {
            problems.push(("service.url", e.to_string()));
        }
    }
    problems
}

/// The least length of the fleet secret (`FleetGate::new` refuses shorter).
#[cfg(feature = "redis")]
const MIN_FLEET_SECRET_LEN: usize = 16;

#[cfg(feature = "redis")]
fn global(g: &super::FleetConfig) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    use crate::fleet::{RedisSettings, RedisStore};
    let least = MIN_FLEET_SECRET_LEN;
    let secret = match (&g.key_secret, &g.key_secret_env) {
        (Some(s), _) => Ok(s.0.len()),
        (None, Some(var)) => match std::env::var_os(var) {
            None => Err((
                "global.key_secret_env",
                format!(
                    "the environment variable {var} is not set (the fleet secret: at least {least} bytes, the \
                     same on every instance)"
                ),
            )),
            Some(v) => Ok(v.len()),
        },
        (None, None) => Err((
            "global",
            format!(
                "key_secret_env: name the environment variable holding the fleet secret (at least {least} \
                 bytes, the same on every instance; Redis keys are keyed hashes under it)"
            ),
        )),
    };
    match secret {
        Ok(n) if n < least => problems.push((
            "global.key_secret_env",
            format!("the fleet secret is {n} bytes; at least {least} are needed"),
        )),
        Ok(_) => {}
        Err(p) => problems.push(p),
    }
    let mut settings = RedisSettings::default()
        .with_prefix(g.key_prefix.clone())
        .with_cluster(g.cluster)
        .with_connect_timeout(g.connect_timeout)
        .with_response_timeout(g.timeout);
    settings.ca_file = g.ca_file.clone();
    if let Err(e) = RedisStore::new(&g.redis_url, settings) {
        problems.push(("global.redis_url", e.to_string()));
    }
    problems
}

/// The warning for a profile the fleet gate limits locally only.
fn long_period_message(q: &crate::Quota, window: std::time::Duration) -> String {
    use report::duration;
    let holds = report::window(q);
    let budget = window.as_secs_f64() / q.emission_interval().as_secs_f64();
    let fleet_wide = if holds <= crate::engine::window::LONG_PERIOD {
        format!(
            "a [global] window of at least {} (burst x emission interval) so it holds the burst, or a burst of at \
             most {}",
            duration(round_up_to_secs(holds)),
            budget.floor().max(1.0)
        )
    } else {
        format!(
            "a burst of at most {} (the window is at most 1h, shorter than the {} a burst of {} takes)",
            budget.floor().max(1.0),
            duration(round_up_to_secs(holds)),
            q.burst()
        )
    };
    format!(
        "{} has a period of {}, longer than an hour, and a burst of {} that [global] window = {} cannot hold (the \
         fleet budget would be {budget:.2} per window): the fleet gate limits this profile locally only, per \
         instance, so N instances can admit up to N times its limit. To limit it fleet-wide: {fleet_wide}; or \
         keep the long quota in a limit service ([service])",
        report::rate(q),
        duration(q.period()),
        q.burst(),
        duration(window),
    )
}

fn round_up_to_secs(d: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests;
