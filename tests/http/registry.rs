//! Startup knows every attribute route: each `#[rate_limit]` registers its
//! route at link time, `RateLimit::build` refuses a configuration that
//! cannot serve one (naming the route, the handler and where it is
//! written), a reload that would break one is refused with the running
//! configuration kept, and `RateLimit::routes()` lists them. Requests go
//! through a real axum router.

use axum::routing::get;
use axum::Router;
use http::{Method, StatusCode};
use ratelimit::axum::RateLimit;
use ratelimit::config::Config;
use ratelimit::{rate_limit, ManualClock};

use crate::support::router::{header, send, App};

#[rate_limit(key = ip, resolve = [profile("gold"), default], name = "registry.gold")]
async fn gold() -> &'static str {
    "gold"
}

#[rate_limit(key = header("x-api-key"), resolve = [default], name = "registry.bulk", cost = 4)]
#[rate_limit(key = ip, resolve = [default], name = "registry.bulk.ip")]
async fn bulk() -> &'static str {
    "bulk"
}

/// Two handlers registering one route name, in a module of their own (so
/// that only the test that asks for them checks them).
mod clash {
    use ratelimit::rate_limit;

    #[rate_limit(key = ip, resolve = [default], name = "registry.same")]
    pub(super) async fn one() -> &'static str {
        "one"
    }

    #[rate_limit(key = ip, resolve = [default], name = "registry.same")]
    pub(super) async fn two() -> &'static str {
        "two"
    }
}

/// Chains whose later steps are never reached, each in a module of its own
/// (checked only by the test that asks for it).
mod reach {
    use ratelimit::rate_limit;

    /// `profile("c")` always answers: `default` is never reached.
    #[rate_limit(key = ip, resolve = [profile("c"), default], cost = 5, name = "registry.reach")]
    pub(in super::super) async fn named_first() -> &'static str {
        "c"
    }

    pub(in super::super) mod token {
        use ratelimit::rate_limit;

        /// `jwt` may pass: `default` is reached.
        #[rate_limit(key = ip, resolve = [jwt, default], cost = 5, name = "registry.reach.jwt")]
        pub(in super::super::super) async fn jwt_then_default() -> &'static str {
            "jwt"
        }
    }
}

/// A chain whose steps never answer without their sections.
mod unanswerable {
    use ratelimit::rate_limit;

    #[rate_limit(key = ip, resolve = [jwt, service, default], name = "registry.unanswerable")]
    pub(in super::super) async fn asks() -> &'static str {
        "asks"
    }

    pub(in super::super) mod costly {
        use ratelimit::rate_limit;

        #[rate_limit(key = ip, resolve = [jwt, default], cost = 5, name = "registry.costly")]
        pub(in super::super::super) async fn tokens() -> &'static str {
            "tokens"
        }
    }
}

/// This module's routes, not the submodule's.
const HERE: &str = concat!(module_path!(), "::gold");

const GOLD: &str = r#"
default_profile = "standard"
[profiles.standard]
rate = "60/min"
burst = 5
[profiles.gold]
rate = "600/min"
burst = 7
"#;

async fn build(config: &str, routes_in: &'static str) -> Result<RateLimit, String> {
    RateLimit::builder(Config::from_toml_str(config).unwrap())
        .clock(ManualClock::new())
        .routes_in(routes_in)
        .build()
        .await
        .map_err(|e| {
            // What `main` prints of it (`?` into `Box<dyn Error>`, or
            // `.unwrap()`) is the same readable text.
            assert_eq!(format!("{e:?}"), e.to_string());
            e.to_string()
        })
}

fn app(rl: RateLimit) -> App {
    Router::new().route("/gold", get(gold)).with_state(rl).into_service()
}

#[tokio::test]
async fn startup_refuses_a_route_whose_profile_is_missing() {
    let without_gold = "[profiles.standard]\nrate = \"60/min\"\n";
    let refused = build(without_gold, HERE).await.unwrap_err();
    eprintln!("{refused}");
    assert!(refused.contains("#[rate_limit] route \"registry.gold\""), "{refused}");
    assert!(refused.contains("handler http::registry::gold"), "{refused}");
    assert!(refused.contains("tests/http/registry.rs:17"), "{refused}");
    assert!(
        refused.contains("profile(\"gold\") is not a profile of the configuration (it has \"standard\")"),
        "{refused}"
    );
    // With the profile, it starts, and the route answers with its numbers.
    let rl = build(GOLD, HERE).await.unwrap();
    let response = send(&app(rl), Method::GET, "/gold", "192.0.2.1:1").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "ratelimit-limit"), "7");
}

