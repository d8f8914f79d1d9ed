//! Networks and outbound networking, below the configuration and the parts
//! it sets up: an address's network (`prefix_of`), what the runtime's TLS
//! clients trust ([`TlsConfig`], the `[tls]`
//! section), the one rustls setup (`tls`), the CA file (`ca`) and the
//! HTTP(S) client of the JWKS fetcher and the limit service (`http`).

#[cfg(any(feature = "redis-tls", feature = "fetch"))]
pub(crate) mod ca;
#[cfg(feature = "fetch")]
pub(crate) mod http;
#[cfg(any(feature = "redis-tls", feature = "fetch"))]
pub(crate) mod tls;

use std::net::IpAddr;

/// `[tls]`: what every outbound TLS client of the runtime trusts: HTTPS to
/// `[jwt] jwks_url` and to `[service] url` (features `jwt`, `service`), and
/// `rediss://` to `[global] redis_url` (feature `redis-tls`) unless
/// `[global] ca_file` names its own CA (the more specific setting wins).
///
/// With `ca_file` set, the certificates of that PEM file are the roots, and
/// the only ones (a private CA; concatenate a public bundle into the file to
/// trust both). Unset, the webpki roots (Mozilla's, compiled in, the same on
/// every host). Certificates are always verified, hostname included. The
/// crypto provider is the application's process default if it installed
/// one, else ring for these clients alone: the library never installs one.
///
/// ```
/// use ratelimit::config::{Config, TlsConfig};
///
/// # let dir = std::env::temp_dir().join(format!("ratelimit-doc-tls-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let ca = dir.join("missing-ca.pem");
/// // In the file: `[tls] ca_file = "ca.pem"`, checked when the file is read.
/// let text = format!("[profiles.std]\nrate = \"10/s\"\n[tls]\nca_file = {:?}\n", ca.display().to_string());
/// let err = Config::from_toml_str(&text).unwrap_err();
/// assert_eq!(err.field(), Some("tls.ca_file"));
/// assert_eq!(err.line(), Some(4));
///
/// // In code:
/// let mut config = Config::from_toml_str("[profiles.std]\nrate = \"10/s\"\n").unwrap();
/// assert_eq!(config.tls, TlsConfig::default()); // the webpki roots
/// config.tls = TlsConfig::with_ca_file("/etc/ratelimit/private-ca.pem");
/// assert!(config.tls.ca_file.is_some());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// A PEM file of the CA certificates to trust instead of the webpki
    /// roots. A relative path is from the working directory. Read and
    /// checked when a configuration file is loaded, and again when a
    /// client is built.
    pub ca_file: Option<std::path::PathBuf>,
}

impl TlsConfig {
    /// Trust the CAs of the PEM file at `path` (and only them).
    pub fn with_ca_file(path: impl Into<std::path::PathBuf>) -> Self {
        TlsConfig {
            ca_file: Some(path.into()),
        }
    }
}

/// The first `v6` (IPv6) or `v4` (IPv4) bits of `ip`, the rest zeroed;
/// IPv4-mapped IPv6 is the IPv4 address it maps. A length of 0 keeps
/// nothing; lengths above the family's width keep everything.
pub(crate) fn prefix_of(ip: IpAddr, v6: u8, v4: u8) -> IpAddr {
    match normalize(ip) {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32u32.saturating_sub(u32::from(v4))).unwrap_or(0);
            IpAddr::V4((u32::from(a) & mask).into())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128u32.saturating_sub(u32::from(v6))).unwrap_or(0);
            IpAddr::V6((u128::from(a) & mask).into())
        }
    }
}

/// IPv4-mapped IPv6 (`::ffff:192.0.2.1`) is the IPv4 client it maps.
pub(crate) fn normalize(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}
