// An unknown resolver step: there is no `tier` resolver.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [jwt, tier, default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
