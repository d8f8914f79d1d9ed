// `reject` names a function.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], reject = "busy")]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
