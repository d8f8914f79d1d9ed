//! The quickstart demo: an axum service with two rate-limited routes.
//!
//! ```text
//! cargo run --example quickstart [-- --addr 127.0.0.1:3000 --config examples/quickstart.toml]
//! ```
//!
//! * `GET /public`: limited per client address, with the default profile.
//! * `GET /me`: limited per verified `sub` claim; the token's
//!   `ratelimit_tier` claim picks the profile (`standard` without one).
//! * `GET /export?ms=2000`: a slow download (its body streams for `ms`
//!   milliseconds, at most 60,000), limited per client address by the
//!   `exports` profile: a rate, and at most 3 exports in flight at once
//!   (`concurrency = 3`); a 4th at the same time gets 429 at once.
//! * `GET /token?sub=alice&tier=premium`: mints a demo token (HS256, one
//!   hour) so you can try `/me` without writing code. **A demo only**: a
//!   real service never hands out tokens like this.
//!
//! Tokens are verified with the key source of the config file's `[jwt]`
//! section when it names one (`jwks_url`, `jwks_file`, `pem_file` or
//! `hmac_secret_env`; an `https://` JWKS URL trusts `[tls] ca_file` or the
//! webpki roots). Then `/token` answers 404: the demo cannot mint tokens for
//! keys it does not hold, so get them from the identity provider. Without a
//! key source in the file (as in `examples/quickstart.toml`), tokens are
//! verified with the demo secret in `QUICKSTART_JWT_SECRET` (default:
//! `quickstart-demo-secret-change-me`), which `/token` signs with.
//!
//! * `GET /metrics`: every `ratelimit_*` metric in Prometheus' text format
//!   (not limited, not counted); see `docs/operations.md`.
//!
//! `kill -HUP <pid>` reloads the config file: the log says what changed
//! (profiles, routes, rules), or why the new file was refused (the running
//! configuration stays). Logs go to stdout, coloured only on a terminal
//! (and not with `NO_COLOR` set); `RUST_LOG` filters them.
//!
//! `check` and `explain` run over the config file and these routes
//! together (the library's `ratelimit::axum::command::run_for_app`):
//!
//! ```text
//! cargo run --example quickstart -- check
//! cargo run --example quickstart -- explain --method GET --path /public
//! cargo run --example quickstart -- [--config FILE] explain --method GET --path /me --header 'authorization: Bearer ...'
//! ```
//!
//! `--redis redis://127.0.0.1:6379/` turns on the fleet-wide gate: start two
//! instances on two ports against one Redis and the limits hold for the
//! pair (see docs/global.md, two instances). Fleet ids are keyed with `QUICKSTART_FLEET_SECRET`
//! (a demo default otherwise).

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use ratelimit::axum::RateLimit;
use ratelimit::claims::VerifiedClaims;
use ratelimit::config::{Config, JwtKeySource};
use ratelimit::jwt::JwtVerifier;
use ratelimit::rate_limit;

/// The secret's environment variable, and the default the demo uses without it.
const SECRET_ENV: &str = "QUICKSTART_JWT_SECRET";
const DEFAULT_SECRET: &str = "quickstart-demo-secret-change-me";

#[rate_limit(key = ip, resolve = [default])]
async fn public() -> &'static str {
    "Hello from /public: limited per client address.\n"
}

#[rate_limit(key = jwt_claim("sub"), resolve = [jwt, profile("standard"), default])]
async fn me(claims: Option<axum::Extension<VerifiedClaims>>) -> Json<serde_json::Value> {
    let sub = claims
        .as_ref()
        .and_then(|c| c.get_text("sub").map(|s| s.into_owned()))
        .unwrap_or_else(|| "anonymous".to_owned());
    Json(serde_json::json!({ "sub": sub }))
}

#[derive(serde::Deserialize)]
struct ExportRequest {
    ms: Option<u64>,
}

/// A slow download: a line every 100 ms for `ms` milliseconds, with a
/// `Content-Length`. It holds one of the client's 3 permits until the last
/// byte is sent, or the client hangs up.
#[rate_limit(key = ip, resolve = [profile("exports"), default])]
async fn export(Query(q): Query<ExportRequest>) -> axum::body::Body {
    let ticks = q.ms.unwrap_or(2_000).min(60_000).div_ceil(100);
    axum::body::Body::new(Slow {
        ticks_left: ticks,
        sleep: Box::pin(tokio::time::sleep(std::time::Duration::ZERO)),
    })
}

/// The body of `/export`: one line per 100 ms tick.
struct Slow {
    ticks_left: u64,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for Slow {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        if self.ticks_left == 0 {
            return std::task::Poll::Ready(None);
        }
        std::task::ready!(std::future::Future::poll(self.sleep.as_mut(), cx));
        self.ticks_left -= 1;
        let next = tokio::time::Instant::now() + std::time::Duration::from_millis(100);
        self.sleep.as_mut().reset(next);
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(bytes::Bytes::from_static(b"row\n")))))
    }

    /// Its length is known (the server sends a `Content-Length`), as a
    /// proxied upstream's is: that says nothing of how slowly it streams.
    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.ticks_left * 4)
    }
}

