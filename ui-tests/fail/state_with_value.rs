// `state` is a flag.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], state = true)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
