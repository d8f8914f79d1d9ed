//! Reloads on a signal: the task behind
//! [`RateLimit::reload_on_sighup`](super::RateLimit::reload_on_sighup).

use std::sync::Weak;

use super::runtime::Runtime;
use crate::runtime::config::{Config, ConfigError};

/// Spawns the task: each `SIGHUP` loads a configuration and swaps it in,
/// logging the outcome. It ends when the runtime is gone.
#[cfg(unix)]
pub(super) fn on_sighup<F>(runtime: Weak<Runtime>, load: F) -> std::io::Result<tokio::task::JoinHandle<()>>
where
    F: Fn() -> Result<Config, ConfigError> + Send + 'static,
{
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let Some(runtime) = runtime.upgrade() else { return };
            apply(&runtime, load());
        }
    }))
}

#[cfg(not(unix))]
pub(super) fn on_sighup<F>(_: Weak<Runtime>, _: F) -> std::io::Result<tokio::task::JoinHandle<()>>
where
    F: Fn() -> Result<Config, ConfigError> + Send + 'static,
{
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "reload_on_sighup: no SIGHUP on this platform; call RateLimit::reload_file from a file watch",
    ))
}

/// Swaps `loaded` in, logging what changed or why it was refused.
#[cfg_attr(not(unix), allow(dead_code))]
fn apply(runtime: &Runtime, loaded: Result<Config, ConfigError>) {
    let source = "SIGHUP";
    match loaded.and_then(|config| runtime.reload(config, source)) {
        Ok(changes) if changes.is_empty() => {
            tracing::info!(target: "ratelimit", "SIGHUP: config reloaded, no changes");
        }
        Ok(changes) => {
            tracing::info!(target: "ratelimit", "SIGHUP: config reloaded: {changes}");
            if !changes.at_restart().is_empty() {
                tracing::warn!(
                    target: "ratelimit",
                    sections = %changes.at_restart().join(", "),
                    "SIGHUP: these sections changed but keep their running settings until a restart"
                );
            }
        }
        // The runtime's own refusal already says the running configuration
        // stays, and its source is this signal: its message alone.
        Err(e) if e.source_name() == source => {
            tracing::warn!(target: "ratelimit", "SIGHUP: config refused: {}", e.message());
        }
        Err(e) => {
            tracing::warn!(target: "ratelimit", "SIGHUP: config refused, the running configuration stays: {e}");
        }
    }
}
