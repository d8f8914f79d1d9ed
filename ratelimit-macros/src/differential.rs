//! The attribute and `[[rules]]` accept exactly the same rule language:
//! generated rules, written once as `#[rate_limit(...)]` arguments and once
//! as a `[[rules]]` entry, are accepted by both parsers or refused by both,
//! and when accepted they mean the same key, chain, name, cost and shadow.
//!
//! The generator mixes valid and invalid pieces on purpose (unknown kinds,
//! empty and odd arguments, misplaced `default`, duplicates, out-of-range
//! costs), so both sides of every check are exercised.

use proptest::prelude::*;
use ratelimit::key::AnyKey;
use ratelimit_spec::{KeyKind, Step};

use crate::parse::parse_args;

/// A piece as both surfaces write it: a kind and an optional argument.
#[derive(Debug, Clone)]
struct Call {
    kind: String,
    arg: Option<String>,
}

#[derive(Debug, Clone)]
struct Rule {
    key: Call,
    steps: Vec<Call>,
    name: String,
    cost: i128,
    shadow: bool,
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("a..b".to_owned()),
        Just("x y".to_owned()),
        Just(" ".to_owned()),
        Just("org.id".to_owned()),
        Just("X-Api-Key".to_owned()),
        Just("https://example.com/tenant".to_owned()),
        Just("é".to_owned()),
        Just("a\tb".to_owned()),
        Just("a\"b".to_owned()),
        Just("a\\b".to_owned()),
        Just("a,b".to_owned()),
        Just("x:y".to_owned()),
        "[a-zA-Z0-9_.:/ \\-]{1,8}",
        "[a-z]{1,6}",
    ]
}

fn call(kinds: &'static [&'static str]) -> impl Strategy<Value = Call> {
    (proptest::sample::select(kinds), proptest::option::weighted(0.6, text())).prop_map(|(k, arg)| Call {
        kind: k.to_owned(),
        arg,
    })
}

fn named(kind: &str, arg: Option<String>) -> Call {
    Call {
        kind: kind.to_owned(),
        arg,
    }
}

/// Keys the language accepts, in every kind, with unusual but valid
/// arguments among them.
fn valid_key() -> impl Strategy<Value = Call> {
    prop_oneof![
        Just(named("ip", None)),
        "[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,8}".prop_map(|h| named("header", Some(h))),
        "[a-zA-Z0-9_:/@-]{1,5}(\\.[a-zA-Z0-9_:/é-]{1,4}){0,2}".prop_map(|c| named("jwt_claim", Some(c))),
    ]
}

/// Chains the language accepts: distinct steps, `default` last.
fn valid_chain() -> impl Strategy<Value = Vec<Call>> {
    let profile = "[a-zA-Z0-9_ :.-]{0,5}[a-z]".prop_map(|p| named("profile", Some(p)));
    (
        proptest::option::of(Just(named("jwt", None))),
        proptest::option::of(Just(named("service", None))),
        proptest::collection::vec(profile, 0..3),
        any::<bool>(),
    )
        .prop_map(|(jwt, service, profiles, jwt_first)| {
            let mut steps: Vec<Call> = Vec::new();
            let mut push = |c: Call| {
                if !steps.iter().any(|s| s.kind == c.kind && s.arg == c.arg) {
                    steps.push(c);
                }
            };
            let (early, late) = if jwt_first { (jwt, None) } else { (None, jwt) };
            early.into_iter().for_each(&mut push);
            profiles.into_iter().for_each(&mut push);
            service.into_iter().for_each(&mut push);
            late.into_iter().for_each(&mut push);
            push(named("default", None));
            steps
        })
}

fn rule() -> impl Strategy<Value = Rule> {
    let key = prop_oneof![3 => valid_key(), 1 => call(&["ip", "header", "jwt_claim", "cookie", "IP", "global"])];
    let steps = prop_oneof![
        3 => valid_chain(),
        1 => proptest::collection::vec(call(&["jwt", "service", "profile", "default", "tier"]), 0..5),
    ];
    let name = prop_oneof![
        4 => "[a-zA-Z0-9._:/-]{1,12}",
        1 => Just(String::new()),
        1 => "[a-zA-Z0-9._:/ \"\\-]{1,10}",
    ];
    let cost = prop_oneof![
        4 => 1i128..10,
        1 => Just(i128::from(u32::MAX)),
        1 => prop_oneof![Just(-1i128), Just(0), Just(i128::from(u32::MAX) + 1)],
    ];
    (key, steps, name, cost, any::<bool>()).prop_map(|(key, steps, name, cost, shadow)| Rule {
        key,
        steps,
        name,
        cost,
        shadow,
    })
}

/// `kind` or `kind("arg")`.
fn attr_call(c: &Call) -> String {
    match &c.arg {
        Some(a) => format!("{}({a:?})", c.kind),
        None => c.kind.clone(),
    }
}

