// `jwt` takes no arguments.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [jwt("ratelimit_tier"), default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
