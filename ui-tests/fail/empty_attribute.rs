// No arguments at all: both `key` and `resolve` are reported missing.
use ratelimit::rate_limit;

#[rate_limit]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
