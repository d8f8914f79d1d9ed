//! The `check` and `explain` commands: the `ratelimit` binary's (a
//! configuration file alone) and an application's own (the file together
//! with the attribute routes compiled into the application, the request
//! dispatched by its real router).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;

use tower_service::Service as _;

use super::runtime::{Explained, EXPLAIN};
use super::RateLimit;
use crate::runtime::config::check::{self, CheckReport, Request};
use crate::runtime::config::Config;

impl super::runtime::Runtime {
    /// Makes this runtime `explain`'s: every request is a probe whose
    /// answer only names the limited routes it reached.
    fn explain_only(&self) {
        self.probes.fetch_or(EXPLAIN, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Exit code of a usage mistake.
const USAGE_ERROR: u8 = 2;

const FILE_USAGE: &str = "\
usage:
  ratelimit check FILE
      Everything startup checks: the file, the key files and environment
      variables it names, URL syntax. Exit 0 and a summary, or 1 and
      FILE:LINE:COL: field: message lines.
  ratelimit explain FILE --method METHOD --path PATH [--header 'name: value']... [--peer IP]
      Which [[rules]] entry a request matches, its key, the resolution steps
      and the numbers that would apply. A bearer token is decoded without
      verification. Exit 0, or 1 when the file does not load.
      #[rate_limit] routes are in the application, not the file: the
      application's own binary explains them (see docs/config.md).
  ratelimit --help | --version
";

const APP_USAGE: &str = "\
usage (the application's configuration file and its #[rate_limit] routes):
  check
      Everything startup checks: the file, and every #[rate_limit] route of
      this program against it (the profiles it names exist, its cost fits
      the bursts its chain reaches). Exit 0 and a summary, or 1 and one line
      per problem.
  explain --method METHOD --path PATH [--header 'name: value']... [--peer IP]
      What a request would get: the request goes through the application's
      own router (nothing is charged, no handler runs), and each limit that
      applies, a [[rules]] entry or a #[rate_limit] route, is shown with its
      key, its steps and its numbers. A bearer token is decoded without
      verification. Exit 0, or 1 when the file does not load.
";

/// The `ratelimit` binary: `check FILE` and `explain FILE --method M --path
/// P ...` over a configuration file alone. `args` are the command line
/// after the program's name.
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     let args: Vec<String> = std::env::args().skip(1).collect();
///     ratelimit::axum::command::run(&args)
/// }
/// ```
pub fn run(args: &[String]) -> ExitCode {
    match args.first().map(String::as_str) {
        Some("check") => match &args[1..] {
            [file] => print_check(check::check_file(file), file, &[]),
            _ => usage(FILE_USAGE, "check takes one FILE"),
        },
        Some("explain") => {
            let Some((file, flags)) = args[1..].split_first() else {
                return usage(FILE_USAGE, "explain takes a FILE");
            };
            let request = match request(flags) {
                Ok(r) => r,
                Err(problem) => return usage(FILE_USAGE, &problem),
            };
            let report = check::check_file(file);
            let Some(config) = report.config() else {
                return not_loaded(&report, file);
            };
            print!("{}", check::explain(config, &request));
            note_refusal(&report, &format!("ratelimit check {file}"));
            ExitCode::SUCCESS
        }
        Some("-h" | "--help" | "help") => {
            print!("{FILE_USAGE}");
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("ratelimit {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(other) => usage(FILE_USAGE, &format!("unknown command {other:?}")),
        None => usage(FILE_USAGE, "missing command"),
    }
}

/// An application's own `check` and `explain`, over its configuration file
/// and the `#[rate_limit]` routes compiled into it: call it from `main`
/// when the first argument is `check` or `explain` (`args` from there on),
/// with the file the application loads and a function that builds its
/// router around a runtime (the same router it serves, with any state and
/// layers). `explain` sends the request through that router, with a runtime
/// that only notes which limited routes the request reaches (nothing is
/// charged, and a `#[rate_limit]` handler does not run: its limit answers
/// first), then explains each from the file.
///
/// A path whose route has no `#[rate_limit]` reaches its handler, which
/// runs as the router would run it, with the state `router` built: build
/// that state without live connections (the quickstart's has none), and
/// explain the paths of limited routes. `explain` says when the router
/// answered without reaching a limited route.
///
/// ```no_run
/// use axum::{routing::get, Router};
/// use ratelimit::axum::RateLimit;
/// use ratelimit::rate_limit;
///
/// #[rate_limit(key = ip, resolve = [default])]
/// async fn public() -> &'static str {
///     "hello"
/// }
///
/// fn router(rate_limit: RateLimit) -> Router {
///     Router::new().route("/public", get(public)).with_state(rate_limit)
/// }
///
/// #[tokio::main]
/// async fn main() -> std::process::ExitCode {
///     let args: Vec<String> = std::env::args().skip(1).collect();
///     if matches!(args.first().map(String::as_str), Some("check" | "explain")) {
///         // `my-service explain --method GET --path /public`
///         return ratelimit::axum::command::run_for_app(&args, "limits.toml".as_ref(), router).await;
///     }
///     // ... serve as usual
///     std::process::ExitCode::SUCCESS
/// }
/// ```
pub async fn run_for_app<F>(args: &[String], config_file: &Path, router: F) -> ExitCode
where
    F: FnOnce(RateLimit) -> axum::Router,
{
    let file = config_file.display().to_string();
    match args.first().map(String::as_str) {
        Some("check") if args.len() == 1 => {
            let report = check::check_file(config_file);
            let routes = super::registry::routes_under("");
            let problems = match report.config() {
                Some(config) => {
                    let mut problems = super::registry::check(&routes, config);
                    problems.extend(super::registry::orphan_overrides(config));
                    problems.extend(super::registry::unreached_overrides(&routes, config));
                    problems
                }
                None => Vec::new(),
            };
            let code = print_check(report, &file, &problems);
            if problems.is_empty() && code == ExitCode::SUCCESS {
                println!("\nattribute routes of this program (#[rate_limit], checked against the file):");
                if routes.is_empty() {
                    println!("  (none)");
                }
                for r in &routes {
                    let (source, line) = r.location();
                    println!(
                        "  {:?}  {}  key = {}, resolve = [{}], cost {}{}  ({source}:{line})",
                        r.name(),
                        r.handler(),
                        r.key(),
                        r.resolve().join(", "),
                        r.cost(),
                        if r.shadow() { ", shadow" } else { "" }
                    );
                }
            }
            code
        }
        Some("check") => usage(
            APP_USAGE,
            "check takes no argument (the application's own file is checked)",
        ),
        Some("explain") => {
            let request = match request(&args[1..]) {
                Ok(r) => r,
                Err(problem) => return usage(APP_USAGE, &problem),
            };
            let report = check::check_file(config_file);
            let Some(config) = report.config() else {
                return not_loaded(&report, &file);
            };
            let reached = match reached_routes(&request, router).await {
                Ok(reached) => reached,
                Err(problem) => {
                    eprintln!("explain: {problem}");
                    return ExitCode::FAILURE;
                }
            };
            print!("{}", explain_reached(config, &request, &reached));
            note_refusal(&report, "check");
            ExitCode::SUCCESS
        }
        Some("-h" | "--help" | "help") => {
            print!("{APP_USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => usage(APP_USAGE, &format!("unknown command {other:?}")),
        None => usage(APP_USAGE, "missing command"),
    }
}

/// What the router did with the request: the limited routes it reached,
/// or the status it answered without reaching one.
enum Reached {
    Routes(Vec<String>),
    Answered(http::StatusCode),
}

/// The route names of the attribute routes the application's router sends
/// `request` to, found with a runtime that answers every request as a
/// probe noting its routes (no configuration of the application's: no
/// connection to Redis, a JWKS URL or a limit service).
async fn reached_routes<F>(request: &Request, router: F) -> Result<Reached, String>
where
    F: FnOnce(RateLimit) -> axum::Router,
{
    let config = Config::from_toml_str("[profiles.explain]\nrate = \"1/s\"\n").map_err(|e| e.to_string())?;
    let explaining = RateLimit::builder(config)
        .clock(crate::ManualClock::new())
        .routes_in("none")
        .build()
        .await
        .map_err(|e| e.to_string())?;
    explaining.inner.explain_only();
    let mut app = router(explaining);
    let mut builder = http::Request::builder()
        .method(request.method.clone())
        .uri(request.path.as_str());
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    let mut http_request = builder
        .body(axum::body::Body::empty())
        .map_err(|e| format!("the request cannot be built: {e}"))?;
    let peer = SocketAddr::new(request.peer.unwrap_or(IpAddr::from([127, 0, 0, 1])), 0);
    http_request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
    let response = app
        .call(http_request)
        .await
        .map_err(|e| format!("the router failed: {e}"))?;
    Ok(match response.extensions().get::<Explained>() {
        Some(explained) => Reached::Routes(explained.0.clone()),
        None => Reached::Answered(response.status()),
    })
}

/// The explanation of the `[[rules]]` that apply and of each attribute
/// route reached, with what the router did.
fn explain_reached(config: &Config, request: &Request, reached: &Reached) -> String {
    let all = super::registry::routes_under("");
    let mut attributes = Vec::new();
    let mut notes = Vec::new();
    match reached {
        Reached::Routes(names) => {
            for name in names {
                match all.iter().find(|r| r.name() == name) {
                    Some(route) => match super::registry::as_rule(route) {
                        Ok(rule) => attributes.push(rule),
                        Err(e) => notes.push(format!("attribute route {name:?}: {e}")),
                    },
                    None => notes.push(format!(
                        "limited route {name:?}: not an attribute route of this program"
                    )),
                }
            }
        }
        Reached::Answered(status) => notes.push(format!(
            "router: answered {status} without reaching a #[rate_limit] route (no route for this path and method, \
             a middleware answered first, or the route is not limited and its handler ran)"
        )),
    }
    let mut text = check::explain_with(config, request, &attributes).to_string();
    // This is the application's own binary: no need to point at it.
    text = text.replace(
        "  (attribute routes, #[rate_limit] in code, are not in the file: a handler's own limit may still apply; the \
         application's own binary explains them, see docs/config.md)\n",
        "",
    );
    for note in notes {
        text.push_str(&note);
        text.push('\n');
    }
    text
}

/// The request of `explain`'s flags.
fn request(flags: &[String]) -> Result<Request, String> {
    let mut method = None;
    let mut path = None;
    let mut headers = Vec::new();
    let mut peer = None;
    let mut it = flags.iter();
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            return Err(format!("{flag} needs a value"));
        };
        match flag.as_str() {
            "--method" => match http::Method::from_bytes(value.to_ascii_uppercase().as_bytes()) {
                Ok(m) => method = Some(m),
                Err(_) => return Err(format!("invalid method {value:?}")),
            },
            "--path" => path = Some(value.clone()),
            "--header" => headers.push(value.clone()),
            "--peer" => match value.parse::<IpAddr>() {
                Ok(ip) => peer = Some(ip),
                Err(_) => return Err(format!("--peer {value:?}: expected an IP address")),
            },
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    let (Some(method), Some(path)) = (method, path) else {
        return Err("explain needs --method and --path".to_owned());
    };
    let mut request = Request::new(method, path);
    for line in &headers {
        request = request.with_header_line(line).map_err(|e| e.to_string())?;
    }
    if let Some(ip) = peer {
        request = request.with_peer(ip);
    }
    Ok(request)
}

fn usage(text: &str, problem: &str) -> ExitCode {
    eprintln!("ratelimit: {problem}\n{text}");
    ExitCode::from(USAGE_ERROR)
}

/// `check`'s report, with `routes`' problems (attribute routes the file
/// cannot serve) among the errors.
fn print_check(report: CheckReport, file: &str, routes: &[String]) -> ExitCode {
    // Warnings do not fail the check: startup accepts the file.
    for w in report.warnings() {
        eprintln!("{w}");
    }
    if report.is_ok() && routes.is_empty() {
        let n = report.warnings().len();
        let warned = match n {
            0 => String::new(),
            1 => " (1 warning)".to_owned(),
            n => format!(" ({n} warnings)"),
        };
        println!("{file}: OK: startup would accept this configuration{warned}\n");
        print!("{}", report.summary());
        return ExitCode::SUCCESS;
    }
    for e in report.errors() {
        eprintln!("{e}");
    }
    for problem in routes {
        eprintln!("{file}: {problem}");
    }
    let n = report.errors().len() + routes.len();
    let (s, them) = if n == 1 { ("", "it") } else { ("s", "them") };
    if report.config().is_none() {
        eprintln!(
            "ratelimit check: {file} does not load: {n} problem{s} (fixing {them} can reveal more: checks across \
             sections stop at their first, and startup checks run once the file loads)"
        );
    } else {
        eprintln!("ratelimit check: {n} problem{s} startup would refuse {file} for");
    }
    ExitCode::FAILURE
}

fn not_loaded(report: &CheckReport, file: &str) -> ExitCode {
    for e in report.errors() {
        eprintln!("{e}");
    }
    eprintln!("ratelimit explain: {file} does not load");
    ExitCode::FAILURE
}

/// A note under an explanation when startup would refuse the file, naming
/// the command that says why.
fn note_refusal(report: &CheckReport, command: &str) {
    if !report.errors().is_empty() {
        let n = report.errors().len();
        println!(
            "note: startup would refuse this configuration ({n} problem{}; run `{command}`)",
            if n == 1 { "" } else { "s" }
        );
    }
}
