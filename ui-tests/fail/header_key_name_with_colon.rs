// A header name with a character that is not a token character (`:`).
use ratelimit::rate_limit;

#[rate_limit(key = header("x:api"), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
