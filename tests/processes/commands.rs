//! The quickstart's own `check` and `explain`, as real processes: the
//! config file together with the `#[rate_limit]` routes compiled into the
//! binary, the request dispatched by the quickstart's real router.

use std::process::{Command, Output};

use crate::support::quickstart as examples;

fn quickstart(args: &[&str]) -> Output {
    Command::new(examples::example_binary("quickstart"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the quickstart runs")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn explain_names_the_attribute_route_the_router_sends_a_path_to() {
    let out = quickstart(&["explain", "--method", "GET", "--path", "/public", "--peer", "192.0.2.7"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "attribute route: \"quickstart::public\" (#[rate_limit] on quickstart::public, examples/quickstart.rs:"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("key: ip: the client address 192.0.2.7"), "{stdout}");
    assert!(
        stdout.contains("would apply: profile anonymous: rate 30/min, burst 5, cost 1, window 10s, enforced"),
        "{stdout}"
    );
    // Another path, another route and its own chain.
    let out = quickstart(&["explain", "--method", "GET", "--path", "/export?ms=10"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("attribute route: \"quickstart::export\""), "{stdout}");
    assert!(
        stdout.contains("profile exports: rate 60/min, burst 20, at most 3 in flight"),
        "{stdout}"
    );
    // No route there: the router's 404, nothing limited.
    let out = quickstart(&["explain", "--method", "GET", "--path", "/nowhere"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success());
    assert!(
        stdout.contains("router: answered 404 Not Found without reaching a #[rate_limit] route"),
        "{stdout}"
    );
    assert!(!stdout.contains("attribute route:"), "{stdout}");
}

#[test]
fn check_covers_the_config_file_and_the_attribute_routes() {
    let out = quickstart(&["check"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("OK: startup would accept this configuration"),
        "{stdout}"
    );
    assert!(stdout.contains("attribute routes of this program"), "{stdout}");
    assert!(
        stdout.contains(
            "\"quickstart::export\"  quickstart::export  key = ip, resolve = [profile(\"exports\"), default]"
        ),
        "{stdout}"
    );
    // A file without the profile a route names: refused, naming the route.
    let dir = std::env::temp_dir().join(format!("ratelimit-commands-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("no-exports.toml");
    let original = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.toml")).unwrap();
    let start = original
        .find("[profiles.exports]")
        .expect("the quickstart has an exports profile");
    let end = original[start + 1..]
        .find("\n[")
        .map_or(original.len(), |e| start + 1 + e + 1);
    std::fs::write(&file, format!("{}{}", &original[..start], &original[end..])).unwrap();
    let out = quickstart(&["--config", file.to_str().unwrap(), "check"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "#[rate_limit] route \"quickstart::export\" (handler quickstart::export, examples/quickstart.rs:"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("profile(\"exports\") is not a profile of the configuration"),
        "{stderr}"
    );
    // And the service itself refuses to start on it, saying the same.
    let out = quickstart(&["--config", file.to_str().unwrap(), "--addr", "127.0.0.1:0"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("profile(\"exports\") is not a profile of the configuration"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
