//! Probes (`[responses] probe_methods = ["HEAD", "OPTIONS"]`) through a real
//! axum router: the limiter answers a probe itself with the status and the
//! rate-limit headers the request would get (204, or the 429 with
//! `Retry-After`), charges nothing, creates no state and never runs the
//! handler; the structured fields are parsed with an RFC 9651 parser.

use crate::support::router::{body, header, send, App};
use crate::support::sf;

use axum::routing::{any, get};
use axum::Router;
use http::{Method, StatusCode};
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::{rate_limit, ManualClock};

const CONFIG: &str = r#"
default_profile = "three"

[profiles.three]
rate = "3/min"
burst = 3

[profiles.ten]
rate = "10/min"
burst = 10

[headers]
style = "both"

[responses]
probe_methods = ["HEAD", "OPTIONS"]

[[rules]]
name = "proxy"
path = "/proxy/{*rest}"
key = "ip"
resolve = ["default"]
"#;

#[rate_limit(key = ip, resolve = [default], name = "item")]
async fn item() -> &'static str {
    "item"
}

#[rate_limit(key = ip, resolve = [profile("ten"), default], name = "pair.wide")]
#[rate_limit(key = ip, resolve = [default], name = "pair.narrow")]
async fn pair() -> &'static str {
    "pair"
}

async fn upstream() -> &'static str {
    "upstream"
}

async fn app(config: &str) -> App {
    let rl = RateLimit::builder(Config::from_toml_str(config).unwrap())
        .routes_in(module_path!())
        .clock(ManualClock::new())
        .build()
        .await
        .unwrap();
    Router::new()
        .route("/item", get(item))
        .route("/pair", get(pair))
        .route("/proxy/{*rest}", any(upstream))
        .layer(rl.layer())
        .with_state(rl)
        .into_service()
}

#[tokio::test]
async fn a_head_probe_tells_what_a_request_would_get_and_spends_nothing() {
    let app = app(CONFIG).await;
    let peer = "192.0.2.1:1";
    for _ in 0..5 {
        let r = send(&app, Method::HEAD, "/item", peer).await;
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        assert_eq!(header(&r, "ratelimit-limit"), "3");
        assert_eq!(header(&r, "ratelimit-remaining"), "2", "what the request would leave");
        let limits = sf::limit_triples(&r);
        assert_eq!(limits.len(), 1, "{limits:?}");
        // The handler answers 200 "item": a 204 with no body is the
        // limiter's own answer (the handler never ran).
        assert!(body(r).await.is_empty(), "a probe never runs the handler");
    }
    // Nothing was spent: the client still has its 3.
    for left in ["2", "1", "0"] {
        let r = send(&app, Method::GET, "/item", peer).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, "ratelimit-remaining"), left);
    }
    // Spent: the probe says what the next request would get, a 429 and
    // its wait, and still spends nothing.
    let r = send(&app, Method::HEAD, "/item", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "retry-after"), "20");
    assert_eq!(header(&r, "ratelimit-remaining"), "0");
    let r = send(&app, Method::GET, "/item", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&r, "retry-after"),
        "20",
        "the probe did not push the wait further"
    );
}

#[tokio::test]
async fn a_stacked_route_probe_lists_every_limit() {
    let app = app(CONFIG).await;
    let peer = "192.0.2.2:1";
    let r = send(&app, Method::HEAD, "/pair", peer).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    // The triple reports the tightest (the narrow one: 2 left of 3).
    assert_eq!(header(&r, "ratelimit-limit"), "3");
    assert_eq!(header(&r, "ratelimit-remaining"), "2");
    let limits = sf::limit_triples(&r);
    assert_eq!(limits.len(), 2, "both limits in the structured list: {limits:?}");
    assert!(body(r).await.is_empty());
}

