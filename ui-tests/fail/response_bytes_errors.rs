// `response_bytes` written wrong, every way at once: each error on its token.
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = response_bytes(per = 0))]
async fn zero() -> &'static str {
    "ok"
}

#[rate_limit(key = ip, resolve = [default], cost = response_bytes(per = -1))]
async fn negative() -> &'static str {
    "ok"
}

#[rate_limit(key = ip, resolve = [default], cost = response_bytes(per = 4294967296))]
async fn too_large() -> &'static str {
    "ok"
}

#[rate_limit(key = ip, resolve = [default], cost = response_bytes)]
async fn bare() -> &'static str {
    "ok"
}

#[rate_limit(key = ip, resolve = [default], cost = response_bytes(size = 10))]
async fn unknown_argument() -> &'static str {
    "ok"
}

#[rate_limit(key = ip, resolve = [default], cost = request_bytes(per = 10))]
async fn unknown_kind() -> &'static str {
    "ok"
}

fn main() {}
