// An associated function (no `self`) inside an `impl` block: the attribute
// defines a rule type next to the handler, which an `impl` block cannot hold.
// Handlers are free functions.
use ratelimit::rate_limit;

struct Api;

impl Api {
    #[rate_limit(key = ip, resolve = [default])]
    async fn handler() -> &'static str {
        "ok"
    }
}

fn main() {}
