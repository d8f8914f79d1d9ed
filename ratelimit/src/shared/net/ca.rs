//! A PEM file of CA certificates (a private CA) for the runtime's outbound
//! TLS clients, read and checked once: at configuration load and when a
//! client is built.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// Reads a PEM file of CA certificates (the roots to trust) and checks each
/// the way a root store does. Errors name the file and the certificate.
pub(crate) fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut certs = Vec::new();
    for (i, cert) in CertificateDer::pem_slice_iter(&pem).enumerate() {
        let cert = cert.map_err(|e| format!("{shown}: certificate {}: {e}", i + 1))?;
        RootCertStore::empty().add(cert.clone()).map_err(|e| {
            let why = match e {
                rustls::Error::InvalidCertificate(e) => format!("{e:?}"),
                e => e.to_string(),
            };
            format!("{shown}: certificate {}: not usable as a trust anchor ({why})", i + 1)
        })?;
        certs.push(cert);
    }
    if certs.is_empty() {
        return Err(format!(
            "{shown}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it"
        ));
    }
    Ok(certs)
}
