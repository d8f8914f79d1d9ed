//! The attribute's arguments: `key = ...`, `resolve = [...]`, `name = "..."`,
//! `cost = N`, `shadow`. Every error is collected, on its own token.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Ident, LitStr, Token};

use ratelimit_spec::Surface;
pub(crate) use ratelimit_spec::{KeyKind, Step};

/// Parsed arguments; options left out are `None`.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) key: Option<KeyKind>,
    pub(crate) resolve: Option<Vec<Step>>,
    pub(crate) name: Option<LitStr>,
    pub(crate) cost: Option<u32>,
    pub(crate) shadow: bool,
    /// Options written, valid or not (so a bad one is not also "missing").
    pub(crate) given: Vec<String>,
}

const OPTIONS: &str = "`key`, `resolve`, `name`, `cost` or `shadow`";
const KEY_KINDS: &str = "`ip`, `header(\"x-api-key\")` or `jwt_claim(\"sub\")`";
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
            Some(TokenTree::Ident(i)) => i,
            Some(other) => {
                errors.push(syn::Error::new(other.span(), format!("expected an option: {OPTIONS}")));
                continue;
            }
            None => continue,
        };
        let name = option.to_string();
        if !["key", "resolve", "name", "cost", "shadow"].contains(&name.as_str()) {
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
        if name == "shadow" {
            if let Some(t) = rest.into_iter().next() {
                errors.push(syn::Error::new(
                    t.span(),
                    "`shadow` is a flag and takes no value: write `shadow`",
                ));
            }
            out.shadow = true;
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
                Ok(k) => out.key = Some(k),
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
            _ => match parse_cost.parse2(value) {
                Ok(c) => out.cost = Some(c),
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
        _ => "`cost = 5`",
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

fn parse_key(input: ParseStream<'_>) -> syn::Result<KeyKind> {
    if !input.peek(Ident) {
        return Err(input.error(format!("expected a key kind: {KEY_KINDS}")));
    }
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

fn parse_cost(input: ParseStream<'_>) -> syn::Result<u32> {
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
