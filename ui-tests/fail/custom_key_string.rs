// `custom` names a key type, not a string (that is the config's spelling).
use ratelimit::rate_limit;

#[rate_limit(key = custom("tenant"), resolve = [default])]
async fn handler() -> &'static str {
    "ok"
}

fn main() {}
