// A method taking `self`: the attribute only supports free async functions.
use ratelimit::rate_limit;

struct Api;

impl Api {
    #[rate_limit(key = ip, resolve = [default])]
    async fn handler(&self) -> &'static str {
        "ok"
    }
}

fn main() {}
