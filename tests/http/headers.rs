//! The structured rate-limit fields of draft-ietf-httpapi-ratelimit-headers-10
//! through real axum routers under a manual clock: every `RateLimit-Policy`
//! and `RateLimit` field is parsed as an RFC 9651 List (with `sfv`), `t` is
//! the time until the next unit, `Retry-After` is never earlier than `t`, a
//! rule and an attribute that both limit a request are both listed, and a
//! 429's body is the draft's `quota-exceeded` problem with
//! `violated-policies`.

use crate::support::sf;

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::key::PeerAddr;
use ratelimit::{rate_limit, ManualClock};
use serde_json::Value;
use sf::{limit_triples, limits, policies, policy_triples};
use tower::ServiceExt;

/// These tests serve routes on purpose beyond what each configuration can
/// (a cost above every burst, a profile some configurations lack), to see
/// what a request on them gets: startup checks no attribute route here.
const UNCHECKED: &str = "none";

/// The style under test (one place to change it).
const STYLE: &str = "structured";

const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// `standard`: one a second, 3 at once. `slow`: one every 10 s, 5 at once.
fn config(extra: &str) -> String {
    format!(
        r#"
default_profile = "standard"

[profiles.standard]
rate = "60/min"
burst = 3

[profiles.premium]
rate = "600/min"
burst = 10

[profiles.slow]
rate = "6/min"
burst = 5

[headers]
style = "{STYLE}"
{extra}
"#
    )
}

#[rate_limit(key = ip, resolve = [default], name = "public", layer)]
async fn public() -> &'static str {
    "public"
}

/// What a limited handler's future carries across its await, and axum
/// moves several times: the admission. Within 128 bytes a move is a few
/// register copies; the outcomes it held before (200 bytes each) were a
/// `memcpy` call per move, most of what the attribute added to a request.
#[test]
fn an_admission_moves_in_registers() {
    use ratelimit::__private::{Admit, InState, ViaLayer};
    let sizes = [
        std::mem::size_of::<Admit<__ratelimit_rule_public, ViaLayer>>(),
        std::mem::size_of::<Admit<__ratelimit_rule_public, InState<RateLimit>>>(),
    ];
    assert!(sizes.iter().all(|&n| n <= 128), "{sizes:?} bytes");
}

#[rate_limit(key = ip, resolve = [profile("slow"), default], name = "reports", layer)]
async fn reports() -> &'static str {
    "reports"
}

/// A cost above the standard profile's burst of 3.
#[rate_limit(key = ip, resolve = [default], name = "impossible", cost = 6, layer)]
async fn impossible() -> &'static str {
    "impossible"
}

async fn plain() -> &'static str {
    "plain"
}

fn router() -> Router {
    Router::new()
        .route("/public", get(public))
        .route("/reports", get(reports))
        .route("/impossible", get(impossible))
        .route("/plain", get(plain))
}

async fn app(toml: &str, clock: &ManualClock) -> axum::routing::RouterIntoService<Body> {
    let rl = RateLimit::builder(Config::from_toml_str(toml).unwrap())
        .routes_in(UNCHECKED)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    router().layer(rl.layer()).into_service()
}

async fn get_from(app: &axum::routing::RouterIntoService<Body>, path: &str, peer: &str) -> Response<Body> {
    let mut r = Request::builder().uri(path).body(Body::empty()).unwrap();
    r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
    app.clone().oneshot(r).await.unwrap()
}

fn header<B>(r: &Response<B>, name: &str) -> Option<String> {
    r.headers().get(name).map(|v| v.to_str().unwrap().to_owned())
}

fn retry_after<B>(r: &Response<B>) -> i64 {
    header(r, "retry-after")
        .expect("a 429 has Retry-After")
        .parse()
        .unwrap()
}

async fn body(r: Response<Body>) -> Value {
    serde_json::from_slice(&r.into_body().collect().await.unwrap().to_bytes()).unwrap()
}

fn s(name: &str) -> String {
    name.to_owned()
}

/// Every policy is listed in both fields, by the same names, in the same
/// order.
fn assert_fields_match<B>(r: &Response<B>) {
    let p: Vec<String> = policies(r).into_iter().map(|m| m.name).collect();
    let l: Vec<String> = limits(r).into_iter().map(|m| m.name).collect();
    assert_eq!(p, l, "RateLimit-Policy and RateLimit name the same policies");
}

