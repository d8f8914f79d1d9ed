//! A tonic gRPC server behind `RateLimitLayer`: the standard health service
//! (`grpc.health.v1.Health`, shipped by tonic-health), limited per client
//! address by a `[[rules]]` entry, three calls at once, then one every 10 s.
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
//! fourth is `ResourceExhausted` with `retry-after` and a
//! `google.rpc.RetryInfo` detail (see docs/http.md, gRPC).

use std::net::SocketAddr;

use ratelimit::axum::RateLimit;
use ratelimit::config::Config;

const CONFIG: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "6/min"
burst = 3

[[rules]]
name = "health"
path = "/grpc.health.v1.Health/{*method}"
key = "ip"
resolve = ["default"]
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:50051")
        .parse()?;
    let rate_limit = RateLimit::from_config(Config::from_toml_str(CONFIG)?).await?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    println!("gRPC health service on {addr}, 3 calls at once then one every 10 s per address");
    tonic::transport::Server::builder()
        .layer(rate_limit.layer())
        .add_service(health)
        .serve(addr)
        .await?;
    Ok(())
}
