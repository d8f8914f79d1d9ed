// A `pub` handler in a module, used from outside the module.
mod api {
    use ratelimit::rate_limit;

    #[rate_limit(key = ip, resolve = [profile("standard"), default])]
    pub async fn list_users() -> &'static str {
        "[]"
    }
}

fn router() -> axum::Router<ratelimit::axum::RateLimit> {
    axum::Router::new().route("/users", axum::routing::get(api::list_users))
}

fn main() {
    let _ = router;
}