/// Draft-10: "the Retry-After field value SHOULD NOT reference a point in
/// time earlier than the reset parameter", for every listed limit that has
/// nothing left (one with room does not hold the client back).
fn assert_retry_after_not_before_t<B>(r: &Response<B>) {
    let retry = retry_after(r);
    for (name, remaining, t) in limit_triples(r) {
        if remaining == 0 {
            let t = t.expect("an empty bucket refills: t is sent");
            assert!(retry >= t, "Retry-After {retry} is earlier than {name}'s t={t}");
        }
    }
}

#[tokio::test]
async fn allowed_responses_carry_the_policy_and_the_seconds_to_the_next_unit() {
    let clock = ManualClock::new();
    let app = app(&config(""), &clock).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = get_from(&app, "/public", "192.0.2.1:1").await;
        assert_eq!(r.status(), 200);
        assert_eq!(policy_triples(&r), vec![(s("public/standard"), 3, Some(3))]);
        assert_fields_match(&r);
        // Only the structured fields under "structured".
        assert_eq!(header(&r, "ratelimit-limit"), None);
        assert_eq!(header(&r, "ratelimit-remaining"), None);
        seen.extend(limit_triples(&r));
    }
    // One unit comes back each second, however many are used: t stays 1
    // while the time to a full bucket grows (1, 2, 3 s).
    assert_eq!(
        seen,
        vec![
            (s("public/standard"), 2, Some(1)),
            (s("public/standard"), 1, Some(1)),
            (s("public/standard"), 0, Some(1)),
        ]
    );

    // One unit every 10 s, 5 at once: q=5 per w=50 s.
    let r = get_from(&app, "/reports", "192.0.2.1:1").await;
    assert_eq!(policy_triples(&r), vec![(s("reports/slow"), 5, Some(50))]);
    assert_eq!(limit_triples(&r), vec![(s("reports/slow"), 4, Some(10))]);
    let r = get_from(&app, "/reports", "192.0.2.1:1").await;
    assert_eq!(limit_triples(&r), vec![(s("reports/slow"), 3, Some(10))]);
    // 4 s later the next unit is 6 s away (rounded up from 6.0).
    clock.advance(Duration::from_secs(4));
    let r = get_from(&app, "/reports", "192.0.2.1:1").await;
    assert_eq!(limit_triples(&r), vec![(s("reports/slow"), 2, Some(6))]);
}

#[tokio::test]
async fn a_429_has_retry_after_no_earlier_than_t_and_a_quota_exceeded_body() {
    let clock = ManualClock::new();
    let app = app(&config(""), &clock).await;
    for _ in 0..5 {
        assert_eq!(get_from(&app, "/reports", "192.0.2.2:1").await.status(), 200);
    }
    let r = get_from(&app, "/reports", "192.0.2.2:1").await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limit_triples(&r), vec![(s("reports/slow"), 0, Some(10))]);
    assert_eq!(policy_triples(&r), vec![(s("reports/slow"), 5, Some(50))]);
    assert_eq!(retry_after(&r), 10);
    assert_retry_after_not_before_t(&r);
    assert_eq!(header(&r, "content-type").as_deref(), Some("application/problem+json"));
    let b = body(r).await;
    assert_eq!(b["type"], QUOTA_EXCEEDED);
    assert_eq!(b["title"], "Quota Exceeded");
    assert_eq!(b["status"], 429);
    assert_eq!(b["violated-policies"], serde_json::json!(["reports/slow"]));
    assert_eq!(b["retry_after"], 10);
    assert_eq!(b["detail"], "Rate limit exceeded; retry in 10 s.");

    // 4 s later: 6 s to the next unit, and Retry-After says the same.
    clock.advance(Duration::from_secs(4));
    let r = get_from(&app, "/reports", "192.0.2.2:1").await;
    assert_eq!(r.status(), 429);
    assert_eq!(limit_triples(&r), vec![(s("reports/slow"), 0, Some(6))]);
    assert_eq!(retry_after(&r), 6);
    assert_retry_after_not_before_t(&r);
}

