// An empty route name.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], name = "")]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