#[tokio::test]
async fn startup_refuses_a_cost_above_the_burst_the_chain_reaches() {
    let small = "[profiles.standard]\nrate = \"60/min\"\nburst = 3\n";
    let prefix = concat!(module_path!(), "::bulk");
    let refused = build(small, prefix).await.unwrap_err();
    assert!(
        refused.contains(
            "#[rate_limit] route \"registry.bulk\" (handler http::registry::bulk, tests/http/registry.rs:22): cost \
             4 is above the burst 3 of profile \"standard\": every request would be refused"
        ),
        "{refused}"
    );
    // A `[routes]` override of the cost counts, not the attribute's.
    let lowered = format!("{small}[routes.\"registry.bulk\"]\ncost = 2\n");
    build(&lowered, prefix).await.unwrap();
}

/// Startup counts only the profiles a chain can reach: nothing after a
/// `profile(..)` step (it always answers once startup has checked that the
/// profile exists), nor after `default`; a `jwt` step may pass on.
#[tokio::test]
async fn startup_checks_the_cost_against_the_profiles_the_chain_reaches() {
    let config = |c_burst: u32| {
        format!(
            "default_profile = \"a\"\n[profiles.a]\nrate = \"60/min\"\nburst = 3\n\
             [profiles.c]\nrate = \"60/min\"\nburst = {c_burst}\n[jwt]\n"
        )
    };
    let named = concat!(module_path!(), "::reach::named_first");
    // c's burst admits the cost; the default's 3 would not, but is never
    // reached: started, and a request is charged 5 of c's 10.
    let rl = build(&config(10), named).await.unwrap();
    let app: App = Router::new()
        .route("/reach", get(reach::named_first))
        .with_state(rl)
        .into_service();
    let response = send(&app, Method::GET, "/reach", "192.0.2.1:1").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "ratelimit-limit"), "10");
    assert_eq!(header(&response, "ratelimit-remaining"), "5");
    // c's burst below the cost: refused, naming c, not the default.
    let refused = build(&config(3), named).await.unwrap_err();
    assert!(
        refused.contains("cost 5 is above the burst 3 of profile \"c\": every request would be refused"),
        "{refused}"
    );
    assert!(!refused.contains("profile \"a\""), "{refused}");
    // A `[routes]` profile for the route is reached only through `default`,
    // which `profile("c")` answers before: it would change nothing, and a
    // user who wrote it expects it to. Refused, saying why.
    let routed = format!(
        "{}[profiles.tiny]\nrate = \"60/min\"\nburst = 1\n[routes.\"registry.reach\"]\nprofile = \"tiny\"\n",
        config(10)
    );
    let refused = build(&routed, named).await.unwrap_err();
    assert!(
        refused.contains(
            r#"[routes."registry.reach"] profile = "tiny" is never used: the chain answers at profile("c") before `default`"#
        ),
        "{refused}"
    );
    // After a `jwt` step, `default` is reached (a request without a token):
    // the default's burst 3 refuses the cost 5.
    let refused = build(&config(10), concat!(module_path!(), "::reach::token"))
        .await
        .unwrap_err();
    assert!(
        refused.contains("cost 5 is above the burst 3 of profile \"a\""),
        "{refused}"
    );
}

/// A refusal over every route of the program (no `routes_in`) says how to
/// serve only this application's.
#[tokio::test]
async fn a_refusal_over_every_linked_route_names_routes_in() {
    let refused = build("[profiles.standard]\nrate = \"60/min\"\nburst = 1\n", "")
        .await
        .unwrap_err();
    assert!(refused.contains("RateLimitBuilder::routes_in"), "{refused}");
    assert!(refused.contains("routes_in(module_path!())"), "{refused}");
    // Selected, the refusal is this application's alone: no such hint.
    let refused = build("[profiles.standard]\nrate = \"60/min\"\n", HERE)
        .await
        .unwrap_err();
    assert!(!refused.contains("routes_in"), "{refused}");
}

