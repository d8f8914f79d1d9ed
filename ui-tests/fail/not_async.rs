// A plain `fn`: handlers must be `async fn`.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
fn handler() -> &'static str {
    "ok"
}

fn main() {}
