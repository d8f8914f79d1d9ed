// A `custom` key type must implement `KeySource` (and `Default`).
use ratelimit::rate_limit;

#[derive(Default)]
struct NotAKey;

#[rate_limit(key = custom(NotAKey), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
