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
use ratelimit_spec::KeyKind;

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
    cost: CostGen,
    shadow: bool,
}

/// A cost as generated: units, or `response_bytes` with bytes per unit.
#[derive(Debug, Clone, Copy)]
enum CostGen {
    Units(i128),
    Bytes(i128),
}

impl CostGen {
    fn attribute(self) -> String {
        match self {
            CostGen::Units(n) => n.to_string(),
            CostGen::Bytes(per) => format!("response_bytes(per = {per})"),
        }
    }
    fn config(self) -> String {
        match self {
            CostGen::Units(n) => n.to_string(),
            CostGen::Bytes(per) => format!("\"response_bytes:{per}\""),
        }
    }
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
        Just(named("route", None)),
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

/// A part of a rule the generator writes from anything, valid or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Key,
    Resolve,
    Name,
    Cost,
}

/// Key kinds: the spec's own (so a kind added there is generated here) and
/// names that are not kinds. `custom` is the one kind the two surfaces
/// spell differently by design (the attribute names a type, `custom(a::B)`;
/// the configuration a registered name, `"custom:tenant"`), so it has tests
/// of its own (`custom_keys_on_both_surfaces`).
fn key_kinds() -> Vec<&'static str> {
    let mut kinds: Vec<&'static str> = ratelimit_spec::KEY_KINDS
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| *k != "custom")
        .collect();
    kinds.extend(["cookie", "IP", "Global", "Header"]);
    kinds
}

fn step_names() -> Vec<&'static str> {
    let mut steps: Vec<&'static str> = ratelimit_spec::STEPS.iter().map(|(s, _)| *s).collect();
    steps.extend(["tier", "Default", "jwt_claim"]);
    steps
}

/// A rule whose parts are valid, except at most one (`Some(part)`), which
/// is written from anything: when both surfaces refuse, they must refuse
/// that part.
fn rule() -> impl Strategy<Value = (Rule, Option<Part>)> {
    let wild_key = (
        proptest::sample::select(key_kinds()),
        proptest::option::weighted(0.6, text()),
    )
        .prop_map(|(k, arg)| named(k, arg));
    let wild_steps = proptest::collection::vec(
        (
            proptest::sample::select(step_names()),
            proptest::option::weighted(0.5, text()),
        )
            .prop_map(|(s, arg)| named(s, arg)),
        0..5,
    );
    let wild_name = prop_oneof![Just(String::new()), "[a-zA-Z0-9._:/ \"\\,é-]{1,10}"];
    let wild_number = prop_oneof![Just(-1i128), Just(0), Just(i128::from(u32::MAX) + 1), -3i128..12];
    let wild_cost = prop_oneof![
        3 => wild_number.clone().prop_map(CostGen::Units),
        1 => wild_number.prop_map(CostGen::Bytes),
    ];
    let valid_cost = prop_oneof![
        4 => (1i128..10).prop_map(CostGen::Units),
        1 => Just(CostGen::Units(i128::from(u32::MAX))),
        2 => prop_oneof![Just(1i128), Just(1024), Just(i128::from(u32::MAX))].prop_map(CostGen::Bytes),
    ];
    let part = proptest::option::weighted(
        0.7,
        proptest::sample::select(vec![Part::Key, Part::Resolve, Part::Name, Part::Cost]),
    );
    (
        part,
        (valid_key(), wild_key),
        (valid_chain(), wild_steps),
        ("[a-zA-Z0-9._:/-]{1,12}", wild_name),
        (valid_cost, wild_cost),
        any::<bool>(),
    )
        .prop_map(|(part, keys, chains, names, costs, shadow)| {
            let pick = |p: Part| part == Some(p);
            let rule = Rule {
                key: if pick(Part::Key) { keys.1 } else { keys.0 },
                steps: if pick(Part::Resolve) { chains.1 } else { chains.0 },
                name: if pick(Part::Name) { names.1 } else { names.0 },
                cost: if pick(Part::Cost) { costs.1 } else { costs.0 },
                shadow,
            };
            (rule, part)
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
        r.cost.attribute()
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
         [jwt]\nmax_rate = \"10/s\"\nmax_burst = 10\n[service]\nurl = \"http://127.0.0.1:9/limits\"\n\
         id_secret_env = \"RATELIMIT_SERVICE_ID_SECRET\"\n",
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
        r.cost.config(),
        r.shadow
    ));
    text
}

