//! `ratelimit`: check a rate-limit configuration before deploy, and explain
//! what a request would get under it.
//!
//! ```text
//! ratelimit check FILE
//! ratelimit explain FILE --method GET --path /users/7 [--header 'name: value']... [--peer IP]
//! ```
//!
//! The commands are the library's (`ratelimit::axum::command::run`), the
//! code startup runs; an application runs the same over its own
//! `#[rate_limit]` routes with `ratelimit::axum::command::run_for_app`.

use std::process::ExitCode;

fn main() -> ExitCode {
    // `std::env::args` panics on an argument that is not Unicode.
    let args: Vec<String> = match std::env::args_os().skip(1).map(|a| a.into_string()).collect() {
        Ok(args) => args,
        Err(bad) => {
            eprintln!("ratelimit: argument {bad:?} is not valid Unicode (try --help)");
            return ExitCode::from(2);
        }
    };
    ratelimit::axum::command::run(&args)
}
