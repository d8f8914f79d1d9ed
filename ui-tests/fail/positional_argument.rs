// A bare value where an option is expected.
use ratelimit::rate_limit;

#[rate_limit("ip", key = ip, resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
