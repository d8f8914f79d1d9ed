// `ip` takes no arguments.
use ratelimit::rate_limit;

#[rate_limit(key = ip("x-forwarded-for"), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