fn config_key(k: &AnyKey) -> KeyKind {
    match k {
        AnyKey::Ip(_) => KeyKind::Ip,
        AnyKey::Header(h) => KeyKind::Header(h.0.as_str().to_owned()),
        AnyKey::Claim(c) => KeyKind::Claim(c.0.to_string()),
        AnyKey::Route(_) => KeyKind::Route,
        AnyKey::Custom(c) => KeyKind::Custom(c.name().to_owned()),
        other => panic!("a key kind the spec does not have: {other:?}"),
    }
}

/// The options the attribute refused (each is `None` in its arguments).
fn attribute_refused(args: &crate::parse::Args) -> Vec<&'static str> {
    let mut refused = Vec::new();
    if args.key.is_none() {
        refused.push("key");
    }
    if args.resolve.is_none() {
        refused.push("resolve");
    }
    if args.name.is_none() {
        refused.push("name");
    }
    if args.cost.is_none() {
        refused.push("cost");
    }
    refused
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn attribute_and_config_accept_the_same_rules((r, _part) in rule()) {
        let attr_text = attribute(&r);
        let tokens: proc_macro2::TokenStream = attr_text.parse().expect("the generator writes valid tokens");
        let (args, errors) = parse_args(tokens);
        let config_text = config(&r);
        let loaded = ratelimit::config::Config::from_toml_str(&config_text);
        match (&errors[..], &loaded) {
            ([], Ok(config)) => {
                let rule = &config.rules[0];
                prop_assert_eq!(args.key.as_ref(), Some(&config_key(&rule.key)), "key of {}", attr_text);
                prop_assert_eq!(args.resolve.clone(), Some(rule.resolve.clone()), "chain of {}", attr_text);
                prop_assert_eq!(args.name.as_ref().map(|n| n.value()), Some(rule.name.to_string()));
                prop_assert_eq!(args.cost, Some(rule.cost_kind()));
                prop_assert_eq!(args.shadow, rule.shadow);
            }
            ([], Err(e)) => prop_assert!(false, "the attribute accepts `{}`, the config refuses it: {}\n{}", attr_text, e, config_text),
            ([first, ..], Ok(_)) => prop_assert!(false, "the config accepts\n{}\nthe attribute refuses `{}`: {}", config_text, attr_text, first),
            ([_, ..], Err(e)) => {
                // One part at most is wild: both must refuse that one.
                let config_part = e.field().and_then(|f| f.strip_prefix("rules[0].")).unwrap_or("?");
                let refused = attribute_refused(&args);
                prop_assert_eq!(
                    refused.clone(), vec![config_part],
                    "the attribute refuses {:?} of `{}`, the config {:?}: {}\n{}", refused, attr_text, config_part, e, config_text
                );
            }
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
        let (r, _) = rule().new_tree(&mut runner).expect("a rule").current();
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

/// `custom`: the attribute takes a type's path, the configuration a
/// registered name; both go through the spec's name check, and each refuses
/// the other's spelling with a message saying which to write.
#[test]
fn custom_keys_on_both_surfaces() {
    let attr = |args: &str| {
        let (parsed, errors) = parse_args(args.parse().expect("tokens"));
        (parsed, errors.iter().map(ToString::to_string).collect::<Vec<_>>())
    };
    let (args, errors) = attr("key = custom(tenant::ByTenant), resolve = [default]");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(args.key, Some(KeyKind::Custom("tenant::ByTenant".into())));
    assert!(args.custom_key.is_some());
    let (_, errors) = attr("key = custom(\"tenant\"), resolve = [default]");
    assert!(
        errors[0].contains("takes the key type's path, not a string"),
        "{errors:?}"
    );
    let (_, errors) = attr("key = custom, resolve = [default]");
    assert!(errors[0].contains("custom(tenant::ByTenant)"), "{errors:?}");
    let (_, errors) = attr("key = custom(a b), resolve = [default]");
    assert!(!errors.is_empty());

    let config = |key: &str| {
        ratelimit::config::Config::from_toml_str(&format!(
            "[profiles.std]\nrate = \"1/s\"\n[[rules]]\nname = \"r\"\npath = \"/x\"\nkey = {key:?}\nresolve = [\"default\"]\n"
        ))
    };
    let loaded = config("custom:tenant").expect("a registered name");
    assert_eq!(config_key(&loaded.rules[0].key), KeyKind::Custom("tenant".into()));
    for bad in ["custom", "custom:", "custom:a b", "custom:é"] {
        let e = config(bad).unwrap_err();
        assert_eq!(e.field(), Some("rules[0].key"), "{bad}: {e}");
    }
}
