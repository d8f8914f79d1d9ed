//! A build of ratelimit with `axum` but without `jwt`, `service` and
//! `redis` refuses what needs them, naming the feature: startup, a reload
//! and the checker for a configuration, the compiler for an attribute.
//!
//! Run with `cargo test -p ratelimit --no-default-features --features axum
//! --test builds` (`scripts/test` does); with more features this
//! file compiles to nothing.
#![cfg(all(
    feature = "axum",
    not(feature = "jwt"),
    not(feature = "service"),
    not(feature = "redis")
))]

use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::ManualClock;

const PROFILES: &str = "default_profile = \"a\"\n[profiles.a]\nrate = \"10/s\"\n";

fn config(extra: &str) -> Config {
    Config::from_toml_str(&format!("{PROFILES}{extra}")).expect("the file itself is valid")
}

/// What `RateLimit::builder(config).build()` says: the section and message.
fn startup(extra: &str) -> (String, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let built = rt.block_on(RateLimit::builder(config(extra)).clock(ManualClock::new()).build());
    let e = built.expect_err("startup must refuse what this build cannot run");
    (e.section().to_owned(), e.to_string())
}

/// `[jwt]` without a key source: claim names and caps, for claims an
/// upstream layer verified.
const JWT_CLAIMS: &str = "[jwt]\nmax_rate = \"100/s\"\nmax_burst = 10\n";
const CLAIM_RULE: &str = "[[rules]]\nname = \"me\"\npath = \"/me\"\nkey = \"jwt_claim:sub\"\nresolve = [\"default\"]\n";
const JWT_STEP_RULE: &str =
    "[[rules]]\nname = \"me\"\npath = \"/me\"\nkey = \"ip\"\nresolve = [\"jwt\", \"default\"]\n";
const SERVICE_STEP_RULE: &str =
    "[[rules]]\nname = \"me\"\npath = \"/me\"\nkey = \"ip\"\nresolve = [\"service\", \"default\"]\n";
const JWT_KEYS: &str = "[jwt]\nmax_rate = \"100/s\"\nmax_burst = 10\nhmac_secret_env = \"RL_TEST_MISSING_FEATURES_SECRET\"\nalgorithm = \"HS256\"\n";
const SERVICE: &str = "[service]\nurl = \"http://limits.internal\"\nid_secret_env = \"RL_TEST_MISSING_FEATURES_IDS\"\n";
const GLOBAL: &str =
    "[global]\nredis_url = \"redis://127.0.0.1:6379/\"\nkey_secret_env = \"RL_TEST_MISSING_FEATURES_FLEET\"\n";

#[test]
fn a_claim_key_needs_jwt() {
    let (section, message) = startup(CLAIM_RULE);
    assert_eq!(section, "rules");
    assert_eq!(
        message,
        "[[rules]] entry 1 (\"me\"): key \"jwt_claim:sub\" needs the `jwt` feature of ratelimit, which this build \
         lacks (claims are never read from an unverified token)"
    );
}

#[test]
fn a_jwt_step_needs_jwt() {
    let (section, message) = startup(&format!("{JWT_CLAIMS}{JWT_STEP_RULE}"));
    assert_eq!(section, "rules");
    assert_eq!(
        message,
        "[[rules]] entry 1 (\"me\"): the `jwt` step needs the `jwt` feature of ratelimit, which this build lacks"
    );
}

#[test]
fn a_service_step_needs_service() {
    // The rule is reported before the section it asks.
    let (section, message) = startup(&format!("{SERVICE}{SERVICE_STEP_RULE}"));
    assert_eq!(section, "rules");
    assert_eq!(
        message,
        "[[rules]] entry 1 (\"me\"): the `service` step needs the `service` feature of ratelimit, which this build \
         lacks"
    );
}

#[test]
fn a_jwt_key_source_needs_jwt() {
    let (section, message) = startup(JWT_KEYS);
    assert_eq!(section, "jwt");
    assert_eq!(
        message,
        "[jwt] hmac_secret_env: verifying tokens with it needs the `jwt` feature of ratelimit, which this build \
         lacks (enable it in Cargo.toml, or remove the key source)"
    );
    let (_, message) = startup(&format!("{JWT_CLAIMS}jwks_url = \"https://idp.internal/jwks.json\"\n"));
    assert!(
        message.starts_with("[jwt] jwks_url: verifying tokens with it needs the `jwt` feature"),
        "{message}"
    );
}

#[test]
fn a_limit_service_needs_service() {
    let (section, message) = startup(SERVICE);
    assert_eq!(section, "service");
    assert_eq!(
        message,
        "[service]: the limit service needs the `service` feature of ratelimit, which this build lacks (enable it \
         in Cargo.toml, or remove the section)"
    );
}

#[test]
fn the_fleet_gate_needs_redis() {
    let (section, message) = startup(GLOBAL);
    assert_eq!(section, "global");
    assert!(message.contains("needs the `redis` feature of ratelimit"), "{message}");
}

#[test]
fn a_reload_is_refused_too_and_the_running_configuration_stays() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rl = rt
        .block_on(RateLimit::builder(config("")).clock(ManualClock::new()).build())
        .unwrap();
    let e = rl.reload(config(CLAIM_RULE)).expect_err("a reload must refuse it too");
    assert_eq!(e.field(), Some("rules[0].key"));
    assert!(e.to_string().contains("needs the `jwt` feature of ratelimit"), "{e}");
    assert!(e.to_string().contains("the running configuration stays"), "{e}");
    assert!(rl.config().rules.is_empty());
}

#[test]
fn the_checker_reports_every_one_at_its_place() {
    let text = format!("{PROFILES}{JWT_KEYS}{SERVICE}{CLAIM_RULE}resolve = [\"jwt\", \"service\", \"default\"]\n");
    // `resolve` given twice is a TOML error: the rule above has its own.
    let text = text.replacen("resolve = [\"default\"]\n", "", 1);
    let report = ratelimit::config::check::check_toml_str(&text, "limits.toml");
    let found: Vec<(Option<&str>, Option<usize>)> = report.errors().iter().map(|e| (e.field(), e.line())).collect();
    assert_eq!(
        found,
        [
            (Some("jwt.hmac_secret_env"), Some(7)),
            (Some("service"), Some(9)),
            (Some("rules[0].key"), Some(15)),
            (Some("rules[0].resolve"), Some(16)),
            (Some("rules[0].resolve"), Some(16)),
        ],
        "{:#?}",
        report.errors()
    );
    let messages: Vec<String> = report.errors().iter().map(ToString::to_string).collect();
    assert!(
        messages[0].starts_with("limits.toml:7:1: jwt.hmac_secret_env: [jwt] hmac_secret_env: verifying tokens"),
        "{messages:#?}"
    );
    assert!(
        messages[3].contains("the `jwt` step needs the `jwt` feature"),
        "{messages:#?}"
    );
    assert!(
        messages[4].contains("the `service` step needs the `service` feature"),
        "{messages:#?}"
    );
}

/// `#[rate_limit]` on a handler whose key or steps need a feature this build
/// lacks is a compile error naming it (`missing_features/*.stderr`). trybuild
/// builds the case with the features this test is built with.
#[test]
fn the_attribute_names_the_missing_feature() {
    trybuild::TestCases::new().compile_fail("tests/missing_features/*.rs");
}
