//! `Deserialize` for [`Config`] and its sections, so an application can
//! embed them in its own configuration. The same schema, field
//! deserializers and validation as [`Config::from_file`]; only the located
//! reporting differs: a mistake in one value (a rate, a duration, an
//! unknown field) is reported by the outer deserializer at that value
//! (`toml` gives its line and column), and a mistake found by validation
//! across fields (an unknown profile, a cost above a burst) names the field
//! in its message, relative to the embedded table, at the table's position.
//! Environment overrides are not applied (see `docs/config.md`).

use serde::{Deserialize, Deserializer};

use super::named::{self, Named};
use super::schema::{RawConfig, RawGlobal, RawJwt, RawResponses, RawService, RawStore};
use super::spans::Spans;
use super::validate::{self, Ctx};
use crate::runtime::config::{Config, ConfigError, FleetConfig, JwtLimits, ResponseConfig, ServiceConfig, StoreConfig};

/// The name validation errors of an embedded table are reported under.
const EMBEDDED: &str = "<embedded>";

/// Runs `check` with a context that has no text (positions come from the
/// outer deserializer), turning its error into the deserializer's.
fn checked<T, E: serde::de::Error>(check: impl FnOnce(&Ctx<'_>) -> Result<T, ConfigError>) -> Result<T, E> {
    let spans = Spans::default();
    let ctx = Ctx {
        source: EMBEDDED,
        text: "",
        spans: &spans,
    };
    check(&ctx).map_err(|e| match e.field() {
        Some(field) => E::custom(format!("{field}: {}", e.message())),
        None => E::custom(e.message()),
    })
}

impl<'de> Deserialize<'de> for Config {
    /// A whole configuration, validated as [`Config::from_toml_str`]
    /// validates one; without environment overrides.
    ///
    /// ```
    /// #[derive(Debug, serde::Deserialize)]
    /// struct AppConfig {
    ///     database_url: String,
    ///     ratelimit: ratelimit::config::Config,
    /// }
    ///
    /// let app: AppConfig = toml::from_str(r#"
    ///     database_url = "postgres://localhost/app"
    ///     [ratelimit.profiles.standard]
    ///     rate = "600/min"
    /// "#).unwrap();
    /// assert_eq!(app.ratelimit.default_quota().burst(), 600);
    ///
    /// let err = toml::from_str::<AppConfig>(r#"
    ///     database_url = "postgres://localhost/app"
    ///     [ratelimit.profiles.standard]
    ///     rate = "600/fortnight"
    /// "#).unwrap_err();
    /// assert!(err.to_string().contains("line 4, column 12"), "{err}");
    /// assert!(err.to_string().contains("invalid rate \"600/fortnight\""), "{err}");
    /// ```
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Config, D::Error> {
        named::reset();
        let raw = RawConfig::deserialize(Named::root(d))?;
        checked(|ctx| validate::validate(raw, ctx))
    }
}

impl<'de> Deserialize<'de> for StoreConfig {
    /// A `[store]` table.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StoreConfig, D::Error> {
        {
            named::reset();
            RawStore::deserialize(Named::root(d))
        }
        .map(validate::store)
    }
}

impl<'de> Deserialize<'de> for ServiceConfig {
    /// A `[service]` table (`id_secret_env` required).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ServiceConfig, D::Error> {
        let raw = {
            named::reset();
            RawService::deserialize(Named::root(d))
        }?;
        checked(|ctx| validate::service(raw, ctx))
    }
}

impl<'de> Deserialize<'de> for ResponseConfig {
    /// A `[responses]` table.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ResponseConfig, D::Error> {
        let raw = {
            named::reset();
            RawResponses::deserialize(Named::root(d))
        }?;
        checked(|ctx| validate::responses(raw, ctx))
    }
}

impl<'de> Deserialize<'de> for JwtLimits {
    /// A `[jwt]` table: claim names, caps and at most one key source.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JwtLimits, D::Error> {
        let raw = {
            named::reset();
            RawJwt::deserialize(Named::root(d))
        }?;
        checked(|ctx| validate::jwt(raw, ctx))
    }
}

impl<'de> Deserialize<'de> for FleetConfig {
    /// A `[global]` table, checked on its own (within a [`Config`], every
    /// profile's burst is also checked against what the gate counts).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FleetConfig, D::Error> {
        let raw = {
            named::reset();
            RawGlobal::deserialize(Named::root(d))
        }?;
        checked(|ctx| validate::global(raw, &Default::default(), None, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_deserialize_with_their_checks() {
        let store: StoreConfig = toml::from_str("max_keys = 10\nsweep_interval = \"1d\"\n").unwrap();
        assert_eq!(store.max_keys, 10);
        assert_eq!(store.sweep_interval, std::time::Duration::from_secs(86_400));
        let err = toml::from_str::<ServiceConfig>("url = \"http://limits\"\n").unwrap_err();
        assert!(err.to_string().contains("service: missing `id_secret_env`"), "{err}");
        let err = toml::from_str::<ResponseConfig>("problem_title = \" \"\n").unwrap_err();
        assert!(
            err.to_string().contains("responses.problem_title: empty title"),
            "{err}"
        );
        let err = toml::from_str::<FleetConfig>("redis_url = \"http://x\"\n").unwrap_err();
        assert!(err.to_string().contains("global.redis_url: expected redis://"), "{err}");
        let jwt: JwtLimits = toml::from_str("max_rate = \"60/min\"\nmax_burst = 5\n").unwrap();
        assert_eq!(jwt.max_burst, Some(5));
    }

    #[test]
    fn any_self_describing_format_carries_a_config() {
        let json = r#"{"default_profile": "a", "profiles": {"a": {"rate": "10/s", "burst": 3}},
                       "store": {"sweep_interval": "1d"}}"#;
        let config: Config = serde_json::from_str(json).unwrap();
        let toml = Config::from_toml_str(
            "default_profile = \"a\"\n[profiles.a]\nrate = \"10/s\"\nburst = 3\n[store]\nsweep_interval = \"1d\"\n",
        )
        .unwrap();
        assert_eq!(config, toml);
        let err = serde_json::from_str::<Config>(r#"{"profiles": {"a": {"rate": "10/fortnight"}}}"#).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("profiles.a.rate: invalid rate \"10/fortnight\""),
            "{err}"
        );
        let err = serde_json::from_str::<Config>(r#"{"profiles": {"a": {"rate": "10/s"}}, "default_profile": "b"}"#)
            .unwrap_err();
        assert!(
            err.to_string().starts_with("default_profile: unknown profile \"b\""),
            "{err}"
        );
    }
}