/// `"kind"` or `"kind:arg"`, as a TOML string.
fn config_call(c: &Call) -> String {
    match &c.arg {
        Some(a) => toml_string(&format!("{}:{a}", c.kind)),
        None => toml_string(&c.kind),
    }
}

fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn attribute(r: &Rule) -> String {
    let steps: Vec<String> = r.steps.iter().map(attr_call).collect();
    let mut args = format!(
        "key = {}, resolve = [{}], name = {:?}, cost = {}",
        attr_call(&r.key),
        steps.join(", "),
        r.name,
        r.cost
    );
    if r.shadow {
        args.push_str(", shadow");
    }
    args
}

/// A configuration holding the rule, with every profile its steps name
/// defined (bursts as large as costs go), a `[jwt]` and a `[service]`
/// section: what is left to refuse is the rule's language.
fn config(r: &Rule) -> String {
    let mut text = String::from(
        "default_profile = \"std\"\n[profiles.std]\nrate = \"1/s\"\nburst = 4294967295\n\
         [jwt]\nmax_rate = \"10/s\"\nmax_burst = 10\n[service]\nurl = \"http://127.0.0.1:9/limits\"\n",
    );
    let mut defined = vec!["std".to_owned()];
    for s in &r.steps {
        if let (Some(p), true) = (&s.arg, s.kind == "profile") {
            if !p.trim().is_empty() && !defined.contains(p) {
                defined.push(p.clone());
                text.push_str(&format!(
                    "[profiles.{}]\nrate = \"1/s\"\nburst = 4294967295\n",
                    toml_string(p)
                ));
            }
        }
    }
    let steps: Vec<String> = r.steps.iter().map(config_call).collect();
    text.push_str(&format!(
        "[[rules]]\nname = {}\npath = \"/x\"\nkey = {}\nresolve = [{}]\ncost = {}\nshadow = {}\n",
        toml_string(&r.name),
        config_call(&r.key),
        steps.join(", "),
        r.cost,
        r.shadow
    ));
    text
}

fn config_key(k: &AnyKey) -> KeyKind {
    match k {
        AnyKey::Ip(_) => KeyKind::Ip,
        AnyKey::Header(h) => KeyKind::Header(h.0.as_str().to_owned()),
        AnyKey::Claim(c) => KeyKind::Claim(c.0.to_string()),
        other => panic!("a key kind the spec does not have: {other:?}"),
    }
}

fn config_steps(chain: &ratelimit::resolve::AnyChain) -> Vec<Step> {
    use ratelimit::resolve::AnyStep;
    chain
        .steps()
        .iter()
        .map(|s| match s {
            AnyStep::Jwt(_) => Step::Jwt,
            AnyStep::Service => Step::Service,
            AnyStep::Profile(p) => Step::Profile(p.name().to_owned()),
            AnyStep::Default(_) => Step::Default,
            other => panic!("a step the spec does not have: {other:?}"),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn attribute_and_config_accept_the_same_rules(r in rule()) {
        let attr_text = attribute(&r);
        let tokens: proc_macro2::TokenStream = attr_text.parse().expect("the generator writes valid tokens");
        let (args, errors) = parse_args(tokens);
        let config_text = config(&r);
        let loaded = ratelimit::config::Config::from_toml_str(&config_text);
        match (&errors[..], &loaded) {
            ([], Ok(config)) => {
                let rule = &config.rules[0];
                prop_assert_eq!(args.key.as_ref(), Some(&config_key(&rule.key)), "key of {}", attr_text);
                prop_assert_eq!(args.resolve.clone(), Some(config_steps(&rule.resolve)), "chain of {}", attr_text);
                prop_assert_eq!(args.name.as_ref().map(|n| n.value()), Some(rule.name.to_string()));
                prop_assert_eq!(args.cost, Some(rule.cost));
                prop_assert_eq!(args.shadow, rule.shadow);
            }
            ([], Err(e)) => prop_assert!(false, "the attribute accepts `{}`, the config refuses it: {}\n{}", attr_text, e, config_text),
            ([first, ..], Ok(_)) => prop_assert!(false, "the config accepts\n{}\nthe attribute refuses `{}`: {}", config_text, attr_text, first),
            ([_, ..], Err(_)) => {}
        }
    }
}

/// The generator is not lopsided: it writes both rules the language
/// accepts and rules it refuses, in every part.
#[test]
fn the_generator_reaches_both_sides() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..2000 {
        let r = rule().new_tree(&mut runner).expect("a rule").current();
        let tokens: proc_macro2::TokenStream = attribute(&r).parse().expect("valid tokens");
        if parse_args(tokens).1.is_empty() {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    assert!(
        accepted >= 400 && refused >= 400,
        "accepted {accepted}, refused {refused}"
    );
}
