//! The `[[rules]]` path matcher against the router's own dispatch: a path
//! the axum router sends to a route is matched by the rule written with the
//! same pattern (a rule may match more, never less). Patterns and paths are
//! generated from the spellings that have escaped before: `.`, `..`,
//! `%2e`, empty segments, `;params`, `%2F`, percent-encoded letters, a
//! trailing slash, non-ASCII text. The same property is a fuzz target
//! (`fuzz/fuzz_targets/path_matcher.rs`).

use std::sync::OnceLock;

use axum::body::Body;
use axum::routing::any as any_method;
use axum::Router;
use http::Request;
use http_body_util::BodyExt;
use proptest::prelude::*;
use ratelimit::config::PathPattern;
use tower::ServiceExt;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().unwrap())
}

/// Whether the router built from `pattern` sends `path` to the route
/// (`None`: the router refuses the pattern, or the path is not a URI).
fn router_dispatches(pattern: &str, path: &str) -> Option<bool> {
    let uri: http::Uri = path.parse().ok()?;
    let route = std::panic::catch_unwind(|| Router::new().route(pattern, any_method(|| async { "route" }))).ok()?;
    let app = route.fallback(|| async { "fallback" });
    runtime().block_on(async {
        let request = Request::builder().uri(uri).body(Body::empty()).unwrap();
        let response = app.oneshot(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Some(&body[..] == b"route")
    })
}

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_owned()),
        // An empty segment in the pattern (`/{p}//b`).
        Just(String::new()),
        Just("users".to_owned()),
        Just("v1.json".to_owned()),
        Just("a%20b".to_owned()),
        Just("caf\u{e9}".to_owned()),
        "[a-c.;%~_-]{1,4}",
    ]
}

#[derive(Debug, Clone)]
enum Part {
    Literal(String),
    Param,
    Rest,
    /// The pattern ends with `/` (`/users/{id}/`).
    TrailingSlash,
}

fn pattern() -> impl Strategy<Value = Vec<Part>> {
    (
        prop::collection::vec(prop_oneof![literal().prop_map(Part::Literal), Just(Part::Param)], 0..4),
        0u8..4,
    )
        .prop_map(|(mut parts, end)| {
            if end == 0 || parts.is_empty() {
                parts.push(Part::Rest);
            } else if end == 1 {
                parts.push(Part::TrailingSlash);
            }
            parts
        })
}

fn pattern_text(parts: &[Part]) -> String {
    let mut text = String::new();
    for (i, p) in parts.iter().enumerate() {
        text.push('/');
        match p {
            Part::TrailingSlash => {}
            Part::Literal(l) => text.push_str(l),
            Part::Param => text.push_str(&format!("{{p{i}}}")),
            Part::Rest => text.push_str("{*rest}"),
        }
    }
    text
}

/// A segment a client might send in place of a parameter or a literal.
fn wild_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("%2e".to_owned()),
        Just("%2E%2e".to_owned()),
        Just("a;x=1".to_owned()),
        Just("a%2Fb".to_owned()),
        Just("%61".to_owned()),
        Just("caf%C3%A9".to_owned()),
        "[a-c0-9.;%~_-]{1,5}",
    ]
}

/// A path close to `parts`: each literal as written, percent-encoded, or
/// replaced; each parameter a wild segment; extra or missing segments and
/// slashes.
fn path_for(parts: Vec<Part>) -> impl Strategy<Value = String> {
    let n = parts.len();
    (
        prop::collection::vec(wild_segment(), n + 2),
        prop::collection::vec(0u8..8, n + 2),
        any::<bool>(),
    )
        .prop_map(move |(wild, choice, trailing)| {
            let mut path = String::new();
            for (i, p) in parts.iter().enumerate() {
                path.push('/');
                if matches!(p, Part::TrailingSlash) {
                    // The slash itself was pushed; sometimes drop it.
                    if choice[i] == 0 {
                        path.pop();
                    }
                    continue;
                }
                match (p, choice[i]) {
                    (Part::Literal(l), 0..=4) => path.push_str(l),
                    (Part::Literal(l), 5) => path.push_str(&l.replace('a', "%61").replace('.', "%2e")),
                    (Part::Literal(_), _) => path.push_str(&wild[i]),
                    (Part::Param, 6) => path.push_str(&format!("{}/{}", wild[i], wild[i + 1])),
                    (Part::Param, 7) => path.push('/'),
                    (Part::Param, _) => path.push_str(&wild[i]),
                    (Part::Rest, 0..=3) => path.push_str(&wild[i]),
                    (Part::Rest, _) => path.push_str(&format!("{}/{}", wild[i], wild[i + 1])),
                    (Part::TrailingSlash, _) => unreachable!("handled above"),
                }
            }
            if trailing {
                path.push('/');
            }
            if path.is_empty() {
                path.push('/');
            }
            path
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn every_path_the_router_dispatches_to_a_route_is_matched_by_its_rule(
        (parts, path) in pattern().prop_flat_map(|parts| (Just(parts.clone()), path_for(parts)))
    ) {
        let text = pattern_text(&parts);
        let rule = PathPattern::parse(&text).expect("generated patterns are valid rules");
        if router_dispatches(&text, &path) == Some(true) {
            prop_assert!(rule.matches(&path), "the router sends {path:?} to {text:?}, the rule does not match it");
        }
    }
}

/// The generator reaches the router's accepting side often, so the
/// property above is not vacuous.
#[test]
fn the_generator_produces_dispatched_paths() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = pattern().prop_flat_map(|parts| (Just(parts.clone()), path_for(parts)));
    let mut dispatched = 0;
    for _ in 0..1000 {
        let (parts, path) = strategy.new_tree(&mut runner).unwrap().current();
        dispatched += usize::from(router_dispatches(&pattern_text(&parts), &path) == Some(true));
    }
    assert!(
        dispatched > 200,
        "{dispatched} of 1000 generated paths were dispatched to the route"
    );
}