#[tokio::test]
async fn a_rule_and_an_attribute_both_list_their_policy() {
    let rule = r#"
[[rules]]
name = "outer"
path = "/{*any}"
key = "ip"
resolve = ["profile:premium", "default"]
"#;
    let clock = ManualClock::new();
    let app = app(&config(rule), &clock).await;
    let r = get_from(&app, "/public", "192.0.2.3:1").await;
    assert_eq!(r.status(), 200);
    assert_fields_match(&r);
    assert_eq!(
        policy_triples(&r),
        vec![(s("public/standard"), 3, Some(3)), (s("@outer/premium"), 10, Some(1))]
    );
    assert_eq!(
        limit_triples(&r),
        vec![(s("public/standard"), 2, Some(1)), (s("@outer/premium"), 9, Some(1))]
    );
    // A path only the rule covers lists the rule alone.
    let r = get_from(&app, "/plain", "192.0.2.3:1").await;
    assert_eq!(limit_triples(&r), vec![(s("@outer/premium"), 8, Some(1))]);
    assert_fields_match(&r);
}

#[tokio::test]
async fn a_rule_and_an_attribute_on_one_profile_have_distinct_names() {
    let rule = r#"
[[rules]]
name = "outer"
path = "/{*any}"
key = "ip"
resolve = ["default"]
"#;
    let clock = ManualClock::new();
    let app = app(&config(rule), &clock).await;
    let r = get_from(&app, "/public", "192.0.2.4:1").await;
    assert_eq!(
        limit_triples(&r),
        vec![(s("public/standard"), 2, Some(1)), (s("@outer/standard"), 2, Some(1))]
    );
    assert_fields_match(&r);
}

#[tokio::test]
async fn a_refusal_names_the_policy_that_refused_and_waits_for_every_empty_one() {
    // The rule: 4 at once, one every 10 s. The attribute: 3 at once, one a second.
    let rule = r#"
[profiles.tight]
rate = "6/min"
burst = 4

[[rules]]
name = "outer"
path = "/{*any}"
key = "ip"
resolve = ["profile:tight", "default"]
"#;
    let clock = ManualClock::new();
    let app = app(&config(rule), &clock).await;
    for _ in 0..3 {
        assert_eq!(get_from(&app, "/public", "192.0.2.5:1").await.status(), 200);
    }
    // The rule admits its last unit; the attribute refuses. Both are listed,
    // only the attribute violated, and Retry-After waits for the rule's
    // next unit too (10 s), not just the attribute's (1 s).
    let r = get_from(&app, "/public", "192.0.2.5:1").await;
    assert_eq!(r.status(), 429);
    assert_fields_match(&r);
    assert_eq!(
        limit_triples(&r),
        vec![(s("public/standard"), 0, Some(1)), (s("@outer/tight"), 0, Some(10))]
    );
    assert_eq!(retry_after(&r), 10);
    assert_retry_after_not_before_t(&r);
    let b = body(r).await;
    assert_eq!(b["violated-policies"], serde_json::json!(["public/standard"]));
    assert_eq!(b["type"], QUOTA_EXCEEDED);

    // Now the rule refuses at the layer: the handler (and its attribute)
    // never runs, so only the rule is listed.
    clock.advance(Duration::from_secs(1));
    let r = get_from(&app, "/public", "192.0.2.5:1").await;
    assert_eq!(r.status(), 429);
    assert_eq!(limit_triples(&r), vec![(s("@outer/tight"), 0, Some(9))]);
    assert_eq!(policy_triples(&r), vec![(s("@outer/tight"), 4, Some(40))]);
    assert_eq!(retry_after(&r), 9);
    assert_retry_after_not_before_t(&r);
    let b = body(r).await;
    assert_eq!(b["violated-policies"], serde_json::json!(["@outer/tight"]));
}

#[tokio::test]
async fn a_request_that_can_never_conform_reports_a_full_bucket_without_t() {
    let clock = ManualClock::new();
    let app = app(&config(""), &clock).await;
    let r = get_from(&app, "/impossible", "192.0.2.6:1").await;
    assert_eq!(r.status(), 429);
    // Nothing was used and nothing more is coming: r = q, and no t.
    assert_eq!(limit_triples(&r), vec![(s("impossible/standard"), 3, None)]);
    assert_eq!(retry_after(&r), 86_400);
    let b = body(r).await;
    assert_eq!(b["violated-policies"], serde_json::json!(["impossible/standard"]));
    assert_eq!(
        b["detail"],
        "This request costs more than the limit's burst, so it can never be admitted."
    );
}

