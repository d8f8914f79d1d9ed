//! From a configuration to a running [`Runtime`]: the store, the token
//! verifier, the limit service, the fleet gate and the application's key
//! extractors, checked as startup and every reload check them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::error::SetupError;
use super::optional::{Fleet, Given, Service, Tokens};
use super::reject::RejectHook;
use super::report::Observer;
use super::runtime::Runtime;
use crate::config::{Config, ConfigChanges, ConfigError, ConfigHandle};
use crate::key::{AnyKey, HeaderBudget, KeyHasher, KeySource};
use crate::{AnyClock, Limiter};

/// What the builder adds to a configuration.
#[derive(Default)]
pub(crate) struct Extras {
    pub(crate) keys: BTreeMap<String, Arc<dyn KeySource>>,
    pub(crate) reject: Option<RejectHook>,
    /// The builder's verifier and limit service.
    pub(crate) given: Given,
    /// Which attribute routes this runtime serves: those whose handler's
    /// path starts with it (all of them by default).
    pub(crate) routes_in: &'static str,
    /// The gRPC services the application serves (`pkg.Service`), when it
    /// named them: a gRPC-shaped `[[rules]]` path must name one.
    pub(crate) grpc_services: Vec<&'static str>,
}

/// The attribute routes under `prefix`, refused (every problem, one per
/// line) when `config` cannot serve them.
fn attribute_routes(prefix: &str, config: &Config) -> Result<Vec<&'static super::AttributeRoute>, String> {
    let routes = super::registry::routes_under(prefix);
    let mut problems = super::registry::check(&routes, config);
    let orphans = super::registry::orphan_overrides(config);
    if !orphans.is_empty() && problems.is_empty() {
        // Only [routes] sections are wrong: no hint about other
        // applications' routes (every linked route counts as known).
        return Err(orphans.join("\n"));
    }
    problems.extend(orphans);
    if problems.is_empty() {
        return Ok(routes);
    }
    let mut refused = problems.join("\n");
    if prefix.is_empty() {
        // Every route of the program was checked: a binary that links
        // several applications' routes (a test binary, a workspace of
        // services) may have refused another's.
        let mut crates: Vec<&str> = routes
            .iter()
            .map(|r| r.handler().split("::").next().unwrap_or_default())
            .collect();
        crates.sort_unstable();
        crates.dedup();
        refused.push_str(&format!(
            "\n(this runtime checks every #[rate_limit] route linked into the program, here of {}: if a refused \
             route belongs to another application, serve only this one's with \
             RateLimit::builder(config).routes_in(module_path!()), see RateLimitBuilder::routes_in)",
            crates.join(", ")
        ));
    }
    Err(refused)
}

