// The runtime inside the application's state (`FromRef`, `state`), a key
// type of the application's (`custom(Type)`), one bucket per route
// (`route`) and the route's own rejection (`reject = path`).
use axum::extract::{FromRef, State};
use axum::routing::get;
use axum::Router;
use ratelimit::axum::{RateLimit, Rejection};
use ratelimit::key::{ClientKey, KeyContext, KeySource};
use ratelimit::rate_limit;

#[derive(Clone)]
struct AppState {
    db: String,
    rate_limit: RateLimit,
}

impl FromRef<AppState> for RateLimit {
    fn from_ref(s: &AppState) -> RateLimit {
        s.rate_limit.clone()
    }
}

mod keys {
    use super::*;

    #[derive(Default)]
    pub struct ByTenant;

    impl KeySource for ByTenant {
        fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
            cx.address()
        }
        fn write_id(&self, _cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn std::hash::Hasher) {
            ratelimit::key::write_address_id(key, h)
        }
    }
}

// Named like the expansion's own parameter once was.
fn rejection(r: &Rejection<'_>) -> http::Response<String> {
    http::Response::new(format!("retry in {} s", r.retry_after_secs()))
}

#[rate_limit(key = custom(keys::ByTenant), resolve = [default], reject = rejection)]
async fn orders(State(state): State<AppState>) -> String {
    state.db
}

#[rate_limit(key = route, resolve = [default])]
async fn export() -> &'static str {
    "export"
}

// A generic key type.
struct ByExt<T>(std::marker::PhantomData<fn() -> T>);

impl<T> Default for ByExt<T> {
    fn default() -> Self {
        ByExt(std::marker::PhantomData)
    }
}

impl<T: Send + Sync + std::hash::Hash + 'static> KeySource for ByExt<T> {
    fn extract(&self, cx: &mut KeyContext<'_>) -> ClientKey {
        match cx.parts().extensions.get::<T>() {
            Some(t) => ClientKey::Custom(cx.hash(t)),
            None => cx.address(),
        }
    }
    fn write_id(&self, _cx: &KeyContext<'_>, key: &ClientKey, h: &mut dyn std::hash::Hasher) {
        ratelimit::key::write_address_id(key, h)
    }
}

#[derive(Clone, Hash)]
struct TenantId(u64);

#[rate_limit(key = custom(ByExt<TenantId>), resolve = [default])]
async fn by_extension() -> &'static str {
    "generic"
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/orders", get(orders))
        .route("/export", get(export))
        .route("/generic", get(by_extension))
        .with_state(state)
}

fn main() {
    let _ = router;
}
