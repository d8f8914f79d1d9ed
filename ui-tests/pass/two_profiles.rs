// Two different named profiles in one chain: only repeating the same one is an error.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [profile("partner"), profile("standard"), default])]
async fn catalog() -> &'static str {
    "catalog"
}

fn main() {
    let _ = catalog::<ratelimit::axum::RateLimit>;
}
