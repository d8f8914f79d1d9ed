//! The attribute's arguments: `key = ...`, `resolve = [...]`, `name = "..."`,
//! `cost = N`, `shadow`, `state`, `reject = path`, `crate = "path"`. Every
//! error is collected, on its own token.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Ident, LitStr, Token};

use ratelimit_spec::Surface;
pub(crate) use ratelimit_spec::{Cost, KeyKind, Step};

/// Parsed arguments; options left out are `None`.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<KeyKind>,
    pub(crate) resolve: Option<Vec<Step>>,
    pub(crate) name: Option<LitStr>,
    pub(crate) cost: Option<Cost>,
    /// The span of the cost's value (a `Charge` argument beside a
    /// `response_bytes` cost is reported there).
    pub(crate) cost_span: Option<Span>,
    pub(crate) shadow: bool,
    /// `key = custom(path::To::Type)`: the type, as written.
    pub(crate) custom_key: Option<syn::Path>,
    /// `state`: the runtime is found in the router's state through axum's
    /// `FromRef`.
    pub(crate) state: bool,
    /// `reject = path::to::function`: the route's own rejection response.
    pub(crate) reject: Option<syn::Path>,
    /// `crate = "path"`: where the `ratelimit` crate is (a renamed
    /// dependency, a re-export).
    pub(crate) krate: Option<syn::Path>,
    /// Options written, valid or not (so a bad one is not also "missing").
    pub(crate) given: Vec<String>,
}

const OPTIONS: &str = "`key`, `resolve`, `name`, `cost`, `shadow`, `state`, `reject` or `crate`";
const OPTION_NAMES: [&str; 8] = ["key", "resolve", "name", "cost", "shadow", "state", "reject", "crate"];
const KEY_KINDS: &str = "`ip`, `header(\"x-api-key\")`, `jwt_claim(\"sub\")`, `global` or `custom(path::To::KeyType)`";
const RESOLVERS: &str = "`jwt`, `service`, `profile(\"name\")` or `default`";

/// A spec error, on `span`, in the attribute's spelling.
fn spec_error(span: Span, e: &ratelimit_spec::Error) -> syn::Error {
    syn::Error::new(span, e.describe(Surface::Attribute))
}

/// Parses the arguments, returning what could be parsed and every error.
pub(crate) fn parse_args(args: TokenStream) -> (Args, Vec<syn::Error>) {
    let mut out = Args::default();
    let mut errors = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for segment in split_top_level(args) {
        let mut tokens = segment.into_iter().peekable();
        let option = match tokens.next() {
            // (`crate` is a keyword, and an identifier token all the same.)
            Some(TokenTree::Ident(i)) => i,
            Some(other) => {
                errors.push(syn::Error::new(other.span(), format!("expected an option: {OPTIONS}")));
                continue;
            }
            None => continue,
        };
        let name = option.to_string();
        if !OPTION_NAMES.contains(&name.as_str()) {
            errors.push(syn::Error::new(
                option.span(),
                format!("unknown option `{name}`; expected {OPTIONS}"),
            ));
            continue;
        }
        if seen.contains(&name) {
            errors.push(syn::Error::new(option.span(), format!("duplicate option `{name}`")));
            continue;
        }
        seen.push(name.clone());
        out.given.push(name.clone());
        let rest: TokenStream = tokens.collect();
        if name == "shadow" || name == "state" {
            if let Some(t) = rest.into_iter().next() {
                errors.push(syn::Error::new(
                    t.span(),
                    format!("`{name}` is a flag and takes no value: write `{name}`"),
                ));
            }
            if name == "shadow" {
                out.shadow = true;
            } else {
                out.state = true;
            }
            continue;
        }
        let mut rest = rest.into_iter();
        match rest.next() {
            Some(TokenTree::Punct(p)) if p.as_char() == '=' => {}
            Some(other) => {
                errors.push(syn::Error::new(
                    other.span(),
                    format!("expected `=` after `{name}`, e.g. {}", example(&name)),
                ));
                continue;
            }
            None => {
                errors.push(syn::Error::new(
                    option.span(),
                    format!("`{name}` needs a value, e.g. {}", example(&name)),
                ));
                continue;
            }
        }
        let value: TokenStream = rest.collect();
        if value.is_empty() {
            errors.push(syn::Error::new(
                option.span(),
                format!("`{name}` needs a value, e.g. {}", example(&name)),
            ));
            continue;
        }
        match name.as_str() {
            "key" => match parse_key.parse2(value) {
                Ok((k, custom)) => {
                    out.key = Some(k);
                    out.custom_key = custom;
                }
                Err(e) => errors.push(e),
            },
            "reject" => match parse_fn_path.parse2(value) {
                Ok(p) => out.reject = Some(p),
                Err(e) => errors.push(e),
            },
            "crate" => match parse_crate.parse2(value) {
                Ok(p) => out.krate = Some(p),
                Err(e) => errors.push(e),
            },
            "resolve" => {
                let (steps, errs) = parse_resolve(value, option.span());
                errors.extend(errs);
                out.resolve = steps;
            }
            "name" => match parse_name.parse2(value) {
                Ok(n) => out.name = Some(n),
                Err(e) => errors.push(e),
            },
            _ => match parse_cost.parse2(value.clone()) {
                Ok(c) => {
                    out.cost = Some(c);
                    out.cost_span = Some(value.span());
                }
                Err(e) => errors.push(e),
            },
        }
    }
    (out, errors)
}

