// The same profile step twice: `profile("a")`.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [profile("a"), profile("a"), default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
