//! The HTTP(S) client of the runtime's outbound fetches: a JWKS URL
//! (`[jwt] jwks_url`) and the limit service (`[service] url`). Off the
//! request path: background refreshes and cache misses only.

use std::sync::Arc;

use super::TlsConfig;

/// The HTTP(S) client shared by the limit service and the JWKS fetcher, and
/// what it trusts (for error messages).
#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    client: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        http_body_util::Empty<bytes::Bytes>,
    >,
    trust: Arc<str>,
}

/// A client of `http://` and `https://` URLs; `https://` trusts `tls`'s
/// `ca_file` or the webpki roots (see `super::tls`). Errors name the file.
pub(crate) fn http_client(tls: &TlsConfig) -> Result<HttpClient, String> {
    let ca_file = tls.ca_file.as_deref();
    let config = super::tls::client_config(ca_file)?.config;
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .build();
    Ok(HttpClient {
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector),
        trust: super::tls::trust_of(ca_file).into(),
    })
}

/// Whether `url` names a scheme the client speaks.
pub(crate) fn is_http_or_https(uri: &http::Uri) -> bool {
    matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some_and(|h| !h.is_empty())
}

/// `GET uri`: the status and at most `max_body` bytes of body (a longer body
/// is an error), the whole exchange within `timeout`. An error says why,
/// with its causes (a refused certificate: which and why).
pub(crate) async fn http_get(
    client: &HttpClient,
    uri: http::Uri,
    max_body: usize,
    timeout: std::time::Duration,
) -> Result<(http::StatusCode, bytes::Bytes), String> {
    use http_body_util::BodyExt;
    let exchange = async {
        let response = client
            .client
            .get(uri)
            .await
            .map_err(|e| format!("request failed: {}", super::tls::describe(&e, &client.trust)))?;
        let status = response.status();
        let body = http_body_util::Limited::new(response.into_body(), max_body)
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| "timed out".to_owned())?
}