fn example(option: &str) -> &'static str {
    match option {
        "key" => "`key = ip`",
        "resolve" => "`resolve = [jwt, default]`",
        "name" => "`name = \"users.get\"`",
        "reject" => "`reject = errors::too_many_requests`",
        "crate" => "`crate = \"my_ratelimit\"`",
        _ => "`cost = 5` or `cost = response_bytes(per = 1024)`",
    }
}

/// Splits at commas outside any group.
fn split_top_level(args: TokenStream) -> Vec<Vec<TokenTree>> {
    let mut segments = vec![Vec::new()];
    for tt in args {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ',' => segments.push(Vec::new()),
            _ => {
                if let Some(last) = segments.last_mut() {
                    last.push(tt);
                }
            }
        }
    }
    segments.retain(|s| !s.is_empty());
    segments
}

/// The surface syntax of keys and steps: `kind` or `kind("argument")`.
/// Which kinds exist, which take an argument and what it may hold is the
/// spec's: `takes_arg` (`None`: no such kind) and `check` decide, and their
/// errors are reported on the token they are about.
fn parse_call<T>(
    input: ParseStream<'_>,
    takes_arg: impl Fn(&str) -> Option<bool>,
    check: impl Fn(&str, Option<&str>) -> Result<T, ratelimit_spec::Error>,
    example: &str,
    what: &str,
) -> syn::Result<T> {
    let ident: Ident = input.parse()?;
    let name = ident.to_string();
    let on = |span: Span| move |e: ratelimit_spec::Error| spec_error(span, &e);
    match takes_arg(&name) {
        // Unknown: the spec's error names the kinds there are.
        None => return check(&name, None).map_err(on(ident.span())),
        Some(false) if !input.is_empty() => {
            let message = match check(&name, Some("")) {
                Err(e) => e.describe(Surface::Attribute),
                Ok(_) => format!("`{name}` takes no arguments"),
            };
            return Err(input.error(message));
        }
        Some(false) => return check(&name, None).map_err(on(ident.span())),
        Some(true) if !input.peek(syn::token::Paren) => return check(&name, None).map_err(on(ident.span())),
        Some(true) => {}
    }
    let content;
    syn::parenthesized!(content in input);
    let lit: LitStr = content
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("expected a string literal: `{example}`")))?;
    if !content.is_empty() {
        return Err(content.error(format!("expected one string literal: `{example}`")));
    }
    // The argument's own mistake first (it is the likelier one), then what
    // follows it.
    let value = check(&name, Some(&lit.value())).map_err(on(lit.span()))?;
    if !input.is_empty() {
        return Err(input.error(format!("unexpected tokens after the {what}")));
    }
    Ok(value)
}

/// A key, and for `custom(path::To::Type)` the type as written (the one
/// kind whose argument is a path rather than a string).
fn parse_key(input: ParseStream<'_>) -> syn::Result<(KeyKind, Option<syn::Path>)> {
    if !input.peek(Ident) {
        return Err(input.error(format!("expected a key kind: {KEY_KINDS}")));
    }
    if input.fork().parse::<Ident>().is_ok_and(|i| i == "custom") {
        return parse_custom_key(input).map(|(k, p)| (k, Some(p)));
    }
    parse_builtin_key(input).map(|k| (k, None))
}

