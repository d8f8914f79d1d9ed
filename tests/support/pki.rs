//! A private CA made with rcgen for the TLS tests (`redis_tls.rs`,
//! `https.rs`): the CA and the server certificates it signs, as PEM files
//! in a temp dir removed on drop.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

/// A CA and the certificates it signed, as PEM files in a temp dir.
pub(crate) struct Pki {
    pub(crate) dir: PathBuf,
    pub(crate) ca: PathBuf,
    ca_cert: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    pub(crate) fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("ratelimit-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("ratelimit test CA {tag}"));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = params.self_signed(&ca_key).expect("CA certificate");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_cert.pem()).expect("write ca.pem");
        Pki {
            dir,
            ca,
            ca_cert,
            ca_key,
        }
    }

    /// A server certificate for `names` signed by the CA (also fit as a
    /// client certificate, which cluster nodes present to each other).
    /// Returns the (certificate, key) files.
    pub(crate) fn server(&self, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).expect("server params");
        params.distinguished_name.push(DnType::CommonName, names[0]);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &self.ca_cert, &self.ca_key)
            .expect("server certificate");
        let (cert_file, key_file) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_file, cert.pem()).expect("write cert");
        std::fs::write(&key_file, key.serialize_pem()).expect("write key");
        (cert_file, key_file)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
