//! HTTPS for the runtime's outbound fetches, against a loopback HTTPS server
//! (tokio-rustls) with a CA this test makes (rcgen): a JWKS URL and a limit
//! service over HTTPS give their tiers through a real router when `[tls]
//! ca_file` names the CA; an untrusted certificate and a certificate for
//! another name are refused at startup with the URL and the reason, and a
//! refresh refused later keeps the keys in force and logs why; a limit
//! service with a bad certificate does not stop startup, its lookups fail
//! (counted, logged) and the route falls through; a bad `[tls] ca_file` is a
//! located load error; the quickstart takes its key source from its config
//! file; nothing installs a process-wide rustls provider.

use crate::support::pki;
use crate::support::quickstart;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};
use pki::Pki;
use ratelimit::axum::RateLimit;
use ratelimit::config::{Config, ServiceSecret, TlsConfig};
use ratelimit::rate_limit;
use ratelimit::service::{CacheSettings, HttpLimitService, LimitService, ServiceCache};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RSA_PRIVATE: &[u8] = include_bytes!("../fixtures/rsa_private.pem");
const JWKS: &str = include_str!("../fixtures/jwks.json");
const JWKS_PATH: &str = "/.well-known/jwks.json";
const LIMITS_PATH: &str = "/v1/limits";
const ID_SECRET: &[u8] = b"https-test-service-id-secret-32-bytes!";

// ---- the loopback HTTPS server ---------------------------------------------

/// An HTTPS server on a free loopback port: the JWKS fixture at
/// `JWKS_PATH`, `{"tier": "premium"}` under `LIMITS_PATH`, 404 elsewhere;
/// one request per connection. Counts answered requests and refused
/// handshakes.
struct HttpsStub {
    port: u16,
    acceptor: Arc<Mutex<tokio_rustls::TlsAcceptor>>,
    answered: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl HttpsStub {
    async fn start(cert: &(PathBuf, PathBuf)) -> HttpsStub {
        let acceptor = Arc::new(Mutex::new(Self::acceptor(cert)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let answered = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let (a, r, current) = (Arc::clone(&answered), Arc::clone(&refused), Arc::clone(&acceptor));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = current.lock().expect("acceptor").clone();
                let (a, r) = (Arc::clone(&a), Arc::clone(&r));
                tokio::spawn(Self::serve(acceptor, tcp, a, r));
            }
        });
        HttpsStub {
            port,
            acceptor,
            answered,
            refused,
            task,
        }
    }

    /// Presents `cert` from the next connection on.
    fn set_cert(&self, cert: &(PathBuf, PathBuf)) {
        *self.acceptor.lock().expect("acceptor") = Self::acceptor(cert);
    }

    fn acceptor(cert: &(PathBuf, PathBuf)) -> tokio_rustls::TlsAcceptor {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert.0)
            .expect("certificate file")
            .collect::<Result<_, _>>()
            .expect("certificate PEM");
        let key = PrivateKeyDer::from_pem_file(&cert.1).expect("key PEM");
        // An explicit provider: the test installs no process default either
        // (*ring*, as the library; deprecated in rustls 0.23.48).
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server certificate");
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    /// One connection: the handshake, one request, the answer.
    async fn serve(
        acceptor: tokio_rustls::TlsAcceptor,
        tcp: tokio::net::TcpStream,
        answered: Arc<AtomicUsize>,
        refused: Arc<AtomicUsize>,
    ) {
        let Ok(mut tls) = acceptor.accept(tcp).await else {
            refused.fetch_add(1, Ordering::SeqCst);
            return;
        };
        let mut buf = vec![0u8; 8192];
        let mut n = 0;
        while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            match tls.read(&mut buf[n..]).await {
                Ok(0) | Err(_) => return,
                Ok(k) => n += k,
            }
        }
        let head = String::from_utf8_lossy(&buf[..n]).into_owned();
        let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
        let (status, body) = if path == JWKS_PATH {
            ("200 OK", JWKS.to_owned())
        } else if path.starts_with(&format!("{LIMITS_PATH}/")) {
            ("200 OK", r#"{"tier": "premium"}"#.to_owned())
        } else {
            ("404 Not Found", String::new())
        };
        answered.fetch_add(1, Ordering::SeqCst);
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: \
             close\r\n\r\n{body}",
            body.len()
        );
        let _ = tls.write_all(response.as_bytes()).await;
        let _ = tls.shutdown().await;
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.port)
    }

    fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for HttpsStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---- helpers -----------------------------------------------------------------

fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

/// Two profiles (anonymous: burst 2, premium: burst 7), then `extra`.
/// Premium's slow rate keeps its burst exact however slow the machine; the
/// anonymous profile's fast one lets a client's TAT from anonymous requests
/// fit premium's tolerance (a tier change keeps the TAT).
fn config_text(extra: &str) -> String {
    format!(
        "default_profile = \"anonymous\"\n\
         [profiles.anonymous]\nrate = \"600/min\"\nburst = 2\n\
         [profiles.premium]\nrate = \"60/min\"\nburst = 7\n\
         {extra}"
    )
}

fn jwks_config(url: &str, ca_file: Option<&Path>) -> Config {
    let mut extra = format!(
        "[jwt]\ntier_claim = \"ratelimit_tier\"\nmax_rate = \"6000/min\"\nmax_burst = 100\njwks_url = {url:?}\n"
    );
    if let Some(ca) = ca_file {
        extra.push_str(&format!("[tls]\nca_file = {}\n", toml_path(ca)));
    }
    Config::from_toml_str(&config_text(&extra)).expect("a valid config")
}

fn service_config(url: &str, ca_file: Option<&Path>) -> Config {
    let mut extra = format!("[service]\nurl = {url:?}\nid_secret_env = \"HTTPS_TEST_UNUSED\"\n");
    if let Some(ca) = ca_file {
        extra.push_str(&format!("[tls]\nca_file = {}\n", toml_path(ca)));
    }
    let mut config = Config::from_toml_str(&config_text(&extra)).expect("a valid config");
    // In code rather than from the environment (tests run in parallel).
    config.service.as_mut().expect("[service]").id_secret = Some(ServiceSecret(ID_SECRET.to_vec()));
    config
}

/// An RS256 token for the fixture's `key-1`, with a tier.
fn rsa_token(sub: &str, tier: &str) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("key-1".to_owned());
    let claims = json!({"sub": sub, "exp": get_current_timestamp() + 600, "ratelimit_tier": tier});
    encode(
        &header,
        &claims,
        &EncodingKey::from_rsa_pem(RSA_PRIVATE).expect("RSA key"),
    )
    .expect("sign")
}

/// An HS256 token under the quickstart's demo secret.
fn demo_token(sub: &str, tier: &str) -> String {
    let claims = json!({"sub": sub, "exp": get_current_timestamp() + 600, "ratelimit_tier": tier});
    let key = EncodingKey::from_secret(b"quickstart-demo-secret-change-me").expect("HMAC key");
    encode(&Header::new(Algorithm::HS256), &claims, &key).expect("sign")
}

#[rate_limit(key = jwt_claim("sub"), resolve = [jwt, default])]
async fn me() -> &'static str {
    "me\n"
}

#[rate_limit(key = header("x-api-key"), resolve = [service, default])]
async fn partner() -> &'static str {
    "partner\n"
}

async fn build(config: Config) -> Result<RateLimit, String> {
    RateLimit::builder(config)
        .routes_in(module_path!())
        .build()
        .await
        .map_err(|e| e.to_string())
}

/// Serves `rate_limit` with `/me` and `/partner` on a real socket.
async fn serve(rate_limit: RateLimit) -> SocketAddr {
    let app = Router::new()
        .route("/me", get(me))
        .route("/partner", get(partner))
        .with_state(rate_limit);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await;
    });
    addr
}

/// A response: its status and its head (lower-case header names), and body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// `RateLimit-Limit`: the burst of the profile that applied.
    fn limit(&self) -> Option<u32> {
        self.head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("ratelimit-limit:")
                    .map(str::to_owned)
            })
            .and_then(|v| v.trim().parse().ok())
    }
}

async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The library installed no process-wide provider.
fn no_process_provider() {
    assert!(
        CryptoProvider::get_default().is_none(),
        "a process-default rustls CryptoProvider was installed"
    );
}