/// `custom(path::To::Type)`: a path to a type implementing
/// `ratelimit::key::KeySource + Default`.
fn parse_custom_key(input: ParseStream<'_>) -> syn::Result<(KeyKind, syn::Path)> {
    let ident: Ident = input.parse()?;
    if !input.peek(syn::token::Paren) {
        let e = ratelimit_spec::key("custom", None).err();
        let message = e.map_or_else(
            || "`custom` needs the key type's path: `custom(tenant::ByTenant)`".to_owned(),
            |e| e.describe(Surface::Attribute),
        );
        return Err(syn::Error::new(ident.span(), message));
    }
    let content;
    syn::parenthesized!(content in input);
    if content.peek(LitStr) {
        let lit: LitStr = content.parse()?;
        return Err(syn::Error::new(
            lit.span(),
            "`custom` takes the key type's path, not a string: `custom(tenant::ByTenant)` (the configuration's \
             \"custom:<name>\" names an extractor registered on the builder)",
        ));
    }
    let path: syn::Path = content.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected the path of a type implementing `ratelimit::key::KeySource`: `custom(tenant::ByTenant)`",
        )
    })?;
    if !content.is_empty() {
        return Err(content.error("expected one type path: `custom(tenant::ByTenant)`"));
    }
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the key"));
    }
    // The spec names the kind; the path's segments are its name (in
    // messages; generic arguments, `ByExt<Tenant>`, are the type's own).
    let text = path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::");
    let kind = ratelimit_spec::key("custom", Some(&text)).map_err(|e| spec_error(path.span(), &e))?;
    Ok((kind, path))
}

/// `reject = path::to::function`.
fn parse_fn_path(input: ParseStream<'_>) -> syn::Result<syn::Path> {
    let path: syn::Path = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected the path of a function `fn(&ratelimit::axum::Rejection<'_>) -> impl IntoResponse`: \
             `reject = errors::too_many_requests`",
        )
    })?;
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the function's path"));
    }
    Ok(path)
}

/// `crate = "path"`, as tokio's attribute takes it.
fn parse_crate(input: ParseStream<'_>) -> syn::Result<syn::Path> {
    let lit: LitStr = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), "expected a string literal: `crate = \"my_ratelimit\"`"))?;
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the crate's path"));
    }
    lit.parse_with(syn::Path::parse_mod_style).map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!("{:?} is not a path: `crate = \"my_ratelimit\"`", lit.value()),
        )
    })
}

fn parse_builtin_key(input: ParseStream<'_>) -> syn::Result<KeyKind> {
    let example = if input.fork().parse::<Ident>().is_ok_and(|i| i == "header") {
        "header(\"x-api-key\")"
    } else {
        "jwt_claim(\"sub\")"
    };
    parse_call(
        input,
        ratelimit_spec::key_takes_argument,
        ratelimit_spec::key,
        example,
        "key",
    )
}

/// Parses `[step, ...]`, reporting every bad step.
fn parse_resolve(value: TokenStream, option: Span) -> (Option<Vec<Step>>, Vec<syn::Error>) {
    let mut errors = Vec::new();
    let mut tokens = value.into_iter();
    let group = match (tokens.next(), tokens.next()) {
        (Some(TokenTree::Group(g)), None) if g.delimiter() == Delimiter::Bracket => g,
        (Some(first), _) => {
            errors.push(syn::Error::new(
                first.span(),
                format!("expected a list in brackets: `resolve = [jwt, default]`, with steps {RESOLVERS}"),
            ));
            return (None, errors);
        }
        (None, _) => return (None, errors),
    };
    let items = split_top_level(group.stream());
    if items.is_empty() {
        errors.push(spec_error(group.span(), &ratelimit_spec::empty_chain()));
        return (None, errors);
    }
    // Steps that did not parse stay in place as `None`, so the chain's
    // checks report the steps that did at their own positions.
    let mut steps: Vec<Option<Step>> = Vec::new();
    let mut spans = Vec::new();
    for item in items {
        let stream: TokenStream = item.into_iter().collect();
        spans.push(stream.span());
        match parse_step.parse2(stream) {
            Ok(step) => steps.push(Some(step)),
            Err(e) => {
                errors.push(e);
                steps.push(None);
            }
        }
    }
    let partial: Vec<Option<&Step>> = steps.iter().map(Option::as_ref).collect();
    for (i, problem) in ratelimit_spec::check_partial_chain(&partial) {
        errors.push(spec_error(spans.get(i).copied().unwrap_or(option), &problem));
    }
    let steps = if errors.is_empty() {
        steps.into_iter().collect::<Option<Vec<Step>>>()
    } else {
        None
    };
    (steps, errors)
}