/// A `[routes."name"]` section that names no route (a typo, a renamed
/// handler) is refused at startup and at reload, with the closest names; a
/// section for a `[[rules]]` entry or another application's attribute
/// route is not a typo.
#[tokio::test]
async fn a_routes_section_that_names_no_route_is_refused_with_the_closest_names() {
    let typo = format!("{GOLD}[routes.\"registry.gol\"]\ncost = 2\n");
    let refused = build(&typo, HERE).await.unwrap_err();
    assert!(
        refused.contains("[routes.\"registry.gol\"] names no route"),
        "{refused}"
    );
    assert!(refused.contains("did you mean \"registry.gold\""), "{refused}");
    assert!(!refused.contains("routes_in"), "{refused}");
    // Far from every name: the routes are listed instead.
    let unrelated = format!("{GOLD}[routes.\"billing\"]\ncost = 2\n");
    let refused = build(&unrelated, HERE).await.unwrap_err();
    assert!(refused.contains("its routes: "), "{refused}");
    // A [[rules]] entry's name, and an attribute route this runtime does
    // not serve (another application's, linked into this binary), are
    // routes.
    let known = format!(
        "{GOLD}[[rules]]\nname = \"proxy\"\npath = \"/proxy\"\nkey = \"ip\"\nresolve = [\"default\"]\n\
         [routes.proxy]\ncost = 2\n[routes.\"registry.bulk\"]\nshadow = true\n"
    );
    let rl = build(&known, HERE).await.unwrap();
    // A reload with the typo is refused, and the running one kept.
    let refused = rl
        .reload(Config::from_toml_str(&typo).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("[routes.\"registry.gol\"] names no route"),
        "{refused}"
    );
    assert!(refused.contains("the running configuration stays"), "{refused}");
}

#[tokio::test]
async fn two_handlers_with_one_route_name_are_refused() {
    let refused = build(GOLD, concat!(module_path!(), "::clash::")).await.unwrap_err();
    assert!(refused.contains("route \"registry.same\""), "{refused}");
    assert!(refused.contains("http::registry::clash::one"), "{refused}");
    assert!(refused.contains("http::registry::clash::two"), "{refused}");
    assert!(refused.contains("route names are unique"), "{refused}");
    let _ = (clash::one::<RateLimit>, clash::two::<RateLimit>);
}

#[tokio::test]
async fn a_reload_that_would_break_a_route_is_refused_and_the_running_one_kept() {
    let rl = build(GOLD, HERE).await.unwrap();
    let app = app(rl.clone());
    let without_gold = "[profiles.standard]\nrate = \"60/min\"\n";
    let refused = rl.reload(Config::from_toml_str(without_gold).unwrap()).unwrap_err();
    let refused = refused.to_string();
    assert!(refused.contains("profile(\"gold\") is not a profile"), "{refused}");
    assert!(refused.contains("the running configuration stays"), "{refused}");
    // Still gold's numbers.
    let response = send(&app, Method::GET, "/gold", "192.0.2.1:1").await;
    assert_eq!(header(&response, "ratelimit-limit"), "7");
    // A reload that keeps the route servable goes through.
    let raised = GOLD.replace("burst = 7", "burst = 9");
    rl.reload(Config::from_toml_str(&raised).unwrap()).unwrap();
    let response = send(&app, Method::GET, "/gold", "192.0.2.2:1").await;
    assert_eq!(header(&response, "ratelimit-limit"), "9");
}