// ---- JWKS over HTTPS -----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_over_https_gives_tokens_their_tier_with_the_test_ca() {
    let pki = Pki::new("https-jwks");
    let stub = HttpsStub::start(&pki.server("idp", &["localhost", "127.0.0.1"])).await;
    for host in ["localhost", "127.0.0.1"] {
        let url = stub.url(host, JWKS_PATH);
        let before = stub.answered();
        let rate_limit = build(jwks_config(&url, Some(&pki.ca)))
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(stub.answered(), before + 1, "the JWKS was fetched once, at startup");
        let addr = serve(rate_limit).await;

        // A token signed with the JWKS's key: its tier (premium, burst 7).
        let token = bearer(&rsa_token("alice", "premium"));
        let a = get_with(addr, "/me", &[("authorization", &token)]).await;
        assert_eq!((a.status, a.limit()), (200, Some(7)), "{host}: {}\n{}", a.head, a.body);
        // A token signed with another key (the demo's HS256 secret) is
        // anonymous traffic: the default profile (burst 2).
        let forged = bearer(&demo_token("alice", "premium"));
        let a = get_with(addr, "/me", &[("authorization", &forged)]).await;
        assert_eq!((a.status, a.limit()), (200, Some(2)), "{host}: {}", a.head);
        // The premium bucket holds: 7 in a row in all, then 429.
        for i in 1..7 {
            let a = get_with(addr, "/me", &[("authorization", &token)]).await;
            assert_eq!(a.status, 200, "{host}: request {} of 7", i + 1);
        }
        let a = get_with(addr, "/me", &[("authorization", &token)]).await;
        assert_eq!(a.status, 429, "{host}: {}", a.head);
    }
    assert_eq!(stub.refused(), 0);
    no_process_provider();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_jwks_certificate_is_refused_at_startup() {
    let pki = Pki::new("https-untrusted");
    let other = Pki::new("https-untrusted-other");
    let stub = HttpsStub::start(&pki.server("idp", &["localhost", "127.0.0.1"])).await;
    let url = stub.url("localhost", JWKS_PATH);

    // No [tls]: the webpki roots do not know the test CA.
    let err = build(jwks_config(&url, None))
        .await
        .expect_err("an unknown CA was trusted");
    println!("no ca_file: {err}");
    for words in [
        url.as_str(),
        "invalid peer certificate",
        "UnknownIssuer",
        "not issued by a trusted CA",
        "webpki roots",
        "[tls] ca_file",
    ] {
        assert!(err.contains(words), "{err:?} lacks {words:?}");
    }
    // Another CA in [tls] ca_file: refused too, naming the file trusted.
    let err = build(jwks_config(&url, Some(&other.ca)))
        .await
        .expect_err("another CA was trusted");
    println!("another CA: {err}");
    for words in [url.as_str(), "UnknownIssuer", &other.ca.display().to_string()] {
        assert!(err.contains(words), "{err:?} lacks {words:?}");
    }
    // (The server sees the client's alert after the client gave up.)
    eventually("two refused handshakes", || stub.refused() >= 2).await;
    assert_eq!(stub.answered(), 0, "a request went through an untrusted connection");
    no_process_provider();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_certificate_for_another_name_is_refused_at_startup() {
    let pki = Pki::new("https-name");
    let stub = HttpsStub::start(&pki.server("idp", &["other.example"])).await;
    for host in ["localhost", "127.0.0.1"] {
        let url = stub.url(host, JWKS_PATH);
        let err = build(jwks_config(&url, Some(&pki.ca)))
            .await
            .expect_err("a certificate for another name was accepted");
        println!("another name, {host}: {err}");
        for words in [
            url.as_str(),
            "invalid peer certificate",
            "not valid for name",
            "not valid for the URL's host name",
        ] {
            assert!(err.contains(words), "{err:?} lacks {words:?}");
        }
    }
    assert_eq!(stub.answered(), 0);
    no_process_provider();
}

/// A refresh that meets a certificate the client does not trust (the IdP's
/// was replaced) keeps the keys in force and logs why.
#[tokio::test(flavor = "current_thread")]
async fn a_jwks_refresh_refused_for_its_certificate_keeps_the_keys_and_says_why() {
    let (log, _log) = crate::support::log::Captured::on_this_thread("ratelimit=warn");
    let pki = Pki::new("https-refresh");
    let stranger = Pki::new("https-refresh-other");
    let stub = HttpsStub::start(&pki.server("idp", &["localhost"])).await;
    let url = stub.url("localhost", JWKS_PATH);
    let settings = ratelimit::jwt::JwksSettings {
        refresh_every: Duration::from_secs(3600),
        cooldown: Duration::from_millis(50),
        timeout: Duration::from_secs(2),
    };
    let verifier = ratelimit::jwt::JwtVerifier::jwks_url_with_tls(&url, settings, &TlsConfig::with_ca_file(&pki.ca))
        .await
        .expect("the first fetch");
    assert!(verifier.verify(&rsa_token("alice", "premium")).is_some());

    stub.set_cert(&stranger.server("idp", &["localhost"]));
    tokio::time::sleep(Duration::from_millis(60)).await; // past the cooldown
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rotated".to_owned());
    let claims = json!({"sub": "bob", "exp": get_current_timestamp() + 600});
    let unknown = encode(&header, &claims, &EncodingKey::from_rsa_pem(RSA_PRIVATE).expect("key")).expect("sign");
    assert!(verifier.verify(&unknown).is_none(), "an unknown kid verified");
    eventually("the refresh to be refused", || stub.refused() >= 1).await;
    eventually("the warning", || log.text().contains("JWKS refresh failed")).await;
    let text = log.text();
    println!("log: {text}");
    assert!(text.contains(&url) && text.contains("UnknownIssuer"), "{text:?}");
    assert!(
        verifier.verify(&rsa_token("carol", "premium")).is_some(),
        "the keys in force were dropped"
    );
    assert_eq!(verifier.jwks_fetches(), 2);
}

// ---- the limit service over HTTPS -------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_service_over_https_gives_its_tier() {
    let pki = Pki::new("https-service");
    let stub = HttpsStub::start(&pki.server("limits", &["localhost"])).await;
    let url = stub.url("localhost", LIMITS_PATH);
    let rate_limit = build(service_config(&url, Some(&pki.ca))).await.expect("a runtime");
    assert_eq!(stub.answered(), 0, "no lookup before a request");
    let addr = serve(rate_limit).await;
    // The first request misses (the lookup runs in the background): the
    // default profile; once the answer is in, the service's tier.
    let a = get_with(addr, "/partner", &[("x-api-key", "partner-1")]).await;
    assert_eq!((a.status, a.limit()), (200, Some(2)), "{}", a.head);
    eventually("the service's answer", || stub.answered() >= 1).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = get_with(addr, "/partner", &[("x-api-key", "partner-1")]).await;
        if a.limit() == Some(7) {
            assert_eq!(a.status, 200);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the service's tier never applied: {}",
            a.head
        );
        assert_eq!((a.status, a.limit()), (200, Some(2)), "{}", a.head);
        // Slower than the anonymous rate: every request here is admitted.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(stub.refused(), 0);
    no_process_provider();
}

