// No `resolve`: the attribute does not say how much.
use ratelimit::rate_limit;

#[rate_limit(key = ip)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
