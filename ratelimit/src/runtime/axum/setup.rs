//! From a configuration to a running [`Runtime`]: the store, the token
//! verifier, the limit service, the fleet gate and the application's key
//! extractors, checked as startup and every reload check them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::error::SetupError;
use super::observer::Observer;
use super::parts::{Fleet, Given, Service, Tokens};
use super::reject::RejectHook;
use super::runtime::Runtime;
use crate::runtime::config::{Config, ConfigChanges, ConfigError, ConfigHandle};
use crate::runtime::key::{AnyKey, HeaderBudget, KeyHasher, KeySource};
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

/// Refuses `config` (every problem, one per line) when it cannot serve
/// `routes`, the attribute routes under `prefix`.
fn check_routes(prefix: &str, routes: &[&'static super::AttributeRoute], config: &Config) -> Result<(), String> {
    let mut problems = super::registry::check(routes, config);
    let mut orphans = super::registry::orphan_overrides(config);
    // (Over every linked route, as the orphans: a section another
    // application's route of the same name reaches is in use.)
    orphans.extend(super::registry::unreached_overrides(
        &super::registry::routes_under(""),
        config,
    ));
    if !orphans.is_empty() && problems.is_empty() {
        // Only [routes] sections are wrong: no hint about other
        // applications' routes (every linked route counts as known, and an
        // unreached profile is the section's, not a route's).
        return Err(orphans.join("\n"));
    }
    problems.extend(orphans);
    if problems.is_empty() {
        return Ok(());
    }
    let mut refused = problems.join("\n");
    // Every route of the program was checked: a binary that links several
    // applications' routes (a test binary, a workspace of services) may
    // have refused another's. Its routes then come from several modules; a
    // single application's from one, and the hint would only puzzle.
    let mut modules: Vec<&str> = routes
        .iter()
        .map(|r| r.handler().rsplit_once("::").map_or("", |(module, _)| module))
        .collect();
    modules.sort_unstable();
    modules.dedup();
    if prefix.is_empty() && modules.len() > 1 {
        refused.push_str(&format!(
            "\n(this runtime checks every #[rate_limit] route linked into the program, here of the modules {}: \
             if a refused route belongs to another application, serve only this one's with \
             RateLimit::builder(config).routes_in(module_path!()), see RateLimitBuilder::routes_in)",
            modules.join(", ")
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

/// What a configuration is prepared against: the application that runs it.
pub(super) struct Served<'a> {
    /// `RateLimitBuilder::routes_in`: which attribute routes it serves.
    pub(super) routes_in: &'a str,
    pub(super) routes: &'a [&'static super::AttributeRoute],
    /// Its key extractors, by the names `"custom:<name>"` keys give.
    pub(super) keys: &'a BTreeMap<String, Arc<dyn KeySource>>,
    /// The gRPC services it named.
    pub(super) grpc_services: &'a [&'static str],
    /// Whether it runs a limit service (which the `service` step asks).
    pub(super) service_on: bool,
}

/// Why [`prepare`] refused a configuration: the section at fault (startup's
/// [`SetupError::section`]), the field (a reload's [`ConfigError`]) and what
/// is wrong.
pub(super) struct Refused {
    section: &'static str,
    field: String,
    message: String,
}

impl Refused {
    fn new(section: &'static str, field: impl Into<String>, message: impl Into<String>) -> Refused {
        Refused {
            section,
            field: field.into(),
            message: message.into(),
        }
    }

    /// As startup reports it.
    fn at_startup(self) -> SetupError {
        SetupError::new(self.section, self.message)
    }

    /// As a reload from `source` reports it.
    fn at_reload(self, source: &str) -> ConfigError {
        ConfigError::new(source, format!("{}; the running configuration stays", self.message)).with_field(self.field)
    }
}

/// Prepares `config` to run in `served`: what startup and every reload do,
/// the same checks with the same words, before any request sees it. It
/// needs no cargo feature the build lacks (the checker's verdict, so that
/// `Config::check_startup` refuses the same files too); its custom keys are
/// bound to the application's extractors; its probe methods, gRPC-shaped
/// rules and route overrides fit what the application serves; then its
/// plan is compiled (warning of what it finds) and its rules logged.
/// Returns the probe mask requests read.
pub(super) fn prepare(config: &mut Config, served: &Served<'_>, when: &str) -> Result<u8, Refused> {
    if let Some((section, field, message)) = crate::runtime::config::check::missing_features(config)
        .into_iter()
        .next()
    {
        return Err(Refused::new(section, field, message));
    }
    bind_keys(config, served.keys).map_err(|(i, message)| {
        Refused::new(
            "rules",
            format!("rules[{i}].key"),
            format!("[[rules]] entry {}: {message}", i + 1),
        )
    })?;
    let probes = crate::runtime::config::ResponseConfig::probe_mask(&config.responses.probe_methods).map_err(|e| {
        Refused::new(
            "responses",
            "responses.probe_methods",
            format!("[responses] probe_methods: {e}"),
        )
    })?;
    unserved_grpc_rules(config, served.grpc_services).map_err(|message| Refused::new("rules", "rules", message))?;
    check_routes(served.routes_in, served.routes, config)
        .map_err(|message| Refused::new("routes", "routes", message))?;
    // The plan, compiled now that the rules are bound: no request compiles it.
    super::registry::compile_and_warn(served.routes, config, served.service_on);
    log_rules(config, when);
    Ok(probes)
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
        let routes = super::registry::routes_under(routes_in);
        // `[service]` starts a limit service (or the start refuses it).
        let service_on = config.service.is_some();
        let served = Served {
            routes_in,
            routes: &routes,
            keys: &keys,
            grpc_services: &grpc_services,
            service_on,
        };
        let probes = prepare(&mut config, &served, "startup").map_err(Refused::at_startup)?;
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
        debug_assert_eq!(service.is_on(), service_on);
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
            layer_seen: std::sync::atomic::AtomicBool::new(false),
            reloading: std::sync::Mutex::new(()),
            published: crate::shared::metrics::Published::default(),
            fleet,
            in_flight: std::sync::OnceLock::new(),
            max_keys_in_flight,
            grpc_services,
            routes_in,
            routes,
        })
    }

    /// Swaps the running configuration, once its custom keys are bound
    /// (`source` names it in the error: a file's path, or `<config>`).
    pub(crate) fn reload(&self, mut config: Config, source: &str) -> Result<ConfigChanges, ConfigError> {
        // The limit service keeps its startup settings: a reload's must
        // fit them.
        self.service
            .fits(&config)
            .map_err(|message| Refused::new("service", "service", message).at_reload(source))?;
        let served = Served {
            routes_in: self.routes_in,
            routes: &self.routes,
            keys: &self.keys,
            grpc_services: &self.grpc_services,
            service_on: self.service.is_on(),
        };
        let probes = prepare(&mut config, &served, "reload").map_err(|r| r.at_reload(source))?;
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
