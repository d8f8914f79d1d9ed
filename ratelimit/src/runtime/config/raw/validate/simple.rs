//! The sections whose validation is a conversion and at most one check:
//! `[store]`, `[header_keys]`, `[service]` and `[responses]` (`[headers]`
//! is a single field, taken as is).

use super::super::schema::{RawHeaderKeys, RawResponses, RawService, RawStore};
use super::super::spans::field;
use super::Ctx;
use crate::runtime::config::{ConfigError, ResponseConfig, ServiceConfig, StoreConfig};
use crate::runtime::key::HeaderCardinality;

pub(in crate::runtime::config::raw) fn store(raw: RawStore) -> StoreConfig {
    StoreConfig {
        max_keys: raw.max_keys,
        sweep_interval: raw.sweep_interval,
        overflow: raw.overflow,
        new_keys_per_network: raw.new_keys_per_network,
        max_keys_in_flight: raw.max_keys_in_flight,
    }
}

pub(super) fn header_keys(raw: RawHeaderKeys) -> HeaderCardinality {
    HeaderCardinality {
        per_ip: raw.per_ip,
        window: raw.window,
        max_tracked: raw.max_tracked,
    }
}

/// `[service]`: client ids are keyed, so the section names the secret's
/// variable (an unkeyed id would be one any client can compute and aim at a
/// partner's).
pub(in crate::runtime::config::raw) fn service(raw: RawService, ctx: &Ctx<'_>) -> Result<ServiceConfig, ConfigError> {
    let section = field("service");
    let Some(var) = raw.id_secret_env else {
        return Err(ctx.error(
            &section,
            "missing `id_secret_env`: name the environment variable holding the secret client ids are keyed \
             with (at least 32 bytes, shared with the limit service; docs/http.md)",
        ));
    };
    if var.trim().is_empty() {
        return Err(ctx.error(&section.key("id_secret_env"), "empty variable name"));
    }
    Ok(ServiceConfig {
        url: raw.url,
        ttl: raw.ttl,
        negative_ttl: raw.negative_ttl,
        timeout: raw.timeout,
        max_entries: raw.max_entries,
        id_secret_env: Some(var),
        id_secret: None,
    })
}

/// The 429 body; its title must say something.
pub(in crate::runtime::config::raw) fn responses(
    raw: RawResponses,
    ctx: &Ctx<'_>,
) -> Result<ResponseConfig, ConfigError> {
    if raw.problem_title.trim().is_empty() {
        return Err(ctx.error(&field("responses").key("problem_title"), "empty title"));
    }
    let at = field("responses").key("probe_methods");
    let probe_methods = raw
        .probe_methods
        .iter()
        .map(|m| {
            http::Method::from_bytes(m.trim().to_ascii_uppercase().as_bytes())
                .map_err(|_| ctx.error(&at, format!("invalid method {m:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    ResponseConfig::probe_mask(&probe_methods).map_err(|e| ctx.error(&at, e))?;
    Ok(ResponseConfig {
        problem_type: raw.problem_type,
        problem_title: raw.problem_title,
        probe_methods,
    })
}
