// `resolve` given a single step instead of a bracketed list.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = default)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
