//! The options' values, each a type with its own `Parse`: `key = ...`
//! ([`KeyValue`]), `resolve = [...]` ([`Steps`]), `name = "..."`
//! ([`RouteName`]), `cost = ...` ([`CostValue`]), `reject = path`
//! ([`FnPath`]), `crate = "path"` ([`CratePath`]), and the flags
//! ([`Flag`]). Which kinds, steps and costs exist, and what their arguments
//! may hold, is the spec's.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Ident, LitStr, Token};

use ratelimit_spec::{Cost, KeyKind, Step, Surface};

use super::{spec_error, split_top_level, Head};

/// `shadow`, `state`: a flag is set when written; a value after it is an
/// error (on its first token), and the flag is set all the same.
pub(super) struct Flag(pub(super) Option<syn::Error>);

impl Flag {
    pub(super) fn parse(head: &Head, input: ParseStream<'_>) -> syn::Result<Flag> {
        let name = head.option.keyword();
        let error = input.cursor().token_tree().map(|(t, _)| {
            syn::Error::new(
                t.span(),
                format!("`{name}` is a flag and takes no value: write `{name}`"),
            )
        });
        let _: TokenStream = input.parse()?;
        Ok(Flag(error))
    }
}

/// `key = ...`: a key, and for `custom(path::To::Type)` the type as written
/// (the one kind whose argument is a path rather than a string).
pub(super) struct KeyValue {
    pub(super) kind: KeyKind,
    pub(super) custom: Option<syn::Path>,
}

impl Parse for KeyValue {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if !input.peek(Ident) {
            return Err(input.error(format!(
                "expected a key kind: {}",
                ratelimit_spec::expected_keys(Surface::Attribute)
            )));
        }
        if input.fork().parse::<Ident>().is_ok_and(|i| i == "custom") {
            let (kind, path) = parse_custom_key(input)?;
            return Ok(KeyValue {
                kind,
                custom: Some(path),
            });
        }
        let kind = parse_builtin_key(input)?;
        Ok(KeyValue { kind, custom: None })
    }
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

/// `resolve = [step, ...]`: every bad step is reported (the errors
/// combined), then the chain's own problems.
pub(super) struct Steps(pub(super) Vec<Step>);

impl Parse for Steps {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let value: TokenStream = input.parse()?;
        let mut tokens = value.into_iter();
        let group = match (tokens.next(), tokens.next()) {
            (Some(TokenTree::Group(g)), None) if g.delimiter() == Delimiter::Bracket => g,
            (first, _) => {
                return Err(syn::Error::new(
                    first.map_or_else(Span::call_site, |t| t.span()),
                    format!(
                        "expected a list in brackets: `resolve = [jwt, default]`, with steps {}",
                        ratelimit_spec::expected_steps(Surface::Attribute)
                    ),
                ));
            }
        };
        let items = split_top_level(group.stream());
        if items.is_empty() {
            return Err(spec_error(group.span(), &ratelimit_spec::empty_chain()));
        }
        let mut errors = Vec::new();
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
            // (Each problem is about a step of the list.)
            let span = spans.get(i).copied().unwrap_or_else(|| group.span());
            errors.push(spec_error(span, &problem));
        }
        let mut errors = errors.into_iter();
        match errors.next() {
            Some(mut first) => {
                first.extend(errors);
                Err(first)
            }
            None => Ok(Steps(steps.into_iter().flatten().collect())),
        }
    }
}

fn parse_step(input: ParseStream<'_>) -> syn::Result<Step> {
    if !input.peek(Ident) {
        return Err(input.error(format!(
            "expected a resolver: {}",
            ratelimit_spec::expected_steps(Surface::Attribute)
        )));
    }
    parse_call(
        input,
        ratelimit_spec::step_takes_argument,
        ratelimit_spec::step,
        "profile(\"standard\")",
        "resolver",
    )
}

/// `name = "users.get"`.
pub(super) struct RouteName(pub(super) LitStr);

impl Parse for RouteName {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lit: LitStr = input
            .parse()
            .map_err(|e| syn::Error::new(e.span(), "expected a string literal: `name = \"users.get\"`"))?;
        ratelimit_spec::route_name(&lit.value()).map_err(|e| spec_error(lit.span(), &e))?;
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the name"));
        }
        Ok(RouteName(lit))
    }
}

/// `reject = path::to::function`.
pub(super) struct FnPath(pub(super) syn::Path);

impl Parse for FnPath {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let path: syn::Path = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "expected the path of a function `fn(&ratelimit::axum::Rejection<'_>) -> http::Response<B>`: \
                 `reject = errors::too_many_requests`",
            )
        })?;
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the function's path"));
        }
        Ok(FnPath(path))
    }
}

/// `crate = "path"`, as tokio's attribute takes it.
pub(super) struct CratePath(pub(super) syn::Path);

impl Parse for CratePath {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lit: LitStr = input
            .parse()
            .map_err(|e| syn::Error::new(e.span(), "expected a string literal: `crate = \"my_ratelimit\"`"))?;
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the crate's path"));
        }
        let path = lit.parse_with(syn::Path::parse_mod_style).map_err(|_| {
            syn::Error::new(
                lit.span(),
                format!("{:?} is not a path: `crate = \"my_ratelimit\"`", lit.value()),
            )
        })?;
        Ok(CratePath(path))
    }
}

/// `cost = N` or `cost = response_bytes(per = N)`, and the span of the
/// value as written.
pub(super) struct CostValue {
    pub(super) cost: Cost,
    pub(super) span: Span,
}

impl Parse for CostValue {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let span = input.fork().parse::<TokenStream>()?.span();
        let cost = if input.peek(Ident) {
            parse_cost_kind(input)?
        } else {
            Cost::Units(parse_units(input)?)
        };
        Ok(CostValue { cost, span })
    }
}

/// `N`: a whole number of units.
fn parse_units(input: ParseStream<'_>) -> syn::Result<u32> {
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
    Ok(cost)
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
