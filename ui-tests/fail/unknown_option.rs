// An unknown option: `limit` is not one of `key`, `resolve`, `name`, `cost`, `shadow`, `layer`, `reject`, `crate`.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], limit = 5)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