#[derive(serde::Deserialize)]
struct TokenRequest {
    sub: String,
    tier: Option<String>,
}

async fn token(Query(q): Query<TokenRequest>) -> Result<String, (http::StatusCode, String)> {
    mint(&q.sub, q.tier.as_deref()).map_err(|e| (http::StatusCode::INTERNAL_SERVER_ERROR, e))
}

/// `/token` when the config file's `[jwt]` names the key source: the demo
/// secret would mint tokens nothing verifies.
async fn no_token() -> (http::StatusCode, &'static str) {
    (
        http::StatusCode::NOT_FOUND,
        "/token mints demo-secret tokens only; this configuration verifies tokens with its [jwt] key source, \
         so get a token from its identity provider (or remove the key source from [jwt] to use the demo \
         secret)\n",
    )
}

fn secret() -> String {
    std::env::var(SECRET_ENV).unwrap_or_else(|_| DEFAULT_SECRET.to_owned())
}

fn mint(sub: &str, tier: Option<&str>) -> Result<String, String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?;
    let mut claims = serde_json::json!({ "sub": sub, "exp": now.as_secs() + 3600 });
    if let Some(tier) = tier {
        claims["ratelimit_tier"] = tier.into();
    }
    let key = EncodingKey::from_secret(secret().as_bytes()).map_err(|e| e.to_string())?;
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).map_err(|e| e.to_string())
}

/// How the help names the file's key source.
fn key_source_name(keys: &JwtKeySource) -> String {
    match keys {
        JwtKeySource::HmacSecretEnv(var) => format!("hmac_secret_env = {var:?}"),
        JwtKeySource::PemFile(path) => format!("pem_file = {path:?}"),
        JwtKeySource::JwksFile(path) => format!("jwks_file = {path:?}"),
        // Without its query: a provider's API key may sit there.
        JwtKeySource::JwksUrl(url) => match url.split_once('?') {
            Some((base, _)) => format!("jwks_url = {:?}", format!("{base}?...")),
            None => format!("jwks_url = {url:?}"),
        },
        other => format!("{other:?}"),
    }
}

/// `GET /metrics`, in the text format. It does not publish first: the
/// runtime publishes its gauges once a second by itself, and a scrape
/// anyone can send should not lock anything. (A real service serves this
/// on an admin listener: it tells a client when the fleet limit is off.)
async fn metrics(State(app): State<App>) -> ([(http::HeaderName, &'static str); 1], String) {
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.prometheus.render(),
    )
}

/// The router's state: the runtime (which the `#[rate_limit(...)]`
/// handlers take through `FromRef`) and the exporter's handle.
#[derive(Clone)]
struct App {
    rate_limit: RateLimit,
    prometheus: PrometheusHandle,
}

impl axum::extract::FromRef<App> for RateLimit {
    fn from_ref(app: &App) -> RateLimit {
        app.rate_limit.clone()
    }
}

/// The recorder for every `ratelimit_*` metric (installed before the
/// runtime is built: handles bind to the recorder in place), with the
/// catalogue's buckets and help text.
fn install_prometheus() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let mut builder = PrometheusBuilder::new();
    for m in ratelimit::metrics::CATALOGUE {
        if let Some(buckets) = ratelimit::metrics::buckets(m.name) {
            builder = builder.set_buckets_for_metric(Matcher::Full(m.name.to_owned()), buckets)?;
        }
    }
    let handle = builder.install_recorder()?;
    ratelimit::metrics::describe();
    Ok(handle)
}

/// The config file, with `--redis` applied (at startup and on every reload,
/// so a reload sees the same `[global]`).
fn load_config(opts: &Options) -> Result<Config, ratelimit::config::ConfigError> {
    let mut config = Config::from_file(&opts.config)?;
    if let Some(url) = &opts.redis {
        // The same as a [global] section in the file.
        let secret =
            std::env::var("QUICKSTART_FLEET_SECRET").unwrap_or_else(|_| "quickstart-fleet-secret-change-me".to_owned());
        config.global = Some(
            ratelimit::config::FleetConfig::new(url.clone())
                .with_sync_interval(std::time::Duration::from_millis(100))
                .with_window(std::time::Duration::from_secs(10))
                .with_key_prefix("quickstart")
                .with_key_secret(ratelimit::config::FleetSecret(secret.into_bytes())),
        );
    }
    Ok(config)
}

#[derive(Clone)]
struct Options {
    addr: SocketAddr,
    config: PathBuf,
    redis: Option<String>,
}

