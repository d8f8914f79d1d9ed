// A stacked `#[rate_limit]` without arguments.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
#[rate_limit]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
