//! Runs the attribute (parse, check, expand) and expands a handler: a
//! zero-sized rule type per route, and the handler rewritten to take
//! `Admit<Rule>` first (so the decision runs before any other extractor and
//! before the body) and to hand its response to `Admit::finish` (which
//! adds the headers).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType};

use crate::check;
use crate::parse::{parse_args, take_stacked, Args, Cost, KeyKind, Step};

/// The attribute: its arguments parsed, the handler and the attributes
/// stacked below it checked, then either the expansion or, when there is
/// any error, the item unchanged and every error after it.
pub(crate) fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    let (first, mut errors) = parse_args(args);
    let mut function = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(f) => f,
        Err(_) => {
            errors.push(check::not_a_function(&item));
            return with_errors(item, errors);
        }
    };
    check::function(&function, &mut errors);
    let mut all = vec![(first, Span::call_site())];
    all.extend(take_stacked(&mut function, &mut errors));
    check::attributes(&all, &function, &mut errors);
    if !errors.is_empty() {
        // The function without the stacked attributes this expansion took:
        // they would expand again and report their errors twice.
        return with_errors(quote!(#function), errors);
    }
    let all: Vec<Args> = all.into_iter().map(|(args, _)| args).collect();
    expand(&all, function)
}

/// The original item, unchanged, then every error.
fn with_errors(item: TokenStream, errors: Vec<syn::Error>) -> TokenStream {
    let mut combined: Option<syn::Error> = None;
    for e in errors {
        match &mut combined {
            Some(c) => c.combine(e),
            None => combined = Some(e),
        }
    }
    let errors = combined.map(|e| e.into_compile_error());
    quote! { #item #errors }
}

fn expand(all: &[Args], f: ItemFn) -> TokenStream {
    // A `Charge` argument: the route keeps the reservation for it.
    let wants_charge = check::charge_argument(&f).is_some();
    let ItemFn { attrs, vis, sig, block } = f;
    let ident = &sig.ident;
    let fn_name = ident.to_string();
    let fn_name = fn_name.strip_prefix("r#").unwrap_or(&fn_name);
    let first = &all[0];
    // `crate = "path"` (a renamed dependency), else `::ratelimit`.
    let krate = match &first.krate {
        Some(path) => quote!(#path),
        None => quote!(::ratelimit),
    };
    // A handler compiled out (`#[cfg(test)]`, a feature) takes its rules with it.
    let cfg_attrs: Vec<_> = attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr"))
        .collect();
    let mut rules = Vec::new();
    let mut items = Vec::new();
    for (i, args) in all.iter().enumerate() {
        let rule = if i == 0 {
            format_ident!("__ratelimit_rule_{}", fn_name)
        } else {
            // A digit after the prefix: no handler's own rule type
            // (`__ratelimit_rule_<fn>`) can be spelt like it.
            format_ident!("__ratelimit_stack_{}_{}", i + 1, fn_name)
        };
        let charge = wants_charge && i == 0;
        items.push(rule_items(args, &rule, fn_name, i, charge, &krate, &vis, &cfg_attrs));
        rules.push(rule);
    }
    // One rule, or a tuple of them (stacked).
    let rules_ty = if rules.len() == 1 {
        let rule = &rules[0];
        quote!(#rule)
    } else {
        quote!((#(#rules),*))
    };
    // The runtime is in the router's state (`FromRef`), a bound on the
    // handler itself so that a state without it is a compile error with the
    // attribute's message; `layer`: the one `RateLimitLayer` installed.
    let state_param = format_ident!("__RatelimitState");
    let (admit, state_bound) = if first.layer {
        (
            quote!(#krate::__private::Admit<#rules_ty, #krate::__private::ViaLayer>),
            None,
        )
    } else {
        (
            quote!(#krate::__private::Admit<#rules_ty, #krate::__private::InState<#state_param>>),
            Some(quote!(#state_param: #krate::__private::RouterState)),
        )
    };
    // Arguments keep their names where they are plain bindings (so other
    // attributes, like `#[tracing::instrument(skip(db))]`, still find them);
    // patterns (`Path(id): Path<u64>`) get a hidden name, and the inner
    // function destructures.
    let mut outer_inputs = Vec::new();
    let mut call_args = Vec::new();
    for (i, input) in sig.inputs.iter().enumerate() {
        let FnArg::Typed(t) = input else { continue };
        let cfgs: Vec<_> = t
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr"))
            .collect();
        let name = match &*t.pat {
            syn::Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
            _ => format_ident!("__ratelimit_arg{}", i),
        };
        let ty = &t.ty;
        outer_inputs.push(quote!(#(#cfgs)* #name: #ty));
        call_args.push(quote!(#(#cfgs)* #name));
    }
    // Type and const parameters are named at the call when they can be
    // (they may not be inferable from the arguments); `impl Trait` arguments
    // forbid a turbofish, and there inference has to do.
    let has_impl_arg = sig.inputs.iter().any(|i| contains_impl(&quote!(#i)));
    let params: Vec<_> = sig
        .generics
        .params
        .iter()
        .filter_map(|p| match p {
            syn::GenericParam::Type(t) => Some(t.ident.clone()),
            syn::GenericParam::Const(c) => Some(c.ident.clone()),
            syn::GenericParam::Lifetime(_) => None,
        })
        .collect();
    let turbofish = if params.is_empty() || has_impl_arg {
        quote!()
    } else {
        quote!(::<#(#params),*>)
    };
    let lint_attrs = attrs.iter().filter(|a| {
        ["allow", "warn", "deny", "expect", "forbid"]
            .iter()
            .any(|l| a.path().is_ident(l))
    });
    let generics = &sig.generics;
    let where_clause = &sig.generics.where_clause;
    // A generic handler's output is known to be a response only where the
    // handler is routed (`get(h::<Foo>)`), as with axum; `finish` turns it
    // into one inside the body, so the outer function's bounds must say it
    // is one (an `impl IntoResponse` output says so itself).
    let output_bound = match &sig.output {
        ReturnType::Type(_, ty) if !params.is_empty() && !contains_impl(&quote!(#ty)) => {
            Some(quote!(#ty: #krate::__private::IntoResponse))
        }
        _ => None,
    };
    let bounds: Vec<_> = state_bound.iter().cloned().chain(output_bound).collect();
    // The outer function: the handler's generics, then the state's.
    let outer_generics = if state_bound.is_some() {
        let params = &sig.generics.params;
        let comma = if params.empty_or_trailing() {
            quote!()
        } else {
            quote!(,)
        };
        quote!(<#params #comma #state_param>)
    } else {
        quote!(#generics)
    };
    let outer_where = if bounds.is_empty() {
        quote!(#where_clause)
    } else {
        let preds = where_clause.as_ref().map(|w| &w.predicates);
        let pred_comma = match preds {
            Some(p) if !p.empty_or_trailing() => quote!(,),
            _ => quote!(),
        };
        quote!(where #preds #pred_comma #(#bounds),*)
    };
    let inner_inputs = &sig.inputs;
    let output = &sig.output;

    quote! {
        #(#items)*

        #(#attrs)*
        #vis async fn #ident #outer_generics (
            __ratelimit_admit: #admit,
            #(#outer_inputs),*
        ) -> #krate::__private::Limited #outer_where {
            #(#lint_attrs)*
            async fn __ratelimit_handler #generics (#inner_inputs) #output #where_clause #block
            __ratelimit_admit.finish(__ratelimit_handler #turbofish (#(#call_args),*).await)
        }
    }
}

/// The zero-sized rule type of one attribute and its `Rule` impl.
#[allow(clippy::too_many_arguments)]
fn rule_items(
    args: &Args,
    rule: &syn::Ident,
    fn_name: &str,
    index: usize,
    wants_charge: bool,
    krate: &TokenStream,
    vis: &syn::Visibility,
    cfg_attrs: &[&syn::Attribute],
) -> TokenStream {
    // The default name of a stacked attribute's route: the handler's path
    // and its place (`app::get_user#2`), so each limit is its own bucket.
    let route_name = match (&args.name, index) {
        (Some(lit), _) => quote!(#lit),
        (None, 0) => quote!(::core::concat!(::core::module_path!(), "::", #fn_name)),
        (None, i) => {
            let suffix = format!("#{}", i + 1);
            quote!(::core::concat!(::core::module_path!(), "::", #fn_name, #suffix))
        }
    };
    let cost_kind = args.cost.unwrap_or(Cost::Units(ratelimit_spec::DEFAULT_COST));
    let cost = cost_kind.reserved();
    let bytes_per_unit = match cost_kind.bytes_per_unit() {
        Some(per) => quote!(::core::option::Option::Some(#per)),
        None => quote!(::core::option::Option::None),
    };
    let shadow = args.shadow;
    // What runs each key kind is the spec's (`runtime()`): the expansion
    // only names the type and passes the argument.
    let runtime = |(ty, arg): (&str, Option<&str>)| {
        let ty = format_ident!("{}", ty);
        let value = match arg {
            Some(arg) => quote!(#krate::__private::#ty::from_static(#arg)),
            None => quote!(#krate::__private::#ty),
        };
        (quote!(#krate::__private::#ty), value)
    };
    // The key source: a built-in kind's type, or the application's own
    // (`custom(path::To::Type)`), made once, on first use, by `Default`.
    let key_fn = match (&args.key, &args.custom_key) {
        (Some(KeyKind::Custom(_)), Some(path)) => quote! {
            type Key = #path;
            fn key() -> &'static Self::Key {
                // A `OnceLock`, not a `LazyLock`: a `Default` that panics
                // once is tried again on the next request rather than
                // poisoning the route for good.
                static KEY: ::std::sync::OnceLock<#path> = ::std::sync::OnceLock::new();
                KEY.get_or_init(<#path as ::core::default::Default>::default)
            }
        },
        (key, _) => {
            let (key_ty, key_value) = runtime(key.as_ref().map_or(("Ip", None), KeyKind::runtime));
            quote! {
                type Key = #key_ty;
                fn key() -> &'static Self::Key {
                    static KEY: #key_ty = #key_value;
                    &KEY
                }
            }
        }
    };
    // `reject = path`: the route's own 429.
    // The call goes through a function with the hook's signature as its
    // bound, spanned on the path: a hook of the wrong shape is an error
    // there, saying what is expected.
    let reject_fn = args.reject.as_ref().map(|path| {
        let call = quote::quote_spanned! {path.span()=>
            #krate::__private::call_reject(#path, __ratelimit_rejection)
        };
        quote! {
            fn reject(
                __ratelimit_rejection: &#krate::__private::Rejection<'_>,
            ) -> ::core::option::Option<#krate::__private::Response> {
                ::core::option::Option::Some(#call)
            }
        }
    });
    let steps = args.resolve.as_deref().unwrap_or(&[]);
    let wants_claims = steps.contains(&Step::Jwt);
    let wants_service = steps.contains(&Step::Service);
    // What needs a cargo feature of ratelimit: a macro of `__private` that
    // is empty with the feature and a `compile_error!` naming it without
    // (the attribute cannot see ratelimit's features).
    let mut requires = Vec::new();
    if matches!(args.key, Some(KeyKind::Claim(_))) {
        requires.push(quote!(#krate::__private::requires_jwt! { key }));
    }
    if wants_claims {
        requires.push(quote!(#krate::__private::requires_jwt! { step }));
    }
    if wants_service {
        requires.push(quote!(#krate::__private::requires_service! { step }));
    }
    let profiles: Vec<&str> = steps
        .iter()
        .filter_map(|step| match step {
            Step::Profile(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    // The route as written, registered at link time for startup's checks
    // and `RateLimit::routes()`.
    let key_text = match &args.key {
        Some(KeyKind::Ip) | None => "ip".to_owned(),
        Some(KeyKind::Header(name)) => format!("header({name:?})"),
        Some(KeyKind::Claim(path)) => format!("jwt_claim({path:?})"),
        Some(KeyKind::Route) => "route".to_owned(),
        Some(KeyKind::Custom(path)) => format!("custom({})", path.replace(' ', "")),
    };
    // The same in the rule language (`[[rules]]`), which `explain` reads.
    let rule_key = match &args.key {
        Some(KeyKind::Ip) | None => "ip".to_owned(),
        Some(KeyKind::Header(name)) => format!("header:{name}"),
        Some(KeyKind::Claim(path)) => format!("jwt_claim:{path}"),
        Some(KeyKind::Route) => "route".to_owned(),
        Some(KeyKind::Custom(path)) => format!("custom:{}", path.replace(' ', "")),
    };
    let rule_steps: Vec<String> = steps.iter().map(ToString::to_string).collect();
    let step_texts: Vec<String> = steps
        .iter()
        .map(|step| match step {
            Step::Jwt => "jwt".to_owned(),
            Step::Service => "service".to_owned(),
            Step::Profile(name) => format!("profile({name:?})"),
            Step::Default => "default".to_owned(),
        })
        .collect();
    let stacked = u8::try_from(index + 1).unwrap_or(u8::MAX);
    let register = quote! {
        #(#cfg_attrs)*
        #krate::__private::inventory::submit! {
            #krate::__private::AttributeRoute::__new(
                <#rule as #krate::__private::Rule>::NAME,
                ::core::concat!(::core::module_path!(), "::", #fn_name),
                #key_text,
                &[#(#step_texts),*],
                #rule_key,
                &[#(#rule_steps),*],
                &[#(#profiles),*],
                #cost,
                #bytes_per_unit,
                #shadow,
                #stacked,
                ::core::file!(),
                ::core::line!(),
                <#rule as #krate::__private::Rule>::slot,
            )
        }
    };
    let requires = requires.iter().map(|r| quote!(#(#cfg_attrs)* #r));
    quote! {
        #(#requires)*

        #(#cfg_attrs)*
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #[derive(::core::fmt::Debug, ::core::clone::Clone, ::core::marker::Copy)]
        #vis struct #rule;

        #(#cfg_attrs)*
        impl #krate::__private::Rule for #rule {
            const NAME: &'static ::core::primitive::str = #route_name;
            const COST: ::core::primitive::u32 = #cost;
            const BYTES_PER_UNIT: ::core::option::Option<::core::primitive::u32> = #bytes_per_unit;
            const SHADOW: ::core::primitive::bool = #shadow;
            const WANTS_CHARGE: ::core::primitive::bool = #wants_charge;
            #key_fn
            fn slot() -> &'static #krate::__private::RouteSlot {
                static SLOT: #krate::__private::RouteSlot = #krate::__private::RouteSlot::new();
                &SLOT
            }
            fn series() -> &'static #krate::__private::RouteSeries {
                static SERIES: #krate::__private::RouteSeries = #krate::__private::RouteSeries::new();
                &SERIES
            }
            #reject_fn
        }

        #register
    }
}

/// Whether a token stream mentions `impl` (an `impl Trait` argument).
fn contains_impl(tokens: &TokenStream) -> bool {
    tokens.clone().into_iter().any(|t| match t {
        proc_macro2::TokenTree::Ident(i) => i == "impl",
        proc_macro2::TokenTree::Group(g) => contains_impl(&g.stream()),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    /// Every path of the expansion goes through `crate = "..."` when it is
    /// given: nothing names `::ratelimit` (a renamed dependency has no
    /// crate of that name).
    #[test]
    fn crate_path_replaces_every_ratelimit_path() {
        let args: proc_macro2::TokenStream =
            "crate = \"my_rl\", key = custom(a::B), resolve = [jwt, service, profile(\"p\"), default], \
             reject = errors::too_many"
                .parse()
                .unwrap();
        let item: proc_macro2::TokenStream = "async fn h(x: u32) -> String { x.to_string() }".parse().unwrap();
        let out = super::rate_limit(args, item).to_string();
        assert!(!out.contains("compile_error"), "{out}");
        assert!(!out.contains(":: ratelimit"), "{out}");
        assert!(out.contains("my_rl :: __private :: Admit"), "{out}");
        assert!(out.contains("my_rl :: __private :: InState"), "{out}");
        assert!(
            out.contains("__RatelimitState : my_rl :: __private :: RouterState"),
            "{out}"
        );
        assert!(out.contains("type Key = a :: B"), "{out}");
        assert!(
            out.contains("call_reject (errors :: too_many , __ratelimit_rejection)"),
            "{out}"
        );
        // Without it, `::ratelimit`.
        let args: proc_macro2::TokenStream = "key = route, resolve = [default]".parse().unwrap();
        let item: proc_macro2::TokenStream = "async fn h() {}".parse().unwrap();
        let out = super::rate_limit(args, item).to_string();
        assert!(out.contains(":: ratelimit :: __private :: Route"), "{out}");
        assert!(!out.contains("ViaLayer"), "{out}");
    }
}
