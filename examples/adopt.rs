//! A realistic axum service adopting `ratelimit`: what `cargo run --example
//! adopt` runs.
//!
//! * **Application state.** `AppState` holds the service's own handles (an
//!   order book standing in for a database pool) and the `RateLimit`; the
//!   handlers find the limiter through `FromRef` (`#[rate_limit(...)]`),
//!   with no layer and no allocation per request.
//! * **Tenants.** An authentication middleware checks the `x-api-key` header
//!   against the service's key table and puts the verified `Tenant` in the
//!   request's extensions; `key = custom(ByTenant)` limits each tenant,
//!   whatever address it calls from. A request without a verified tenant
//!   never reaches the handler (401).
//! * **Tokens from an identity provider.** `/me` is limited per verified
//!   `sub`, with the token's `plan` claim picking the profile. The keys come
//!   from the IdP's JWKS over HTTPS: the example starts a local test IdP (a
//!   private CA made at startup, a JWKS and a token endpoint, standing in for
//!   Okta, Auth0 or Entra ID) and names its URL and CA in `[jwt] jwks_url` and
//!   `[tls] ca_file`. `--jwks-url URL [--ca-file PEM]` uses another IdP.
//! * **A global bucket.** `/reports` is one bucket for every caller.
//! * **An edge limit.** A `[[rules]]` entry limits every request per client
//!   address before the authentication middleware runs (the runtime's layer
//!   wraps the whole router), so guessing API keys is limited too.
//! * **The service's own 429.** The builder's rejection hook answers in the
//!   service's error envelope (`{"error": {...}}`); the runtime adds
//!   `Retry-After` and the rate-limit headers to it.
//!
//! `--addr HOST:PORT` (default 127.0.0.1:3001), `--config FILE` (default
//! `examples/adopt.toml`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{FromRef, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http::StatusCode;
use ratelimit::axum::{RateLimit, Rejection};
use ratelimit::claims::VerifiedClaims;
use ratelimit::config::Config;
use ratelimit::key::{write_address_id, ClientKey, KeyContext, KeySource};
use ratelimit::rate_limit;

/// The service's state: its own handles and the limiter beside them.
#[derive(Clone, FromRef)]
struct AppState {
    orders: Arc<OrderBook>,
    rate_limit: RateLimit,
}

/// Orders per tenant (a database in a real service), and the API keys that
/// identify tenants.
struct OrderBook {
    by_tenant: HashMap<&'static str, Vec<&'static str>>,
    api_keys: HashMap<&'static str, &'static str>,
}

/// A tenant the authentication middleware verified.
#[derive(Debug, Clone)]
struct Tenant(&'static str);

/// Limits by the verified tenant; a request without one (the middleware
/// refuses those, so only a misconfigured route) falls back to its address.
#[derive(Debug, Default)]
struct ByTenant;

impl KeySource for ByTenant {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        match cx.parts().extensions.get::<Tenant>() {
            Some(t) => ClientKey::Custom(cx.hash(t.0)),
            None => cx.address(),
        }
    }
    fn write_id(&self, cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn std::hash::Hasher) {
        match (key, cx.parts().extensions.get::<Tenant>()) {
            (ClientKey::Custom(_), Some(t)) => {
                h.write(b"tenant:");
                h.write(t.0.as_bytes());
            }
            _ => write_address_id(key, h),
        }
    }
    fn id_name(&self) -> Option<&str> {
        Some("tenant")
    }
}

/// Checks `x-api-key` and records the tenant it belongs to.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let tenant = request
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .and_then(|key| state.orders.api_keys.get(key).copied());
    match tenant {
        Some(t) => {
            request.extensions_mut().insert(Tenant(t));
            next.run(request).await
        }
        None => error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid x-api-key is required".into(),
        )
        .into_response(),
    }
}

/// The service's error envelope, for every error it sends.
fn error(status: StatusCode, code: &str, message: String) -> (StatusCode, Json<serde_json::Value>) {
    (
        status,
        Json(serde_json::json!({"error": {"code": code, "message": message}})),
    )
}

#[rate_limit(key = custom(ByTenant), resolve = [profile("tenant"), default], name = "orders.list")]
async fn orders(State(state): State<AppState>, tenant: axum::Extension<Tenant>) -> Json<serde_json::Value> {
    let list = state.orders.by_tenant.get(tenant.0 .0).cloned().unwrap_or_default();
    Json(serde_json::json!({"tenant": tenant.0 .0, "orders": list}))
}

