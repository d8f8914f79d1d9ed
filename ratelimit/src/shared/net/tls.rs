//! The one rustls setup of every outbound TLS client of the runtime: HTTPS
//! for a JWKS URL and the limit service (feature `service`), `rediss://`
//! for the fleet gate (feature `redis-tls`).
//!
//! * Provider: the application's process-default `CryptoProvider` if it
//!   installed one when the client is built (read, never set), ring
//!   otherwise, owned by this config alone (`builder_with_provider` never
//!   installs it). A library must not install a process-wide provider: an
//!   application that installs its own afterwards would fail.
//! * Trust: the certificates of `ca_file` when set (a private CA, and only
//!   it), the webpki roots (Mozilla's, compiled in) otherwise. Certificates
//!   are always verified, hostname included; nothing here can turn that off.
//! * Protocols: rustls's safe defaults (TLS 1.3 and 1.2).

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// A client config, and the roots it trusts beyond the defaults.
pub(crate) struct ClientTls {
    pub(crate) config: ClientConfig,
    /// `ca_file`'s certificates (`None`: the webpki roots): Redis cluster
    /// stores compare them.
    #[cfg_attr(not(feature = "redis-tls"), allow(dead_code))]
    pub(crate) roots: Option<Vec<CertificateDer<'static>>>,
}

/// The client config trusting `ca_file`'s CAs, or the webpki roots. Errors
/// start with `ca_file` and name the file.
pub(crate) fn client_config(ca_file: Option<&Path>) -> Result<ClientTls, String> {
    let roots = match ca_file {
        Some(path) => Some(super::ca::read_ca_file(path).map_err(|e| format!("ca_file {e}"))?),
        None => None,
    };
    let mut store = RootCertStore::empty();
    match &roots {
        Some(certs) => {
            for cert in certs {
                store.add(cert.clone()).map_err(|e| format!("ca_file: {e}"))?;
            }
        }
        None => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = CryptoProvider::get_default().cloned().unwrap_or_else(ring_provider);
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(store)
        .with_no_client_auth();
    Ok(ClientTls { config, roots })
}

/// The provider of every outbound TLS connection unless the application
/// installed its own process-wide (`CryptoProvider::install_default`, which
/// this library never calls): *ring*, chosen deliberately. rustls 0.23.48
/// deprecated `ring::default_provider` because *ring* has no post-quantum
/// key exchange (X25519MLKEM768 needs aws-lc-rs); aws-lc-rs needs cmake and
/// a C toolchain at build time and adds minutes to a cold build, for
/// connections (a JWKS URL, a limit service, Redis) that carry no client
/// secrets worth a harvest-now-decrypt-later attack. A service that wants
/// post-quantum key exchange installs the aws-lc-rs provider at startup and
/// these connections use it (`docs/security.md`, TLS). `scripts/test` builds
/// against a fresh resolve, so the next deprecation is seen before users.
#[allow(deprecated)]
fn ring_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What the roots of a client trusting `ca_file` are, for error messages.
#[cfg(feature = "fetch")]
pub(crate) fn trust_of(ca_file: Option<&Path>) -> String {
    match ca_file {
        Some(path) => format!("the CAs of [tls] ca_file {}", path.display()),
        None => "the webpki roots; a private CA goes in [tls] ca_file".to_owned(),
    }
}

/// An error and its sources, as one line (`a: b: c`, repeats skipped),
/// with what a certificate error means when one is among them. `trust`
/// says which roots the client trusts.
#[cfg(feature = "fetch")]
pub(crate) fn describe(err: &(dyn std::error::Error + 'static), trust: &str) -> String {
    let mut text = String::new();
    let mut hint = None;
    let mut next = Some(err);
    while let Some(e) = next {
        let shown = e.to_string();
        if !text.ends_with(&shown) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&shown);
        }
        hint = hint.or_else(|| certificate_hint(e, trust));
        next = e.source();
    }
    match hint {
        Some(h) => format!("{text} ({h})"),
        None => text,
    }
}

/// What a rustls certificate error (possibly inside an `io::Error`) means
/// for the operator.
#[cfg(feature = "fetch")]
fn certificate_hint(e: &(dyn std::error::Error + 'static), trust: &str) -> Option<String> {
    use rustls::CertificateError as C;
    // An `io::Error` shows its inner error but does not give it as a
    // source, and connectors nest them (hyper-rustls wraps tokio-rustls's).
    let mut e: &(dyn std::error::Error + 'static) = e;
    let tls = loop {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            break tls;
        }
        let inner = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref())?;
        e = inner;
    };
    let rustls::Error::InvalidCertificate(cert) = tls else {
        return None;
    };
    Some(match cert {
        C::UnknownIssuer => format!("the server's certificate is not issued by a trusted CA; trusted: {trust}"),
        C::NotValidForName | C::NotValidForNameContext { .. } => {
            "the server's certificate is not valid for the URL's host name".to_owned()
        }
        C::Expired | C::ExpiredContext { .. } => "the server's certificate has expired".to_owned(),
        C::NotValidYet | C::NotValidYetContext { .. } => "the server's certificate is not valid yet".to_owned(),
        _ => return None,
    })
}
