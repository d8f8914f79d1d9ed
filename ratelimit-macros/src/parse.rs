//! The attribute's arguments: `key = ...`, `resolve = [...]`, `name = "..."`,
//! `cost = N`, `shadow`, `layer`, `reject = path`, `crate = "path"`.
//!
//! Each option is a keyword (`syn::custom_keyword!`, and `Token![crate]`)
//! and each value a type with its own `Parse`. The arguments are split at
//! their top-level commas and each segment is parsed on its own, so that
//! every error is collected, each on its own token, rather than the first
//! one ending the parse.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{ItemFn, LitStr, Token};

use ratelimit_spec::Surface;
pub(crate) use ratelimit_spec::{Cost, KeyKind, Step};

mod values;

use values::{CostValue, CratePath, Flag, FnPath, KeyValue, RouteName, Steps};

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(resolve);
    syn::custom_keyword!(name);
    syn::custom_keyword!(cost);
    syn::custom_keyword!(shadow);
    syn::custom_keyword!(layer);
    syn::custom_keyword!(state);
    syn::custom_keyword!(reject);
}

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
    /// `layer`: the runtime is the one `RateLimitLayer` installed, not the
    /// router's state (the default, through axum's `FromRef`).
    pub(crate) layer: bool,
    /// `reject = path::to::function`: the route's own rejection response.
    pub(crate) reject: Option<syn::Path>,
    /// `crate = "path"`: where the `ratelimit` crate is (a renamed
    /// dependency, a re-export).
    pub(crate) krate: Option<syn::Path>,
    /// Options written, valid or not (so a bad one is not also "missing").
    pub(crate) given: Vec<OptionName>,
}

/// The options, by keyword.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OptionName {
    Key,
    Resolve,
    Name,
    Cost,
    Shadow,
    Layer,
    Reject,
    Crate,
}

impl OptionName {
    /// Every option, in the order messages list them.
    const ALL: [OptionName; 8] = [
        OptionName::Key,
        OptionName::Resolve,
        OptionName::Name,
        OptionName::Cost,
        OptionName::Shadow,
        OptionName::Layer,
        OptionName::Reject,
        OptionName::Crate,
    ];

    fn keyword(self) -> &'static str {
        match self {
            OptionName::Key => "key",
            OptionName::Resolve => "resolve",
            OptionName::Name => "name",
            OptionName::Cost => "cost",
            OptionName::Shadow => "shadow",
            OptionName::Layer => "layer",
            OptionName::Reject => "reject",
            OptionName::Crate => "crate",
        }
    }

    /// The option written out, for messages; `None` for a flag (it has no
    /// value).
    fn example(self) -> Option<&'static str> {
        match self {
            OptionName::Key => Some("`key = ip`"),
            OptionName::Resolve => Some("`resolve = [jwt, default]`"),
            OptionName::Name => Some("`name = \"users.get\"`"),
            OptionName::Cost => Some("`cost = 5` or `cost = response_bytes(per = 1024)`"),
            OptionName::Reject => Some("`reject = errors::too_many_requests`"),
            OptionName::Crate => Some("`crate = \"my_ratelimit\"`"),
            OptionName::Shadow | OptionName::Layer => None,
        }
    }
}

/// `` `key`, `resolve`, ... or `crate` ``.
fn expected_options() -> String {
    let names: Vec<String> = OptionName::ALL.iter().map(|o| format!("`{}`", o.keyword())).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// The keyword a segment starts with, and its span.
struct Head {
    option: OptionName,
    span: Span,
}

impl Parse for Head {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // The token as written (`crate` is a keyword, and an identifier
        // token all the same), not looked into when it is an invisible group.
        let ident = match input.cursor().token_tree() {
            Some((TokenTree::Ident(ident), _)) => ident,
            Some((other, _)) => {
                return Err(syn::Error::new(
                    other.span(),
                    format!("expected an option: {}", expected_options()),
                ))
            }
            None => return Err(input.error(format!("expected an option: {}", expected_options()))),
        };
        let lookahead = input.lookahead1();
        let (option, span) = if lookahead.peek(kw::key) {
            (OptionName::Key, input.parse::<kw::key>()?.span)
        } else if lookahead.peek(kw::resolve) {
            (OptionName::Resolve, input.parse::<kw::resolve>()?.span)
        } else if lookahead.peek(kw::name) {
            (OptionName::Name, input.parse::<kw::name>()?.span)
        } else if lookahead.peek(kw::cost) {
            (OptionName::Cost, input.parse::<kw::cost>()?.span)
        } else if lookahead.peek(kw::shadow) {
            (OptionName::Shadow, input.parse::<kw::shadow>()?.span)
        } else if lookahead.peek(kw::layer) {
            (OptionName::Layer, input.parse::<kw::layer>()?.span)
        } else if lookahead.peek(kw::reject) {
            (OptionName::Reject, input.parse::<kw::reject>()?.span)
        } else if lookahead.peek(Token![crate]) {
            (OptionName::Crate, input.parse::<Token![crate]>()?.span)
        } else if lookahead.peek(kw::state) {
            // The option of 0.1: the router's state is now where the
            // runtime is looked for by default.
            return Err(syn::Error::new(
                ident.span(),
                "`state` is no longer an option: the runtime is found in the router's state by default \
                 (through `FromRef`); remove it",
            ));
        } else {
            // The lookahead's own message ("expected one of: ...") is
            // replaced by the attribute's, which names the option written.
            return Err(syn::Error::new(
                ident.span(),
                format!("unknown option `{ident}`; expected {}", expected_options()),
            ));
        };
        Ok(Head { option, span })
    }
}

