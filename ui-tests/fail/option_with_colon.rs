// `:` instead of `=` between an option and its value.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost: 2)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
