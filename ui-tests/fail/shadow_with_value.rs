// `shadow` is a flag and takes no value.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], shadow = true)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
