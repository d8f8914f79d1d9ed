//! `explain` against the request path, on random configurations: profiles,
//! a `[jwt]` section with and without numbers, `[[rules]]` whose chains mix
//! `jwt`, `profile(..)` and `default` in any order, `[routes]` overrides of
//! cost, shadow and profile. Each request (a token minted by
//! `jsonwebtoken`, with a tier, numbers, a forged signature, or none) is
//! explained, then sent through a real router with the layer from a fresh
//! address; the response's headers, read by an RFC 9651 parser, must carry
//! the profile, burst and remaining that explain promised.

use std::net::IpAddr;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};
use ratelimit::axum::RateLimit;
use ratelimit::config::check::{self, Applied, Request as ExplainRequest};
use ratelimit::config::Config;
use ratelimit::key::PeerAddr;
use ratelimit::ManualClock;
use tower::ServiceExt;

const SECRET_VAR: &str = "RL_EXPLAIN_AGREES_SECRET";
const SECRET: &str = "explain agrees: a test secret of 32 bytes";

/// splitmix64: a seeded sequence, so a failure names its case.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What a case sends: a token, if any, and whether it verifies.
enum Token {
    None,
    Tier(String),
    Numbers { rpm: u32, burst: u32 },
    Forged,
}

struct Case {
    toml: String,
    path: &'static str,
    token: Token,
}

fn case(rng: &mut Rng) -> Case {
    let profiles = 1 + rng.below(4) as usize;
    let names: Vec<String> = (0..profiles).map(|i| format!("p{i}")).collect();
    let mut toml = format!(
        "default_profile = \"p{}\"\n[headers]\nstyle = \"both\"\n",
        rng.below(profiles as u64)
    );
    for name in &names {
        toml += &format!(
            "[profiles.{name}]\nrate = \"{}/min\"\nburst = {}\n",
            1 + rng.below(1000),
            1 + rng.below(20)
        );
    }
    let jwt = rng.chance(70);
    let numbers = jwt && rng.chance(50);
    if jwt {
        toml += &format!("[jwt]\ntier_claim = \"tier\"\nhmac_secret_env = \"{SECRET_VAR}\"\nalgorithm = \"HS256\"\n");
        if numbers {
            toml += &format!("max_rate = \"6000/min\"\nmax_burst = {}\n", 1 + rng.below(50));
        }
    }
    let rules = 1 + rng.below(3);
    for i in 0..rules {
        let mut steps: Vec<String> = Vec::new();
        if jwt && rng.chance(60) {
            steps.push("\"jwt\"".into());
        }
        if rng.chance(50) {
            // Before or after the `jwt` step.
            let at = rng.below(steps.len() as u64 + 1) as usize;
            steps.insert(
                at,
                format!("\"profile:{}\"", names[rng.below(profiles as u64) as usize]),
            );
        }
        steps.push("\"default\"".into());
        let path = if rng.chance(50) { "/a" } else { "/{*rest}" };
        toml += &format!(
            "[[rules]]\nname = \"r{i}\"\npath = \"{path}\"\nkey = \"ip\"\nresolve = [{}]\ncost = {}\nshadow = {}\n",
            steps.join(", "),
            1 + rng.below(3),
            rng.chance(20)
        );
    }
    for i in 0..rules {
        if rng.chance(35) {
            toml += &format!("[routes.r{i}]\n");
            if rng.chance(50) {
                toml += &format!("cost = {}\n", 1 + rng.below(3));
            }
            if rng.chance(30) {
                toml += &format!("shadow = {}\n", rng.chance(50));
            }
            if rng.chance(50) {
                toml += &format!("profile = \"{}\"\n", names[rng.below(profiles as u64) as usize]);
            }
        }
    }
    let token = match rng.below(5) {
        0 => Token::None,
        1 => Token::Forged,
        2 => Token::Numbers {
            rpm: 1 + rng.below(10_000) as u32,
            burst: 1 + rng.below(60) as u32,
        },
        // A tier the configuration may not have.
        _ => Token::Tier(format!("p{}", rng.below(5))),
    };
    Case {
        toml,
        path: if rng.chance(50) { "/a" } else { "/b" },
        token,
    }
}

