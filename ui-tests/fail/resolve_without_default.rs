// A resolve list that does not end with `default`.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [jwt, profile("standard")])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
