//! The limit service over HTTP or HTTPS.

use std::sync::Arc;

use super::{LimitService, ServiceAnswer, ServiceError, ServiceErrorKind};
use crate::shared::net::http::{http_client, http_get, is_http_or_https, HttpClient};
use crate::shared::net::TlsConfig;

/// [`LimitService`] over HTTP or HTTPS: `GET {base_url}/{key as 16 hex
/// digits}`; 200 with a JSON [`ServiceAnswer`], 404 for no answer, anything
/// else is an error.
///
/// `https://` verifies the service's certificate, hostname included, against
/// the webpki roots ([`HttpLimitService::new`]) or the CAs of a
/// [`TlsConfig`]'s `ca_file` ([`HttpLimitService::with_tls`]; the runtime
/// passes `[tls]`). A certificate that fails is a failed lookup like any
/// other: no answer (cached for the negative TTL), counted in
/// [`ServiceCache::lookup_errors`](super::ServiceCache::lookup_errors) and logged; the route falls through to
/// its next step. Nothing is fetched before the first lookup, so startup
/// never depends on the service.
#[derive(Debug, Clone)]
pub struct HttpLimitService {
    base: String,
    client: HttpClient,
}

/// The largest answer body read.
const MAX_BODY: usize = 4096;

impl HttpLimitService {
    /// A client of the service at `base_url` (`http://host:port/path` or
    /// `https://...`); `https://` trusts the webpki roots.
    ///
    /// ```
    /// use ratelimit::service::HttpLimitService;
    ///
    /// assert!(HttpLimitService::new("https://limits.example.com/v1/limits").is_ok());
    /// assert!(HttpLimitService::new("ftp://limits.example.com/").is_err());
    /// ```
    pub fn new(base_url: &str) -> Result<Self, ServiceError> {
        Self::with_tls(base_url, &TlsConfig::default())
    }

    /// A client of the service at `base_url` whose `https://` trusts the
    /// CAs of `tls.ca_file` (a private CA, and only it) when set, the webpki
    /// roots otherwise. Reads the CA file now: a missing or bad one is an
    /// error naming it.
    ///
    /// ```
    /// use ratelimit::config::TlsConfig;
    /// use ratelimit::service::HttpLimitService;
    ///
    /// let tls = TlsConfig::with_ca_file("/nonexistent/private-ca.pem");
    /// let err = HttpLimitService::with_tls("https://limits.internal/v1", &tls).unwrap_err();
    /// assert!(err.to_string().contains("private-ca.pem"), "{err}");
    /// ```
    pub fn with_tls(base_url: &str, tls: &TlsConfig) -> Result<Self, ServiceError> {
        let setup = |m: String| ServiceError::of(ServiceErrorKind::Setup, m);
        let base = base_url.trim_end_matches('/').to_owned();
        let uri = base
            .parse::<http::Uri>()
            .map_err(|e| setup(format!("{base_url:?}: {e}")))?;
        if !is_http_or_https(&uri) {
            return Err(setup(format!("{base_url:?}: expected an http:// or https:// URL")));
        }
        // Never sent, and would be logged with every failed lookup.
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(setup(
                "the limit service URL has credentials (user:password@): they would not be sent, and would be \
                 logged; refused"
                    .to_owned(),
            ));
        }
        let client = http_client(tls).map_err(|e| setup(format!("{base_url}: {e}")))?;
        Ok(HttpLimitService { base, client })
    }
}

impl LimitService for HttpLimitService {
    async fn lookup(&self, key: u64) -> Result<Option<ServiceAnswer>, ServiceError> {
        let uri: http::Uri = format!("{}/{key:016x}", self.base)
            .parse()
            .map_err(|e| ServiceError::of(ServiceErrorKind::Setup, format!("bad URI: {e}")))?;
        // The cache bounds each lookup with its own timeout; this one only
        // keeps a stuck exchange from outliving it by much.
        let (status, body) = http_get(&self.client, uri, MAX_BODY, std::time::Duration::from_secs(60))
            .await
            .map_err(|m| ServiceError::of(ServiceErrorKind::Exchange, format!("{}: {m}", self.base)))?;
        match status {
            // Every error names the service (its base URL, never the
            // client's id): the log line says which target failed.
            http::StatusCode::OK => serde_json::from_slice(&body).map(Some).map_err(|e| {
                let mut err = ServiceError::of(ServiceErrorKind::Answer, format!("{}: answer: {e}", self.base));
                err.source = Some(Arc::new(e));
                err
            }),
            http::StatusCode::NOT_FOUND => Ok(None),
            other => Err(ServiceError::of(
                ServiceErrorKind::Answer,
                format!("{}: status {other}", self.base),
            )),
        }
    }
}
