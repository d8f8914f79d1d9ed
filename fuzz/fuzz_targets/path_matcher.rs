//! The `[[rules]]` path matcher against axum's own dispatch: whenever the
//! router built from a pattern sends a path to its route, the rule written
//! with that pattern matches the path (a rule may match more, never less).
//! Input: a pattern line, a newline, then the path. Run: see fuzz/README.md.
#![no_main]

use std::sync::OnceLock;

use axum::body::Body;
use axum::routing::any;
use axum::Router;
use libfuzzer_sys::fuzz_target;
use ratelimit::config::PathPattern;
use tower::ServiceExt;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Some((pattern, path)) = text.split_once('\n') else { return };
    let Ok(rule) = PathPattern::parse(pattern) else { return };
    let Ok(uri) = path.parse::<http::Uri>() else { return };
    // axum panics on patterns it does not accept (a segment starting with
    // `*` or `:`, a catch-all followed by `/`); such a rule describes no
    // route. libFuzzer's panic hook aborts the process, so it is swapped
    // for a silent one around the call, and the panic caught.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let router = std::panic::catch_unwind(|| Router::new().route(pattern, any(|| async { "route" })));
    std::panic::set_hook(hook);
    let Ok(router) = router else { return };
    let app = router.fallback(|| async { "fallback" });
    let dispatched = runtime().block_on(async {
        let request = http::Request::builder().uri(uri.clone()).body(Body::empty()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        let body = axum::body::to_bytes(response.into_body(), 64).await.unwrap();
        &body[..] == b"route"
    });
    if dispatched {
        assert!(rule.matches(uri.path()), "axum sends {path:?} to {pattern:?}; the rule does not match");
    }
});
