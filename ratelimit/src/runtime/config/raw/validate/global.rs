//! `[global]`: the fleet-wide gate. Its settings must fit together, and with
//! it every burst must be one the gate counts.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::super::schema::RawGlobal;
use super::super::spans::field;
use super::Ctx;
use crate::runtime::config::{ConfigError, FleetConfig, JwtLimits, Profile};

pub(in crate::runtime::config::raw) fn global(
    g: RawGlobal,
    profiles: &BTreeMap<String, Profile>,
    jwt: Option<&JwtLimits>,
    ctx: &Ctx<'_>,
) -> Result<FleetConfig, ConfigError> {
    let section = field("global");
    let at = |key: &str, message: String| ctx.error(&section.key(key), message);
    // The fleet gate counts bursts up to MAX_FLEET_BURST: above, a limit
    // would silently be local only. (A long period the gate limits locally
    // anyway, with a warning, is not refused for it: `100000000/month`.)
    let most = crate::engine::window::MAX_FLEET_BURST;
    if let Some((name, p)) = profiles
        .iter()
        .find(|(_, p)| p.quota.burst() > most && !crate::engine::window::limited_locally(&p.quota, g.window))
    {
        return Err(ctx.error(
            &field("profiles").key(name).key("burst"),
            format!(
                "{} is above {most}, the largest burst the fleet gate ([global]) counts",
                p.quota.burst()
            ),
        ));
    }
    if let Some(burst) = jwt.and_then(|j| j.max_burst).filter(|&b| b > most) {
        return Err(ctx.error(
            &field("jwt").key("max_burst"),
            format!("{burst} is above {most}, the largest burst the fleet gate ([global]) counts"),
        ));
    }
    let scheme_ok = g.redis_url.starts_with("redis://") || g.redis_url.starts_with("rediss://");
    if !scheme_ok {
        return Err(at(
            "redis_url",
            "expected redis://[user:password@]host:port[/db] (or rediss:// for TLS)".to_owned(),
        ));
    }
    if g.window < Duration::from_secs(1) || g.window > Duration::from_secs(3600) {
        return Err(at("window", "from 1s to 1h".to_owned()));
    }
    if g.sync_interval < Duration::from_millis(10) || g.sync_interval * 2 > g.window {
        return Err(at(
            "sync_interval",
            format!("from 10ms to half the window ({:?})", g.window / 2),
        ));
    }
    if g.timeout.is_zero() || g.timeout > g.window {
        return Err(at("timeout", "above zero and at most the window".to_owned()));
    }
    if g.connect_timeout.is_zero() || g.connect_timeout > Duration::from_secs(60) {
        return Err(at("connect_timeout", "above zero and at most 60s".to_owned()));
    }
    if g.key_prefix.is_empty() || g.key_prefix.contains(['{', '}', ' ']) {
        return Err(at(
            "key_prefix",
            "non-empty, without braces or spaces (keys are hash-tagged)".to_owned(),
        ));
    }
    if g.max_keys > 1 << 26 {
        return Err(at("max_keys", "at most 67108864".to_owned()));
    }
    let on_outage = match g.on_outage.as_deref() {
        None | Some("local") => crate::runtime::config::OnOutage::Local,
        Some("share") => crate::runtime::config::OnOutage::Share,
        Some(other) => {
            return Err(at(
                "on_outage",
                format!("{other:?}: \"local\" (each instance's local limit) or \"share\" (each key held to its last known share of the fleet budget)"),
            ))
        }
    };
    if let Some(k) = g.sub_epochs {
        let most = (g.window.as_nanos() / (g.sync_interval.as_nanos() * 2)).min(100) as u32;
        if k == 0 || k > most {
            return Err(at(
                "sub_epochs",
                format!(
                    "from 1 to {most}: each sub-epoch must span at least two sync intervals ({:?}), and at most 100",
                    g.sync_interval * 2
                ),
            ));
        }
    }
    if g.key_secret_env.as_deref().is_some_and(|v| v.trim().is_empty()) {
        return Err(at("key_secret_env", "empty variable name".to_owned()));
    }
    if let Some(path) = &g.ca_file {
        if !g.redis_url.starts_with("rediss://") {
            return Err(at(
                "ca_file",
                "for rediss:// (TLS) only; redis_url is not rediss://".to_owned(),
            ));
        }
        check_ca_file(path).map_err(|e| at("ca_file", e))?;
    }
    Ok(FleetConfig {
        redis_url: g.redis_url,
        cluster: g.cluster,
        sync_interval: g.sync_interval,
        window: g.window,
        key_prefix: g.key_prefix,
        timeout: g.timeout,
        connect_timeout: g.connect_timeout,
        max_keys: g.max_keys,
        on_outage,
        sub_epochs: g.sub_epochs,
        key_secret_env: g.key_secret_env,
        key_secret: None,
        ca_file: g.ca_file,
    })
}

/// `[global] ca_file`: readable, and PEM CA certificates (checked at
/// startup, so a bad file fails there rather than at the first connection).
#[cfg(feature = "redis-tls")]
fn check_ca_file(path: &Path) -> Result<(), String> {
    crate::shared::net::ca::read_ca_file(path).map(drop)
}

#[cfg(not(feature = "redis-tls"))]
fn check_ca_file(path: &Path) -> Result<(), String> {
    Err(format!(
        "{}: TLS needs the `redis-tls` feature of ratelimit",
        path.display()
    ))
}
