//! What parsing alone cannot tell: that the item is a handler the
//! attribute can wrap, that each attribute says who is limited and how
//! much, that stacked attributes agree, and that a `Charge` argument fits
//! the route's cost.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn};

use crate::parse::{Args, Cost, OptionName};

/// The most attributes one handler stacks (the runtime's tuples go to 8).
const MAX_STACK: usize = 8;

/// The attribute is on something that is not a function.
pub(crate) fn not_a_function(item: &TokenStream) -> syn::Error {
    let span = item
        .clone()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |t| t.span());
    syn::Error::new(
        span,
        "`#[rate_limit]` goes on an async handler function, e.g. `async fn get_user(...) -> ...`",
    )
}

/// The handler's signature: a free `async fn`, neither `const`, `unsafe`
/// nor variadic.
pub(crate) fn function(f: &ItemFn, errors: &mut Vec<syn::Error>) {
    if f.sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            f.sig.fn_token.span,
            "`#[rate_limit]` handlers must be `async fn` (axum handlers are async)",
        ));
    }
    for input in &f.sig.inputs {
        if let FnArg::Receiver(r) = input {
            errors.push(syn::Error::new(
                r.span(),
                "`#[rate_limit]` does not support methods: use a free async function as the handler",
            ));
        }
    }
    if let Some(c) = &f.sig.constness {
        errors.push(syn::Error::new(c.span, "a handler cannot be a `const fn`"));
    }
    if let Some(u) = &f.sig.unsafety {
        errors.push(syn::Error::new(u.span, "a handler cannot be an `unsafe fn`"));
    }
    if let Some(v) = &f.sig.variadic {
        errors.push(syn::Error::new(v.span(), "a handler cannot be variadic"));
    }
}

/// The attributes of one handler (the first, then those stacked below it,
/// each with the span its attribute-wide errors go on): each has a `key`
/// and a `resolve`, the stack agrees, and a `Charge` argument fits.
pub(crate) fn attributes(all: &[(Args, Span)], f: &ItemFn, errors: &mut Vec<syn::Error>) {
    for (args, span) in all {
        if !args.given.contains(&OptionName::Key) {
            errors.push(syn::Error::new(
                *span,
                "missing `key`: say who is limited, e.g. `key = ip`, `key = header(\"x-api-key\")` or \
                 `key = jwt_claim(\"sub\")`",
            ));
        }
        if !args.given.contains(&OptionName::Resolve) {
            errors.push(syn::Error::new(
                *span,
                "missing `resolve`: say how much, e.g. `resolve = [jwt, profile(\"standard\"), default]`",
            ));
        }
    }
    stack(all, errors);
    charge(all, f, errors);
}

/// What stacked attributes must agree on: distinct route names (each limit
/// is its own bucket), at most [`MAX_STACK`] of them, and the handler-wide
/// options (`layer`, `crate`) written once.
fn stack(all: &[(Args, Span)], errors: &mut Vec<syn::Error>) {
    if all.len() > MAX_STACK {
        errors.push(syn::Error::new(
            all[MAX_STACK].1,
            format!("at most {MAX_STACK} `#[rate_limit]` attributes can stack on one handler"),
        ));
    }
    let mut names: Vec<String> = Vec::new();
    for (args, _) in all {
        if let Some(name) = &args.name {
            if names.contains(&name.value()) {
                errors.push(syn::Error::new(
                    name.span(),
                    format!(
                        "two stacked limits named {:?}: each `#[rate_limit]` is its own bucket, give each its own \
                         `name`",
                        name.value()
                    ),
                ));
            }
            names.push(name.value());
        }
    }
    if all.len() > 1 {
        for (args, span) in &all[1..] {
            for (given, what) in [(args.layer, "layer"), (args.krate.is_some(), "crate")] {
                if given {
                    errors.push(syn::Error::new(
                        *span,
                        format!("`{what}` applies to the whole handler: write it on the first `#[rate_limit]` only"),
                    ));
                }
            }
        }
    }
}

/// A `Charge` argument (`ratelimit::axum::Charge`, by any path ending in
/// `Charge`), if the handler takes one.
pub(crate) fn charge_argument(f: &ItemFn) -> Option<&syn::Type> {
    f.sig.inputs.iter().find_map(|input| match input {
        FnArg::Typed(t) => match &*t.ty {
            syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Charge") => Some(&*t.ty),
            _ => None,
        },
        FnArg::Receiver(_) => None,
    })
}

/// A route charged by its response's size settles itself when the body has
/// been sent: a `Charge` argument would settle the same reservation twice.
fn charge(all: &[(Args, Span)], f: &ItemFn, errors: &mut Vec<syn::Error>) {
    let Some(charge) = charge_argument(f) else { return };
    for (args, span) in all {
        if matches!(args.cost, Some(Cost::ResponseBytes { .. })) {
            let mut e = syn::Error::new(
                args.cost_span.unwrap_or(*span),
                "a route charged by `response_bytes` settles when its body has been sent: it cannot also take a \
                 `Charge` (use `cost = N` with the `Charge`, or drop the `Charge` argument)",
            );
            e.combine(syn::Error::new(charge.span(), "the `Charge` argument"));
            errors.push(e);
        }
    }
}
