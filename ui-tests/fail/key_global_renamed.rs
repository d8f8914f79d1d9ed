// `key = global` (0.1) is `key = route`: the word `global` is the fleet gate.
use ratelimit::rate_limit;

#[rate_limit(key = global, resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
