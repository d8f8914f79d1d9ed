// The attribute written by its full path, without a `use`.
#[ratelimit::rate_limit(key = ip, resolve = [default])]
async fn public() -> &'static str {
    "hello"
}

fn main() {
    let _ = public::<ratelimit::axum::RateLimit>;
}
