// A route name with a character that is not allowed (a space).
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], name = "users get")]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