#[tokio::test]
async fn both_sends_the_tightest_triple_and_every_policy() {
    let rule = r#"
[[rules]]
name = "outer"
path = "/{*any}"
key = "ip"
resolve = ["profile:premium", "default"]
"#;
    let toml = config(rule).replace(&format!("style = \"{STYLE}\""), "style = \"both\"");
    let clock = ManualClock::new();
    let app = app(&toml, &clock).await;
    let r = get_from(&app, "/public", "192.0.2.7:1").await;
    let triple = ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"].map(|h| header(&r, h));
    assert_eq!(
        triple,
        [Some(s("3")), Some(s("2")), Some(s("1"))],
        "the attribute's, the tighter"
    );
    assert_eq!(limits(&r).len(), 2);
    assert_fields_match(&r);
}

#[tokio::test]
async fn policy_names_are_strings_for_any_profile_name() {
    // A profile name with a quote, a backslash, a slash, a space and
    // non-ASCII letters.
    let toml = format!(
        r#"
default_profile = "pr\u00e9 \"mium\\/x"

[profiles."pr\u00e9 \"mium\\/x"]
rate = "60/min"
burst = 1

[headers]
style = "{STYLE}"
"#
    );
    let clock = ManualClock::new();
    let app = app(&toml, &clock).await;
    let r = get_from(&app, "/public", "192.0.2.8:1").await;
    let name = s("public/pr%C3%A9 %22mium%5C%2Fx");
    assert_eq!(policy_triples(&r), vec![(name.clone(), 1, Some(1))]);
    assert_eq!(limit_triples(&r), vec![(name.clone(), 0, Some(1))]);
    let r = get_from(&app, "/public", "192.0.2.8:1").await;
    assert_eq!(r.status(), 429);
    assert_eq!(limit_triples(&r), vec![(name.clone(), 0, Some(1))]);
    let b = body(r).await;
    assert_eq!(b["violated-policies"], serde_json::json!([name]));
}

#[tokio::test]
async fn the_problem_type_and_title_stay_configurable() {
    let extra = r#"
[responses]
problem_type = "https://api.example/problems/rate-limited"
problem_title = "Slow down"
"#;
    let clock = ManualClock::new();
    let app = app(&config(extra), &clock).await;
    for _ in 0..3 {
        get_from(&app, "/public", "192.0.2.9:1").await;
    }
    let r = get_from(&app, "/public", "192.0.2.9:1").await;
    assert_eq!(r.status(), 429);
    let b = body(r).await;
    assert_eq!(b["type"], "https://api.example/problems/rate-limited");
    assert_eq!(b["title"], "Slow down");
    assert_eq!(b["violated-policies"], serde_json::json!(["public/standard"]));
}

// ---------------------------------------------------------------------------
// Review (h-headers): attacks on the structured fields and Retry-After.
// ---------------------------------------------------------------------------

/// An upstream behind the layer that sends an earlier draft's `RateLimit`
/// (draft-07/08: a Dictionary, `limit=10, remaining=5, reset=3`). The layer
/// joins it with its own member into one field line; the result must still
/// let a client read the layer's own member.
#[tokio::test]
async fn review_an_upstream_non_list_ratelimit_does_not_hide_the_layers_member() {
    async fn upstream() -> impl axum::response::IntoResponse {
        ([("ratelimit", "limit=10, remaining=5, reset=3")], "upstream")
    }
    let rule = r#"
[[rules]]
name = "outer"
path = "/{*any}"
key = "ip"
resolve = ["default"]
"#;
    let clock = ManualClock::new();
    let rl = RateLimit::builder(Config::from_toml_str(&config(rule)).unwrap())
        .routes_in(UNCHECKED)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/upstream", get(upstream))
        .layer(rl.layer())
        .into_service::<Body>();
    let r = get_from(&app, "/upstream", "192.0.2.40:1").await;
    assert_eq!(r.status(), 200);
    let value = header(&r, "ratelimit").unwrap();
    // What a client does: parse the field as an RFC 9651 List.
    let parsed = sfv::Parser::new(&value).parse::<sfv::List>();
    assert!(
        parsed.is_ok(),
        "the layer's member is unreadable: RateLimit = {value:?} is not a List ({:?})",
        parsed.err()
    );
}

