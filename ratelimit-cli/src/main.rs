//! `ratelimit`: check a rate-limit configuration before deploy, and explain
//! what a request would get under it.
//!
//! ```text
//! ratelimit check FILE
//! ratelimit explain FILE --method GET --path /users/7 [--header 'name: value']... [--peer IP]
//! ```
//!
//! The checks and explanations are the library's (`ratelimit::config::check`),
//! the code startup runs; this binary parses arguments and prints.

use std::net::IpAddr;
use std::process::ExitCode;

use ratelimit::config::check::{self, Request};

const USAGE: &str = "\
usage:
  ratelimit check FILE
      Everything startup checks: the file, the key files and environment
      variables it names, URL syntax. Exit 0 and a summary, or 1 and
      FILE:LINE:COL: field: message lines.
  ratelimit explain FILE --method METHOD --path PATH [--header 'name: value']... [--peer IP]
      Which [[rules]] entry a request matches, its key, the resolution steps
      and the numbers that would apply. A bearer token is decoded without
      verification. Exit 0, or 1 when the file does not load.
  ratelimit --help | --version
";

/// Exit code of a usage mistake.
const USAGE_ERROR: u8 = 2;

fn main() -> ExitCode {
    // `std::env::args` panics on an argument that is not Unicode.
    let args: Vec<String> = match std::env::args_os().skip(1).map(|a| a.into_string()).collect() {
        Ok(args) => args,
        Err(bad) => return usage(&format!("argument {bad:?} is not valid Unicode")),
    };
    match args.first().map(String::as_str) {
        Some("check") => check_cmd(&args[1..]),
        Some("explain") => explain_cmd(&args[1..]),
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("ratelimit {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(other) => usage(&format!("unknown command {other:?}")),
        None => usage("missing command"),
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("ratelimit: {problem}\n{USAGE}");
    ExitCode::from(USAGE_ERROR)
}

fn check_cmd(args: &[String]) -> ExitCode {
    let [file] = args else {
        return usage("check takes one FILE");
    };
    let report = check::check_file(file);
    // Warnings do not fail the check: startup accepts the file.
    for w in report.warnings() {
        eprintln!("{w}");
    }
    if report.is_ok() {
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
    let n = report.errors().len();
    if report.config().is_none() {
        eprintln!(
            "ratelimit check: {file} does not load: {n} problem{} (fixing them can reveal more: checks across \
             sections stop at their first, and startup checks run once the file loads)",
            if n == 1 { "" } else { "s" }
        );
    } else {
        eprintln!(
            "ratelimit check: {n} problem{} startup would refuse {file} for",
            if n == 1 { "" } else { "s" }
        );
    }
    ExitCode::FAILURE
}

fn explain_cmd(args: &[String]) -> ExitCode {
    let Some((file, rest)) = args.split_first() else {
        return usage("explain takes a FILE");
    };
    let mut method = None;
    let mut path = None;
    let mut headers = Vec::new();
    let mut peer = None;
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let Some(value) = it.next() else {
            return usage(&format!("{flag} needs a value"));
        };
        match flag.as_str() {
            "--method" => match http::Method::from_bytes(value.to_ascii_uppercase().as_bytes()) {
                Ok(m) => method = Some(m),
                Err(_) => return usage(&format!("invalid method {value:?}")),
            },
            "--path" => path = Some(value.clone()),
            "--header" => headers.push(value.clone()),
            "--peer" => match value.parse::<IpAddr>() {
                Ok(ip) => peer = Some(ip),
                Err(_) => return usage(&format!("--peer {value:?}: expected an IP address")),
            },
            other => return usage(&format!("unknown option {other:?}")),
        }
    }
    let (Some(method), Some(path)) = (method, path) else {
        return usage("explain needs --method and --path");
    };
    let mut request = Request::new(method, path);
    for line in &headers {
        request = match request.with_header_line(line) {
            Ok(r) => r,
            Err(e) => return usage(&e.to_string()),
        };
    }
    if let Some(ip) = peer {
        request = request.with_peer(ip);
    }
    let report = check::check_file(file);
    let Some(config) = report.config() else {
        for e in report.errors() {
            eprintln!("{e}");
        }
        eprintln!("ratelimit explain: {file} does not load");
        return ExitCode::FAILURE;
    };
    print!("{}", check::explain(config, &request));
    if !report.errors().is_empty() {
        println!(
            "note: startup would refuse this configuration ({} problem{}; run `ratelimit check {file}`)",
            report.errors().len(),
            if report.errors().len() == 1 { "" } else { "s" }
        );
    }
    ExitCode::SUCCESS
}
