use ratelimit::rate_limit;

// The invalid name is reported, not only the tokens after it.
#[rate_limit(key = header("a b") x, resolve = [default])]
async fn handler() {}

fn main() {}
