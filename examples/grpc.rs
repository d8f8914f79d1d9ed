//! A tonic gRPC server behind `RateLimitLayer`: the standard health service
//! (`grpc.health.v1.Health`, shipped by tonic-health), its `Check` method
//! limited per client address by a `[[rules]]` entry with a profile of its
//! own: three calls at once, then one every 10 s.
//!
//! ```text
//! cargo run --example grpc [-- 127.0.0.1:50051]
//! ```
//!
//! Then, with any gRPC client, call it four times quickly; with
//! [grpc_health_probe](https://github.com/grpc-ecosystem/grpc-health-probe)
//! (the server has no reflection service, so grpcurl needs the proto
//! file: `-proto health.proto`):
//!
//! ```text
//! for i in 1 2 3 4; do grpc_health_probe -addr=127.0.0.1:50051 -v; done
//! ```
//!
//! The first three answer `SERVING` with `ratelimit-*` response headers; the
//! fourth is `RESOURCE_EXHAUSTED` (not an HTTP 429: a gRPC client reads the
//! status in the trailers) with `retry-after` and a `google.rpc.RetryInfo`
//! detail (see docs/http.md, gRPC). `tests/processes/grpc_example.rs` runs
//! it so, with a tonic client.

use std::net::SocketAddr;

use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthService;

const CONFIG: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "60/min"

# Health checks: 3 at once per address, then one every 10 s.
[profiles.health]
rate = "6/min"
burst = 3

[[rules]]
name = "health.check"
path = "/grpc.health.v1.Health/Check"
key = "ip"
resolve = ["profile:health", "default"]
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:50051")
        .parse()?;
    // The limiter's own lines (the rules in force, refusals) under the
    // `ratelimit` target; RUST_LOG filters them.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "ratelimit=info".into()),
        )
        .init();
    let rate_limit = RateLimit::builder(Config::from_toml_str(CONFIG)?)
        // The services this server serves: a rule whose path names none
        // (`/Health/Check`, the package missing) is refused at startup.
        .grpc_service::<HealthServer<HealthService>>()
        .build()
        .await?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    let incoming = TcpIncoming::bind(addr)?;
    println!(
        "gRPC health service on {}: Check limited to 3 calls at once, then one every 10 s per address",
        incoming.local_addr()?
    );
    tonic::transport::Server::builder()
        .layer(rate_limit.layer())
        .add_service(health)
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}
