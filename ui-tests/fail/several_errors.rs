// Several mistakes in one attribute: every one is reported, each on its own token.
use ratelimit::rate_limit;

#[rate_limit(key = ip, limit = 5, resolve = [default, jwt], cost = 0)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