/// A limit service whose certificate fails verification does not stop
/// startup (lookups are lazy, off the request path); each lookup fails
/// (no answer, counted, logged with the URL and the reason) and the route
/// falls through to its next step.
#[tokio::test(flavor = "current_thread")]
async fn a_limit_service_with_a_bad_certificate_fails_its_lookups_not_startup() {
    // Current-thread runtime: the background lookups log on this thread.
    let (log, _log) = crate::support::log::Captured::on_this_thread("ratelimit=warn");

    let pki = Pki::new("https-service-bad");
    let stranger = Pki::new("https-service-bad-other");
    let stub = HttpsStub::start(&stranger.server("limits", &["localhost"])).await;
    let url = stub.url("localhost", LIMITS_PATH);

    // The lookup itself: the URL and the reason, and no client key.
    let service = HttpLimitService::with_tls(&url, &TlsConfig::with_ca_file(&pki.ca)).expect("a client");
    let err = service
        .lookup(0x0123_4567_89ab_cdef)
        .await
        .expect_err("an unknown CA was trusted");
    println!("lookup: {err}");
    assert!(err.is_exchange(), "{err}");
    for words in [url.as_str(), "UnknownIssuer", "not issued by a trusted CA"] {
        assert!(err.to_string().contains(words), "{err} lacks {words:?}");
    }
    assert!(
        !err.to_string().contains("0123456789abcdef"),
        "the client id is in the error: {err}"
    );

    // Through the cache: counted and logged.
    let cache = ServiceCache::new(service, CacheSettings::default()).expect("a cache");
    assert_eq!(cache.get(7), None);
    eventually("a failed lookup", || cache.lookup_errors() == 1).await;
    assert_eq!(cache.get(7), None, "no answer, and no retry within the negative TTL");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(cache.lookup_errors(), 1);
    let text = log.text();
    println!("log: {text}");
    assert!(
        text.contains("WARN") && text.contains("limit service lookup failed") && text.contains(&url),
        "no warning naming the service: {text:?}"
    );
    assert!(text.contains("UnknownIssuer"), "the warning lacks the reason: {text:?}");

    // Through a router: startup succeeds, requests get the default profile.
    let rate_limit = build(service_config(&url, Some(&pki.ca)))
        .await
        .expect("startup does not depend on the limit service");
    let addr = serve(rate_limit).await;
    let refused = stub.refused();
    for _ in 0..2 {
        let a = get_with(addr, "/partner", &[("x-api-key", "partner-1")]).await;
        assert_eq!((a.status, a.limit()), (200, Some(2)), "{}", a.head);
    }
    eventually("the router's lookup to be refused", || stub.refused() > refused).await;
    // (Past the anonymous profile's emission interval.)
    tokio::time::sleep(Duration::from_millis(250)).await;
    let a = get_with(addr, "/partner", &[("x-api-key", "partner-1")]).await;
    assert_eq!((a.status, a.limit()), (200, Some(2)), "{}", a.head);
    assert_eq!(stub.answered(), 0, "a request went through an untrusted connection");
    no_process_provider();
}

