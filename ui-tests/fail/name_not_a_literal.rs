// The route name as a path instead of a string literal.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], name = users.get)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
