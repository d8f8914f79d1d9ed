// `crate` takes the path as a string, as tokio's attribute does.
use ratelimit::rate_limit;

#[rate_limit(crate = ratelimit, key = ip, resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
