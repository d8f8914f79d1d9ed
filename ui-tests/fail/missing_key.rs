// No `key`: the attribute does not say who is limited.
use ratelimit::rate_limit;

#[rate_limit(resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
