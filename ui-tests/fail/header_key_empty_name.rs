// An empty header name.
use ratelimit::rate_limit;

#[rate_limit(key = header(""), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
