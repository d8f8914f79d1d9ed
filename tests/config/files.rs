//! Configuration: a full example loads, every kind of mistake is refused with
//! the file, line and field, environment overrides apply, and a reload keeps
//! every client's state.

use std::time::Duration;

use ratelimit::config::{Config, ConfigHandle, HeaderStyle};
use ratelimit::jwt::JwtVerifier;
use ratelimit::key::ForwardedHeader;
use ratelimit::{Limiter, ManualClock, MemoryStore, OverflowPolicy};

const FULL: &str = r#"
default_profile = "standard"

[profiles.standard]
rate = "600/min"
burst = 60

[profiles.premium]
rate = "6000/min"

[routes."users.get"]
profile = "premium"
cost = 2

[routes."reports.export"]
shadow = true

[store]
max_keys = 250000
sweep_interval = "5s"
overflow = "refuse"

[ip]
trusted_proxies = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.1"]
forwarded_header = "forwarded"
ipv6_prefix = 56

[headers]
style = "both"

[jwt]
tier_claim = "plan.tier"
max_rate = "100000/min"
max_burst = 1000

[service]
url = "http://limits.internal:8080/v1/limits"
id_secret_env = "RATELIMIT_SERVICE_ID_SECRET"
ttl = "30s"
timeout = "150ms"
"#;

#[test]
fn a_full_configuration_loads() {
    let c = Config::from_toml_str(FULL).unwrap();
    assert_eq!(c.default_profile(), "standard");
    assert_eq!(
        c.default_quota(),
        "600/min".parse::<ratelimit::Quota>().unwrap().with_burst(60)
    );
    assert_eq!(c.profile("premium").unwrap().quota.burst(), 6000);
    let users = c.route("users.get").unwrap();
    assert_eq!(
        (users.profile.as_deref(), users.cost, users.shadow),
        (Some("premium"), Some(2), None)
    );
    assert_eq!(c.route("reports.export").unwrap().shadow, Some(true));
    assert_eq!(c.store.max_keys, 250_000);
    assert_eq!(c.store.sweep_interval, Duration::from_secs(5));
    assert_eq!(c.store.overflow, OverflowPolicy::Refuse);
    assert_eq!(c.ip.trusted_proxies().len(), 3);
    assert_eq!(c.ip.header(), ForwardedHeader::Forwarded);
    assert_eq!(c.headers, HeaderStyle::Both);
    let jwt = c.jwt.as_ref().unwrap();
    assert_eq!(
        (jwt.tier_claim.as_str(), jwt.rate_claim.as_str(), jwt.max_burst),
        ("plan.tier", "ratelimit_rpm", Some(1000))
    );
    let service = c.service.as_ref().unwrap();
    assert_eq!(
        (service.ttl, service.timeout),
        (Duration::from_secs(30), Duration::from_millis(150))
    );
    let store = c.build_store().unwrap();
    assert_eq!(
        (store.max_keys(), store.overflow_policy()),
        (250_000, OverflowPolicy::Refuse)
    );
}

#[test]
fn header_styles_by_name() {
    for (name, style) in [
        ("draft-06", HeaderStyle::Draft06),
        ("structured", HeaderStyle::Structured),
        ("both", HeaderStyle::Both),
        ("none", HeaderStyle::None),
    ] {
        let c = Config::from_toml_str(&format!(
            "[profiles.a]\nrate = \"1/s\"\n[headers]\nstyle = \"{name}\"\n"
        ))
        .unwrap();
        assert_eq!(c.headers, style, "{name}");
    }
}

