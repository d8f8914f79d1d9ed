//! What an attacker review of the checker found, kept as tests: `explain`
//! must read a request as the runtime does (a header key sent twice or
//! empty keys by address; two `Authorization` headers carry no token), and
//! the checker and startup must read a fleet secret the same way. Each is
//! checked against a real router or a real startup.

use std::net::IpAddr;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};
use ratelimit::axum::RateLimit;
use ratelimit::config::check::{self, Request as ExplainRequest};
use ratelimit::config::Config;
use ratelimit::key::PeerAddr;
use ratelimit::ManualClock;
use tower::ServiceExt;

async fn plain() -> &'static str {
    "plain"
}

async fn app(toml: &str) -> axum::routing::RouterIntoService<Body> {
    let rl = RateLimit::builder(Config::from_toml_str(toml).unwrap())
        .routes_in(module_path!())
        .clock(ManualClock::new())
        .build()
        .await
        .unwrap();
    Router::new().route("/k", get(plain)).layer(rl.layer()).into_service()
}

async fn send(app: &axum::routing::RouterIntoService<Body>, headers: &[(&str, &str)]) -> Response<Body> {
    let mut b = Request::builder().uri("/k");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut r = b.body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr("192.0.2.9:4000".parse().unwrap()));
    app.clone().oneshot(r).await.unwrap()
}

fn explain(toml: &str, header_lines: &[&str]) -> String {
    let config = Config::from_toml_str(toml).unwrap();
    let mut req = ExplainRequest::new(http::Method::GET, "/k").with_peer("192.0.2.9".parse::<IpAddr>().unwrap());
    for line in header_lines {
        req = req.with_header_line(line).unwrap();
    }
    check::explain(&config, &req).to_string()
}

const HEADER_RULE: &str = r#"
[profiles.standard]
rate = "1/min"
burst = 1

[[rules]]
name = "keyed"
path = "/k"
key = "header:x-api-key"
resolve = ["default"]
"#;

/// A header sent twice, or empty: the runtime (`HeaderBudget::key`) keys
/// the request by its address, and `explain` says so.
#[tokio::test]
async fn explain_reads_a_duplicate_or_empty_header_key_as_the_runtime_does() {
    for sent in [vec![("x-api-key", "a"), ("x-api-key", "b")], vec![("x-api-key", "")]] {
        let lines: Vec<String> = sent.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let text = explain(HEADER_RULE, &lines);
        assert!(
            text.contains("key: header x-api-key: absent, empty or sent more than once, so the key falls back to"),
            "explain: {text}"
        );

        let app = app(HEADER_RULE).await;
        // The request explain describes: 200, in SOME bucket.
        assert_eq!(send(&app, &sent).await.status(), StatusCode::OK);
        // The same address without any header: if the first request had been
        // keyed by its header value, this one would have a fresh bucket (200).
        // It is 429: the first request spent the ADDRESS's bucket.
        assert_eq!(
            send(&app, &[]).await.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "runtime keyed {sent:?} by address, explain said by header"
        );
    }
}

const HMAC_VAR: &str = "RL_REVIEW_HMAC_SECRET";
const HMAC: &str = "review-hmac-secret-of-reasonable-length";

const JWT_RULE: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "1/min"
burst = 1

[profiles.premium]
rate = "600/min"
burst = 100

[jwt]
tier_claim = "ratelimit_tier"
max_rate = "6000/min"
max_burst = 100
hmac_secret_env = "RL_REVIEW_HMAC_SECRET"
algorithm = "HS256"

[[rules]]
name = "me"
path = "/k"
key = "jwt_claim:sub"
resolve = ["jwt", "default"]
"#;