/// A refusal whose real wait is longer than a day: `Retry-After` is capped
/// at 86400 s although the request cannot conform before 60 h; a client that
/// honours it is refused again.
#[tokio::test]
async fn review_retry_after_is_not_earlier_than_the_real_wait_beyond_a_day() {
    let toml = r#"
default_profile = "hourly"

[profiles.hourly]
rate = "1/h"
burst = 60

[headers]
style = "structured"

[[rules]]
name = "bulk"
path = "/plain"
key = "ip"
cost = 60
resolve = ["default"]
"#;
    let clock = ManualClock::new();
    let app = app(toml, &clock).await;
    assert_eq!(get_from(&app, "/plain", "192.0.2.41:1").await.status(), 200);
    let r = get_from(&app, "/plain", "192.0.2.41:1").await;
    assert_eq!(r.status(), 429);
    let retry = retry_after(&r);
    clock.advance(Duration::from_secs(retry as u64));
    let again = get_from(&app, "/plain", "192.0.2.41:1").await;
    assert_eq!(
        again.status(),
        200,
        "Retry-After was {retry} s, but the request still waits {:?} s",
        header(&again, "retry-after")
    );
}

/// The attribute refuses beneath a rule of cost 2 that has one unit left
/// (`r=1`): `Retry-After` is the attribute's 1 s and is not raised, as the
/// raise looks only at `r == 0`; but the rule cannot take cost 2 for another
/// 9 s, so a client that honours `Retry-After` is refused by the rule.
#[tokio::test]
async fn review_retry_after_waits_for_the_rules_own_cost() {
    let rule = r#"
[profiles.tight]
rate = "6/min"
burst = 9

[[rules]]
name = "outer"
path = "/{*any}"
key = "ip"
cost = 2
resolve = ["profile:tight", "default"]
"#;
    let clock = ManualClock::new();
    let app = app(&config(rule), &clock).await;
    for _ in 0..3 {
        assert_eq!(get_from(&app, "/public", "192.0.2.42:1").await.status(), 200);
    }
    let r = get_from(&app, "/public", "192.0.2.42:1").await;
    assert_eq!(r.status(), 429);
    let retry = retry_after(&r);
    let triples = limit_triples(&r);
    clock.advance(Duration::from_secs(retry as u64));
    let again = get_from(&app, "/public", "192.0.2.42:1").await;
    assert_eq!(
        again.status(),
        200,
        "Retry-After was {retry} s ({triples:?}), but then {:?} refused with Retry-After {:?}",
        limit_triples(&again),
        header(&again, "retry-after")
    );
}

/// When the layer raises a 429's `Retry-After` to the rule's `t`, the
/// problem body (built beneath, by the attribute) still says the old
/// number: `retry_after` and `detail` contradict the header.
#[tokio::test]
async fn review_a_raised_retry_after_is_also_the_bodys() {
    let rule = r#"
[profiles.tight]
rate = "6/min"
burst = 4

[[rules]]
name = "outer"
path = "/{*any}"
key = "ip"
resolve = ["profile:tight", "default"]
"#;
    let clock = ManualClock::new();
    let app = app(&config(rule), &clock).await;
    for _ in 0..3 {
        assert_eq!(get_from(&app, "/public", "192.0.2.43:1").await.status(), 200);
    }
    let r = get_from(&app, "/public", "192.0.2.43:1").await;
    assert_eq!(r.status(), 429);
    let retry = retry_after(&r);
    assert_eq!(retry, 10, "raised to the rule's t");
    let b = body(r).await;
    assert_eq!(b["retry_after"], serde_json::json!(retry), "body: {b}");
    assert!(
        b["detail"].as_str().unwrap().contains(&format!("retry in {retry} s")),
        "body: {b}"
    );
}

