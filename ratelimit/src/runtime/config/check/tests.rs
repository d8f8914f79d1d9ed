use super::*;

const LONG: &str = r#"default_profile = "daily"

[profiles.daily]
rate = "10000/d"
burst = 20

[profiles.weekly]
rate = "100000/week"

[profiles.monthly]
rate = "1000000/month"

[profiles.standard]
rate = "600/min"
burst = 1000
"#;

#[test]
fn long_periods_load_and_a_zero_one_is_refused_at_its_value() {
    let c = Config::from_toml_str(LONG).unwrap();
    assert_eq!(c.profile("weekly").unwrap().quota, crate::Quota::per_week(100_000));
    let monthly = c.profile("monthly").unwrap().quota;
    assert_eq!(monthly.period(), std::time::Duration::from_secs(2_592_000));
    assert_eq!(report::rate(&monthly), "1000000/month");
    // No [global]: nothing to warn about.
    assert!(c.check_warnings().is_empty());

    let bad = LONG.replace("\"100000/week\"", "\"1/0week\"");
    let e = Config::from_toml_str(&bad).unwrap_err();
    assert_eq!((e.line(), e.column()), (Some(8), Some(8)), "{e}");
    assert_eq!(e.field(), Some("profiles.weekly.rate"));
    assert!(
        e.to_string()
            .contains("invalid rate \"1/0week\": the period must be longer than zero"),
        "{e}"
    );
    let e = Config::from_toml_str(&LONG.replace("\"1000000/month\"", "\"1/mo\"")).unwrap_err();
    assert!(
        e.to_string()
            .contains("unknown period unit; expected one of ns, us, ms, s, min, h, d, week, month"),
        "{e}"
    );
}

#[cfg(feature = "redis")]
#[test]
fn the_checker_warns_about_profiles_the_fleet_gate_limits_locally() {
    // SAFETY of the test: a variable no other test reads.
    std::env::set_var("RL_LONG_WINDOWS_TEST_SECRET", "a fleet secret of enough bytes");
    let global =
        "\n[global]\nredis_url = \"redis://127.0.0.1:6379/\"\nkey_secret_env = \"RL_LONG_WINDOWS_TEST_SECRET\"\n";
    let report = check_toml_str(&format!("{LONG}{global}"), "long.toml");
    assert!(report.is_ok(), "{report}");
    let w = report.warnings();
    // daily (burst 20 x 8.64 s > 10 s), weekly and monthly (their whole
    // count as the burst), in the file's order; not standard (an hour or
    // less: fleet-limited).
    assert_eq!(w.len(), 3, "{w:?}");
    let daily = &w[0];
    assert_eq!(daily.field(), Some("profiles.daily.rate"));
    assert_eq!((daily.line(), daily.column()), (Some(4), Some(1)), "at the key");
    let text = daily.to_string();
    println!("{text}");
    for needle in [
        "long.toml:4:1: profiles.daily.rate: warning: 10000/d has a period of 1d",
        "[global] window = 10s",
        "locally only",
        "up to N times its limit",
        "a [global] window of at least 173s",
        "a burst of at most 1",
        "limit service",
    ] {
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
    // Weekly: its burst takes a week, no window holds it.
    let weekly = w[1].to_string();
    assert!(
        weekly.contains("profiles.weekly.rate: warning: 100000/week has a period of 7d"),
        "{weekly}"
    );
    assert!(
        weekly.contains("a burst of at most 1 (the window is at most 1h"),
        "{weekly}"
    );
    // The report prints the warnings before the summary.
    assert!(report
        .to_string()
        .starts_with("long.toml:4:1: profiles.daily.rate: warning:"));

    // A window that holds the daily burst: no warning for it.
    let wide = format!("{LONG}{global}window = \"3min\"\nsync_interval = \"1s\"\n");
    let report = check_toml_str(&wide, "long.toml");
    assert!(report.is_ok(), "{report}");
    let fields: Vec<_> = report
        .warnings()
        .iter()
        .map(|w| w.field().unwrap_or("").to_owned())
        .collect();
    assert_eq!(fields, ["profiles.weekly.rate", "profiles.monthly.rate"]);

    // A burst above the gate's counters is refused with [global] ...
    let big = format!("{LONG}[profiles.huge]\nrate = \"100000000/min\"\n{global}");
    let e = Config::from_toml_str(&big).unwrap_err().to_string();
    assert!(e.contains("the largest burst the fleet gate ([global]) counts"), "{e}");
    // ... unless the gate limits the profile locally anyway (warned).
    let big = format!("{LONG}[profiles.huge]\nrate = \"100000000/month\"\n{global}");
    let report = check_toml_str(&big, "long.toml");
    assert!(report.is_ok(), "{report}");
    assert!(report
        .warnings()
        .iter()
        .any(|w| w.field() == Some("profiles.huge.rate")));
}
