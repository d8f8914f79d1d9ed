// A handler returning `Result` and using `?` in its body.
use http::StatusCode;
use ratelimit::rate_limit;

fn parse_id(raw: &str) -> Result<u64, (StatusCode, String)> {
    raw.trim()
        .parse()
        .map_err(|_| (StatusCode::BAD_REQUEST, format!("not an id: {raw:?}")))
}

#[rate_limit(key = header("x-api-key"), resolve = [default])]
async fn lookup(body: String) -> Result<String, (StatusCode, String)> {
    let id = parse_id(&body)?;
    Ok(format!("item {id}"))
}

fn router() -> axum::Router<ratelimit::axum::RateLimit> {
    axum::Router::new().route("/lookup", axum::routing::post(lookup))
}

fn main() {
    let _ = router;
}