/// Review (h-headers): the fields stay valid Lists, and `Retry-After` no
/// earlier than `t`, at the extremes of the quota arithmetic (a burst of
/// u32::MAX at one a day, and at 4294967295 per nanosecond), with a cost of
/// the whole burst.
#[tokio::test]
async fn review_extreme_quotas_still_send_valid_fields() {
    for (rate, burst, cost) in [
        // The largest burst a day-long rate may have (about 146 years of
        // capacity), at its cost and at 1.
        ("1/d", 53_375u64, 53_375u64),
        ("1/d", 53_375, 1),
        ("4294967295/ns", 4_294_967_295, 4_294_967_295),
        ("1/d", 1, 1),
    ] {
        let toml = format!(
            r#"
default_profile = "huge"

[profiles.huge]
rate = "{rate}"
burst = {burst}

[headers]
style = "both"

[[rules]]
name = "x"
path = "/plain"
key = "ip"
cost = {cost}
resolve = ["default"]
"#
        );
        let clock = ManualClock::new();
        let app = app(&toml, &clock).await;
        for i in 0..3 {
            let r = get_from(&app, "/plain", "192.0.2.45:1").await;
            assert_fields_match(&r);
            let _ = policy_triples(&r);
            let _ = limit_triples(&r);
            if r.status() == 429 {
                assert_retry_after_not_before_t(&r);
            }
            eprintln!(
                "{rate} b={burst} c={cost} #{i}: {} {:?} {:?} ra={:?}",
                r.status(),
                header(&r, "ratelimit-policy"),
                header(&r, "ratelimit"),
                header(&r, "retry-after")
            );
        }
    }
}

/// Review (h-headers): a quota whose capacity (`T * burst`) is beyond u64
/// nanoseconds (584 years) is accepted at load, but a fresh client's first
/// request of more than `u64::MAX / T` units (213503 at one a day) is
/// refused as `RateLimited` ("retry in 86400 s", no `t`, `r=213503` on a
/// full bucket of 4294967295) and stays refused forever: the TAT cannot be
/// stored (gcra.rs, `new > MAX_TAT`). The load now refuses such a quota.
#[test]
fn review_a_quota_beyond_u64_nanoseconds_is_refused_at_startup() {
    // Such a bucket would refuse even a fresh client's first request
    // forever (its capacity does not fit the engine's nanoseconds).
    let toml = r#"
default_profile = "huge"

[profiles.huge]
rate = "1/d"
burst = 4294967295
"#;
    let err = ratelimit::config::Config::from_toml_str(toml).unwrap_err();
    assert_eq!(err.field(), Some("profiles.huge.burst"), "{err}");
    assert!(err.to_string().contains("years to refill"), "{err}");
}

/// Review (h-headers): a store-full refusal (`overflow = "refuse"`) sends
/// valid fields and a `Retry-After` no earlier than `t`. Passes.
#[tokio::test]
async fn review_a_store_full_refusal_sends_valid_fields() {
    let extra = r#"
[store]
max_keys = 1
overflow = "refuse"
new_keys_per_network = "off"
"#;
    let clock = ManualClock::new();
    let app = app(&config(extra), &clock).await;
    let mut refused = None;
    for i in 0..64 {
        let r = get_from(&app, "/reports", &format!("198.51.{}.{}:1", i / 200, i % 200 + 1)).await;
        if r.status() == 429 {
            refused = Some(r);
            break;
        }
    }
    let r = refused.expect("a full store refuses new clients");
    assert_fields_match(&r);
    assert_retry_after_not_before_t(&r);
    eprintln!(
        "{:?} {:?} {:?}",
        header(&r, "ratelimit"),
        header(&r, "retry-after"),
        header(&r, "ratelimit-policy")
    );
    let b = body(r).await;
    assert_eq!(b["violated-policies"], serde_json::json!(["reports/slow"]));
}

/// One burst at a time, a second apart: what `/once` allows.
#[rate_limit(key = ip, resolve = [profile("once"), default], name = "once", layer)]
async fn once() -> &'static str {
    "once"
}

