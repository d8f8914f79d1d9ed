// Stacked attributes: two with the same name, `layer` on a later one, and
// a later one with neither key nor resolve.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], name = "same")]
#[rate_limit(key = ip, resolve = [default], name = "same", layer)]
#[rate_limit(cost = 2)]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