#[test]
fn defaults_fill_in_the_optional_sections() {
    let c = Config::from_toml_str("[profiles.only]\nrate = \"10/s\"\n").unwrap();
    assert_eq!(c.default_profile(), "only");
    assert_eq!(c.store.max_keys, 100_000);
    assert_eq!(c.store.overflow, OverflowPolicy::SharedBucket);
    assert_eq!(c.headers, HeaderStyle::Draft06);
    assert_eq!(c.responses, ratelimit::config::ResponseConfig::default());
    assert_eq!(
        c.responses.problem_type,
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(c.responses.problem_title, "Quota Exceeded");
    assert!(c.ip.trusted_proxies().is_empty());
    assert!(c.jwt.is_none() && c.service.is_none());
}

/// Each case: the TOML, the line, the field, and words the message must have.
#[rustfmt::skip]
const MISTAKES: &[(&str, Option<usize>, &str, &str)] = &[
    ("colour = 1\n[profiles.a]\nrate = \"1/s\"\n", Some(1), "colour", "unknown field"),
    ("[profiles.a]\nratee = \"1/s\"\n", Some(2), "profiles.a.ratee", "unknown field"),
    ("[profiles.a]\nrate = \"0/min\"\n", Some(2), "profiles.a.rate", "at least 1"),
    ("[profiles.a]\nrate = \"10 per second\"\n", Some(2), "profiles.a.rate", "expected \"<count>/<period>\""),
    ("[profiles.a]\nrate = \"10/s\"\nburst = 0\n", Some(3), "profiles.a.burst", "from 1"),
    ("[profiles.a]\nrate = \"10/s\"\nburst = -5\n", Some(3), "profiles.a.burst", "from 1"),
    ("[profiles.a]\nburst = 5\n", Some(1), "profiles.a", "missing field `rate`"),
    ("default_profile = \"gold\"\n[profiles.a]\nrate = \"1/s\"\n", Some(1), "default_profile", "unknown profile \"gold\""),
    ("[profiles.a]\nrate = \"1/s\"\n[profiles.b]\nrate = \"2/s\"\n", None, "default_profile", "missing"),
    ("default_profile = \"a\"\n", None, "profiles", "no profiles"),
    ("[profiles.a]\nrate = \"1/s\"\n[routes.\"users.get\"]\nprofile = \"premum\"\n", Some(4), "routes.users.get.profile", "unknown profile \"premum\"; defined profiles: a"),
    ("[profiles.a]\nrate = \"1/s\"\n[routes.x]\ncost = 0\n", Some(4), "routes.x.cost", "from 1"),
    ("[profiles.a]\nrate = \"1/s\"\n[routes.x]\nshadow = \"yes\"\n", Some(4), "routes.x.shadow", "bool"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\ntrusted_proxies = [\"10.0.0.0/33\"]\n", Some(4), "ip.trusted_proxies", "invalid CIDR \"10.0.0.0/33\""),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\ntrusted_proxies = [\"localhost\"]\n", Some(4), "ip.trusted_proxies", "invalid CIDR"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\nipv6_prefix = 0\n", Some(4), "ip.ipv6_prefix", "1 to 128"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\nforwarded_header = \"x-real-ip\"\n", Some(4), "ip.forwarded_header", "expected \"x-forwarded-for\" or \"forwarded\""),
    ("[profiles.a]\nrate = \"1/s\"\n[store]\nmax_keys = 0\n", Some(4), "store.max_keys", "from 1"),
    ("[profiles.a]\nrate = \"1/d\"\nburst = 100000\n", Some(3), "profiles.a.burst", "years to refill"),
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"1/s\"\nmax_burst = 1\nleeway = \"500000h\"\n", Some(6), "jwt.leeway", "clock skew"),
    ("[profiles.a]\nrate = \"1/s\"\n[store]\nsweep_interval = \"0s\"\n", Some(4), "store.sweep_interval", "longer than zero"),
    ("[profiles.a]\nrate = \"1/s\"\n[store]\nsweep_interval = \"soon\"\n", Some(4), "store.sweep_interval", "invalid duration"),
    ("[profiles.a]\nrate = \"1/s\"\n[store]\noverflow = \"allow\"\n", Some(4), "store.overflow", "\"shared\" or \"refuse\""),
    ("[profiles.a]\nrate = \"1/s\"\n[store]\nnew_keys_per_network = \"0/min\"\n", Some(4), "store.new_keys_per_network", "\"256/min\", or \"off\""),
    ("[profiles.a]\nrate = \"1/s\"\n[store]\nnew_keys_per_network = 256\n", Some(4), "store.new_keys_per_network", "string"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\nipv6_network_prefix = 129\n", Some(4), "ip.ipv6_network_prefix", "1 to 128"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\nipv4_network_prefix = 0\n", Some(4), "ip.ipv4_network_prefix", "1 to 32"),
    ("[profiles.a]\nrate = \"1/s\"\n[headers]\nstyle = \"rfc\"\n", Some(4), "headers.style", "\"draft-06\", \"structured\", \"both\" or \"none\""),
    // The old name of "structured" is refused, naming the new one.
    ("[profiles.a]\nrate = \"1/s\"\n[headers]\nstyle = \"draft-11\"\n", Some(4), "headers.style", "is now \"structured\""),
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\ntier_claim = \"\"\nmax_rate = \"1/s\"\nmax_burst = 1\n", Some(4), "jwt.tier_claim", "invalid claim name"),
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"1/s\"\nmax_burst = 1\nmax_failed_per_ip = 0\n", Some(6), "jwt.max_failed_per_ip", "from 1"),
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"1/s\"\nmax_burst = 1\nmax_failed_per_network = 0\n", Some(6), "jwt.max_failed_per_network", "from 1"),
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"1/s\"\nmax_burst = 1\nfailed_window = \"0s\"\n", Some(6), "jwt.failed_window", "longer than zero"),
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"1/s\"\nmax_burst = 1\nmax_failed_tracked = 0\n", Some(6), "jwt.max_failed_tracked", "from 1"),
    // Numbers from tokens: their caps, both or neither.
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"1/s\"\n", Some(4), "jwt.max_rate", "max_rate needs max_burst"),
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_burst = 5\n", Some(4), "jwt.max_burst", "max_burst needs max_rate"),
    ("[profiles.a]\nrate = \"1/s\"\n[jwt]\nrate_claim = \"rpm\"\n", Some(4), "jwt.rate_claim", "needs max_rate and max_burst"),
    ("[profiles.a]\nrate = \"1/s\"\n[service]\nurl = \"ftp://x\"\n", Some(4), "service.url", "http:// or https://"),
    // [service]: client ids are keyed with a named secret
    ("[profiles.a]\nrate = \"1/s\"\n[service]\nurl = \"http://x/limits\"\n", Some(3), "service", "missing `id_secret_env`: name the environment variable holding the secret client ids are keyed with (at least 32 bytes"),
    ("[profiles.a]\nrate = \"1/s\"\n[service]\nurl = \"http://x/limits\"\nid_secret_env = \" \"\n", Some(5), "service.id_secret_env", "empty variable name"),
    ("[profiles.a]\nrate = \"1/s\"\n[profiles.a]\nrate = \"2/s\"\n", Some(3), "profiles.a", "duplicate"),
    ("[profiles.a\nrate = \"1/s\"\n", Some(1), "profiles.a", "unclosed table, expected `]`"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\ntrusted_proxies = [\"0.0.0.0/0\"]\n", Some(4), "ip.trusted_proxies", "trusts every address"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\ntrusted_proxies = [\"10.0.0.0/8\", \"::/0\"]\n", Some(4), "ip.trusted_proxies", "trusts every address"),
    // Every IPv4 client, spelled as IPv4-mapped IPv6 (normalised to 0.0.0.0/0).
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\ntrusted_proxies = [\"::ffff:0:0/96\"]\n", Some(4), "ip.trusted_proxies", "trusts every IPv4 address"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\ntrusted_proxies = [\"0.0.0.0/1\", \"::ffff:128.0.0.0/97\"]\n", Some(4), "ip.trusted_proxies", "trust every IPv4 address"),
    ("[profiles.a]\nrate = \"1/s\"\n[ip]\ntrusted_proxies = [\"::/1\", \"8000::/1\"]\n", Some(4), "ip.trusted_proxies", "trust every IPv6 address"),
    ("[profiles.a]\nrate = \"10/s\"\nburst = 3\n[routes.x]\ncost = 4\n", Some(5), "routes.x.cost", "above the burst 3"),
    // Reserved when the first concurrency limit is used: bounded at load.
    ("[profiles.a]\nrate = \"1/s\"\n[store]\nmax_keys_in_flight = 100000000\n", Some(4), "store.max_keys_in_flight", "from 1 to 16777216"),
    // [[rules]] for the config-driven layer
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"cookie:x\"\nresolve = [\"default\"]\n", Some(6), "rules[0].key", "unknown key \"cookie\""),
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"x\"\nkey = \"ip\"\nresolve = [\"default\"]\n", Some(5), "rules[0].path", "must start with '/'"),
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"ip\"\nresolve = [\"default\", \"jwt\"]\n", Some(7), "rules[0].resolve", "must be last"),
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"ip\"\nresolve = [\"jwt\"]\n", Some(7), "rules[0].resolve", "must end with \"default\""),
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"ip\"\nresolve = [\"profile:gold\", \"default\"]\n", Some(7), "rules[0].resolve", "unknown profile \"gold\""),
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"header:x y\"\nresolve = [\"default\"]\n", Some(6), "rules[0].key", "header name"),
    ("[profiles.a]\nrate = \"10/s\"\nburst = 2\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"ip\"\nresolve = [\"default\"]\ncost = 3\n", Some(9), "rules[0].cost", "above the burst 2"),
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"ip\"\nresolve = [\"default\"]\nmethods = [\"G T\"]\n", Some(8), "rules[0].methods", "invalid method"),
    // The second rule's line, with another table between the two.
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"ip\"\nresolve = [\"default\"]\n[store]\nmax_keys = 10\n[[rules]]\nname = \"s\"\npath = \"/y\"\nkey = \"ip\"\nresolve = [\"nope\", \"default\"]\n", Some(14), "rules[1].resolve", "unknown resolver \"nope\""),
    ("[profiles.a]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"ip\"\nresolve = [\"default\"]\n[[rules]]\nname = \"r\"\npath = \"/y\"\nkey = \"ip\"\nresolve = [\"default\"]\n", Some(9), "rules[1].name", "used twice"),
    ("[profiles.a]\nrate = \"1/s\"\n[responses]\nproblem_title = \" \"\n", Some(4), "responses.problem_title", "empty"),
    // [global]: the fleet gate
    ("[profiles.a]\nrate = \"1/s\"\n[global]\nredis_url = \"http://x\"\nkey_secret_env = \"S\"\n", Some(4), "global.redis_url", "expected redis://"),
    ("[profiles.a]\nrate = \"1/s\"\n[global]\nredis_url = \"redis://x\"\nwindow = \"500ms\"\n", Some(5), "global.window", "from 1s to 1h"),
    ("[profiles.a]\nrate = \"1/s\"\n[global]\nredis_url = \"redis://x\"\nsync_interval = \"6s\"\n", Some(5), "global.sync_interval", "half the window"),
    ("[profiles.a]\nrate = \"1/s\"\n[global]\nredis_url = \"redis://x\"\nkey_prefix = \"{x}\"\n", Some(5), "global.key_prefix", "without braces"),
    ("[profiles.a]\nrate = \"1/s\"\nburst = 5000000\n[global]\nredis_url = \"redis://x\"\n", Some(3), "profiles.a.burst", "largest burst the fleet gate"),
    ("[profiles.a]\nrate = \"1/s\"\n[global]\nredis_url = \"redis://x\"\nsub_epochs = 60\n", Some(5), "global.sub_epochs", "two sync intervals"),
    ("[profiles.a]\nrate = \"1/s\"\n[global]\nredis_url = \"redis://x\"\ntimeout = \"0ms\"\n", Some(5), "global.timeout", "longer than zero"),
    ("[profiles.a]\nrate = \"1/s\"\n[global]\nwindow = \"10s\"\n", Some(3), "global", "missing field `redis_url`"),
];

