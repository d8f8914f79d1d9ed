// An unknown key kind: there is no `cookie(...)` key.
use ratelimit::rate_limit;

#[rate_limit(key = cookie("session"), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
