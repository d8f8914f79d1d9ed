// Every optional setting: a stable route name, a cost per request, shadow mode.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], name = "users.get", cost = 3, shadow)]
async fn get_user() -> &'static str {
    "user"
}

fn main() {
    let _ = get_user::<ratelimit::axum::RateLimit>;
}