fn parse_step(input: ParseStream<'_>) -> syn::Result<Step> {
    if !input.peek(Ident) {
        return Err(input.error(format!("expected a resolver: {RESOLVERS}")));
    }
    parse_call(
        input,
        ratelimit_spec::step_takes_argument,
        ratelimit_spec::step,
        "profile(\"standard\")",
        "resolver",
    )
}

fn parse_name(input: ParseStream<'_>) -> syn::Result<LitStr> {
    let lit: LitStr = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), "expected a string literal: `name = \"users.get\"`"))?;
    ratelimit_spec::route_name(&lit.value()).map_err(|e| spec_error(lit.span(), &e))?;
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the name"));
    }
    Ok(lit)
}

fn parse_cost(input: ParseStream<'_>) -> syn::Result<Cost> {
    if input.peek(Ident) {
        return parse_cost_kind(input);
    }
    if input.peek(Token![-]) {
        let minus: Token![-] = input.parse()?;
        let message = match ratelimit_spec::cost(-1) {
            Err(e) => e.describe(Surface::Attribute),
            Ok(_) => "cost must be a positive integer".to_owned(),
        };
        return Err(syn::Error::new(minus.span, message));
    }
    let lit: syn::Lit = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), "expected an integer literal: `cost = 5`"))?;
    let cost = match &lit {
        syn::Lit::Int(i) => {
            let value: u64 = i
                .base10_parse()
                .map_err(|_| syn::Error::new(i.span(), "cost must be an integer that fits in a u32"))?;
            ratelimit_spec::cost(i128::from(value)).map_err(|e| spec_error(i.span(), &e))?
        }
        syn::Lit::Float(f) => {
            return Err(syn::Error::new(
                f.span(),
                "cost must be a whole number of units, e.g. `cost = 2`",
            ))
        }
        other => return Err(syn::Error::new(other.span(), "expected an integer literal: `cost = 5`")),
    };
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the cost"));
    }
    Ok(Cost::Units(cost))
}

/// `response_bytes(per = 1024)`: the cost is the response's size.
fn parse_cost_kind(input: ParseStream<'_>) -> syn::Result<Cost> {
    let kind: Ident = input.parse()?;
    if kind != "response_bytes" {
        return Err(spec_error(
            kind.span(),
            &ratelimit_spec::unknown_cost(&kind.to_string()),
        ));
    }
    const EXAMPLE: &str = "`response_bytes(per = 1024)`: the response bytes one unit pays for";
    if !input.peek(syn::token::Paren) {
        return Err(syn::Error::new(
            kind.span(),
            format!("`response_bytes` needs `per`: {EXAMPLE}"),
        ));
    }
    let content;
    let parens = syn::parenthesized!(content in input);
    if content.is_empty() {
        return Err(syn::Error::new(
            parens.span.join(),
            format!("`response_bytes` needs `per`: {EXAMPLE}"),
        ));
    }
    let per: Ident = content
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("expected `per = N`: {EXAMPLE}")))?;
    if per != "per" {
        return Err(syn::Error::new(
            per.span(),
            format!("unknown argument `{per}`; expected {EXAMPLE}"),
        ));
    }
    let _: Token![=] = content
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("expected `per = N`: {EXAMPLE}")))?;
    let cost = if content.peek(Token![-]) {
        let minus: Token![-] = content.parse()?;
        let e = ratelimit_spec::response_bytes(-1).expect_err("a negative size is refused");
        return Err(spec_error(minus.span, &e));
    } else {
        let lit: syn::LitInt = content
            .parse()
            .map_err(|e| syn::Error::new(e.span(), format!("expected an integer literal: {EXAMPLE}")))?;
        let value: u64 = lit
            .base10_parse()
            .map_err(|_| syn::Error::new(lit.span(), "bytes per unit must be an integer that fits in a u32"))?;
        ratelimit_spec::response_bytes(i128::from(value)).map_err(|e| spec_error(lit.span(), &e))?
    };
    if !content.is_empty() {
        return Err(content.error("unexpected tokens after `per = N`"));
    }
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the cost"));
    }
    Ok(cost)
}
