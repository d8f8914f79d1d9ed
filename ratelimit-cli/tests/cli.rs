//! The `ratelimit` binary, run as a user runs it: `check` on the
//! quickstart's configuration and on broken ones, `explain` on requests
//! that match a rule or none, behind a trusted proxy or not, with a token.

use std::path::PathBuf;
use std::process::{Command, Output};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

const BIN: &str = env!("CARGO_BIN_EXE_ratelimit");

fn quickstart() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/quickstart.toml"))
}

/// A file of this test's own, in a directory of its own.
fn file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ratelimit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("the file is written");
    path
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let Output { status, stdout, stderr } = Command::new(BIN)
        // The variables the configurations below name are never set.
        .env_remove("RL_CLI_UNSET_ID_SECRET")
        .env_remove("RL_CLI_UNSET_FLEET_SECRET")
        .env_remove("RL_CLI_JWT_SECRET")
        .args(args)
        .output()
        .expect("the binary runs");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8 output");
    (status.code(), text(stdout), text(stderr))
}

/// The line of `text` that starts with `start`, whitespace collapsed.
fn row(text: &str, start: &str) -> String {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting with {start:?} in:\n{text}"))
}

#[test]
fn check_accepts_the_quickstart_and_prints_its_profiles() {
    let path = quickstart();
    let (code, out, err) = run(&["check", path.to_str().expect("a UTF-8 path")]);
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("OK: startup would accept this configuration"), "{out}");
    assert_eq!(row(&out, "profiles"), "profiles (default: anonymous):");
    assert_eq!(row(&out, "anonymous "), "anonymous 30/min 5 10s");
    assert_eq!(row(&out, "standard "), "standard 120/min 10 5s");
    assert_eq!(row(&out, "premium "), "premium 1200/min 50 2.5s");
    assert!(out.contains("rules (first match wins):\n  (none)"), "{out}");
    assert!(out.contains("jwt: no key source in the file"), "{out}");
    assert!(err.is_empty(), "{err}");
}

const GATEWAY: &str = r#"default_profile = "anonymous"

[profiles.anonymous]
rate = "30/min"
burst = 5

[profiles.standard]
rate = "600/min"
burst = 60

[profiles.premium]
rate = "6000/min"
burst = 200

[routes."api.write"]
cost = 2

[routes."users.get"]
profile = "standard"

[ip]
trusted_proxies = ["10.0.0.0/8"]

[jwt]
max_rate = "12000/min"
max_burst = 400

[[rules]]
name = "api.write"
path = "/api/{*rest}"
methods = ["POST", "PUT", "DELETE"]
key = "jwt_claim:sub"
resolve = ["jwt", "profile:standard", "default"]

[[rules]]
name = "api.read"
path = "/api/{*rest}"
key = "ip"
resolve = ["jwt", "default"]
shadow = true

[[rules]]
name = "partner"
path = "/partner/{*rest}"
key = "header:x-api-key"
resolve = ["default"]
"#;