#[rate_limit(key = jwt_claim("sub"), resolve = [jwt, profile("standard"), default], name = "me")]
async fn me(claims: Option<axum::Extension<VerifiedClaims>>) -> Json<serde_json::Value> {
    let claim = |c: &VerifiedClaims, name: &str| c.get_text(name).map(|s| s.into_owned());
    Json(match claims {
        Some(axum::Extension(c)) => serde_json::json!({"sub": claim(&c, "sub"), "plan": claim(&c, "plan")}),
        None => serde_json::json!({"sub": null, "note": "no verified token: limited as anonymous traffic"}),
    })
}

#[rate_limit(key = route, resolve = [profile("reports"), default], name = "reports")]
async fn reports() -> &'static str {
    "the monthly report\n"
}

/// Every refusal in the service's own envelope.
fn rejection(r: &Rejection<'_>) -> http::Response<String> {
    let body = serde_json::json!({"error": {
        "code": "rate_limited",
        "message": format!("too many requests on {}; retry in {} s", r.route(), r.retry_after_secs()),
        "policy": r.policy(),
        "retry_after": r.retry_after_secs(),
    }});
    let mut response = http::Response::new(body.to_string());
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

struct Options {
    addr: SocketAddr,
    config: PathBuf,
    jwks_url: Option<String>,
    ca_file: Option<PathBuf>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        addr: SocketAddr::from(([127, 0, 0, 1], 3001)),
        config: PathBuf::from("examples/adopt.toml"),
        jwks_url: None,
        ca_file: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => o.addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--config" => o.config = PathBuf::from(value()?),
            "--jwks-url" => o.jwks_url = Some(value()?),
            "--ca-file" => o.ca_file = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!("usage: service [--addr HOST:PORT] [--config FILE] [--jwks-url URL [--ca-file PEM]]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(o)
}

/// The configuration file, with the IdP's JWKS URL and CA filled in (what a
/// deployment writes in the file itself).
fn load_config(o: &Options, jwks_url: &str, ca_file: Option<&std::path::Path>) -> Result<Config, String> {
    let text = std::fs::read_to_string(&o.config).map_err(|e| format!("{}: {e}", o.config.display()))?;
    let mut doc: toml::Table = text.parse().map_err(|e| format!("{}: {e}", o.config.display()))?;
    let jwt = doc
        .entry("jwt")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let Some(jwt) = jwt.as_table_mut() {
        jwt.insert("jwks_url".into(), toml::Value::String(jwks_url.to_owned()));
    }
    if let Some(ca) = ca_file {
        let mut tls = toml::Table::new();
        tls.insert("ca_file".into(), toml::Value::String(ca.display().to_string()));
        doc.insert("tls".into(), toml::Value::Table(tls));
    }
    Config::from_toml_str(&doc.to_string()).map_err(|e| format!("{} (with the IdP filled in): {e}", o.config.display()))
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("service: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // Logs go to stderr, coloured only on a terminal (and not with
    // NO_COLOR): a log file gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
    let o = options()?;
    // The identity provider: the one given, or a local test IdP.
    let (jwks_url, ca_file, idp) = match &o.jwks_url {
        Some(url) => (url.clone(), o.ca_file.clone(), None),
        None => {
            let idp = test_idp::start().await?;
            (idp.jwks_url(), Some(idp.ca_file.clone()), Some(idp))
        }
    };
    let config = load_config(&o, &jwks_url, ca_file.as_deref())?;
    let rate_limit = RateLimit::builder(config).rejection(rejection).build().await?;

    let state = AppState {
        orders: Arc::new(OrderBook {
            by_tenant: HashMap::from([("acme", vec!["A-1", "A-2"]), ("globex", vec!["G-7"])]),
            api_keys: HashMap::from([("key-acme", "acme"), ("key-globex", "globex")]),
        }),
        rate_limit,
    };
    let tenant_api = Router::new()
        .route("/orders", get(orders))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let app = Router::new()
        .merge(tenant_api)
        .route("/me", get(me))
        .route("/reports", get(reports))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(state.clone())
        // Outermost: `[[rules]]` (the per-address edge limit) before the
        // authentication middleware and the handlers' own limits.
        .layer(state.rate_limit.layer());

    let listener = tokio::net::TcpListener::bind(o.addr).await?;
    let addr = listener.local_addr()?;
    println!("service listening on http://{addr} (identity provider: {jwks_url})");
    if let Some(idp) = &idp {
        let token = idp.mint("alice", "premium")?;
        println!();
        println!("Try it:");
        println!("  # tenant acme: 20 at once, then 600/min; another tenant has its own bucket");
        println!("  curl -i -H 'x-api-key: key-acme' http://{addr}/orders");
        println!("  for i in $(seq 22); do curl -s -o /dev/null -w '%{{http_code}} ' -H 'x-api-key: key-acme' http://{addr}/orders; done; echo");
        println!();
        println!("  # a token from the IdP (RS256, its JWKS fetched over HTTPS): the premium plan's limit");
        println!("  curl -i -H 'Authorization: Bearer {token}' http://{addr}/me");
        println!(
            "  # more tokens: curl --cacert {} '{}/token?sub=bob&plan=standard'",
            idp.ca_file.display(),
            idp.base
        );
        println!();
        println!("  # one bucket for everyone: 2 at once, then 6/min, in the service's own 429 envelope");
        println!("  for i in $(seq 3); do curl -s http://{addr}/reports; done");
    }
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}

/// A local identity provider for the demo and its test, standing in for a
/// hosted one: HTTPS with a private CA made at startup, `GET
/// /.well-known/jwks.json` (the test keys of `tests/fixtures/`) and `GET
/// /token?sub=..&plan=..` (an RS256 token). Not part of the pattern to copy.
mod test_idp {
    use std::path::PathBuf;
    use std::sync::Arc;

    use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const PRIVATE_KEY: &[u8] = include_bytes!("../tests/fixtures/rsa_private.pem");
    const JWKS: &str = include_str!("../tests/fixtures/jwks.json");
    pub(crate) const ISSUER: &str = "https://idp.example.test";

    pub(crate) struct Idp {
        pub(crate) base: String,
        pub(crate) ca_file: PathBuf,
    }

    impl Idp {
        pub(crate) fn jwks_url(&self) -> String {
            format!("{}/.well-known/jwks.json", self.base)
        }

        pub(crate) fn mint(&self, sub: &str, plan: &str) -> Result<String, String> {
            mint(sub, plan)
        }
    }

    pub(crate) fn mint(sub: &str, plan: &str) -> Result<String, String> {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("key-1".to_owned());
        let claims = serde_json::json!({
            "sub": sub, "plan": plan, "iss": ISSUER, "aud": "orders-api",
            "exp": get_current_timestamp() + 3600,
        });
        let key = EncodingKey::from_rsa_pem(PRIVATE_KEY).map_err(|e| e.to_string())?;
        encode(&header, &claims, &key).map_err(|e| e.to_string())
    }

    /// Starts the IdP on a free loopback port; its CA is written to a file
    /// in the system's temporary directory.
    pub(crate) async fn start() -> Result<Idp, Box<dyn std::error::Error>> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "service example test IdP CA");
        let ca = ca_params.self_signed(&ca_key)?;
        let server_key = KeyPair::generate()?;
        let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?.signed_by(
            &server_key,
            &ca,
            &ca_key,
        )?;

        let dir = std::env::temp_dir().join(format!("ratelimit-service-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let ca_file = dir.join("idp-ca.pem");
        std::fs::write(&ca_file, ca.pem())?;

        // *ring*, as the library (deprecated in rustls 0.23.48 for lacking
        // post-quantum key exchange: a test identity provider needs none).
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![server.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into()),
            )?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("https://127.0.0.1:{}", listener.local_addr()?.port());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(mut stream) = acceptor.accept(tcp).await {
                        let _ = serve(&mut stream).await;
                    }
                });
            }
        });
        Ok(Idp { base, ca_file })
    }

    /// One HTTP/1.1 exchange, then close.
    async fn serve<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(stream: &mut S) -> std::io::Result<()> {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            head.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8_lossy(&head);
        let target = head.split_whitespace().nth(1).unwrap_or("/");
        let (status, body) = match target.split_once('?') {
            None if target == "/.well-known/jwks.json" => ("200 OK", JWKS.to_owned()),
            Some(("/token", query)) => {
                let param = |name: &str| {
                    query
                        .split('&')
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                        .filter(|v| v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
                };
                match mint(param("sub").unwrap_or("anonymous"), param("plan").unwrap_or("standard")) {
                    Ok(token) => ("200 OK", token),
                    Err(e) => ("500 Internal Server Error", e),
                }
            }
            _ => ("404 Not Found", "not found".to_owned()),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    }
}
