// An option with no value: `key` alone.
use ratelimit::rate_limit;

#[rate_limit(key, resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