fn bearer(token: &Token) -> Option<String> {
    let exp = get_current_timestamp() + 600;
    let (claims, key) = match token {
        Token::None => return None,
        Token::Tier(tier) => (serde_json::json!({"sub": "u", "tier": tier, "exp": exp}), SECRET),
        Token::Numbers { rpm, burst } => (
            serde_json::json!({"sub": "u", "ratelimit_rpm": rpm, "ratelimit_burst": burst, "exp": exp}),
            SECRET,
        ),
        Token::Forged => (
            serde_json::json!({"sub": "u", "tier": "p0", "exp": exp}),
            "another key entirely, not the issuer's",
        ),
    };
    let token = encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(key.as_bytes()).unwrap(),
    )
    .unwrap();
    Some(format!("Bearer {token}"))
}

async fn plain() -> &'static str {
    "plain"
}

/// The response's policy (name and `q`) and the draft-06 limit and
/// remaining, parsed by `sfv`.
fn reported(response: &http::Response<Body>) -> Option<(String, i64, u64, u64)> {
    let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
    let policy = header("ratelimit-policy")?;
    let list = sfv::Parser::new(&policy).parse::<sfv::List>().unwrap();
    let sfv::ListEntry::Item(item) = &list[0] else {
        panic!("policy {policy:?}")
    };
    let name = item.bare_item.as_string().unwrap().as_str().to_owned();
    let q = item
        .params
        .get("q")
        .and_then(|q| q.as_integer())
        .map(i64::from)
        .unwrap();
    let limit = header("ratelimit-limit")?.parse().unwrap();
    let remaining = header("ratelimit-remaining")?.parse().unwrap();
    Some((name, q, limit, remaining))
}

#[tokio::test]
async fn explain_says_what_the_request_path_does_on_random_configurations() {
    std::env::set_var(SECRET_VAR, SECRET);
    let mut rng = Rng(0x5eed_0046);
    let (mut compared, mut refused_configs) = (0, 0);
    for n in 0..160 {
        let case = case(&mut rng);
        let Ok(config) = Config::from_toml_str(&case.toml) else {
            // A cost above the burst its chain settles on: refused at load.
            refused_configs += 1;
            continue;
        };
        let bearer = bearer(&case.token);
        let peer: IpAddr = format!("198.51.100.{}", n % 250).parse().unwrap();
        let mut explain_request = ExplainRequest::new(http::Method::GET, case.path).with_peer(peer);
        if let Some(b) = &bearer {
            explain_request = explain_request
                .with_header_line(&format!("authorization: {b}"))
                .unwrap();
        }
        let explained = check::explain(&config, &explain_request);

        let rl = match RateLimit::builder(config)
            .routes_in(module_path!())
            .clock(ManualClock::new())
            .build()
            .await
        {
            Ok(rl) => rl,
            // A `[routes]` profile its rule never reaches (a `profile:..`
            // step answers first): refused at startup.
            Err(e) if e.to_string().contains("is never used") => {
                refused_configs += 1;
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        let app = Router::new()
            .route("/{*rest}", get(plain))
            .layer(rl.layer())
            .into_service();
        let mut request = Request::get(case.path);
        if let Some(b) = &bearer {
            request = request.header("authorization", b);
        }
        let mut request = request.body(Body::empty()).unwrap();
        request.extensions_mut().insert(PeerAddr((peer, 4000).into()));
        let response = app.oneshot(request).await.unwrap();

        let context = format!("case {n}:\n{}\ntoken: {bearer:?}\nexplain:\n{explained}", case.toml);
        let Some(rule) = explained.rules().first() else {
            assert_eq!(response.status(), StatusCode::OK, "{context}");
            assert!(reported(&response).is_none(), "{context}");
            continue;
        };
        let verifies = matches!(case.token, Token::Tier(_) | Token::Numbers { .. });
        let applied: &Applied = match rule.if_verified() {
            Some(v) if verifies => v,
            _ => rule.anonymous(),
        };
        let burst = applied.quota.burst();
        let policy = format!("@{}/{}", rule.name(), applied.profile.as_deref().unwrap_or("custom"));
        if applied.cost > burst {
            // Never admitted: refused, or served on a shadow rule.
            let want = if applied.shadow {
                StatusCode::OK
            } else {
                StatusCode::TOO_MANY_REQUESTS
            };
            assert_eq!(response.status(), want, "{context}");
        } else {
            assert_eq!(response.status(), StatusCode::OK, "{context}");
            let (name, q, limit, remaining) = reported(&response).expect("rate-limit headers");
            assert_eq!(name, policy, "{context}");
            assert_eq!((q, limit), (i64::from(burst), u64::from(burst)), "{context}");
            assert_eq!(remaining, u64::from(burst - applied.cost), "{context}");
        }
        compared += 1;
    }
    assert!(
        compared >= 100,
        "only {compared} cases compared ({refused_configs} configurations refused)"
    );
}