#[test]
fn check_prints_routes_and_rules_with_overrides() {
    let path = file("gateway.toml", GATEWAY);
    let (code, out, err) = run(&["check", path.to_str().expect("UTF-8")]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(row(&out, "api.write -"), "api.write - 2 - rule api.write");
    assert_eq!(
        row(&out, "users.get "),
        "users.get standard - - an attribute route (checked by the application's own check)"
    );
    assert_eq!(
        row(&out, "1 api.write"),
        "1 api.write POST,PUT,DELETE /api/{*rest} jwt_claim:sub jwt -> profile:standard -> default 2 (routes) false"
    );
    assert_eq!(
        row(&out, "2 api.read"),
        "2 api.read any /api/{*rest} ip jwt -> default 1 true"
    );
}

#[test]
fn check_reports_every_startup_problem_at_its_line_and_column() {
    let text = r#"[profiles.standard]
rate = "600/min"

[jwt]
max_rate = "6000/min"
max_burst = 100
pem_file = "/nonexistent/ratelimit-cli-test/key.pem"
algorithm = "RS256"

[service]
url = "http://limits.internal/v1"
id_secret_env = "RL_CLI_UNSET_ID_SECRET"

[global]
redis_url = "redis://cache.internal:notaport/0"
key_secret_env = "RL_CLI_UNSET_FLEET_SECRET"
"#;
    let path = file("startup.toml", text);
    let name = path.to_str().expect("UTF-8");
    let (code, out, err) = run(&["check", name]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 5, "four problems and a summary:\n{err}");
    assert!(
        lines[0].starts_with(&format!(
            "{name}:7:1: jwt.pem_file: /nonexistent/ratelimit-cli-test/key.pem: No such file"
        )),
        "{err}"
    );
    assert_eq!(
        lines[1],
        format!(
            "{name}:12:1: service.id_secret_env: the environment variable RL_CLI_UNSET_ID_SECRET is not set (the \
             secret client ids are keyed with: at least 32 bytes, shared with the limit service)"
        )
    );
    assert!(
        lines[2].starts_with(&format!(
            "{name}:15:1: global.redis_url: redis url \"redis://cache.internal:notaport/0\""
        )),
        "{err}"
    );
    assert!(
        lines[3].starts_with(&format!(
            "{name}:16:1: global.key_secret_env: the environment variable RL_CLI_UNSET_FLEET_SECRET is not set"
        )),
        "{err}"
    );
    assert_eq!(
        lines[4],
        format!("ratelimit check: 4 problems startup would refuse {name} for")
    );
    assert!(out.is_empty(), "nothing on stdout: {out}");
}

#[test]
fn check_reports_a_missing_pem_file_and_an_unset_hmac_variable() {
    let pem = "[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"60/min\"\nmax_burst = 5\npem_file = \"no-such-key.pem\"\nalgorithm = \"ES256\"\n";
    let path = file("pem.toml", pem);
    let name = path.to_str().expect("UTF-8");
    let (code, _, err) = run(&["check", name]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "{name}:6:1: jwt.pem_file: no-such-key.pem: No such file or directory"
        )),
        "{err}"
    );
    let hmac = "[profiles.a]\nrate = \"1/s\"\n[jwt]\nmax_rate = \"60/min\"\nmax_burst = 5\nalgorithm = \"HS256\"\nhmac_secret_env = \"RL_CLI_JWT_SECRET\"\n";
    let path = file("hmac.toml", hmac);
    let name = path.to_str().expect("UTF-8");
    let (code, _, err) = run(&["check", name]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "{name}:7:1: jwt.hmac_secret_env: the environment variable RL_CLI_JWT_SECRET is not set"
        )),
        "{err}"
    );
    // Set, it passes.
    let out = Command::new(BIN)
        .env("RL_CLI_JWT_SECRET", "a secret long enough for HS256, 32+ bytes")
        .args(["check", name])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn check_locates_the_first_error_of_a_file_that_does_not_load() {
    let path = file("bad-rate.toml", "[profiles.a]\nrate = \"10/fortnight\"\n");
    let name = path.to_str().expect("UTF-8");
    let (code, _, err) = run(&["check", name]);
    assert_eq!(code, Some(1));
    let first = err.lines().next().expect("an error line");
    assert!(
        first.starts_with(&format!(
            "{name}:2:8: profiles.a.rate: invalid rate \"10/fortnight\": unknown period unit"
        )),
        "{err}"
    );
    assert!(err.contains("does not load: 1 problem"), "{err}");
    let (code, _, err) = run(&["check", "/nonexistent/ratelimit.toml"]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with("/nonexistent/ratelimit.toml: cannot read the file"),
        "{err}"
    );
}

