// `default` always answers, so a step after it would never run.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default, jwt])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
