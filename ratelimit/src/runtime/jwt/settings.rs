//! The verifier that `[jwt]`'s settings describe.

use super::{JwtConfigError, JwtVerifier};
use crate::runtime::limits::{JwtKeySource, JwtVerification, MISSING_ALGORITHM};
use crate::shared::net::TlsConfig;

impl JwtVerifier {
    /// The verifier `verification` describes (a `[jwt]` section with a key
    /// source): reads key files and the secret's environment variable now,
    /// and fetches a JWKS URL (which needs the `service` feature and a
    /// tokio runtime; `https://` trusts what `tls` says). The failed-check
    /// budget's networks are `network_prefixes` (IPv6, IPv4; see
    /// [`ClientIpConfig::network_prefixes`](crate::key::ClientIpConfig::network_prefixes)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use ratelimit::config::{Config, JwtVerification};
    /// use ratelimit::jwt::JwtVerifier;
    ///
    /// let config = Config::from_toml_str(
    ///     "[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"100/s\"\nmax_burst = 10\nhmac_secret_env = \"NO_SUCH_SECRET\"\nalgorithm = \"HS256\"\n",
    /// )
    /// .unwrap();
    /// let verification: &JwtVerification = config.jwt.as_ref().and_then(|j| j.verification.as_ref()).unwrap();
    /// let err = JwtVerifier::from_settings(verification, &config.tls, config.ip.network_prefixes())
    ///     .await
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("NO_SUCH_SECRET"), "{err}");
    /// # }
    /// ```
    pub async fn from_settings(
        verification: &JwtVerification,
        tls: &TlsConfig,
        network_prefixes: (u8, u8),
    ) -> Result<JwtVerifier, JwtConfigError> {
        let v = verification;
        let alg = || -> Result<jsonwebtoken::Algorithm, JwtConfigError> {
            let Some(name) = v.algorithm.as_deref() else {
                return Err(JwtConfigError::new(MISSING_ALGORITHM.to_owned()));
            };
            name.parse()
                .map_err(|_| JwtConfigError::new(format!("unknown algorithm {name:?}")))
        };
        let verifier = match &v.keys {
            JwtKeySource::HmacSecretEnv(var) => JwtVerifier::hmac_from_env(var, alg()?)?,
            JwtKeySource::PemFile(path) => JwtVerifier::pem_file(path, alg()?)?,
            JwtKeySource::JwksFile(path) => JwtVerifier::jwks_file(path)?,
            JwtKeySource::JwksUrl(url) => Self::from_jwks_url(url, v, tls).await?,
        };
        let (ipv6_network, ipv4_network) = network_prefixes;
        let mut verifier = verifier
            .leeway(v.leeway)
            .failed_checks_per_ip(v.max_failed_per_ip, v.failed_window, v.max_failed_tracked)
            .failed_checks_per_network(v.max_failed_per_network, v.failed_window, ipv6_network, ipv4_network)
            .failed_checks_per_second(v.max_failed_per_second);
        if !v.issuer.is_empty() {
            verifier = verifier.issuer(&v.issuer.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if !v.audience.is_empty() {
            verifier = verifier.audience(&v.audience.iter().map(String::as_str).collect::<Vec<_>>());
        }
        Ok(verifier)
    }

    async fn from_jwks_url(url: &str, v: &JwtVerification, tls: &TlsConfig) -> Result<JwtVerifier, JwtConfigError> {
        let settings = super::JwksSettings {
            refresh_every: v.jwks_refresh,
            cooldown: v.jwks_cooldown,
            ..super::JwksSettings::default()
        };
        JwtVerifier::jwks_url_with_tls(url, settings, tls).await
    }
}

impl JwtVerifier {
    /// One line saying what this verifier accepts, for the startup log: the
    /// key source and its keys' algorithms, the issuers and audiences
    /// required, the leeway.
    #[cfg(feature = "axum")]
    pub(crate) fn summary(&self) -> String {
        use super::Keys;
        let algorithms = |keys: &mut dyn Iterator<Item = jsonwebtoken::Algorithm>| {
            let mut names: Vec<String> = keys.map(|a| format!("{a:?}")).collect();
            names.sort();
            names.dedup();
            names.join(", ")
        };
        let keys = match &self.keys {
            Keys::Single(k) => format!("one key ({:?})", k.alg),
            Keys::ByKid(m) => format!(
                "a JWKS file, {} keys ({})",
                m.len(),
                algorithms(&mut m.values().map(|k| k.alg))
            ),
            Keys::Remote(r) => {
                let set = r.current();
                format!(
                    "the JWKS at {}, {} keys ({})",
                    super::jwks::shown(&r.url),
                    set.keys.len(),
                    algorithms(&mut set.keys.values().map(|k| k.alg))
                )
            }
        };
        // Each issuer is held with and without its trailing slash: show one.
        let issuers = self.issuer.as_ref().map_or("any (not checked)".to_owned(), |all| {
            let shown: Vec<&String> = all.iter().step_by(2).collect();
            format!("{shown:?}, with or without a trailing slash")
        });
        let audiences = self
            .audience
            .as_ref()
            .map_or("any (not checked)".to_owned(), |all| format!("{all:?}"));
        format!(
            "JWT verifier: {keys}; issuer {issuers}; audience {audiences}; leeway {} s; tokens that do not \
             verify are anonymous (ratelimit_jwt_verifications_total says why)",
            self.leeway.as_secs()
        )
    }
}
