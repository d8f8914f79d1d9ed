//! Every error of the attribute, pinned: its exact text and the token it
//! sits on.
//!
//! `parse_args_errors` runs the option parser on arguments (those of each
//! `ui-tests/fail` case, then corner cases the cases do not reach) and
//! compares every error with a caret line under the characters its span
//! covers, as the compiler underlines them. `ui_cases_match_their_stderr`
//! runs the whole attribute (parse, checks, expansion) on every
//! `ui-tests/fail/*.rs` file and compares its errors with the ones the
//! case's `.stderr` expects from the attribute: same text, same order, same
//! line and column. trybuild checks the same files through the compiler;
//! these tests need neither the runtime crate nor a compiler run.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::quote;

use crate::parse::parse_args;

/// The arguments' errors, one line each: carets under the span, a space,
/// the message.
fn render(args: &str) -> String {
    let tokens: TokenStream = args.parse().expect("the arguments are tokens");
    let (_, errors) = parse_args(tokens);
    errors
        .into_iter()
        .flat_map(syn::Error::into_iter)
        .map(|e| format!("{} {}", carets(e.span()), e))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `^` under the columns `span` covers (the arguments are one line); the
/// call site, which covers none, is `<call site>`.
fn carets(span: Span) -> String {
    if span.byte_range() == (0..0) {
        return "<call site>".to_owned();
    }
    let (start, end) = (span.start(), span.end());
    assert_eq!(start.line, end.line, "a span over several lines");
    format!("{}{}", " ".repeat(start.column), "^".repeat(end.column - start.column))
}

/// Each case: the arguments on the first line, then one line per error.
fn check(cases: &[&str]) {
    let mut failures = Vec::new();
    for case in cases {
        let case = case.strip_prefix('\n').unwrap_or(case);
        let case = case.strip_suffix('\n').unwrap_or(case);
        let (args, expected) = case.split_once('\n').unwrap_or((case, ""));
        let got = render(args);
        if got != expected {
            failures.push(format!("{args}\nexpected:\n{expected}\ngot:\n{got}\n"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn parse_args_errors() {
    check(UI_CASES);
    check(CORNER_CASES);
}

/// The arguments of the `ui-tests/fail` cases (those whose errors are the
/// parser's; `ui_cases_match_their_stderr` checks the rest).
const UI_CASES: &[&str] = &[
    r#"
key = ip, resolve = [default], cost = 1.5
                                      ^^^ cost must be a whole number of units, e.g. `cost = 2`
"#,
    r#"
key = ip, resolve = [default], cost = -1
                                      ^ cost must be a positive integer: it is how many units of the limit a request uses
"#,
    r#"
key = ip, resolve = [default], cost = 99999999999999999999999
                                      ^^^^^^^^^^^^^^^^^^^^^^^ cost must be an integer that fits in a u32
"#,
    r#"
key = ip, resolve = [default], cost = "2"
                                      ^^^ expected an integer literal: `cost = 5`
"#,
    r#"
key = ip, resolve = [default], cost = 5000000000
                                      ^^^^^^^^^^ cost must fit in a u32 (at most 4294967295)
"#,
    r#"
key = ip, resolve = [default], cost = 2 3
                                        ^ unexpected tokens after the cost
"#,
    r#"
key = ip, resolve = [default], cost = 0
                                      ^ cost must be at least 1: a request that costs nothing is not limited (remove the attribute instead)
"#,
    r#"
crate = ratelimit, key = ip, resolve = [default]
        ^^^^^^^^^ expected a string literal: `crate = "my_ratelimit"`
"#,
    r#"
key = custom("tenant"), resolve = [default]
             ^^^^^^^^ `custom` takes the key type's path, not a string: `custom(tenant::ByTenant)` (the configuration's "custom:<name>" names an extractor registered on the builder)
"#,
    r#"
key = ip, resolve = [default, jwt]
                     ^^^^^^^ `default` always answers, so the steps after it would never run: put `default` last
"#,
    r#"
key = ip, resolve = [default], cost = 2, cost = 3
                                         ^^^^ duplicate option `cost`
"#,
    r#"
key = ip, resolve = [profile("a"), profile("a"), default]
                                   ^^^^^^^^^^^^ duplicate resolver: each step is tried once
"#,
    r#"
key = ip, resolve = [jwt, jwt, default]
                          ^^^ duplicate resolver: each step is tried once
"#,
    r#"
key = header("a b") x, resolve = [default]
             ^^^^^ invalid header name "a b": ' ' is not allowed; header names are letters, digits and !#$%&'*+-.^_`|~
"#,
    r#"
key = header(""), resolve = [default]
             ^^ empty header name; e.g. `header("x-api-key")`
"#,
    r#"
key = header("x:api"), resolve = [default]
             ^^^^^^^ invalid header name "x:api": ':' is not allowed; header names are letters, digits and !#$%&'*+-.^_`|~
"#,
    r#"
key = header("x api key"), resolve = [default]
             ^^^^^^^^^^^ invalid header name "x api key": ' ' is not allowed; header names are letters, digits and !#$%&'*+-.^_`|~
"#,
    r#"
key = header(x_api_key), resolve = [default]
             ^^^^^^^^^ expected a string literal: `header("x-api-key")`
"#,
    r#"
key = header("x-api-key", "x-client-id"), resolve = [default]
                        ^ expected one string literal: `header("x-api-key")`
"#,
    r#"
key = header, resolve = [default]
      ^^^^^^ `header` needs a name in parentheses: `header("x-api-key")`
"#,
    r#"
key = ip("x-forwarded-for"), resolve = [default]
        ^ `ip` takes no arguments: write `key = ip`
"#,
    r#"
key = jwt_claim(""), resolve = [jwt, default]
                ^^ empty claim name; e.g. `jwt_claim("sub")` or a dotted path `jwt_claim("org.id")`
"#,
    r#"
key = jwt_claim("a..b"), resolve = [jwt, default]
                ^^^^^^ invalid claim path "a..b": empty segment; a path is names joined by '.', e.g. "org.id"
"#,
    r#"
key = jwt_claim("org. id"), resolve = [jwt, default]
                ^^^^^^^^^ invalid claim path "org. id": claim names have no whitespace
"#,
    r#"
key = "ip", resolve = [default]
      ^^^^ expected a key kind: `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `route` or `custom(path::To::KeyType)`
"#,
    r#"
key = ip, resolve = [default], name = ""
                                      ^^ empty route name; e.g. `name = "users.get"`
"#,
    r#"
key = ip, resolve = [default], name = "users get"
                                      ^^^^^^^^^^^ invalid route name "users get": ' ' is not allowed; use letters, digits and . _ - : /
"#,
    r#"
key = ip, resolve = [default], name = users.get
                                      ^^^^^ expected a string literal: `name = "users.get"`
"#,
    r#"
key = ip, resolve = [default], cost: 2
                                   ^ expected `=` after `cost`, e.g. `cost = 5` or `cost = response_bytes(per = 1024)`
"#,
    r#"
key, resolve = [default]
^^^ `key` needs a value, e.g. `key = ip`
"#,
    r#"
"ip", key = ip, resolve = [default]
^^^^ expected an option: `key`, `resolve`, `name`, `cost`, `shadow`, `layer`, `reject` or `crate`
"#,
    r#"
key = ip, resolve = [profile(""), default]
                             ^^ empty profile name; name a profile of the configuration, e.g. `profile("standard")`
"#,
    r#"
key = ip, resolve = [profile, default]
                     ^^^^^^^ `profile` needs a profile name: `profile("standard")`
"#,
    r#"
key = ip, resolve = [default], reject = "busy"
                                        ^^^^^^ expected the path of a function `fn(&ratelimit::axum::Rejection<'_>) -> http::Response<B>`: `reject = errors::too_many_requests`
"#,
    r#"
key = ip, resolve = [default, tier]
                              ^^^^ unknown resolver `tier`; expected `jwt`, `service`, `profile("name")` or `default`
                     ^^^^^^^ `default` always answers, so the steps after it would never run: put `default` last
"#,
    r#"
key = ip, resolve = []
                    ^^ empty resolve list: list the steps to try, ending with `default`; steps are `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
key = ip, resolve = default
                    ^^^^^^^ expected a list in brackets: `resolve = [jwt, default]`, with steps `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
key = ip, resolve = [tier]
                     ^^^^ unknown resolver `tier`; expected `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
key = ip, resolve = [jwt, profile("standard")]
                          ^^^^^^^^^^^^^^^^^^^ the resolve list must end with `default`, which always answers: every request needs a limit
"#,
    r#"
key = ip, resolve = [jwt("ratelimit_tier"), default]
                        ^ `jwt` takes no arguments
"#,
    r#"
key = ip, resolve = [default], cost = response_bytes(per = 0)
                                                           ^ `per` is how many response bytes one unit pays for: a whole number of at least 1, e.g. `response_bytes(per = 1024)`
"#,
    r#"
key = ip, resolve = [default], cost = response_bytes(per = -1)
                                                           ^ `per` is how many response bytes one unit pays for: a whole number of at least 1, e.g. `response_bytes(per = 1024)`
"#,
    r#"
key = ip, resolve = [default], cost = response_bytes(per = 4294967296)
                                                           ^^^^^^^^^^ bytes per unit must fit in a u32 (at most 4294967295)
"#,
    r#"
key = ip, resolve = [default], cost = response_bytes
                                      ^^^^^^^^^^^^^^ `response_bytes` needs `per`: `response_bytes(per = 1024)`: the response bytes one unit pays for
"#,
    r#"
key = ip, resolve = [default], cost = response_bytes(size = 10)
                                                     ^^^^ unknown argument `size`; expected `response_bytes(per = 1024)`: the response bytes one unit pays for
"#,
    r#"
key = ip, resolve = [default], cost = request_bytes(per = 10)
                                      ^^^^^^^^^^^^^ unknown cost `request_bytes`; expected a number of units (`cost = 5`) or `response_bytes(per = 1024)`
"#,
    r#"
key = ip, limit = 5, resolve = [default, jwt], cost = 0
          ^^^^^ unknown option `limit`; expected `key`, `resolve`, `name`, `cost`, `shadow`, `layer`, `reject` or `crate`
                                ^^^^^^^ `default` always answers, so the steps after it would never run: put `default` last
                                                      ^ cost must be at least 1: a request that costs nothing is not limited (remove the attribute instead)
"#,
    r#"
key = ip, resolve = [default], shadow = true
                                      ^ `shadow` is a flag and takes no value: write `shadow`
"#,
    r#"
key = ip, resolve = [default], layer = true
                                     ^ `layer` is a flag and takes no value: write `layer`
"#,
    r#"
key = ip, resolve = [default], state
                               ^^^^^ `state` is no longer an option: the runtime is found in the router's state by default (through `FromRef`); remove it
"#,
    r#"
key = cookie("session"), resolve = [default]
      ^^^^^^ unknown key kind `cookie`; expected `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `route` or `custom(path::To::KeyType)`
"#,
    r#"
key = ip, resolve = [default], limit = 5
                               ^^^^^ unknown option `limit`; expected `key`, `resolve`, `name`, `cost`, `shadow`, `layer`, `reject` or `crate`
"#,
    r#"
key = ip, resolve = [jwt, tier, default]
                          ^^^^ unknown resolver `tier`; expected `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
cost = 2
"#,
    r#"
key = ip
"#,
    r#"
resolve = [default]
"#,
    r#"

"#,
    r#"
key = custom(NotAKey), resolve = [default]
"#,
    r#"
key = ip, resolve = [default], reject = busy
"#,
    r#"
key = ip, resolve = [default], layer
"#,
];

/// What the cases do not reach: every other error of each option, and
/// arguments that are fine.
const CORNER_CASES: &[&str] = &[
    r#"
crate = "my_rl", key = custom(a::B), resolve = [jwt, service, profile("p"), default], name = "n", cost = 3, shadow, layer, reject = e::f
"#,
    r#"
key = route, resolve = [default], cost = response_bytes(per = 1024)
"#,
    r#"
,
"#,
    r#"
key = ip,, resolve = [default],
"#,
    r#"
r#key = ip
^^^^^ unknown option `r#key`; expected `key`, `resolve`, `name`, `cost`, `shadow`, `layer`, `reject` or `crate`
"#,
    r#"
'a = 1
^ expected an option: `key`, `resolve`, `name`, `cost`, `shadow`, `layer`, `reject` or `crate`
"#,
    r#"
(key) = ip
^^^^^ expected an option: `key`, `resolve`, `name`, `cost`, `shadow`, `layer`, `reject` or `crate`
"#,
    r#"
Key = ip
^^^ unknown option `Key`; expected `key`, `resolve`, `name`, `cost`, `shadow`, `layer`, `reject` or `crate`
"#,
    r#"
key == ip
     ^ expected a key kind: `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `route` or `custom(path::To::KeyType)`
"#,
    r#"
key ip
    ^^ expected `=` after `key`, e.g. `key = ip`
"#,
    r#"
key (ip)
    ^^^^ expected `=` after `key`, e.g. `key = ip`
"#,
    r#"
key =
^^^ `key` needs a value, e.g. `key = ip`
"#,
    r#"
shadow (x)
       ^^^ `shadow` is a flag and takes no value: write `shadow`
"#,
    r#"
shadow x y
       ^ `shadow` is a flag and takes no value: write `shadow`
"#,
    r#"
layer =
      ^ `layer` is a flag and takes no value: write `layer`
"#,
    r#"
crate
^^^^^ `crate` needs a value, e.g. `crate = "my_ratelimit"`
"#,
    r#"
crate =
^^^^^ `crate` needs a value, e.g. `crate = "my_ratelimit"`
"#,
    r#"
key = self
      ^^^^ expected a key kind: `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `route` or `custom(path::To::KeyType)`
"#,
    r#"
key = ip x
         ^ `ip` takes no arguments: write `key = ip`
"#,
    r#"
key = route(1)
           ^ `route` takes no arguments: write `key = route`
"#,
    r#"
key = header("x") ("y")
                  ^ unexpected tokens after the key
"#,
    r#"
key = header()
             ^ expected a string literal: `header("x-api-key")`
"#,
    r#"
key = header["x"]
      ^^^^^^ `header` needs a name in parentheses: `header("x-api-key")`
"#,
    r#"
key = jwt_claim
      ^^^^^^^^^ `jwt_claim` needs a name in parentheses: `jwt_claim("sub")`
"#,
    r#"
key = custom
      ^^^^^^ `custom` needs a name in parentheses: `custom(tenant::ByTenant)`
"#,
    r#"
key = custom()
             ^ expected the path of a type implementing `ratelimit::key::KeySource`: `custom(tenant::ByTenant)`
"#,
    r#"
key = custom(a b)
               ^ expected one type path: `custom(tenant::ByTenant)`
"#,
    r#"
key = custom(a::B) x
                   ^ unexpected tokens after the key
"#,
    r#"
key = custom(a::B<T>)
"#,
    r#"
key = custom(::a::B)
"#,
    r#"
key = custom(a::B, c)
                 ^ expected one type path: `custom(tenant::ByTenant)`
"#,
    r#"
key = custom(é::B)
             ^^^^ invalid custom key name "é::B": 'é' is not allowed; use letters, digits and . _ - : /
"#,
    r#"
key = 1
      ^ expected a key kind: `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `route` or `custom(path::To::KeyType)`
"#,
    r#"
key = [ip]
      ^ expected a key kind: `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `route` or `custom(path::To::KeyType)`
"#,
    r#"
key = nope, key = ip
      ^^^^ unknown key kind `nope`; expected `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `route` or `custom(path::To::KeyType)`
            ^^^ duplicate option `key`
"#,
    r#"
key = ip, resolve = [default], shadow, shadow
                                       ^^^^^^ duplicate option `shadow`
"#,
    r#"
resolve = [jwt, default] x
          ^^^^^^^^^^^^^^ expected a list in brackets: `resolve = [jwt, default]`, with steps `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
resolve = [jwt,, default]
"#,
    r#"
resolve = [,]
          ^^^ empty resolve list: list the steps to try, ending with `default`; steps are `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
resolve = [jwt default]
               ^^^^^^^ `jwt` takes no arguments
"#,
    r#"
resolve = [1, default]
           ^ expected a resolver: `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
resolve = [profile("a") x, default]
                        ^ unexpected tokens after the resolver
"#,
    r#"
resolve = [profile("a", "b"), default]
                      ^ expected one string literal: `profile("standard")`
"#,
    r#"
resolve = [profile(a), default]
                   ^ expected a string literal: `profile("standard")`
"#,
    r#"
resolve = [profile(), default]
                   ^ expected a string literal: `profile("standard")`
"#,
    r#"
resolve = [Default]
           ^^^^^^^ unknown resolver `Default`; expected `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
resolve = [jwt]
           ^^^ the resolve list must end with `default`, which always answers: every request needs a limit
"#,
    r#"
resolve = [default, default]
           ^^^^^^^ `default` always answers, so the steps after it would never run: put `default` last
                    ^^^^^^^ duplicate resolver: each step is tried once
"#,
    r#"
resolve = [service, jwt, service]
                         ^^^^^^^ duplicate resolver: each step is tried once
"#,
    r#"
resolve = (jwt, default)
          ^^^^^^^^^^^^^^ expected a list in brackets: `resolve = [jwt, default]`, with steps `jwt`, `service`, `profile("name")` or `default`
"#,
    r#"
resolve = [jwt, tier, default, jwt]
                ^^^^ unknown resolver `tier`; expected `jwt`, `service`, `profile("name")` or `default`
                      ^^^^^^^ `default` always answers, so the steps after it would never run: put `default` last
                               ^^^ duplicate resolver: each step is tried once
"#,
    r#"
resolve = [default, tier, jwt]
                    ^^^^ unknown resolver `tier`; expected `jwt`, `service`, `profile("name")` or `default`
           ^^^^^^^ `default` always answers, so the steps after it would never run: put `default` last
"#,
    r#"
name = "a" "b"
           ^^^ unexpected tokens after the name
"#,
    r#"
name = "a b" x
       ^^^^^ invalid route name "a b": ' ' is not allowed; use letters, digits and . _ - : /
"#,
    r#"
name = 5
       ^ expected a string literal: `name = "users.get"`
"#,
    r#"
cost = -0
       ^ cost must be a positive integer: it is how many units of the limit a request uses
"#,
    r#"
cost = 1u8
"#,
    r#"
cost = 0x10
"#,
    r#"
cost = true
       ^^^^ expected an integer literal: `cost = 5`
"#,
    r#"
cost = 'c'
       ^^^ expected an integer literal: `cost = 5`
"#,
    r#"
cost = x
       ^ unknown cost `x`; expected a number of units (`cost = 5`) or `response_bytes(per = 1024)`
"#,
    r#"
cost = response_bytes()
                     ^^ `response_bytes` needs `per`: `response_bytes(per = 1024)`: the response bytes one unit pays for
"#,
    r#"
cost = response_bytes(per)
                         ^ expected `per = N`: `response_bytes(per = 1024)`: the response bytes one unit pays for
"#,
    r#"
cost = response_bytes(per =)
                           ^ expected an integer literal: `response_bytes(per = 1024)`: the response bytes one unit pays for
"#,
    r#"
cost = response_bytes(per = x)
                            ^ expected an integer literal: `response_bytes(per = 1024)`: the response bytes one unit pays for
"#,
    r#"
cost = response_bytes(per = 1024) x
                                  ^ unexpected tokens after the cost
"#,
    r#"
cost = response_bytes(per = 1024, x)
                                ^ unexpected tokens after `per = N`
"#,
    r#"
cost = response_bytes(per = 99999999999999999999999)
                            ^^^^^^^^^^^^^^^^^^^^^^^ bytes per unit must be an integer that fits in a u32
"#,
    r#"
cost = response_bytes(1)
                      ^ expected `per = N`: `response_bytes(per = 1024)`: the response bytes one unit pays for
"#,
    r#"
cost = response_bytes[per = 1]
       ^^^^^^^^^^^^^^ `response_bytes` needs `per`: `response_bytes(per = 1024)`: the response bytes one unit pays for
"#,
    r#"
cost = [1]
       ^ expected an integer literal: `cost = 5`
"#,
    r#"
cost = 1.0e3
       ^^^^^ cost must be a whole number of units, e.g. `cost = 2`
"#,
    r#"
reject = a::b c
              ^ unexpected tokens after the function's path
"#,
    r#"
reject = a::<T>
"#,
    r#"
reject = 1
         ^ expected the path of a function `fn(&ratelimit::axum::Rejection<'_>) -> http::Response<B>`: `reject = errors::too_many_requests`
"#,
    r#"
crate = "a b"
        ^^^^^ "a b" is not a path: `crate = "my_ratelimit"`
"#,
    r#"
crate = "::a"
"#,
    r#"
crate = "a" x
            ^ unexpected tokens after the crate's path
"#,
    r#"
crate = 1
        ^ expected a string literal: `crate = "my_ratelimit"`
"#,
];

/// The parser knows every key kind, step and cost kind the spec lists.
#[test]
fn every_kind_the_spec_lists_parses() {
    let parses = |args: String| {
        let (parsed, errors) = parse_args(args.parse().expect("tokens"));
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(errors.is_empty(), "{args}: {errors:?}");
        parsed
    };
    for (kind, takes) in ratelimit_spec::KEY_KINDS {
        let key = match (kind, takes) {
            ("custom", _) => "custom(a::B)".to_owned(),
            (_, true) => format!("{kind}(\"x\")"),
            (_, false) => kind.to_owned(),
        };
        assert!(parses(format!("key = {key}, resolve = [default]")).key.is_some());
    }
    for (step, takes) in ratelimit_spec::STEPS {
        let chain = match (step, takes) {
            ("default", _) => "default".to_owned(),
            (_, true) => format!("{step}(\"p\"), default"),
            (_, false) => format!("{step}, default"),
        };
        assert!(parses(format!("key = ip, resolve = [{chain}]")).resolve.is_some());
    }
    for kind in ratelimit_spec::COST_KINDS {
        let args = parses(format!("key = ip, resolve = [default], cost = {kind}(per = 1)"));
        assert!(args.cost.is_some());
    }
}

/// An error of the attribute: line (1-based), column (1-based), message.
type Located = (usize, usize, String);

/// The errors the attribute gives on one `ui-tests/fail` file: each
/// `#[rate_limit]` item expanded as the compiler would (the attribute taken
/// off, the item with the attributes after it given to the macro), each
/// `compile_error!` of the output read back.
fn attribute_errors(source: &str) -> Vec<Located> {
    let file = syn::parse_file(source).expect("a ui case parses");
    let mut errors = Vec::new();
    for item in file.items {
        match item {
            syn::Item::Impl(mut block) => {
                for inner in &mut block.items {
                    if let syn::ImplItem::Fn(f) = inner {
                        if let Some(attr) = take_rate_limit(&mut f.attrs) {
                            errors.extend(expand(&attr, quote!(#f)));
                        }
                    }
                }
            }
            syn::Item::Fn(mut f) => {
                if let Some(attr) = take_rate_limit(&mut f.attrs) {
                    errors.extend(expand(&attr, quote!(#f)));
                }
            }
            syn::Item::Struct(mut s) => {
                if let Some(attr) = take_rate_limit(&mut s.attrs) {
                    errors.extend(expand(&attr, quote!(#s)));
                }
            }
            _ => {}
        }
    }
    errors
}

/// The first `#[rate_limit]` of an item, taken off it.
fn take_rate_limit(attrs: &mut Vec<syn::Attribute>) -> Option<syn::Attribute> {
    let i = attrs.iter().position(|a| a.path().is_ident("rate_limit"))?;
    Some(attrs.remove(i))
}

fn expand(attr: &syn::Attribute, item: TokenStream) -> Vec<Located> {
    let args = match &attr.meta {
        syn::Meta::List(list) => list.tokens.clone(),
        _ => TokenStream::new(),
    };
    let output: Vec<TokenTree> = crate::expand::rate_limit(args, item).into_iter().collect();
    // The call site is the attribute (the compiler shows it from its `#`).
    let call_site = attr.pound_token.span.start();
    let mut errors = Vec::new();
    for (i, token) in output.iter().enumerate() {
        let TokenTree::Ident(ident) = token else { continue };
        if ident != "compile_error" {
            continue;
        }
        let Some(TokenTree::Group(group)) = output.get(i + 2) else {
            panic!("`compile_error` without its message")
        };
        let message: syn::LitStr = syn::parse2(group.stream()).expect("the message is a string");
        let at = if ident.span().byte_range() == (0..0) {
            call_site
        } else {
            ident.span().start()
        };
        errors.push((at.line, at.column + 1, message.value()));
    }
    errors
}

/// rustc's own errors in the cases' `.stderr` (about the expansion, not
/// from the attribute).
const RUSTC_ERRORS: [&str; 2] = [
    "is not supported in `trait`s or `impl`s",
    "`const` items in this context need a name",
];

/// The errors a `.stderr` shows that the attribute gives: `error: ...`
/// (with no code) and the `-->` line after it.
fn expected_errors(stderr: &str) -> Vec<Located> {
    let mut errors = Vec::new();
    let mut lines = stderr.lines();
    while let Some(line) = lines.next() {
        let Some(message) = line.strip_prefix("error: ") else {
            continue;
        };
        if RUSTC_ERRORS.iter().any(|e| message.contains(e)) {
            continue;
        }
        let location = lines.next().and_then(|l| l.trim_start().strip_prefix("--> "));
        let location = location.unwrap_or_else(|| panic!("no location after `{line}`"));
        let mut parts = location.rsplitn(3, ':');
        let column = parts.next().and_then(|c| c.parse().ok()).expect("a column");
        let row = parts.next().and_then(|r| r.parse().ok()).expect("a line");
        errors.push((row, column, message.to_owned()));
    }
    errors
}

#[test]
fn ui_cases_match_their_stderr() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui-tests/fail");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .expect("ui-tests/fail")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    cases.sort();
    let (mut failures, mut compared) = (Vec::new(), 0);
    for case in &cases {
        let source = std::fs::read_to_string(case).expect("the case");
        let stderr = std::fs::read_to_string(case.with_extension("stderr")).expect("the case's .stderr");
        let expected = expected_errors(&stderr);
        let got = attribute_errors(&source);
        compared += expected.len();
        if got != expected {
            failures.push(format!("{}:\nexpected {expected:#?}\ngot {got:#?}", case.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Not vacuous: the cases were found, and most of them are the
    // attribute's own errors.
    assert!(
        cases.len() >= 60 && compared >= 60,
        "{} cases, {compared} errors",
        cases.len()
    );
}