/// Review (OuterWait): two `RateLimitLayer`s, one inside the other (a
/// global limit on the router, another on a nested part). Each inserts its
/// `OuterWait` with `Extensions::insert`, so the inner one's shorter wait
/// replaces the outer one's longer wait. The attribute's 429 body then says
/// the inner wait, while the outer layer raises the `Retry-After` header to
/// its own: header and body contradict (what
/// `review_a_raised_retry_after_is_also_the_bodys` guards for one layer).
#[tokio::test]
async fn review_nested_layers_keep_the_longest_outer_wait() {
    let outer_toml = config(
        r#"
[profiles.tight]
rate = "6/min"
burst = 2

[profiles.once]
rate = "60/min"
burst = 1

[[rules]]
name = "global"
path = "/{*any}"
key = "ip"
resolve = ["profile:tight", "default"]
"#,
    );
    let inner_toml = config(
        r#"
[profiles.once]
rate = "60/min"
burst = 1

[profiles.pair]
rate = "60/min"
burst = 2

[[rules]]
name = "nested"
path = "/{*any}"
key = "ip"
resolve = ["profile:pair", "default"]
"#,
    );
    let clock = ManualClock::new();
    let outer = RateLimit::builder(Config::from_toml_str(&outer_toml).unwrap())
        .routes_in(UNCHECKED)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let inner = RateLimit::builder(Config::from_toml_str(&inner_toml).unwrap())
        .routes_in(UNCHECKED)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/once", get(once))
        .layer(inner.layer())
        .layer(outer.layer())
        .into_service::<Body>();
    assert_eq!(get_from(&app, "/once", "192.0.2.60:1").await.status(), 200);
    // Second request: the global rule admits it with nothing left (10 s to
    // its next unit), the nested rule too (1 s), the attribute refuses.
    let r = get_from(&app, "/once", "192.0.2.60:1").await;
    assert_eq!(r.status(), 429);
    let retry = retry_after(&r);
    assert_eq!(retry, 10, "raised to the global rule's wait");
    let b = body(r).await;
    assert_eq!(b["retry_after"], serde_json::json!(retry), "body: {b}");
}

/// Review (OuterWait): an inner layer's own rule refuses beneath an outer
/// layer that admitted with nothing left. The inner layer's rejection is
/// built with `rejection` (no outer wait), so its body says 1 s while the
/// outer layer raises `Retry-After` to 10 s.
#[tokio::test]
async fn review_an_inner_layers_refusal_tells_the_outer_wait_in_its_body() {
    let outer_toml = config(
        r#"
[profiles.tight]
rate = "6/min"
burst = 2

[profiles.once]
rate = "60/min"
burst = 1

[[rules]]
name = "global"
path = "/{*any}"
key = "ip"
resolve = ["profile:tight", "default"]
"#,
    );
    let inner_toml = config(
        r#"
[profiles.once]
rate = "60/min"
burst = 1

[[rules]]
name = "nested"
path = "/{*any}"
key = "ip"
resolve = ["profile:once", "default"]
"#,
    );
    let clock = ManualClock::new();
    let outer = RateLimit::builder(Config::from_toml_str(&outer_toml).unwrap())
        .routes_in(UNCHECKED)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let inner = RateLimit::builder(Config::from_toml_str(&inner_toml).unwrap())
        .routes_in(UNCHECKED)
        .clock(clock.clone())
        .build()
        .await
        .unwrap();
    let app = Router::new()
        .route("/plain", get(plain))
        .layer(inner.layer())
        .layer(outer.layer())
        .into_service::<Body>();
    assert_eq!(get_from(&app, "/plain", "192.0.2.61:1").await.status(), 200);
    let r = get_from(&app, "/plain", "192.0.2.61:1").await;
    assert_eq!(r.status(), 429);
    let retry = retry_after(&r);
    assert_eq!(retry, 10, "raised to the global rule's wait");
    let b = body(r).await;
    assert_eq!(b["retry_after"], serde_json::json!(retry), "body: {b}");
}

/// Review (append_member): a `[[rules]]` entry named like a `#[rate_limit]`
/// route, on the same profile, gets the same policy name; the layer drops
/// the attribute's member as "an upstream member with this limit's name",
/// so the response lists one policy for two limits (and loses the
/// attribute's remaining count).
#[tokio::test]
async fn review_a_rule_named_like_an_attribute_does_not_hide_its_member() {
    let rule = r#"
[profiles.roomy]
rate = "60/min"
burst = 3

[[rules]]
name = "public"
path = "/{*any}"
key = "ip"
resolve = ["default"]
"#;
    let clock = ManualClock::new();
    let Ok(config) = Config::from_toml_str(&config(rule)) else {
        return; // refused at load: no collision possible
    };
    let Ok(rl) = RateLimit::builder(config)
        .routes_in(UNCHECKED)
        .clock(clock.clone())
        .build()
        .await
    else {
        return;
    };
    let app = router().layer(rl.layer()).into_service::<Body>();
    let r = get_from(&app, "/public", "192.0.2.62:1").await;
    assert_eq!(r.status(), 200);
    let triples = limit_triples(&r);
    assert_eq!(triples.len(), 2, "two limits applied, listed: {triples:?}");
}
