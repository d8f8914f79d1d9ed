// A handler named with a raw identifier (`r#match`).
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
async fn r#match() -> &'static str {
    "matched"
}

fn main() {
    let _ = r#match::<ratelimit::axum::RateLimit>;
}
