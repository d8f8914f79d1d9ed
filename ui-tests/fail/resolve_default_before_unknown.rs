use ratelimit::rate_limit;

// `default` before the end is reported even when a later step does not parse.
#[rate_limit(key = ip, resolve = [default, tier])]
async fn handler() {}

fn main() {}
