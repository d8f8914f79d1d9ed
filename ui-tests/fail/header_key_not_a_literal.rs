// The header name as an identifier instead of a string literal.
use ratelimit::rate_limit;

#[rate_limit(key = header(x_api_key), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