/// Two Authorization headers: the runtime (`jwt::bearer_token`) takes no
/// token from them, so even a token that verifies is anonymous; `explain`
/// reads them the same way.
#[tokio::test]
async fn explain_takes_no_token_from_two_authorization_headers_as_the_runtime() {
    std::env::set_var(HMAC_VAR, HMAC);
    let token = encode(
        &Header::new(Algorithm::HS256),
        &serde_json::json!({"sub": "alice", "ratelimit_tier": "premium", "exp": get_current_timestamp() + 600}),
        &EncodingKey::from_secret(HMAC.as_bytes()).unwrap(),
    )
    .unwrap();
    let bearer = format!("Bearer {token}");
    let lines = [format!("authorization: {bearer}"), format!("authorization: {bearer}")];
    let text = explain(JWT_RULE, &[&lines[0], &lines[1]]);
    assert!(!text.contains("profile premium"), "explain: {text}");
    assert!(text.contains("profile standard"), "explain: {text}");

    let rl = RateLimit::builder(Config::from_toml_str(JWT_RULE).unwrap())
        .routes_in(module_path!())
        .clock(ManualClock::new())
        .build()
        .await
        .unwrap();
    let app = Router::new().route("/k", get(plain)).layer(rl.layer()).into_service();
    let twice = [("authorization", bearer.as_str()), ("authorization", bearer.as_str())];
    // One header: the token verifies, premium (burst 100): two in a row pass.
    let once = [("authorization", bearer.as_str())];
    assert_eq!(send(&app, &once).await.status(), StatusCode::OK);
    assert_eq!(send(&app, &once).await.status(), StatusCode::OK);
    // Twice: anonymous, standard burst 1 by address: the second is refused,
    // although explain promised premium for this (valid) token.
    assert_eq!(send(&app, &twice).await.status(), StatusCode::OK);
    assert_eq!(send(&app, &twice).await.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// A fleet secret that is not UTF-8 (24 bytes of /dev/urandom, say): the
/// checker and startup both take its bytes.
#[cfg(unix)]
#[tokio::test]
async fn a_non_utf8_fleet_secret_is_accepted_by_the_checker_and_by_startup() {
    use std::os::unix::ffi::OsStrExt;
    let var = "RL_REVIEW_FLEET_SECRET";
    std::env::set_var(var, std::ffi::OsStr::from_bytes(&[0xff; 24]));
    let toml = format!(
        "[profiles.a]\nrate = \"10/s\"\n[global]\nredis_url = \"redis://127.0.0.1:1\"\nkey_secret_env = \"{var}\"\n"
    );
    let report = check::check_toml_str(&toml, "fleet.toml");
    assert!(report.is_ok(), "checker: {:?}", report.errors());
    let started = RateLimit::builder(Config::from_toml_str(&toml).unwrap())
        .routes_in(module_path!())
        .build()
        .await;
    assert!(started.is_ok(), "startup: {:?}", started.err());
}

/// A verification built in code with `JwtVerification::new` for an HMAC
/// secret needs `with_algorithm` (as the file's `algorithm` is required
/// beside `hmac_secret_env`): without it, the checker and startup refuse it
/// alike.
#[tokio::test]
async fn an_hmac_verification_built_in_code_needs_an_algorithm() {
    use ratelimit::config::{JwtKeySource, JwtLimits, JwtVerification};
    std::env::set_var(HMAC_VAR, HMAC);
    let mut config = Config::from_toml_str("[profiles.a]\nrate = \"10/s\"\n").unwrap();
    config.jwt = Some(
        JwtLimits::new("600/min".parse().unwrap(), 10)
            .with_verification(JwtVerification::new(JwtKeySource::HmacSecretEnv(HMAC_VAR.to_owned()))),
    );
    let problems = config.check_startup();
    assert!(
        problems.iter().any(|p| p
            .message
            .contains("no algorithm: an HMAC secret or a PEM key needs one named")),
        "{problems:?}"
    );
    let err = RateLimit::builder(config)
        .routes_in(module_path!())
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no algorithm"), "{err}");
}

/// A URL with credentials is refused where it is read (they would not be
/// sent, and every error and log line naming the URL would print them).
#[test]
fn urls_with_credentials_are_refused_at_load() {
    for (section, field) in [
        (
            "[service]\nurl = \"https://svc:hunter2@limits.internal/v1\"\nid_secret_env = \"X\"\n",
            "service.url",
        ),
        (
            "[jwt]\nmax_rate = \"10/s\"\nmax_burst = 1\njwks_url = \"http://u:p@idp.internal/jwks\"\n",
            "jwt.jwks_url",
        ),
    ] {
        let err = Config::from_toml_str(&format!("[profiles.a]\nrate = \"10/s\"\n{section}")).unwrap_err();
        assert_eq!(err.field(), Some(field), "{err}");
        assert!(err.to_string().contains("a URL with credentials"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
    // `@` in the path is not a credential.
    assert!(Config::from_toml_str(
        "[profiles.a]\nrate = \"10/s\"\n[service]\nurl = \"https://limits.internal/v1/@team\"\nid_secret_env = \"X\"\n"
    )
    .is_ok());
}

/// A stack: every request is held by "all" (burst 5), and `/k` also by
/// "k" (burst 2); HEAD is a probe.
const STACKED: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "1/min"
burst = 5

[profiles.tight]
rate = "1/min"
burst = 2

[responses]
probe_methods = ["HEAD"]

[[rules]]
name = "all"
path = "/{*rest}"
key = "ip"
resolve = ["default"]
stack = true

[[rules]]
name = "k"
path = "/k"
key = "ip"
resolve = ["profile:tight", "default"]
"#;

/// What `explain`'s text promises for `method /k`: per rule it lists, the
/// burst, and the units one such request takes from it (none for a probe).
fn promised(method: http::Method) -> (String, Vec<(u64, u64)>) {
    let config = Config::from_toml_str(STACKED).unwrap();
    let req = ExplainRequest::new(method, "/k").with_peer("192.0.2.9".parse::<IpAddr>().unwrap());
    let text = check::explain(&config, &req).to_string();
    let number = |line: &str, after: &str| -> u64 {
        let rest = &line[line.find(after).unwrap_or_else(|| panic!("{after:?} in {line}")) + after.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let rules = text
        .lines()
        .filter(|l| l.starts_with("would apply:"))
        .map(|l| {
            let charged = if l.contains("never charged") {
                0
            } else {
                number(l, "cost ")
            };
            (number(l, "burst "), charged)
        })
        .collect();
    (text, rules)
}

async fn send_as(app: &axum::routing::RouterIntoService<Body>, method: http::Method) -> StatusCode {
    let mut r = Request::builder().method(method).uri("/k").body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr("192.0.2.9:4000".parse().unwrap()));
    app.clone().oneshot(r).await.unwrap().status()
}

/// `explain` showed only the first matching rule, although the runtime
/// also applies every rule stacked under it: it promised the first rule's
/// burst of 5 where the runtime admits 2.
#[tokio::test]
async fn explain_shows_the_rules_stacked_under_the_first_match_as_the_runtime_applies_them() {
    let (text, rules) = promised(http::Method::GET);
    // Back to back from idle: each rule's burst over its cost, the least.
    let promised = rules.iter().map(|(burst, cost)| burst / cost).min().unwrap();
    let app = app(STACKED).await;
    let mut admitted = 0;
    while send_as(&app, http::Method::GET).await == StatusCode::OK {
        admitted += 1;
        assert!(admitted <= 10, "no limit");
    }
    assert_eq!(
        admitted, promised,
        "explain promised {promised}, the runtime admitted {admitted}:\n{text}"
    );
    // The same through the API: both rules, in the runtime's order.
    let config = Config::from_toml_str(STACKED).unwrap();
    let e = check::explain(&config, &ExplainRequest::new(http::Method::GET, "/k"));
    let rules: Vec<(&str, u32, bool)> = e
        .rules()
        .iter()
        .map(|r| (r.name(), r.anonymous().quota.burst(), r.anonymous().probe))
        .collect();
    assert_eq!(rules, [("all", 5, false), ("k", 2, false)]);
    assert_eq!(e.rule(), Some("all"));
    // A path only the first rule matches: that rule alone.
    let e = check::explain(&config, &ExplainRequest::new(http::Method::GET, "/other"));
    assert_eq!(e.rules().len(), 1);
}

/// A probe method is answered by the limiter and charges nothing; `explain`
/// reported it charged at the rule's cost.
#[tokio::test]
async fn explain_says_a_probe_is_not_charged_as_the_runtime_does() {
    let (text, rules) = promised(http::Method::HEAD);
    let app = app(STACKED).await;
    for _ in 0..5 {
        // The probe: answered by the limiter itself.
        assert_eq!(send_as(&app, http::Method::HEAD).await, StatusCode::NO_CONTENT);
    }
    // What the five probes left, by explain's account.
    let (_, get) = promised(http::Method::GET);
    let left = rules
        .iter()
        .zip(&get)
        .map(|((burst, charged), (_, cost))| burst.saturating_sub(5 * charged) / cost)
        .min()
        .unwrap();
    let mut admitted = 0;
    while send_as(&app, http::Method::GET).await == StatusCode::OK {
        admitted += 1;
        assert!(admitted <= 10, "no limit");
    }
    assert_eq!(
        admitted, left,
        "explain promised {left} after five probes, the runtime admitted {admitted}:\n{text}"
    );
    let config = Config::from_toml_str(STACKED).unwrap();
    let e = check::explain(&config, &ExplainRequest::new(http::Method::HEAD, "/k"));
    assert!(e.rules().iter().all(|r| r.anonymous().probe), "{e}");
    // OPTIONS is not a probe here: charged as any request.
    let e = check::explain(&config, &ExplainRequest::new(http::Method::OPTIONS, "/k"));
    assert!(e.rules().iter().all(|r| !r.anonymous().probe), "{e}");
    assert_eq!(
        send_as(&app, http::Method::OPTIONS).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}
