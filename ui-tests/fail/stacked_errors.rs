// Stacked attributes: two with the same name, `state` on a later one, and
// a later one with neither key nor resolve.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], name = "same")]
#[rate_limit(key = ip, resolve = [default], name = "same", state)]
#[rate_limit(cost = 2)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
