// The same resolver step twice: `jwt`.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [jwt, jwt, default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
