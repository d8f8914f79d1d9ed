//! `[tls]`: the CA file every outbound TLS client of the runtime trusts,
//! read and checked at load (a bad file fails there, located, rather than
//! at the first connection).

use std::path::Path;

use super::super::schema::RawTls;
use super::super::spans::field;
use super::Ctx;
use crate::runtime::config::{ConfigError, TlsConfig};

pub(super) fn tls(raw: RawTls, ctx: &Ctx<'_>) -> Result<TlsConfig, ConfigError> {
    if let Some(path) = &raw.ca_file {
        check_ca_file(path).map_err(|e| ctx.error(&field("tls").key("ca_file"), e))?;
    }
    Ok(TlsConfig { ca_file: raw.ca_file })
}

/// Readable, and PEM CA certificates (errors name the file and the
/// certificate).
#[cfg(any(feature = "fetch", feature = "redis-tls"))]
fn check_ca_file(path: &Path) -> Result<(), String> {
    crate::shared::net::ca::read_ca_file(path).map(drop)
}

#[cfg(not(any(feature = "fetch", feature = "redis-tls")))]
fn check_ca_file(path: &Path) -> Result<(), String> {
    Err(format!(
        "{}: outbound TLS needs the `jwt` or `service` (HTTPS) or `redis-tls` (rediss://) feature of ratelimit",
        path.display()
    ))
}
