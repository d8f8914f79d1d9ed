// A header key (written in uppercase: header names are case-insensitive and
// accepted in any case) with a named profile before the default.
use ratelimit::rate_limit;

#[rate_limit(key = header("X-Api-Key"), resolve = [profile("standard"), default])]
async fn search() -> &'static str {
    "results"
}

fn main() {
    let _ = search::<ratelimit::axum::RateLimit>;
}