#[test]
fn explain_a_matching_rule() {
    let path = file("explain-match.toml", GATEWAY);
    let name = path.to_str().expect("UTF-8");
    let (code, out, err) = run(&[
        "explain",
        name,
        "--method",
        "GET",
        "--path",
        "/api/orders?page=2",
        "--peer",
        "198.51.100.7",
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(
        row(&out, "rule:"),
        "rule: #2 \"api.read\" (any /api/{*rest}; first match wins, rule #1 did not match)"
    );
    assert_eq!(row(&out, "key:"), "key: ip: the client address 198.51.100.7");
    assert_eq!(row(&out, "1. jwt"), "1. jwt: no verified token: no answer, next step");
    assert_eq!(
        row(&out, "2. default"),
        "2. default: answers: profile anonymous (default_profile = \"anonymous\"; always answers)"
    );
    assert_eq!(
        row(&out, "would apply:"),
        "would apply: profile anonymous: rate 30/min, burst 5, cost 1, window 10s, shadow (never rejected)"
    );
}

#[test]
fn explain_a_path_no_rule_matches() {
    let path = file("explain-none.toml", GATEWAY);
    let (code, out, _) = run(&[
        "explain",
        path.to_str().expect("UTF-8"),
        "--method",
        "GET",
        "--path",
        "/health",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(
        row(&out, "rule:"),
        "rule: none of the 3 [[rules]] entries matches: the config-driven layer does not limit this request"
    );
    assert!(!out.contains("would apply"), "{out}");
    // A header key: present, or absent and falling back to the address.
    let name = path.to_str().expect("UTF-8");
    let (_, out, _) = run(&[
        "explain",
        name,
        "--method",
        "GET",
        "--path",
        "/partner/a",
        "--header",
        "X-Api-Key: k1",
    ]);
    assert!(
        row(&out, "key:").starts_with("key: header x-api-key: present (its value, hashed, is the key"),
        "{out}"
    );
    let (_, out, _) = run(&[
        "explain",
        name,
        "--method",
        "GET",
        "--path",
        "/partner/a",
        "--peer",
        "192.0.2.1",
    ]);
    assert_eq!(
        row(&out, "key:"),
        "key: header x-api-key: absent, empty or sent more than once, so the key falls back to the client address \
         192.0.2.1"
    );
    // POST /api is the write rule's, not the read rule's.
    let (_, out, _) = run(&[
        "explain",
        path.to_str().expect("UTF-8"),
        "--method",
        "post",
        "--path",
        "/api/x",
    ]);
    assert!(row(&out, "rule:").starts_with("rule: #1 \"api.write\""), "{out}");
}

#[test]
fn explain_reads_a_forwarded_header_only_from_a_trusted_peer() {
    let path = file("explain-proxy.toml", GATEWAY);
    let name = path.to_str().expect("UTF-8");
    let xff = "x-forwarded-for: 6.6.6.6, 203.0.113.9, 10.0.0.3";
    let (_, out, _) = run(&[
        "explain", name, "--method", "GET", "--path", "/api/a", "--peer", "10.1.2.3", "--header", xff,
    ]);
    assert_eq!(
        row(&out, "client address:"),
        "client address: 203.0.113.9 (peer 10.1.2.3 is a trusted proxy, [ip] trusted_proxies: read from \
         x-forwarded-for, right to left, skipping trusted hops)"
    );
    assert_eq!(row(&out, "key:"), "key: ip: the client address 203.0.113.9");
    let (_, out, _) = run(&[
        "explain",
        name,
        "--method",
        "GET",
        "--path",
        "/api/a",
        "--peer",
        "198.51.100.7",
        "--header",
        xff,
    ]);
    assert_eq!(
        row(&out, "client address:"),
        "client address: 198.51.100.7 (peer 198.51.100.7 is not a trusted proxy: its x-forwarded-for header is ignored)"
    );
    assert_eq!(row(&out, "key:"), "key: ip: the client address 198.51.100.7");
    // IPv6 clients are keyed by their /64.
    let (_, out, _) = run(&[
        "explain",
        name,
        "--method",
        "GET",
        "--path",
        "/api/a",
        "--peer",
        "2001:db8:1:2::7",
    ]);
    assert_eq!(
        row(&out, "keyed as"),
        "keyed as 2001:db8:1:2:: ([ip] prefixes: addresses in one prefix share a bucket)"
    );
}

/// A token with these claims, signed with nothing the checker could verify.
fn token(claims: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims);
    format!("{header}.{payload}.not-a-signature")
}

#[test]
fn explain_shows_a_tokens_tier_as_unverified() {
    let path = file("explain-token.toml", GATEWAY);
    let name = path.to_str().expect("UTF-8");
    let auth = format!(
        "authorization: Bearer {}",
        token(r#"{"sub":"alice","ratelimit_tier":"premium","exp":4102444800}"#)
    );
    let (code, out, err) = run(&[
        "explain",
        name,
        "--method",
        "PUT",
        "--path",
        "/api/orders/7",
        "--peer",
        "198.51.100.7",
        "--header",
        &auth,
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        row(&out, "token:").starts_with("token: a bearer token (HS256), decoded WITHOUT verification"),
        "{out}"
    );
    assert_eq!(
        row(&out, "tier claim"),
        "tier claim ratelimit_tier: \"premium\" (unverified)"
    );
    assert_eq!(
        row(&out, "key:"),
        "key: claim sub = \"alice\" from the token (unverified: the key if the token verifies; otherwise the client \
         address 198.51.100.7)"
    );
    assert_eq!(
        row(&out, "1. jwt"),
        "1. jwt: if the token verifies: answers: profile premium (from claim ratelimit_tier); otherwise: no verified \
         token: no answer, next step"
    );
    assert_eq!(
        row(&out, "2. profile:standard"),
        "2. profile:standard: if the token verifies: not reached; otherwise: answers: profile standard (always answers)"
    );
    assert_eq!(row(&out, "3. default"), "3. default: not reached");
    assert_eq!(
        row(&out, "would apply if the token verifies:"),
        "would apply if the token verifies: profile premium: rate 6000/min, burst 200, cost 2 ([routes.\"api.write\"]), \
         window 2s, enforced"
    );
    assert_eq!(
        row(&out, "would apply otherwise"),
        "would apply otherwise (anonymous): profile standard: rate 600/min, burst 60, cost 2 ([routes.\"api.write\"]), \
         window 6s, enforced"
    );
    // Numbers in the token, capped by [jwt] max_rate and max_burst.
    let auth = format!(
        "authorization: Bearer {}",
        token(r#"{"sub":"bob","ratelimit_rpm":99999,"ratelimit_burst":9999}"#)
    );
    let (_, out, _) = run(&[
        "explain", name, "--method", "POST", "--path", "/api/x", "--header", &auth,
    ]);
    assert_eq!(
        row(&out, "would apply if the token verifies:"),
        "would apply if the token verifies: the token's numbers: rate 12000/min, burst 400, cost 2 \
         ([routes.\"api.write\"]), window 2s, enforced"
    );
    // Not a JWT: anonymous.
    let (_, out, _) = run(&[
        "explain",
        name,
        "--method",
        "POST",
        "--path",
        "/api/x",
        "--header",
        "authorization: Bearer garbage",
    ]);
    assert!(row(&out, "token:").starts_with("token: not a readable JWT"), "{out}");
    assert!(
        row(&out, "would apply:").starts_with("would apply: profile standard"),
        "{out}"
    );
}

#[test]
fn usage_mistakes_exit_2() {
    let (code, _, err) = run(&["explain", "x.toml", "--method", "GET"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("explain needs --method and --path"), "{err}");
    let (code, _, err) = run(&[
        "explain",
        "x.toml",
        "--method",
        "GET",
        "--path",
        "/",
        "--peer",
        "not-an-ip",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("expected an IP address"), "{err}");
    let (code, _, err) = run(&[
        "explain", "x.toml", "--method", "GET", "--path", "/", "--header", "no colon",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("expected \"name: value\""), "{err}");
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt as _;
        let out = Command::new(BIN)
            .arg("check")
            .arg(std::ffi::OsStr::from_bytes(b"bad-\xff.toml"))
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("is not valid Unicode"));
    }
    let (code, _, _) = run(&["frobnicate"]);
    assert_eq!(code, Some(2));
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("ratelimit check FILE"), "{out}");
}

const STACKED: &str = r#"default_profile = "standard"

[profiles.standard]
rate = "60/min"
burst = 5

[profiles.tight]
rate = "6/min"
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
name = "open"
path = "/open"
key = "ip"
resolve = ["default"]

[[rules]]
name = "login"
path = "/login"
key = "ip"
resolve = ["profile:tight", "default"]
"#;

/// A rule stacked under the first match is shown with its own key, steps
/// and numbers; a rule that does not match is skipped; a probe method is
/// decided, never charged.
#[test]
fn explain_shows_stacked_rules_and_probes() {
    let path = file("explain-stacked.toml", STACKED);
    let name = path.to_str().expect("UTF-8");
    let (code, out, err) = run(&[
        "explain",
        name,
        "--method",
        "POST",
        "--path",
        "/login",
        "--peer",
        "192.0.2.1",
    ]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let rules: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with("rule:"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        rules,
        [
            "rule: #1 \"all\" (any /{*rest}; first match wins; stack = true: the next matching rule applies too)",
            "rule: #3 \"login\" (any /login; stacked under #1: one decision, admitted only if every rule of the stack \
             admits, none charged otherwise)",
        ],
        "{out}"
    );
    let applies: Vec<&str> = out.lines().filter(|l| l.starts_with("would apply:")).collect();
    assert_eq!(
        applies,
        [
            "would apply: profile standard: rate 60/min, burst 5, cost 1, window 5s, enforced",
            "would apply: profile tight: rate 6/min, burst 2, cost 1, window 20s, enforced",
        ],
        "{out}"
    );
    assert!(!out.contains("probe"), "{out}");

    let (_, out, _) = run(&["explain", name, "--method", "HEAD", "--path", "/login"]);
    assert!(
        row(&out, "probe:")
            .starts_with("probe: HEAD is a probe method ([responses] probe_methods): the limiter answers it itself"),
        "{out}"
    );
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("cost 1 (a probe: decided at this cost, never charged)"))
            .count(),
        2,
        "{out}"
    );
}

#[test]
fn check_reports_every_refused_value_of_a_file_that_does_not_load() {
    let text = r#"default_profile = "standard"

[profiles.standard]
rate = "600/min"

[profiles.premium]
rate = "6000/min"
brust = 100

[store]
sweep_interval = "10 seconds later"

[ip]
trusted_proxies = ["10.0.0.0/8", "not-a-cidr"]

[[rules]]
name = "a"
path = "/a"
key = "ip"
resolve = ["default"]
cost = 0

[[rules]]
name = "b"
path = "/b"
key = "ip"
resolve = ["default"]
shadow = "yes"

[colour]
x = 1
"#;
    let path = file("many.toml", text);
    let name = path.to_str().expect("UTF-8");
    let (code, out, err) = run(&["check", name]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    let want = [
        "8:1: profiles.premium.brust: unknown field `brust`, expected one of `rate`, `burst`, `concurrency`",
        "11:18: store.sweep_interval: invalid duration \"10 seconds later\": unknown unit \"seconds later\"; expected \
         one of ns, us, ms, s, min, h, d, week, month",
        "14:19: ip.trusted_proxies: invalid CIDR \"not-a-cidr\"",
        "21:8: rules[0].cost: expected a whole number from 1 to 4294967295, got 0",
        "28:10: rules[1].shadow: invalid type: string \"yes\", expected a boolean",
        "30:2: colour: unknown field `colour`",
    ];
    assert_eq!(lines.len(), want.len() + 1, "{err}");
    for (line, want) in lines.iter().zip(want) {
        assert!(line.starts_with(&format!("{name}:{want}")), "{line:?} is not {want:?}");
    }
    assert!(
        lines[6].starts_with(&format!("ratelimit check: {name} does not load: 6 problems")),
        "{err}"
    );
}

#[test]
fn check_reports_every_refused_rule() {
    let text = r#"[profiles.standard]
rate = "600/min"
burst = 5

[[rules]]
name = "a"
path = "/a"
key = "cookie:sid"
resolve = ["default"]

[[rules]]
name = "ok"
path = "/ok"
key = "ip"
resolve = ["default"]

[[rules]]
name = "b"
path = "b"
key = "ip"
resolve = ["default"]

[[rules]]
name = "c"
path = "/c"
key = "ip"
resolve = ["profile:gold", "default"]

[[rules]]
name = "d"
path = "/d"
key = "ip"
resolve = ["default"]
cost = 9

[responses]
problem_title = " "
"#;
    let path = file("rules.toml", text);
    let name = path.to_str().expect("UTF-8");
    let (code, _, err) = run(&["check", name]);
    assert_eq!(code, Some(1), "{err}");
    let lines: Vec<String> = err.lines().map(str::to_owned).collect();
    let want = [
        format!(
            "{name}:8:1: rules[0].key: unknown key \"cookie\"; expected \"ip\", \"header:<name>\", \
             \"jwt_claim:<claim>\", \"route\" or \"custom:<name>\""
        ),
        format!("{name}:19:1: rules[2].path: path \"b\" must start with '/'"),
        format!("{name}:27:1: rules[3].resolve: unknown profile \"gold\"; defined profiles: standard"),
        format!(
            "{name}:34:1: rules[4].cost: cost 9 is above the burst 5 of profile \"standard\": every request would \
             be refused"
        ),
        format!("{name}:37:1: responses.problem_title: empty title"),
    ];
    assert_eq!(lines.len(), want.len() + 1, "{err}");
    assert_eq!(&lines[..5], &want[..], "{err}");
}

#[test]
fn check_warns_about_a_daily_profile_the_fleet_gate_limits_locally_and_passes() {
    let text = "default_profile = \"daily\"\n\n[profiles.daily]\nrate = \"10000/d\"\nburst = 20\n\n\
                [profiles.standard]\nrate = \"600/min\"\n\n[global]\nredis_url = \"redis://127.0.0.1:6379/\"\n\
                key_secret_env = \"RL_CLI_LONG_FLEET_SECRET\"\n";
    let path = file("long.toml", text);
    let name = path.to_str().expect("UTF-8");
    let out = Command::new(BIN)
        .env("RL_CLI_LONG_FLEET_SECRET", "a fleet secret of 16+ bytes")
        .args(["check", name])
        .output()
        .expect("runs");
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).expect("UTF-8"),
        String::from_utf8(out.stderr).expect("UTF-8"),
    );
    assert_eq!(out.status.code(), Some(0), "a warning is not an error: {stderr}");
    assert!(
        stdout.starts_with(&format!(
            "{name}: OK: startup would accept this configuration (1 warning)"
        )),
        "{stdout}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let first = format!("{name}:4:1: profiles.daily.rate: warning: 10000/d has a period of 1d");
    for needle in [
        first.as_str(),
        "[global] window = 10s",
        "locally only",
        "a [global] window of at least 173s",
        "limit service",
    ] {
        assert!(lines[0].contains(needle), "{needle:?} in {stderr}");
    }
    assert_eq!(row(&stdout, "daily "), "daily 10000/d 20 172.8s");
}

/// A `[routes]` profile the rules of its name never reach (a `profile:..`
/// step answers first): a warning at the rule, saying startup refuses it
/// unless an attribute route of that name (which the file cannot show)
/// reaches `default`.
#[test]
fn check_warns_of_a_routes_profile_no_rule_reaches() {
    let text = "default_profile = \"a\"\n[profiles.a]\nrate = \"10/s\"\n[profiles.c]\nrate = \"5/s\"\n\
                [routes.\"api.x\"]\nprofile = \"c\"\n\
                [[rules]]\nname = \"api.x\"\npath = \"/api/{*rest}\"\nkey = \"ip\"\nresolve = [\"profile:a\", \"default\"]\n";
    let path = file("unreached.toml", text);
    let (code, stdout, stderr) = run(&["check", path.to_str().unwrap()]);
    let all = format!("{stdout}{stderr}");
    assert_eq!(code, Some(0), "a warning, not a failure: {all}");
    assert!(
        all.contains(":12:1: rules[0].resolve: warning: [routes.\"api.x\"] profile = \"c\" is never used"),
        "{all}"
    );
    assert!(
        all.contains("unless an attribute route named \"api.x\" reaches `default`"),
        "{all}"
    );
}
