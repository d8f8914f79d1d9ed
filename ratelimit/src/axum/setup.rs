//! From a configuration to a running [`Runtime`]: the store, the token
//! verifier, the limit service, the fleet gate and the application's key
//! extractors, checked as startup and every reload check them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::error::SetupError;
use super::reject::RejectHook;
use super::report::Observer;
use super::runtime::Runtime;
use crate::config::{Config, ConfigChanges, ConfigError, ConfigHandle};
#[cfg(feature = "jwt")]
use crate::jwt::JwtVerifier;
use crate::key::{AnyKey, HeaderBudget, KeyHasher, KeySource};
#[cfg(feature = "service")]
use crate::service::{BoxLimitService, CacheSettings, HttpLimitService, ServiceCache, ServiceIdKey};
use crate::{AnyClock, Limiter};

/// The key of the limit service's client ids: `[service] id_secret` set in
/// code, else the variable `id_secret_env` names; unset, empty or short is a
/// startup error naming the variable (never an unkeyed id). The checks are
/// `ratelimit check`'s too.
#[cfg(feature = "service")]
fn service_id_key(s: &crate::config::ServiceConfig) -> Result<ServiceIdKey, SetupError> {
    crate::config::check::service_id_key(s)
        .map_err(|(field, message)| SetupError::new("service", format!("[service] {field}: {message}")))
}

/// What the builder adds to a configuration.
#[derive(Default)]
pub(crate) struct Extras {
    #[cfg(feature = "jwt")]
    pub(crate) jwt: Option<JwtVerifier>,
    pub(crate) keys: BTreeMap<String, Arc<dyn KeySource>>,
    pub(crate) reject: Option<RejectHook>,
    #[cfg(feature = "service")]
    pub(crate) service: Option<BoxLimitService>,
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

#[cfg(feature = "service")]
const NO_SERVICE_URL: &str = "[service] url: missing; name the limit service's base URL, or give the builder a \
                              LimitService of the application's (RateLimitBuilder::limit_service)";

/// Whether `config`'s `[service]` fits how the limit service is given (`own`:
/// by the builder): a builder's service needs a `[service]` without `url`,
/// else `url` names the HTTP one. Checked at startup and at every reload, so
/// a file that reloads is a file that starts.
#[cfg(feature = "service")]
fn service_shape(config: &Config, own: bool) -> Result<(), String> {
    match (&config.service, own) {
        (None, true) => Err(
            "a limit service was given to the builder, but the configuration has no [service] \
                             section: add one (its id_secret_env keys the client ids the service is asked about; \
                             ttl, timeout and max_entries tune its cache)"
                .to_owned(),
        ),
        (Some(s), true) if s.url.is_some() => Err("[service] url: a limit service was also given to the builder \
                                                  (RateLimitBuilder::limit_service); remove the url, or the \
                                                  builder's service"
            .to_owned()),
        (Some(s), false) if s.url.is_none() => Err(NO_SERVICE_URL.to_owned()),
        _ => Ok(()),
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
                        rule = &*rule.name,
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
        let (keys, reject_hook) = (extras.keys, extras.reject);
        let probes = crate::config::ResponseConfig::probe_mask(&config.responses.probe_methods)
            .map_err(|e| SetupError::new("responses", format!("[responses] probe_methods: {e}")))?;
        #[cfg(feature = "jwt")]
        let jwt = extras.jwt;
        #[cfg(feature = "service")]
        let own_service = extras.service;
        features(&config).map_err(|(section, _, message)| SetupError::new(section, message))?;
        bind_keys(&mut config, &keys)
            .map_err(|(i, message)| SetupError::new("rules", format!("[[rules]] entry {}: {message}", i + 1)))?;
        let store = config
            .build_store()
            .map_err(|e| SetupError::caused_by("store", "[store]: ", e))?;
        let header_budget = HeaderBudget::new(config.header_keys, config.store.new_keys_per_network, clock.clone())
            .map_err(|e| SetupError::caused_by("header_keys", "[header_keys]: ", e))?;
        #[cfg(feature = "jwt")]
        let jwt = match jwt {
            Some(v) => Some(v),
            None => match config.jwt.as_ref().and_then(|j| j.verification.as_ref()) {
                None => None,
                Some(v) => Some(
                    crate::jwt::JwtVerifier::from_settings(v, &config.tls, config.ip.network_prefixes())
                        .await
                        .map_err(|e| SetupError::caused_by("jwt", "[jwt]: ", e))?,
                ),
            },
        };
        #[cfg(feature = "service")]
        let own = own_service.is_some();
        #[cfg(feature = "service")]
        service_shape(&config, own).map_err(|message| SetupError::new("service", message))?;
        #[cfg(feature = "service")]
        let (service, service_ids) = match &config.service {
            None => (None, None),
            Some(s) => {
                let ids = service_id_key(s)?;
                let service = match (own_service, &s.url) {
                    (Some(own), _) => own,
                    (None, Some(url)) => BoxLimitService::new(
                        HttpLimitService::with_tls(url, &config.tls)
                            .map_err(|e| SetupError::caused_by("service", "[service] url: ", e))?,
                    ),
                    (None, None) => return Err(SetupError::new("service", NO_SERVICE_URL.to_owned())),
                };
                let settings = CacheSettings {
                    ttl: s.ttl,
                    negative_ttl: s.negative_ttl,
                    timeout: s.timeout,
                    max_entries: s.max_entries,
                    ..CacheSettings::default()
                };
                let cache = ServiceCache::new(service, settings)
                    .map_err(|e| SetupError::caused_by("service", "[service]: ", e))?;
                (Some(cache), Some(ids))
            }
        };
        #[cfg(feature = "redis")]
        let gate = match &config.global {
            Some(g) => {
                // `[global] ca_file` for Redis, else `[tls] ca_file`.
                let g = crate::config::GlobalConfig {
                    ca_file: config.redis_ca_file().map(std::path::Path::to_path_buf),
                    ..g.clone()
                };
                Some(super::gate::start_gate(&g, config.profiles(), &clock)?)
            }
            None => None,
        };
        let limiter = Arc::new(Limiter::new(store, clock));
        if sweep {
            limiter.spawn_sweeper(config.store.sweep_interval.max(Duration::from_millis(10)));
        }
        Ok(Runtime {
            config: ConfigHandle::new(config),
            limiter,
            header_budget,
            key_hasher: KeyHasher::new(),
            #[cfg(feature = "jwt")]
            jwt,
            #[cfg(feature = "service")]
            service,
            #[cfg(feature = "service")]
            service_ids,
            #[cfg(feature = "service")]
            own_service: own,
            keys,
            reject_hook,
            observer: Observer::default(),
            probes: std::sync::atomic::AtomicU8::new(probes),
            reloading: std::sync::Mutex::new(()),
            published: crate::metrics::Published::default(),
            #[cfg(feature = "redis")]
            gate,
        })
    }

    /// Swaps the running configuration, once its custom keys are bound
    /// (`source` names it in the error: a file's path, or `<config>`).
    pub(crate) fn reload(&self, mut config: Config, source: &str) -> Result<ConfigChanges, ConfigError> {
        features(&config).map_err(|(_, field, message)| {
            ConfigError::new(source, format!("{message}; the running configuration stays")).with_field(field)
        })?;
        #[cfg(feature = "service")]
        service_shape(&config, self.own_service).map_err(|message| {
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
        // A panic elsewhere while holding it poisons nothing that matters.
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let changes = self.config.replace(config);
        self.probes.store(probes, std::sync::atomic::Ordering::Relaxed);
        Ok(changes)
    }
}
