// Mistakes in both the function (not `async`) and the arguments (no `resolve`): both are reported.
use ratelimit::rate_limit;

#[rate_limit(key = ip)]
fn handler() -> &'static str {
    "ok"
}

fn main() {}
