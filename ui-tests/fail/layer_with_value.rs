// `layer` is a flag.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], layer = true)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