/// `http://` keeps working next to `https://` with one client setup.
#[tokio::test(flavor = "current_thread")]
async fn plain_http_still_works() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}{LIMITS_PATH}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = tcp.read(&mut buf).await;
            let body = r#"{"tier": "premium"}"#;
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tcp.write_all(response.as_bytes()).await;
        }
    });
    let pki = Pki::new("https-plain");
    let service = HttpLimitService::with_tls(&url, &TlsConfig::with_ca_file(&pki.ca)).expect("a client");
    let answer = service.lookup(1).await.expect("an answer over http://");
    assert_eq!(
        answer,
        Some(ratelimit::service::ServiceAnswer::Tier {
            tier: "premium".to_owned()
        })
    );
}

// ---- [tls] ca_file at load ---------------------------------------------------------

#[test]
fn a_bad_tls_ca_file_is_a_located_load_error() {
    let pki = Pki::new("https-config");
    let (cert, key) = pki.server("server", &["localhost"]);
    let bad = pki.dir.join("bad.pem");
    std::fs::write(&bad, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").expect("write");
    let text = |path: &Path| config_text(&format!("[tls]\nca_file = {}\n", toml_path(path)));
    let ok = Config::from_toml_str(&text(&pki.ca)).expect("a valid ca_file");
    assert_eq!(ok.tls.ca_file.as_deref(), Some(pki.ca.as_path()));
    assert!(
        Config::from_toml_str(&text(&cert)).is_ok(),
        "a certificate is a certificate"
    );
    let missing = pki.dir.join("nope.pem");
    for (path, words) in [
        (&missing, "No such file"),
        (&key, "no PEM certificate"),
        (&bad, "certificate 1"),
    ] {
        let err = Config::from_toml_str(&text(path)).expect_err(words);
        let message = err.to_string();
        println!("config: {message}");
        assert_eq!(err.field(), Some("tls.ca_file"), "{message}");
        assert_eq!((err.line(), err.column()), (Some(9), Some(1)), "{message}");
        assert!(message.contains(words), "{message} (expected {words:?})");
        assert!(
            message.contains(&path.display().to_string()),
            "{message} does not name the file"
        );
    }
    // From the environment too: the error names the variable.
    let var = "RATELIMIT__TLS__CA_FILE".to_owned();
    let ok = Config::from_toml_str_with_env(&config_text(""), [(var.clone(), pki.ca.display().to_string())])
        .expect("[tls] ca_file from the environment");
    assert_eq!(ok.tls.ca_file.as_deref(), Some(pki.ca.as_path()));
    let err = Config::from_toml_str_with_env(&config_text(""), [(var.clone(), missing.display().to_string())])
        .expect_err("a missing ca_file from the environment");
    println!("env: {err}");
    assert_eq!(err.field(), Some("tls.ca_file"), "{err}");
    assert!(
        err.to_string().contains(&var) && err.to_string().contains("No such file"),
        "{err}"
    );
    let unknown = Config::from_toml_str(&config_text("[tls]\nca_files = \"x.pem\"\n")).expect_err("an unknown field");
    assert!(unknown.to_string().contains("ca_files"), "{unknown}");
}

// ---- the quickstart with a JWKS from its config file ---------------------------

/// The quickstart's own profiles, with `[jwt]` naming an HTTPS JWKS URL and
/// `[tls]` the test CA.
fn quickstart_config(jwks_url: &str, ca: &Path) -> String {
    format!(
        "default_profile = \"anonymous\"\n\
         [profiles.anonymous]\nrate = \"30/min\"\nburst = 5\n\
         [profiles.standard]\nrate = \"120/min\"\nburst = 10\n\
         [profiles.premium]\nrate = \"1200/min\"\nburst = 50\n\
         [profiles.exports]\nrate = \"60/min\"\n\
         [jwt]\ntier_claim = \"ratelimit_tier\"\nmax_rate = \"6000/min\"\nmax_burst = 200\njwks_url = {jwks_url:?}\n\
         [tls]\nca_file = {}\n",
        toml_path(ca)
    )
}

struct Demo {
    child: std::process::Child,
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_takes_its_jwks_from_its_config_file() {
    let bin = quickstart::quickstart_binary();
    let pki = Pki::new("https-quickstart");
    let stub = HttpsStub::start(&pki.server("idp", &["localhost"])).await;
    let config = pki.dir.join("quickstart.toml");
    std::fs::write(&config, quickstart_config(&stub.url("localhost", JWKS_PATH), &pki.ca)).expect("write config");
    let out = pki.dir.join("quickstart.out");
    // Port 0: the address is read from its startup line.
    let mut demo = Demo {
        child: std::process::Command::new(bin)
            .args(["--addr", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start the quickstart"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        let printed = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(addr) = printed.lines().find_map(quickstart::serving_addr) {
            break addr;
        }
        if let Ok(Some(status)) = demo.child.try_wait() {
            panic!("the quickstart exited: {status}");
        }
        assert!(Instant::now() < deadline, "the quickstart did not serve within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(stub.answered() >= 1, "the quickstart did not fetch the JWKS");

    // A token for the JWKS's key gets its tier (premium: burst 50).
    let a = get_with(
        addr,
        "/me",
        &[("authorization", &bearer(&rsa_token("alice", "premium")))],
    )
    .await;
    assert_eq!((a.status, a.limit()), (200, Some(50)), "{}\n{}", a.head, a.body);
    assert!(a.body.contains("\"alice\""), "{}", a.body);
    // A token signed with the demo secret is not verified: anonymous
    // traffic on /me (the standard profile, burst 10).
    let a = get_with(
        addr,
        "/me",
        &[("authorization", &bearer(&demo_token("bob", "premium")))],
    )
    .await;
    assert_eq!((a.status, a.limit()), (200, Some(10)), "{}\n{}", a.head, a.body);
    assert!(a.body.contains("anonymous"), "{}", a.body);
    // /token mints nothing: 404 with the reason.
    let a = get_with(addr, "/token?sub=alice&tier=premium", &[]).await;
    assert_eq!(a.status, 404, "{}\n{}", a.head, a.body);
    assert!(a.body.contains("[jwt] key source"), "{}", a.body);
    // The printed help says so.
    let help = std::fs::read_to_string(&out).expect("stdout");
    assert!(
        help.contains("jwks_url") && help.contains("/token answers 404"),
        "the help does not name the key source: {help}"
    );
}

/// The quickstart refuses to start when its HTTPS JWKS is not trusted, with
/// the URL and the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_refuses_an_untrusted_jwks() {
    let bin = quickstart::quickstart_binary();
    let pki = Pki::new("https-quickstart-untrusted");
    let other = Pki::new("https-quickstart-untrusted-other");
    let stub = HttpsStub::start(&pki.server("idp", &["localhost"])).await;
    let url = stub.url("localhost", JWKS_PATH);
    let config = pki.dir.join("quickstart.toml");
    std::fs::write(&config, quickstart_config(&url, &other.ca)).expect("write config");
    let err_file = pki.dir.join("quickstart.err");
    let mut demo = Demo {
        child: std::process::Command::new(bin)
            .args(["--addr", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("RUST_LOG", "off")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&err_file).expect("stderr file"))
            .spawn()
            .expect("start the quickstart"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = demo.child.try_wait().expect("the quickstart's status") {
            break status;
        }
        assert!(Instant::now() < deadline, "the quickstart did not exit within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let output = (status, std::fs::read(&err_file).expect("stderr"));
    let stderr = String::from_utf8_lossy(&output.1);
    println!("quickstart: {stderr}");
    assert_eq!(output.0.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&url) && stderr.contains("UnknownIssuer"),
        "unclear startup error: {stderr}"
    );
}