/// One option and its value.
enum Opt {
    Key(KeyValue),
    Resolve(Steps),
    Name(RouteName),
    Cost(CostValue),
    Shadow(Flag),
    Layer(Flag),
    Reject(FnPath),
    Crate(CratePath),
}

impl Opt {
    /// The option's value, after its keyword: `= value`, or nothing for a
    /// flag.
    fn parse_value(head: &Head, input: ParseStream<'_>) -> syn::Result<Opt> {
        if let Some(example) = head.option.example() {
            let name = head.option.keyword();
            let needs_value = || syn::Error::new(head.span, format!("`{name}` needs a value, e.g. {example}"));
            if input.is_empty() {
                return Err(needs_value());
            }
            match input.parse::<TokenTree>()? {
                TokenTree::Punct(p) if p.as_char() == '=' => {}
                other => {
                    return Err(syn::Error::new(
                        other.span(),
                        format!("expected `=` after `{name}`, e.g. {example}"),
                    ))
                }
            }
            if input.is_empty() {
                return Err(needs_value());
            }
        }
        Ok(match head.option {
            OptionName::Key => Opt::Key(input.parse()?),
            OptionName::Resolve => Opt::Resolve(input.parse()?),
            OptionName::Name => Opt::Name(input.parse()?),
            OptionName::Cost => Opt::Cost(input.parse()?),
            OptionName::Shadow => Opt::Shadow(Flag::parse(head, input)?),
            OptionName::Layer => Opt::Layer(Flag::parse(head, input)?),
            OptionName::Reject => Opt::Reject(input.parse()?),
            OptionName::Crate => Opt::Crate(input.parse()?),
        })
    }
}

/// A spec error, on `span`, in the attribute's spelling.
fn spec_error(span: Span, e: &ratelimit_spec::Error) -> syn::Error {
    syn::Error::new(span, e.describe(Surface::Attribute))
}

/// Parses the arguments, returning what could be parsed and every error.
pub(crate) fn parse_args(args: TokenStream) -> (Args, Vec<syn::Error>) {
    let mut out = Args::default();
    let mut errors = Vec::new();
    for segment in split_top_level(args) {
        let given = &mut out.given;
        let parsed = (|input: ParseStream<'_>| {
            let head: Head = input.parse()?;
            if given.contains(&head.option) {
                return Err(syn::Error::new(
                    head.span,
                    format!("duplicate option `{}`", head.option.keyword()),
                ));
            }
            given.push(head.option);
            Opt::parse_value(&head, input)
        })
        .parse2(segment.into_iter().collect());
        match parsed {
            Ok(option) => out.set(option, &mut errors),
            Err(e) => errors.extend(e),
        }
    }
    (out, errors)
}

impl Args {
    fn set(&mut self, option: Opt, errors: &mut Vec<syn::Error>) {
        match option {
            Opt::Key(KeyValue { kind, custom }) => {
                self.key = Some(kind);
                self.custom_key = custom;
            }
            Opt::Resolve(Steps(steps)) => self.resolve = Some(steps),
            Opt::Name(RouteName(name)) => self.name = Some(name),
            Opt::Cost(CostValue { cost, span }) => {
                self.cost = Some(cost);
                self.cost_span = Some(span);
            }
            Opt::Shadow(Flag(error)) => {
                self.shadow = true;
                errors.extend(error);
            }
            Opt::Layer(Flag(error)) => {
                self.layer = true;
                errors.extend(error);
            }
            Opt::Reject(FnPath(path)) => self.reject = Some(path),
            Opt::Crate(CratePath(path)) => self.krate = Some(path),
        }
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

/// `#[rate_limit(...)]`, `#[ratelimit::rate_limit(...)]` or any path ending
/// in `rate_limit` (a renamed crate).
fn is_rate_limit(attr: &syn::Attribute) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == "rate_limit")
}

/// Further `#[rate_limit(...)]` attributes below this one stack with it:
/// one all-or-nothing decision. The expansion of the first takes them all
/// (an attribute macro sees the attributes after its own on the item): they
/// are taken off the function and parsed, each with the span its
/// attribute-wide errors go on.
pub(crate) fn take_stacked(function: &mut ItemFn, errors: &mut Vec<syn::Error>) -> Vec<(Args, Span)> {
    let mut stacked = Vec::new();
    let mut kept = Vec::new();
    for attr in std::mem::take(&mut function.attrs) {
        if !is_rate_limit(&attr) {
            kept.push(attr);
            continue;
        }
        let span = attr.path().span();
        match &attr.meta {
            syn::Meta::List(list) => {
                let (args, more) = parse_args(list.tokens.clone());
                errors.extend(more);
                stacked.push((args, span));
            }
            _ => errors.push(syn::Error::new(
                attr.span(),
                "a stacked `#[rate_limit]` needs its arguments: `#[rate_limit(key = ..., resolve = [...])]`",
            )),
        }
    }
    function.attrs = kept;
    stacked
}