fn options(args: &[String]) -> Result<Options, String> {
    let mut opts = Options {
        addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
        config: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.toml")),
        redis: None,
    };
    let mut args = args.iter().cloned();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--addr" => opts.addr = value("--addr")?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--config" => opts.config = PathBuf::from(value("--config")?),
            "--redis" => opts.redis = Some(value("--redis")?),
            "-h" | "--help" => {
                println!(
                    "usage: quickstart [--addr HOST:PORT] [--config FILE] [--redis redis://HOST:PORT/]\n       \
                     quickstart [--config FILE] check | explain --method M --path P [--header 'k: v'] [--peer IP]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(opts)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `check` and `explain`: the config file with these routes.
    if let Some(at) = args.iter().position(|a| a == "check" || a == "explain") {
        let opts = match options(&args[..at]) {
            Ok(opts) => opts,
            Err(e) => {
                eprintln!("quickstart: {e}");
                return std::process::ExitCode::from(2);
            }
        };
        let prometheus = PrometheusBuilder::new().build_recorder().handle();
        return ratelimit::axum::command::run_for_app(&args[at..], &opts.config, |rate_limit| {
            router(App { rate_limit, prometheus }, true)
        })
        .await;
    }
    if let Err(e) = run(&args).await {
        eprintln!("quickstart: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

/// The service's routes around its state; `demo_tokens`: `/token` mints
/// tokens (no key source in the file), else it answers 404.
fn router(app: App, demo_tokens: bool) -> Router {
    let router = Router::new()
        .route("/public", get(public))
        .route("/me", get(me))
        .route("/export", get(export))
        // Not limited, not counted: a plain handler.
        .route("/metrics", get(metrics));
    let router = if demo_tokens {
        router.route("/token", get(token))
    } else {
        router.route("/token", get(no_token))
    };
    // The runtime inside the router's state, found through `FromRef`
    // (`#[rate_limit(..., layer)]` with `.layer(rate_limit.layer())` instead
    // would also apply [[rules]]).
    router.with_state(app)
}

async fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    // Colour only for a person at a terminal: a log file or a collector
    // gets plain text.
    let ansi = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_ansi(ansi)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let opts = options(args)?;
    let prometheus = install_prometheus()?;
    let config = load_config(&opts)?;
    // The file's key source when `[jwt]` names one (the runtime builds the
    // verifier from it, with `[tls]` for an https:// JWKS URL), the demo
    // secret otherwise.
    let key_source = config
        .jwt
        .as_ref()
        .and_then(|j| j.verification.as_ref())
        .map(|v| key_source_name(&v.keys));
    let tier_claim = config
        .jwt
        .as_ref()
        .map_or("ratelimit_tier", |j| j.tier_claim.as_str())
        .to_owned();
    let builder = RateLimit::builder(config);
    let rate_limit = match key_source {
        Some(_) => builder.build().await?,
        None => {
            let verifier = JwtVerifier::hmac(secret().as_bytes(), Algorithm::HS256)?;
            builder.jwt_verifier(verifier).build().await?
        }
    };

    // `kill -HUP <pid>` reloads the file: the log says what changed, or why
    // the new file was refused (the running configuration stays).
    #[cfg(unix)]
    rate_limit.reload_on_sighup({
        let opts = opts.clone();
        move || load_config(&opts)
    })?;

    let app = router(App { rate_limit, prometheus }, key_source.is_none());

    let listener = tokio::net::TcpListener::bind(opts.addr).await?;
    let addr = listener.local_addr()?;
    println!(
        "quickstart: serving on http://{addr} (config {})",
        opts.config.display()
    );
    println!();
    println!("Try it:");
    println!("  # anonymous: 5 at once, then 30/min; the 6th in a row gets 429 with Retry-After");
    println!("  for i in $(seq 7); do curl -s -o /dev/null -w '%{{http_code}} ' http://{addr}/public; done; echo");
    println!("  curl -i http://{addr}/public");
    println!();
    match &key_source {
        None => {
            println!("  # a premium user: mint a demo token (demo secret, {SECRET_ENV}), then call /me with it");
            println!("  TOKEN=$(curl -s 'http://{addr}/token?sub=alice&tier=premium')");
        }
        Some(source) => {
            println!("  # tokens are verified with [jwt] {source} from the config file; /token answers 404");
            println!("  # (the demo secret mints nothing here): get a token from your identity provider,");
            println!("  # with a `sub` and a `{tier_claim}` claim");
            println!("  TOKEN=...");
        }
    }
    println!("  curl -i -H \"Authorization: Bearer $TOKEN\" http://{addr}/me");
    println!();
    println!("  # a forged token is anonymous traffic (keyed by address, standard profile)");
    println!("  curl -i -H 'Authorization: Bearer forged.token.here' http://{addr}/me");
    println!();
    println!("  # at most 3 slow exports at once per client: 4 in parallel, the 4th gets 429 at once");
    println!(
        "  for i in 1 2 3 4; do curl -s -o /dev/null -w '%{{http_code}} ' 'http://{addr}/export?ms=3000' & done; wait; echo"
    );
    println!();
    println!("  # what an operator scrapes: decisions, store occupancy, the verifier's keys");
    println!("  curl -s http://{addr}/metrics | grep ratelimit_");
    println!(
        "  # edit {} and reload it: the log says what changed",
        opts.config.display()
    );
    println!("  kill -HUP {}", std::process::id());
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}
