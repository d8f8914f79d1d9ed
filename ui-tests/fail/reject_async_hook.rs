// A rejection hook is a plain function: it runs on the request path and
// must not wait.
use ratelimit::axum::Rejection;
use ratelimit::rate_limit;

async fn busy(_r: &Rejection<'_>) -> &'static str {
    "busy"
}

#[rate_limit(key = ip, resolve = [default], reject = busy)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
