//! `[global]`: building the fleet gate and starting its sync loop.

use std::sync::Arc;

use super::error::SetupError;
use crate::AnyClock;

/// Builds the fleet gate of `[global]` and spawns its sync loop; warns
/// (once, naming them) about the profiles it limits locally only.
pub(crate) fn start_gate(
    g: &crate::runtime::config::FleetConfig,
    profiles: &std::collections::BTreeMap<String, crate::runtime::config::Profile>,
    clock: &AnyClock,
) -> Result<Arc<crate::fleet::FleetGate>, SetupError> {
    use crate::fleet::{FleetGate, GateSettings, RedisSettings, RedisStore};
    let secret = match (&g.key_secret, &g.key_secret_env) {
        (Some(s), _) => s.0.clone(),
        // Any bytes (a secret from /dev/urandom need not be UTF-8), as the
        // checker reads it.
        (None, Some(var)) => std::env::var_os(var)
            .ok_or_else(|| {
                SetupError::new(
                    "global",
                    format!(
                        "[global] key_secret_env: the environment variable {var} is not set (the fleet secret: \
                     at least 16 bytes, the same on every instance)"
                    ),
                )
            })?
            .into_encoded_bytes(),
        (None, None) => {
            return Err(SetupError::new(
                "global",
                "[global] key_secret_env: name the environment variable holding the fleet secret (at least \
                 16 bytes, the same on every instance; Redis keys are keyed hashes under it)"
                    .to_owned(),
            ))
        }
    };
    let settings = GateSettings {
        window: g.window,
        sync_interval: g.sync_interval,
        max_keys: g.max_keys,
        sub_epochs: g.sub_epochs,
        on_outage: g.on_outage,
        ..GateSettings::new(&secret)
    };
    let gate = Arc::new(FleetGate::new(settings, clock).map_err(|e| SetupError::caused_by("global", "[global] ", e))?);
    let store = RedisStore::new(
        &g.redis_url,
        RedisSettings {
            prefix: g.key_prefix.clone(),
            cluster: g.cluster,
            connect_timeout: g.connect_timeout,
            response_timeout: g.timeout,
            ca_file: g.ca_file.clone(),
            ..RedisSettings::default()
        },
    )
    .map_err(|e| SetupError::caused_by("global", "[global] ", e))?;
    // A round: a connection attempt at most, then the replies.
    let round_timeout = g.connect_timeout.saturating_mul(2).saturating_add(g.timeout);
    gate.spawn_sync(store, clock.clone(), round_timeout);
    tracing::info!(
        target: "ratelimit",
        window = ?g.window,
        sub_epochs = gate.window().slices(),
        sync_interval = ?g.sync_interval,
        "fleet gate on (Redis key prefix {:?}); local-only until the first sync round succeeds if Redis is unreachable",
        g.key_prefix
    );
    let local = crate::runtime::config::check::locally_limited_profiles(profiles, g.window);
    if !local.is_empty() {
        let names: Vec<String> = local
            .iter()
            .map(|(name, q)| format!("{name} ({})", crate::runtime::config::check::rate_text(q)))
            .collect();
        tracing::warn!(
            target: "ratelimit",
            window = ?g.window,
            "fleet gate: profiles {} have a period longer than an hour and a burst the window ({:?}) cannot hold: \
             the gate limits them locally only (per instance; the fleet can admit up to N times one instance's \
             limit); see docs/global.md#long-periods",
            names.join(", "),
            g.window
        );
    }
    Ok(gate)
}
