// The attribute placed on a struct instead of an async handler function.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default])]
struct Handler;

fn main() {}
