// An empty resolve list.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
