//! `ratelimit::config::Config` embedded in an application's own
//! configuration (issue 12, item 6): the same validation as
//! `Config::from_toml_str`, errors located by the outer `toml` parse.

use ratelimit::config::{Config, StoreConfig};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct AppConfig {
    database_url: String,
    ratelimit: Config,
}

const SECTION: &str = r#"default_profile = "standard"

[profiles.standard]
rate = "600/min"
burst = 60

[profiles.premium]
rate = "10000/1d"

[routes."users.get"]
profile = "premium"
cost = 2

[store]
max_keys = 5000
sweep_interval = "1d"

[jwt]
max_rate = "6000/min"
max_burst = 200
leeway = "1min"

[[rules]]
name = "proxy.api"
path = "/api/{*rest}"
key = "ip"
resolve = ["jwt", "default"]
"#;

/// The section under `[ratelimit]`: every table header gets the prefix.
fn embedded(section: &str) -> String {
    let mut out = String::from("database_url = \"postgres://localhost/app\"\n\n[ratelimit]\n");
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("[[") {
            out.push_str(&format!("[[ratelimit.{rest}\n"));
        } else if let Some(rest) = line.strip_prefix('[') {
            out.push_str(&format!("[ratelimit.{rest}\n"));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn parse(text: &str) -> Result<AppConfig, toml::de::Error> {
    toml::from_str(text)
}

/// The 1-based line and column of the error's span in `text`.
fn position(text: &str, err: &toml::de::Error) -> (usize, usize) {
    let span = err.span().expect("a located error");
    let before = &text[..span.start];
    (
        before.matches('\n').count() + 1,
        before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1,
    )
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("the needle is in the text")
        + 1
}

#[test]
fn the_embedded_config_equals_the_one_read_from_its_own_text() {
    let text = embedded(SECTION);
    let app = parse(&text).expect("a valid configuration");
    let own = Config::from_toml_str(SECTION).expect("the same section on its own");
    assert_eq!(app.ratelimit, own);
    assert_eq!(app.ratelimit.route("users.get").and_then(|r| r.cost), Some(2));
    assert_eq!(
        app.ratelimit.store.sweep_interval,
        std::time::Duration::from_secs(86_400)
    );
    assert_eq!(app.ratelimit.rules.len(), 1);
}

#[test]
fn a_bad_rate_is_located_at_its_value_and_names_the_field() {
    let text = embedded(&SECTION.replace("rate = \"10000/1d\"", "rate = \"10000/fortnight\""));
    let err = parse(&text).unwrap_err();
    let line = line_of(&text, "10000/fortnight");
    assert_eq!(position(&text, &err), (line, 8), "{err}");
    let shown = err.to_string();
    assert!(shown.contains(&format!("line {line}, column 8")), "{shown}");
    assert!(
        shown.contains("invalid rate \"10000/fortnight\": unknown period unit"),
        "{shown}"
    );
    assert!(
        shown.contains("profiles.premium.rate: invalid rate"),
        "names the field: {shown}"
    );
}

#[test]
fn bad_values_in_several_sections_are_located() {
    for (from, to, message) in [
        (
            "sweep_interval = \"1d\"",
            "sweep_interval = \"1fortnight\"",
            "invalid duration \"1fortnight\": unknown unit \"fortnight\"",
        ),
        (
            "leeway = \"1min\"",
            "leeway = \"1.5min\"",
            "invalid duration \"1.5min\"",
        ),
        ("max_keys = 5000", "max_keys = 0", "expected a whole number from 1 to"),
        ("burst = 60", "burst = 60\nbrust = 6", "unknown field `brust`"),
    ] {
        let text = embedded(&SECTION.replace(from, to));
        let err = parse(&text).unwrap_err();
        let bad = to.lines().last().expect("a line");
        let line = line_of(&text, bad);
        let shown = err.to_string();
        assert_eq!(position(&text, &err).0, line, "{to}: {shown}");
        assert!(shown.contains(message), "{to}: {shown}");
        assert!(shown.contains(&format!("line {line}, column")), "{to}: {shown}");
    }
}

#[test]
fn a_check_across_fields_names_the_field_in_the_embedded_table() {
    // Validation after deserialization (which profile names exist) has no
    // span of its own: the message names the field, relative to the
    // embedded table, and toml points at the table.
    let text = embedded(&SECTION.replace("profile = \"premium\"", "profile = \"gold\""));
    let err = parse(&text).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.contains("routes.users.get.profile: unknown profile \"gold\"; defined profiles: premium, standard"),
        "{shown}"
    );
    assert_eq!(position(&text, &err).0, line_of(&text, "[ratelimit]"), "{shown}");
    // So is a rule's key or resolver chain, checked after deserialization
    // too (with the rule language's own parser).
    let text = embedded(&SECTION.replace("key = \"ip\"", "key = \"cookie:sid\""));
    let shown = parse(&text).unwrap_err().to_string();
    assert!(shown.contains("rules[0].key: unknown key \"cookie\""), "{shown}");
    // The same mistake in a file is located at the key.
    let own = Config::from_toml_str(&SECTION.replace("profile = \"premium\"", "profile = \"gold\"")).unwrap_err();
    assert_eq!(own.field(), Some("routes.users.get.profile"));
    assert_eq!(own.line(), Some(11));
}

#[test]
fn environment_overrides_are_not_applied_to_an_embedded_config() {
    // A variable that would change the standard profile's burst, were it
    // read: the embedded configuration takes what the application's text
    // says (the suite's tests share one process: the lock keeps the
    // variable from the tests that read the environment's overrides).
    let _env = crate::env_lock();
    std::env::set_var("RATELIMIT__PROFILES__STANDARD__BURST", "3");
    let app = parse(&embedded(SECTION)).expect("valid");
    std::env::remove_var("RATELIMIT__PROFILES__STANDARD__BURST");
    assert_eq!(app.ratelimit.profile("standard").map(|p| p.quota.burst()), Some(60));
}

#[test]
fn a_section_embeds_on_its_own() {
    #[derive(Deserialize)]
    struct Settings {
        store: StoreConfig,
    }
    let s: Settings = toml::from_str("[store]\nmax_keys = 7\nsweep_interval = \"2d\"\n").expect("valid");
    assert_eq!(s.store.max_keys, 7);
    let err = toml::from_str::<Settings>("[store]\noverflow = \"drop\"\n")
        .err()
        .expect("refused");
    assert!(err.to_string().contains("unknown overflow policy \"drop\""), "{err}");
    assert_eq!(err.span().map(|s| s.start), Some("[store]\noverflow = ".len()));
}
