//! Instructions per request, for `perf stat` / `valgrind`: runs N requests
//! through one router (`plain`, `state` or `layer`), as `benches/http.rs`
//! builds them. Run it twice with different N and divide the difference.
//!
//! `cargo build --release --example instr_http && perf stat -e instructions:u target/release/examples/instr_http state 200000`

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use http::Request;
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::rate_limit;
use tower::{Service, ServiceExt};

async fn unannotated() -> &'static str {
    "hello"
}

#[rate_limit(key = ip, resolve = [default])]
async fn annotated() -> &'static str {
    "hello"
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "state".to_owned());
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let config = Config::from_toml_str("[profiles.bench]\nrate = \"10000000/s\"\nburst = 100\n").expect("config");
    let limiter = rt.block_on(RateLimit::from_config(config)).expect("limiter");
    let mut app = match mode.as_str() {
        "plain" => Router::new().route("/hello", get(unannotated)).into_service(),
        "layer" => Router::new()
            .route("/hello", get(annotated))
            .layer(limiter.layer())
            .into_service(),
        _ => Router::new()
            .route("/hello", get(annotated))
            .with_state(limiter.clone())
            .into_service(),
    };
    rt.block_on(async {
        for _ in 0..n {
            let mut r = Request::get("/hello").body(Body::empty()).expect("request");
            r.extensions_mut()
                .insert(ConnectInfo(SocketAddr::from(([192, 0, 2, 7], 40000))));
            let response = app.ready().await.expect("ready").call(r).await.expect("response");
            std::hint::black_box(response);
        }
    });
}
