// A route charged by its response's size settles itself: a `Charge`
// argument would settle the same reservation twice.
use ratelimit::axum::Charge;
use ratelimit::rate_limit;

#[rate_limit(key = ip, resolve = [default], cost = response_bytes(per = 1024))]
async fn download(charge: Charge) -> &'static str {
    charge.settle(1);
    "ok"
}

fn main() {}
