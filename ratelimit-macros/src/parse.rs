//! The attribute's arguments: `key = ...`, `resolve = [...]`, `name = "..."`,
//! `cost = N`, `shadow`. Every error is collected, on its own token.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Ident, LitStr, Token};

/// Who is limited.
pub(crate) enum KeyKind {
    Ip,
    /// A lowercased header name.
    Header(String),
    /// A dotted claim path.
    Claim(String),
}

/// A step of the resolver chain.
#[derive(PartialEq, Eq)]
pub(crate) enum Step {
    Jwt,
    Service,
    Profile(String),
    Default,
}

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

fn parse_key(input: ParseStream<'_>) -> syn::Result<KeyKind> {
    let kind: Ident = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("expected a key kind: {KEY_KINDS}")))?;
    let key = match kind.to_string().as_str() {
        "ip" => {
            if !input.is_empty() {
                return Err(input.error("`ip` takes no arguments: write `key = ip`"));
            }
            KeyKind::Ip
        }
        k @ ("header" | "jwt_claim") => {
            let example = if k == "header" {
                "header(\"x-api-key\")"
            } else {
                "jwt_claim(\"sub\")"
            };
            if !input.peek(syn::token::Paren) {
                return Err(syn::Error::new(
                    kind.span(),
                    format!("`{k}` needs a name in parentheses: `{example}`"),
                ));
            }
            let content;
            syn::parenthesized!(content in input);
            let lit: LitStr = content
                .parse()
                .map_err(|e| syn::Error::new(e.span(), format!("expected a string literal: `{example}`")))?;
            if !content.is_empty() {
                return Err(content.error(format!("expected one string literal: `{example}`")));
            }
            let value = lit.value();
            if k == "header" {
                check_header_name(&value).map_err(|m| syn::Error::new(lit.span(), m))?;
                KeyKind::Header(value.to_ascii_lowercase())
            } else {
                check_claim_path(&value).map_err(|m| syn::Error::new(lit.span(), m))?;
                KeyKind::Claim(value)
            }
        }
        other => {
            return Err(syn::Error::new(
                kind.span(),
                format!("unknown key kind `{other}`; expected {KEY_KINDS}"),
            ))
        }
    };
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the key"));
    }
    Ok(key)
}

fn check_header_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty header name; e.g. `header(\"x-api-key\")`".to_owned());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(*c)))
    {
        return Err(format!(
            "invalid header name {name:?}: {c:?} is not allowed; header names are letters, digits and !#$%&'*+-.^_`|~"
        ));
    }
    Ok(())
}

fn check_claim_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("empty claim name; e.g. `jwt_claim(\"sub\")` or a dotted path `jwt_claim(\"org.id\")`".to_owned());
    }
    if path.split('.').any(str::is_empty) {
        return Err(format!(
            "invalid claim path {path:?}: empty segment; a path is names joined by '.', e.g. \"org.id\""
        ));
    }
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("invalid claim path {path:?}: claim names have no whitespace"));
    }
    Ok(())
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
        errors.push(syn::Error::new(
            group.span(),
            format!("empty resolve list: list the steps to try, ending with `default`; steps are {RESOLVERS}"),
        ));
        return (None, errors);
    }
    let count = items.len();
    let mut steps = Vec::new();
    let mut last_span = group.span();
    let mut all_ok = true;
    for (i, item) in items.into_iter().enumerate() {
        let stream: TokenStream = item.into_iter().collect();
        let span = stream.span();
        last_span = span;
        match parse_step.parse2(stream) {
            Ok(step) => {
                if steps.contains(&step) {
                    errors.push(syn::Error::new(span, "duplicate resolver: each step is tried once"));
                    all_ok = false;
                    continue;
                }
                if step == Step::Default && i + 1 != count {
                    errors.push(syn::Error::new(
                        span,
                        "`default` always answers, so the steps after it would never run: put `default` last",
                    ));
                    all_ok = false;
                }
                steps.push(step);
            }
            Err(e) => {
                errors.push(e);
                all_ok = false;
            }
        }
    }
    if all_ok && steps.last() != Some(&Step::Default) {
        errors.push(syn::Error::new(
            last_span,
            "the resolve list must end with `default`, which always answers: every request needs a limit",
        ));
        all_ok = false;
    }
    let _ = option;
    (all_ok.then_some(steps), errors)
}

fn parse_step(input: ParseStream<'_>) -> syn::Result<Step> {
    let ident: Ident = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("expected a resolver: {RESOLVERS}")))?;
    let name = ident.to_string();
    let step = match name.as_str() {
        "jwt" | "service" | "default" => {
            if !input.is_empty() {
                return Err(input.error(format!("`{name}` takes no arguments")));
            }
            match name.as_str() {
                "jwt" => Step::Jwt,
                "service" => Step::Service,
                _ => Step::Default,
            }
        }
        "profile" => {
            if !input.peek(syn::token::Paren) {
                return Err(syn::Error::new(
                    ident.span(),
                    "`profile` needs a profile name: `profile(\"standard\")`",
                ));
            }
            let content;
            syn::parenthesized!(content in input);
            let lit: LitStr = content
                .parse()
                .map_err(|e| syn::Error::new(e.span(), "expected a string literal: `profile(\"standard\")`"))?;
            if !content.is_empty() {
                return Err(content.error("expected one string literal: `profile(\"standard\")`"));
            }
            let value = lit.value();
            if value.trim().is_empty() {
                return Err(syn::Error::new(
                    lit.span(),
                    "empty profile name; name a profile of the configuration, e.g. `profile(\"standard\")`",
                ));
            }
            if !input.is_empty() {
                return Err(input.error("unexpected tokens after the resolver"));
            }
            Step::Profile(value)
        }
        other => {
            return Err(syn::Error::new(
                ident.span(),
                format!("unknown resolver `{other}`; expected {RESOLVERS}"),
            ))
        }
    };
    Ok(step)
}

fn parse_name(input: ParseStream<'_>) -> syn::Result<LitStr> {
    let lit: LitStr = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), "expected a string literal: `name = \"users.get\"`"))?;
    let value = lit.value();
    if value.is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            "empty route name; e.g. `name = \"users.get\"`",
        ));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-:/".contains(*c)))
    {
        return Err(syn::Error::new(
            lit.span(),
            format!("invalid route name {value:?}: {c:?} is not allowed; use letters, digits and . _ - : /"),
        ));
    }
    if !input.is_empty() {
        return Err(input.error("unexpected tokens after the name"));
    }
    Ok(lit)
}

fn parse_cost(input: ParseStream<'_>) -> syn::Result<u32> {
    if input.peek(Token![-]) {
        let minus: Token![-] = input.parse()?;
        return Err(syn::Error::new(
            minus.span,
            "cost must be a positive integer: it is how many units of the limit a request uses",
        ));
    }
    let lit: syn::Lit = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), "expected an integer literal: `cost = 5`"))?;
    let cost = match &lit {
        syn::Lit::Int(i) => {
            let value: u64 = i
                .base10_parse()
                .map_err(|_| syn::Error::new(i.span(), "cost must be an integer that fits in a u32"))?;
            if value == 0 {
                return Err(syn::Error::new(
                    i.span(),
                    "cost must be at least 1: a request that costs nothing is not limited (remove the attribute instead)",
                ));
            }
            u32::try_from(value)
                .map_err(|_| syn::Error::new(i.span(), format!("cost must fit in a u32 (at most {})", u32::MAX)))?
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
