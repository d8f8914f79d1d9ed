// `state` was the option that found the runtime through `FromRef`; that is
// the default now, and the option says so.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], state)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