#[tokio::test]
async fn a_rule_answers_options_and_head_probes_through_the_layer() {
    let app = app(CONFIG).await;
    let peer = "192.0.2.3:1";
    for method in [Method::OPTIONS, Method::HEAD, Method::OPTIONS] {
        let r = send(&app, method, "/proxy/a", peer).await;
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        assert_eq!(header(&r, "ratelimit-remaining"), "2");
    }
    for _ in 0..3 {
        assert_eq!(
            send(&app, Method::POST, "/proxy/a", peer).await.status(),
            StatusCode::OK
        );
    }
    let r = send(&app, Method::OPTIONS, "/proxy/a", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&r, "content-type").contains("problem+json"));
}

#[tokio::test]
async fn without_probe_methods_a_head_is_a_request() {
    let config = CONFIG.replace("probe_methods = [\"HEAD\", \"OPTIONS\"]", "");
    let app = app(&config).await;
    let peer = "192.0.2.4:1";
    for left in ["2", "1", "0"] {
        let r = send(&app, Method::HEAD, "/item", peer).await;
        assert_eq!(r.status(), StatusCode::OK, "served by the GET handler");
        assert_eq!(header(&r, "ratelimit-remaining"), left, "and charged");
    }
    assert_eq!(
        send(&app, Method::HEAD, "/item", peer).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[test]
fn only_head_and_options_can_be_probes() {
    for method in ["GET", "POST", "DELETE"] {
        let config = CONFIG.replace("\"HEAD\", \"OPTIONS\"", &format!("\"{method}\""));
        let e = Config::from_toml_str(&config).unwrap_err().to_string();
        assert!(
            e.contains("responses.probe_methods") && e.contains("only HEAD and OPTIONS"),
            "{method}: {e}"
        );
    }
    let config = CONFIG.replace("\"HEAD\", \"OPTIONS\"", "\"head\"");
    let ok = Config::from_toml_str(&config).unwrap();
    assert_eq!(ok.responses.probe_methods, vec![Method::HEAD]);
}

#[tokio::test]
async fn a_code_built_config_with_a_get_probe_is_refused_at_startup() {
    let mut config = Config::from_toml_str(CONFIG).unwrap();
    config.responses = config.responses.clone().with_probe_methods(vec![Method::GET]);
    let e = RateLimit::builder(config)
        .routes_in(module_path!())
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("probe_methods") && e.contains("GET"), "{e}");
}

#[tokio::test]
async fn probes_follow_a_reload_and_a_bad_one_changes_nothing() {
    let without = CONFIG.replace("probe_methods = [\"HEAD\", \"OPTIONS\"]", "");
    let rl = RateLimit::builder(Config::from_toml_str(&without).unwrap())
        .routes_in(module_path!())
        .clock(ManualClock::new())
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/item", get(item))
        .with_state(rl.clone())
        .into_service();
    let peer = "192.0.2.5:1";
    assert_eq!(send(&app, Method::HEAD, "/item", peer).await.status(), StatusCode::OK);
    rl.reload(Config::from_toml_str(CONFIG).unwrap()).unwrap();
    let r = send(&app, Method::HEAD, "/item", peer).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT, "probes on after the reload");
    assert_eq!(header(&r, "cache-control"), "no-store");
    assert_eq!(
        header(&r, "ratelimit-remaining"),
        "1",
        "the HEAD before the reload was a charged request"
    );
    // A configuration with a GET probe is refused; the probes in force stay.
    let mut bad = Config::from_toml_str(CONFIG).unwrap();
    bad.responses = bad.responses.clone().with_probe_methods(vec![Method::GET]);
    let e = rl.reload(bad).unwrap_err().to_string();
    assert!(e.contains("GET") && e.contains("running configuration stays"), "{e}");
    assert_eq!(
        send(&app, Method::HEAD, "/item", peer).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(send(&app, Method::GET, "/item", peer).await.status(), StatusCode::OK);
    rl.reload(Config::from_toml_str(&without).unwrap()).unwrap();
    // Probes off: a HEAD is a request again, charged (the third of 3) ...
    assert_eq!(send(&app, Method::HEAD, "/item", peer).await.status(), StatusCode::OK);
    // ... and refused like one.
    let r = send(&app, Method::HEAD, "/item", peer).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
}
