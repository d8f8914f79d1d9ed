// An `unsafe` handler: axum cannot call an unsafe fn.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async unsafe fn handler() -> &'static str {
    "ok"
}

fn main() {}
