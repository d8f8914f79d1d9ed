// The smallest attribute: keyed by client address, the default profile.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async fn public() -> &'static str {
    "hello"
}

fn main() {
    // Type-checks only: nothing runs.
    let _ = public::<ratelimit::axum::RateLimit>;
}
