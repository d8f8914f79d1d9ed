// A header name containing a space.
use ratelimit::rate_limit;

#[rate_limit(key = header("x api key"), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