/// A `[[rules]]` cost is checked against the profile its chain reaches:
/// nothing after a `profile(..)` step (it always answers), so a small
/// default is no reason to refuse; before it, a `jwt` step may pass on.
#[test]
fn a_rule_cost_is_checked_against_the_profile_its_chain_reaches() {
    let rule = |resolve: &str, c_burst: u32| {
        format!(
            "default_profile = \"a\"\n[profiles.a]\nrate = \"10/s\"\nburst = 3\n[profiles.c]\nrate = \"10/s\"\n\
             burst = {c_burst}\n[jwt]\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = \"ip\"\nresolve = {resolve}\ncost = 5\n"
        )
    };
    Config::from_toml_str(&rule(r#"["profile:c", "default"]"#, 10)).expect("default is never reached");
    Config::from_toml_str(&rule(r#"["jwt", "profile:c", "default"]"#, 10)).expect("c ends the chain");
    let refused = Config::from_toml_str(&rule(r#"["profile:c", "default"]"#, 3)).unwrap_err();
    assert_eq!(refused.field(), Some("rules[0].cost"), "{refused}");
    assert!(
        refused.to_string().contains("above the burst 3 of profile \"c\""),
        "{refused}"
    );
    let refused = Config::from_toml_str(&rule(r#"["jwt", "default"]"#, 10)).unwrap_err();
    assert!(
        refused.to_string().contains("above the burst 3 of profile \"a\""),
        "{refused}"
    );
}

/// An error a `main` returns prints through `Debug` (`fn main() ->
/// Result<(), Box<dyn Error>>`, `.unwrap()`): the same readable line as
/// `Display`, never a struct dump.
#[test]
fn errors_print_the_same_line_through_debug() {
    let dir = std::env::temp_dir().join(format!("ratelimit-debug-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    std::fs::write(
        &path,
        "default_profile = \"write\"\n[profiles.write]\nrate = \"10/s\"\nbrust = 3\n",
    )
    .unwrap();
    let e = Config::from_file(&path).unwrap_err();
    let debug = format!("{e:?}");
    assert_eq!(debug, e.to_string());
    assert!(
        debug.starts_with(&format!(
            "{}:4:1: profiles.write.brust: unknown field `brust`",
            path.display()
        )),
        "{debug}"
    );
    // What `main` prints for it.
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert_eq!(format!("Error: {boxed:?}"), format!("Error: {debug}"));
    // The engine's and the builder's errors too.
    let quota = "0/s".parse::<ratelimit::Quota>().unwrap_err();
    assert_eq!(format!("{quota:?}"), quota.to_string());
    let store = ratelimit::MemoryStore::builder()
        .max_keys(1 << 33)
        .validate()
        .unwrap_err();
    assert_eq!(format!("{store:?}"), store.to_string());
}

/// A `[jwt]` section that only names the tier claim loads: caps are for
/// numbers carried by tokens, which it does not read.
#[test]
fn a_jwt_section_for_tiers_needs_no_caps() {
    let c = Config::from_toml_str("[profiles.a]\nrate = \"1/s\"\n[jwt]\ntier_claim = \"plan\"\n").unwrap();
    let jwt = c.jwt.as_ref().unwrap();
    assert_eq!(
        (jwt.tier_claim.as_str(), jwt.max_rate, jwt.max_burst),
        ("plan", None, None)
    );
}

#[test]
fn every_mistake_is_refused_with_line_field_and_reason() {
    let mut failures = Vec::new();
    for (toml, line, field, words) in MISTAKES {
        match Config::from_toml_str(toml) {
            Ok(_) => failures.push(format!("accepted: {toml:?}")),
            Err(e) => {
                let text = e.to_string();
                let ok = e.line() == *line
                    && (field.is_empty() || e.field() == Some(field))
                    && text.to_lowercase().contains(&words.to_lowercase());
                if !ok {
                    failures.push(format!(
                        "{toml:?}\n    got: {text} (line {:?}, field {:?})",
                        e.line(),
                        e.field()
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        MISTAKES.len(),
        failures.join("\n")
    );
}

#[test]
fn file_errors_name_the_file() {
    let _env = crate::env_lock();
    let dir = std::env::temp_dir().join(format!("ratelimit-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    std::fs::write(&path, "[profiles.a]\nrate = \"10/fortnight\"\n").unwrap();
    let err = Config::from_file(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:2:8: profiles.a.rate: invalid rate", path.display())),
        "{err}"
    );
    let missing = Config::from_file(dir.join("nope.toml")).unwrap_err().to_string();
    assert!(
        missing.contains("nope.toml") && missing.contains("cannot read"),
        "{missing}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn environment_overrides_apply_and_are_validated() {
    let text = "default_profile = \"std\"\n[profiles.std]\nrate = \"10/s\"\n";
    let vars = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>()
    };
    let c = Config::from_toml_str_with_env(
        text,
        vars(&[
            ("RATELIMIT__PROFILES__STD__RATE", "100/s"),
            ("RATELIMIT__STORE__MAX_KEYS", "5000"),
            ("RATELIMIT__IP__TRUSTED_PROXIES", "[\"10.0.0.0/8\"]"),
            ("UNRELATED", "x"),
        ]),
    )
    .unwrap();
    assert_eq!(c.default_quota().count(), 100);
    assert_eq!(c.store.max_keys, 5000);
    assert_eq!(c.ip.trusted_proxies().len(), 1);

    let err = Config::from_toml_str_with_env(text, vars(&[("RATELIMIT__PROFILES__STD__BURST", "0")])).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("RATELIMIT__PROFILES__STD__BURST") && msg.contains("from 1"),
        "{msg}"
    );
    let err = Config::from_toml_str_with_env(text, vars(&[("RATELIMIT__PROFILES__STD__RATEE", "1/s")])).unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");

    // An override cannot create a profile or route by accident.
    let err =
        Config::from_toml_str_with_env(text, vars(&[("RATELIMIT__PROFILES__STANDARD__RATE", "1/s")])).unwrap_err();
    assert!(err.to_string().contains("no profile named \"STANDARD\""), "{err}");
    // Segments match the file's keys whatever their case.
    let mixed = "default_profile = \"Gold\"\n[profiles.Gold]\nrate = \"10/s\"\n";
    let c = Config::from_toml_str_with_env(mixed, vars(&[("RATELIMIT__PROFILES__GOLD__RATE", "20/s")])).unwrap();
    assert_eq!(c.default_quota().count(), 20);
    // A semantic error in an overridden field is the environment's, not the file's.
    let err = Config::from_toml_str_with_env(text, vars(&[("RATELIMIT__DEFAULT_PROFILE", "nope")])).unwrap_err();
    assert!(
        err.source_name().contains("RATELIMIT__DEFAULT_PROFILE") && err.line().is_none(),
        "{err}"
    );
}

#[test]
fn a_reload_keeps_every_clients_state_and_a_tier_change_keeps_the_tat() {
    let v1 = "default_profile = \"std\"\n[profiles.std]\nrate = \"10/min\"\n[profiles.gold]\nrate = \"100/min\"\n";
    let handle = ConfigHandle::new(Config::from_toml_str(v1).unwrap());
    let clock = ManualClock::new();
    let limiter = Limiter::new(MemoryStore::default(), clock.clone());

    // A client uses its whole standard burst of 10.
    for _ in 0..10 {
        assert!(limiter.check(&"alice", &handle.load().default_quota()).is_allowed());
    }
    assert!(limiter.check(&"alice", &handle.load().default_quota()).is_denied());
    // Another client used 3.
    for _ in 0..3 {
        limiter.check(&"bob", &handle.load().default_quota());
    }

    // Reload: the standard profile becomes 20/min with a burst of 20.
    let v2 = "default_profile = \"std\"\n[profiles.std]\nrate = \"20/min\"\nburst = 20\n[profiles.gold]\nrate = \"100/min\"\n";
    handle.store(Config::from_toml_str(v2).unwrap());
    let standard = handle.load().default_quota();
    // Alice's debt of 10 * 6 s = 60 s is kept: under 20/min (T = 3 s,
    // capacity 60 s) she is exactly empty, not refilled.
    let d = limiter.check(&"alice", &standard);
    assert!(d.is_denied());
    assert_eq!(d.retry_after(), Duration::from_secs(3));
    // Bob's 3 * 6 s = 18 s of debt leaves 42 s = 14 requests.
    assert_eq!(limiter.check_n(&"bob", &standard, 0).remaining(), 14);

    // Alice moves to gold (100/min, burst 100, capacity 60 s): her 60 s of
    // debt means no fresh burst there either.
    let gold = handle.load().profile("gold").unwrap().quota;
    assert!(limiter.check(&"alice", &gold).is_denied());
    clock.advance(Duration::from_millis(600));
    assert!(limiter.check(&"alice", &gold).is_allowed());
    assert!(limiter.check(&"alice", &gold).is_denied());
}

#[test]
fn a_bad_file_on_reload_keeps_the_running_configuration() {
    let _env = crate::env_lock();
    let dir = std::env::temp_dir().join(format!("ratelimit-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    std::fs::write(&path, "[profiles.a]\nrate = \"10/s\"\n").unwrap();
    let handle = ConfigHandle::from_file(&path).unwrap();
    std::fs::write(&path, "[profiles.a]\nrate = \"20/s\"\n").unwrap();
    handle.reload().unwrap();
    assert_eq!(handle.load().default_quota().count(), 20);
    std::fs::write(&path, "[profiles.a]\nrate = \"0/s\"\n").unwrap();
    let err = handle.reload().unwrap_err();
    assert_eq!(err.line(), Some(2));
    assert_eq!(handle.load().default_quota().count(), 20, "the old configuration stays");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn jwt_verification_and_header_key_settings() {
    let base = "[profiles.a]\nrate = \"1/s\"\n";
    let jwt = |body: &str| format!("{base}[jwt]\nmax_rate = \"100/s\"\nmax_burst = 10\n{body}");
    let c = Config::from_toml_str(&jwt(
        "hmac_secret_env = \"SECRET\"\nalgorithm = \"HS256\"\nissuer = [\"https://auth\"]\nleeway = \"10s\"\n",
    ))
    .unwrap();
    let v = c.jwt.as_ref().unwrap().verification.as_ref().unwrap();
    assert_eq!(v.keys, ratelimit::config::JwtKeySource::HmacSecretEnv("SECRET".into()));
    assert_eq!((v.issuer.len(), v.leeway), (1, Duration::from_secs(10)));
    assert_eq!(
        (v.max_failed_per_ip, v.failed_window, v.max_failed_tracked),
        (10, Duration::from_secs(60), 10_000),
        "the default budget of failed signature checks"
    );
    let c = Config::from_toml_str(&jwt(
        "hmac_secret_env = \"SECRET\"\nalgorithm = \"HS256\"\nmax_failed_per_ip = 3\nfailed_window = \"10s\"\nmax_failed_tracked = 500\n",
    ))
    .unwrap();
    let v = c.jwt.as_ref().unwrap().verification.as_ref().unwrap();
    assert_eq!(
        (v.max_failed_per_ip, v.failed_window, v.max_failed_tracked),
        (3, Duration::from_secs(10), 500)
    );
    assert!(
        Config::from_toml_str(&jwt(""))
            .unwrap()
            .jwt
            .unwrap()
            .verification
            .is_none(),
        "upstream verification"
    );

    for (body, words) in [
        ("hmac_secret_env = \"S\"\n", "needs `algorithm`"),
        ("hmac_secret_env = \"S\"\nalgorithm = \"RS256\"\n", "does not fit"),
        ("pem_file = \"k.pem\"\nalgorithm = \"HS256\"\n", "does not fit"),
        (
            "jwks_file = \"j.json\"\nalgorithm = \"RS256\"\n",
            "pins the algorithm per key",
        ),
        (
            "jwks_file = \"j.json\"\npem_file = \"k.pem\"\n",
            "more than one key source",
        ),
        ("hmac_secret_env = \"S\"\nalgorithm = \"none\"\n", "unknown algorithm"),
        ("jwks_url = \"ftp://x\"\n", "http://"),
    ] {
        let err = Config::from_toml_str(&jwt(body)).unwrap_err().to_string();
        assert!(err.contains(words), "{body:?}: {err}");
    }

    let c = Config::from_toml_str(&format!("{base}[header_keys]\nper_ip = 3\nwindow = \"1min\"\n")).unwrap();
    assert_eq!(
        (c.header_keys.per_ip, c.header_keys.window),
        (3, Duration::from_secs(60))
    );
    assert!(Config::from_toml_str(&format!("{base}[header_keys]\nper_ip = 0\n")).is_err());
}

#[tokio::test]
async fn a_verifier_is_built_from_the_configuration() {
    let jwks = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwks.json");
    let text = format!(
        "[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"100/s\"\nmax_burst = 10\njwks_file = \"{jwks}\"\naudience = [\"api\"]\n"
    );
    let c = Config::from_toml_str(&text).unwrap();
    let verifier = |c: &Config| {
        let settings = c.jwt.as_ref().and_then(|j| j.verification.clone());
        let (tls, prefixes) = (c.tls.clone(), c.ip.network_prefixes());
        async move {
            let settings = settings.expect("a key source is configured");
            JwtVerifier::from_settings(&settings, &tls, prefixes).await
        }
    };
    let v = verifier(&c).await.unwrap();
    assert!(v.verify("garbage").is_none());
    let missing = Config::from_toml_str(
        "[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"100/s\"\nmax_burst = 10\nhmac_secret_env = \"RATELIMIT_TEST_NOT_SET_ANYWHERE\"\nalgorithm = \"HS256\"\n",
    )
    .unwrap();
    let err = verifier(&missing).await.unwrap_err().to_string();
    assert!(err.contains("RATELIMIT_TEST_NOT_SET_ANYWHERE"), "{err}");
}

/// The line, column and field of the error `text` is refused with.
fn position(text: &str) -> (Option<usize>, Option<usize>, Option<String>, String) {
    let e = Config::from_toml_str(text).unwrap_err();
    (
        e.line(),
        e.column(),
        e.field().map(str::to_owned),
        e.message().to_owned(),
    )
}

#[test]
fn errors_inside_inline_tables_are_located_at_the_key_or_value() {
    // Found after parsing: at the key `profile`, inside the inline table.
    let text =
        "default_profile = \"a\"\nprofiles = { a = { rate = \"1/s\" } }\nroutes = { x = { profile = \"nope\" } }\n";
    let (line, col, field, message) = position(text);
    assert_eq!(
        (line, col, field.as_deref()),
        (Some(3), Some(18), Some("routes.x.profile")),
        "{message}"
    );
    assert!(message.contains("unknown profile \"nope\""), "{message}");
    // Found by deserialization: at the value, with the inner field.
    let (line, col, field, message) = position("profiles = { a = { rate = \"0/s\" } }\n");
    assert_eq!(
        (line, col, field.as_deref()),
        (Some(1), Some(27), Some("profiles.a.rate")),
        "{message}"
    );
}

#[test]
fn errors_on_dotted_keys_at_top_level_are_located_at_the_key_or_value() {
    let text = "default_profile = \"a\"\nprofiles.a.rate = \"1/s\"\nroutes.x.profile = \"nope\"\n";
    let (line, col, field, message) = position(text);
    assert_eq!(
        (line, col, field.as_deref()),
        (Some(3), Some(10), Some("routes.x.profile")),
        "{message}"
    );
    let (line, col, field, message) = position("default_profile = \"a\"\nprofiles.a.rate = \"0/s\"\n");
    assert_eq!(
        (line, col, field.as_deref()),
        (Some(2), Some(19), Some("profiles.a.rate")),
        "{message}"
    );
    assert!(message.contains("at least 1"), "{message}");
}

#[test]
fn errors_in_the_second_rule_are_located_in_that_rule() {
    let rule = |name: &str, body: &str| {
        format!("[[rules]]\nname = \"{name}\"\npath = \"/{name}\"\nkey = \"ip\"\nresolve = [\"default\"]\n{body}")
    };
    let base = "[profiles.a]\nrate = \"1/s\"\n";
    // A bad value, refused by deserialization: line 13 is `cost = 0`.
    let text = format!("{base}{}{}", rule("r", ""), rule("s", "cost = 0\n"));
    let (line, col, field, message) = position(&text);
    assert_eq!(
        (line, col, field.as_deref()),
        (Some(13), Some(8), Some("rules[1].cost")),
        "{message}"
    );
    assert!(message.contains("from 1"), "{message}");
    // A bad value, refused by validation: at the key, line 13 again.
    let text = format!("{base}{}{}", rule("r", ""), rule("s", "methods = [\"G T\"]\n"));
    let (line, col, field, message) = position(&text);
    assert_eq!(
        (line, col, field.as_deref()),
        (Some(13), Some(1), Some("rules[1].methods")),
        "{message}"
    );
    // The same in an inline array of tables (before any header, so that it
    // is the top level's `rules`).
    let text = format!(
        "rules = [\n  {{ name = \"r\", path = \"/x\", key = \"ip\", resolve = [\"default\"] }},\n  {{ name = \"s\", path = \"y\", key = \"ip\", resolve = [\"default\"] }},\n]\n{base}"
    );
    let (line, col, field, message) = position(&text);
    assert_eq!(
        (line, col, field.as_deref()),
        (Some(3), Some(17), Some("rules[1].path")),
        "{message}"
    );
    assert!(message.contains("must start with '/'"), "{message}");
}

#[test]
fn an_unreadable_file_keeps_the_io_error_as_the_source() {
    let _env = crate::env_lock();
    use std::error::Error as _;
    let path = std::env::temp_dir().join(format!("ratelimit-missing-{}.toml", std::process::id()));
    let err = Config::from_file(&path).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read the file: ", path.display())),
        "{err}"
    );
    let io = err
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the I/O error");
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}
