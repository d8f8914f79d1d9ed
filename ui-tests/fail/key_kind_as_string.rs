// The key kind written as a string literal instead of a bare word.
use ratelimit::rate_limit;

#[rate_limit(key = "ip", resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
