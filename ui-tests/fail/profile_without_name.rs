// `profile` without a profile name.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [profile, default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