#[tokio::test]
async fn routes_lists_every_attribute_route_as_written() {
    let rl = build(GOLD, concat!(module_path!(), "::")).await;
    // The clash module is under this prefix too: refused, as above.
    assert!(rl.is_err());
    let rl = build(GOLD, concat!(module_path!(), "::b")).await.unwrap();
    let listed: Vec<_> = rl
        .routes()
        .iter()
        .map(|r| {
            (
                r.name(),
                r.handler(),
                r.key(),
                r.resolve().to_vec(),
                r.cost(),
                r.stacked(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                "registry.bulk",
                "http::registry::bulk",
                "header(\"x-api-key\")",
                vec!["default"],
                4,
                1
            ),
            ("registry.bulk.ip", "http::registry::bulk", "ip", vec!["default"], 1, 2),
        ]
    );
    let rl = build(GOLD, HERE).await.unwrap();
    let route = &rl.routes()[0];
    assert_eq!((route.name(), route.profiles()), ("registry.gold", &["gold"][..]));
    assert_eq!(route.location(), ("tests/http/registry.rs", 17));
    let _ = bulk::<RateLimit>;
}

/// A `jwt` step without `[jwt]` and a `service` step without a limit
/// service never answer: startup says so once per step, and so does each
/// reload (off the request path: requests log nothing of it).
#[tokio::test]
async fn startup_and_reloads_warn_of_steps_that_never_answer() {
    let (log, _log) = crate::support::log::Captured::on_this_thread("ratelimit=warn");
    let config = "[profiles.standard]\nrate = \"60/min\"\n";
    let rl = build(config, concat!(module_path!(), "::unanswerable::asks"))
        .await
        .unwrap();
    let warned = |n: usize| {
        let lines = log.lines_with("registry.unanswerable");
        assert_eq!(lines.len(), n, "{}", log.text());
        assert!(
            lines.iter().any(|l| l.contains("`jwt` step needs a [jwt] section")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("`service` step needs a [service] section")),
            "{lines:?}"
        );
    };
    warned(2);
    let app = Router::new()
        .route("/asks", get(unanswerable::asks))
        .with_state(rl.clone())
        .into_service();
    for _ in 0..3 {
        assert_eq!(
            send(&app, Method::GET, "/asks", "192.0.2.1:1").await.status(),
            StatusCode::OK
        );
    }
    warned(2);
    rl.reload(Config::from_toml_str(config).unwrap()).unwrap();
    warned(4);
}

/// A `jwt` step may answer with any profile a tier names, or with numbers
/// capped at `[jwt] max_burst`: those below the route's cost refuse every
/// request they apply to. Startup says which.
#[tokio::test]
async fn startup_warns_of_token_limits_below_the_routes_cost() {
    let (log, _log) = crate::support::log::Captured::on_this_thread("ratelimit=warn");
    let config = "default_profile = \"big\"\n[profiles.big]\nrate = \"60/min\"\nburst = 10\n\
                  [profiles.tiny]\nrate = \"60/min\"\nburst = 2\n[jwt]\nmax_rate = \"600/min\"\nmax_burst = 3\n";
    build(config, concat!(module_path!(), "::unanswerable::costly"))
        .await
        .unwrap();
    let lines = log.lines_with("registry.costly");
    assert_eq!(lines.len(), 2, "{}", log.text());
    assert!(
        lines
            .iter()
            .any(|l| l.contains("profiles a token's tier or the limit service may name") && l.contains("tiny")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("above [jwt] max_burst") && l.contains("max_burst=3")),
        "{lines:?}"
    );
}

/// A `[routes]` profile answers only a chain's `default` step: for a
/// `[[rules]]` entry whose `profile:..` step answers first, it would change
/// nothing, and startup says so. A section is shared by every route of its
/// name: kept while one of them (here an attribute route) reaches
/// `default`.
#[tokio::test]
async fn a_routes_profile_no_route_of_its_name_reaches_is_refused() {
    let text = |name: &str, resolve: &str| {
        format!(
            "default_profile = \"a\"\n[profiles.a]\nrate = \"10/s\"\n[profiles.c]\nrate = \"5/s\"\n\
             [profiles.gold]\nrate = \"10/s\"\n[routes.{name:?}]\nprofile = \"c\"\n\
             [[rules]]\nname = {name:?}\npath = \"/api/{{*rest}}\"\nkey = \"ip\"\nresolve = {resolve}\n"
        )
    };
    let refused = build(&text("api", r#"["profile:a", "default"]"#), HERE)
        .await
        .unwrap_err();
    assert!(
        refused.contains(
            r#"[routes."api"] profile = "c" is never used: the chain answers at profile("a") before `default`"#
        ),
        "{refused}"
    );
    // Reached: `default` alone.
    build(&text("api", r#"["default"]"#), HERE).await.unwrap();
    // The same name as an attribute route that reaches `default`: used there.
    let bulk = concat!(module_path!(), "::bulk");
    build(&text("registry.bulk.ip", r#"["profile:a", "default"]"#), bulk)
        .await
        .unwrap();
}
