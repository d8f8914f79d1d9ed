use ratelimit::rate_limit;

// One unknown step: reported alone (not also as an empty list).
#[rate_limit(key = ip, resolve = [tier])]
async fn handler() {}

fn main() {}
