// A dotted claim path as the key, with every resolver step in the chain.
use ratelimit::rate_limit;

#[rate_limit(key = jwt_claim("org.id"), resolve = [jwt, service, profile("standard"), default])]
async fn org_report() -> &'static str {
    "report"
}

fn main() {
    let _ = org_report::<ratelimit::axum::RateLimit>;
}