/// The `[[rules]]` entries whose path is shaped as a gRPC method's but names
/// none of `served` (when the application named its services): such a rule
/// never matches a call (`/RouteGuide/GetFeature` for
/// `/routeguide.RouteGuide/GetFeature`), and every call would pass
/// unlimited. One line each, with the service it probably meant.
fn unserved_grpc_rules(config: &Config, served: &[&str]) -> Result<(), String> {
    if served.is_empty() {
        return Ok(());
    }
    let problems: Vec<String> = config
        .rules
        .iter()
        .filter_map(|rule| {
            let service = rule.path.grpc_service()?;
            if served.contains(&service) {
                return None;
            }
            // `RouteGuide` for `routeguide.RouteGuide`: the package missing.
            let last = |s: &str| s.rsplit('.').next().unwrap_or(s).to_owned();
            let hint = match served.iter().find(|s| last(s) == last(service)) {
                Some(meant) => format!("; did you mean {:?}?", rule.path.as_str().replacen(service, meant, 1)),
                None => String::new(),
            };
            let names: Vec<String> = served.iter().map(|s| format!("{s:?}")).collect();
            Some(format!(
                "[[rules]] entry {:?}: path {:?} names the gRPC service {service:?}, which this server does not \
                 serve (it serves {}): the rule would never match a call{hint}",
                rule.name,
                rule.path.as_str(),
                names.join(", ")
            ))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// Logs the `[[rules]]` in force, one line each: a rule that never matches
/// is otherwise invisible.
fn log_rules(config: &Config, when: &str) {
    for rule in &config.rules {
        let methods: Vec<&str> = rule.methods.iter().map(http::Method::as_str).collect();
        tracing::info!(
            target: "ratelimit",
            rule = rule.name,
            path = rule.path.as_str(),
            methods = %if methods.is_empty() { "any".to_owned() } else { methods.join(",") },
            key = &*rule.key_text,
            "{when}: [[rules]] entry in force"
        );
    }
}

/// The configuration needs no cargo feature this build lacks (`[jwt]`
/// keys, `jwt` and `service` steps, `jwt_claim` keys, `[service]`,
/// `[global]`): the checker's verdict, so that startup, a reload and
/// `Config::check_startup` refuse the same files with the same words.
fn features(config: &Config) -> Result<(), (&'static str, String, String)> {
    match crate::config::check::missing_features(config).into_iter().next() {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// Binds every `"custom:<name>"` rule key of `config` to the extractor
/// registered under its name: the rule's index and what is wrong for one
/// that names none.
fn bind_keys(config: &mut Config, keys: &BTreeMap<String, Arc<dyn KeySource>>) -> Result<(), (usize, String)> {
    for (i, rule) in config.rules.iter_mut().enumerate() {
        let AnyKey::Custom(key) = &mut rule.key else { continue };
        match keys.get(key.name()) {
            Some(source) => key.bind(Arc::clone(source)),
            None => {
                let registered = if keys.is_empty() {
                    "none is registered".to_owned()
                } else {
                    let names: Vec<String> = keys.keys().map(|k| format!("{k:?}")).collect();
                    format!("registered: {}", names.join(", "))
                };
                return Err((
                    i,
                    format!(
                        "key \"custom:{name}\" of rule {rule:?}: no key extractor is registered under {name:?} \
                         (RateLimit::builder(config).key({name:?}, ...); {registered})",
                        name = key.name(),
                        rule = rule.name,
                    ),
                ));
            }
        }
    }
    Ok(())
}

impl Runtime {
    pub(crate) async fn build(
        mut config: Config,
        clock: AnyClock,
        extras: Extras,
        sweep: bool,
    ) -> Result<Runtime, SetupError> {
        let Extras {
            keys,
            reject: reject_hook,
            mut given,
            routes_in,
            grpc_services,
        } = extras;
        let routes = attribute_routes(routes_in, &config).map_err(|message| SetupError::new("routes", message))?;
        let probes = crate::config::ResponseConfig::probe_mask(&config.responses.probe_methods)
            .map_err(|e| SetupError::new("responses", format!("[responses] probe_methods: {e}")))?;
        features(&config).map_err(|(section, _, message)| SetupError::new(section, message))?;
        bind_keys(&mut config, &keys)
            .map_err(|(i, message)| SetupError::new("rules", format!("[[rules]] entry {}: {message}", i + 1)))?;
        unserved_grpc_rules(&config, &grpc_services).map_err(|message| SetupError::new("rules", message))?;
        log_rules(&config, "startup");
        let store = config
            .build_store()
            .map_err(|e| SetupError::caused_by("store", "[store]: ", e))?;
        let header_budget = HeaderBudget::new(config.header_keys, config.store.new_keys_per_network, clock.clone())
            .map_err(|e| SetupError::caused_by("header_keys", "[header_keys]: ", e))?;
        let tokens = Tokens::start(&config, &mut given).await?;
        let service = Service::start(&config, &mut given)?;
        let fleet = Fleet::start(&config, &clock)?;
        let limiter = Arc::new(Limiter::new(store, clock));
        if sweep {
            limiter.spawn_sweeper(config.store.sweep_interval.max(Duration::from_millis(10)));
        }
        let has_rules = std::sync::atomic::AtomicBool::new(!config.rules.is_empty());
        let max_keys_in_flight = config.store.max_keys_in_flight;
        // The plan, compiled now that the rules are bound: no request
        // compiles it.
        super::registry::compile_and_warn(&routes, &config, service.is_on());
        Ok(Runtime {
            config: ConfigHandle::new(config),
            limiter,
            header_budget,
            key_hasher: KeyHasher::new(),
            tokens,
            service,
            keys,
            reject_hook,
            observer: Observer::default(),
            probes: std::sync::atomic::AtomicU8::new(probes),
            has_rules,
            reloading: std::sync::Mutex::new(()),
            published: crate::metrics::Published::default(),
            fleet,
            in_flight: std::sync::OnceLock::new(),
            max_keys_in_flight,
            grpc_services,
            routes,
        })
    }

    /// Swaps the running configuration, once its custom keys are bound
    /// (`source` names it in the error: a file's path, or `<config>`).
    pub(crate) fn reload(&self, mut config: Config, source: &str) -> Result<ConfigChanges, ConfigError> {
        features(&config).map_err(|(_, field, message)| {
            ConfigError::new(source, format!("{message}; the running configuration stays")).with_field(field)
        })?;
        self.service.fits(&config).map_err(|message| {
            ConfigError::new(source, format!("{message}; the running configuration stays")).with_field("service")
        })?;
        bind_keys(&mut config, &self.keys).map_err(|(i, message)| {
            ConfigError::new(source, format!("{message}; the running configuration stays"))
                .with_field(format!("rules[{i}].key"))
        })?;
        let probes = crate::config::ResponseConfig::probe_mask(&config.responses.probe_methods).map_err(|e| {
            ConfigError::new(source, format!("{e}; the running configuration stays"))
                .with_field("responses.probe_methods")
        })?;
        unserved_grpc_rules(&config, &self.grpc_services).map_err(|message| {
            ConfigError::new(source, format!("{message}; the running configuration stays")).with_field("rules")
        })?;
        let mut problems = super::registry::check(&self.routes, &config);
        problems.extend(super::registry::orphan_overrides(&config));
        if let Some(first) = problems.first() {
            return Err(
                ConfigError::new(source, format!("{first}; the running configuration stays")).with_field("routes"),
            );
        }
        // The plan, compiled before the swap: no request compiles it.
        super::registry::compile_and_warn(&self.routes, &config, self.service.is_on());
        // A panic elsewhere while holding it poisons nothing that matters.
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let has_rules = !config.rules.is_empty();
        let changes = self.config.replace(config);
        self.probes.store(probes, std::sync::atomic::Ordering::Relaxed);
        // After the swap: a request that finds no rules here a moment after
        // a reload added them is as one decided a moment before it.
        self.has_rules.store(has_rules, std::sync::atomic::Ordering::Relaxed);
        Ok(changes)
    }
}
