//! What is wrong with a rule, and its message in the spelling of the
//! surface that reported it.

use std::fmt;

use crate::vocabulary::{Step, KEY_KINDS, MAX_CUSTOM_NAME, MAX_HEADER_NAME, STEPS};

/// Which surface an error is shown on: it decides how kinds and steps are
/// spelled in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// `#[rate_limit(key = header("x-api-key"), resolve = [default])]`.
    Attribute,
    /// `key = "header:x-api-key"`, `resolve = ["default"]`.
    Config,
}

/// What is wrong with a rule. Opaque: read it with [`describe`](Self::describe)
/// (or `Display`, which is the configuration's spelling).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    UnknownKeyKind(String),
    /// `global`, the key of 0.1, is `route` now.
    GlobalKeyRenamed,
    KeyTakesNoArgument(&'static str),
    KeyNeedsArgument(&'static str),
    EmptyHeaderName,
    HeaderNameTooLong(usize),
    HeaderNameChar(String, char),
    EmptyClaim,
    ClaimEmptySegment(String),
    ClaimWhitespace(String),
    EmptyCustomName,
    CustomNameChar(String, char),
    CustomNameTooLong(usize),
    UnknownStep(String),
    StepTakesNoArgument(&'static str),
    ProfileNeedsName,
    EmptyProfileName,
    EmptyChain,
    DuplicateStep(Step),
    DefaultNotLast,
    MissingDefault,
    EmptyRouteName,
    RouteNameChar(String, char),
    CostZero,
    CostNegative,
    CostTooLarge,
    UnknownCost(String),
    BytesPerUnitZero,
    BytesPerUnitNegative,
    BytesPerUnitTooLarge,
    BytesPerUnitNotANumber(String),
}

impl Error {
    pub(crate) fn new(kind: ErrorKind) -> Error {
        Error { kind }
    }

    /// The message, with kinds and steps spelled as `surface` writes them.
    pub fn describe(&self, surface: Surface) -> String {
        use ErrorKind as K;
        let attr = surface == Surface::Attribute;
        match &self.kind {
            K::UnknownKeyKind(k) if attr => format!("unknown key kind `{k}`; expected {}", expected_keys(surface)),
            K::UnknownKeyKind(k) => format!("unknown key {k:?}; expected {}", expected_keys(surface)),
            K::GlobalKeyRenamed if attr => "`key = global` is now `key = route`: one bucket for the whole route, \
                                            whoever the client (`global` is only the fleet gate, `[global]`)"
                .to_owned(),
            K::GlobalKeyRenamed => "key \"global\" is now \"route\": one bucket for the whole route, whoever the \
                                    client (\"global\" is only the fleet gate, [global])"
                .to_owned(),
            K::KeyTakesNoArgument(k) if attr => format!("`{k}` takes no arguments: write `key = {k}`"),
            K::KeyTakesNoArgument(k) => format!("\"{k}\" takes no argument: write \"{k}\""),
            K::KeyNeedsArgument(k) if attr => {
                format!("`{k}` needs a name in parentheses: `{}`", key_example(k, surface))
            }
            K::KeyNeedsArgument(k) => format!("\"{k}\" needs a name: \"{}\"", key_example(k, surface)),
            K::EmptyHeaderName if attr => "empty header name; e.g. `header(\"x-api-key\")`".to_owned(),
            K::EmptyHeaderName => "empty header name; e.g. \"header:x-api-key\"".to_owned(),
            K::HeaderNameTooLong(n) => {
                format!("header name of {n} bytes: header names are at most {MAX_HEADER_NAME} bytes")
            }
            K::HeaderNameChar(name, c) => format!(
                "invalid header name {name:?}: {c:?} is not allowed; header names are letters, digits and \
                 !#$%&'*+-.^_`|~"
            ),
            K::EmptyClaim if attr => {
                "empty claim name; e.g. `jwt_claim(\"sub\")` or a dotted path `jwt_claim(\"org.id\")`".to_owned()
            }
            K::EmptyClaim => "invalid claim name \"\": empty; e.g. \"sub\" or a dotted path \"org.id\"".to_owned(),
            K::ClaimEmptySegment(p) if attr => {
                format!("invalid claim path {p:?}: empty segment; a path is names joined by '.', e.g. \"org.id\"")
            }
            K::ClaimEmptySegment(p) => {
                format!("invalid claim name {p:?}: empty segment; a path is names joined by '.', e.g. \"org.id\"")
            }
            K::ClaimWhitespace(p) if attr => {
                format!("invalid claim path {p:?}: claim names have no whitespace")
            }
            K::ClaimWhitespace(p) => {
                format!("invalid claim name {p:?}: claim names have no whitespace, control or invisible characters")
            }
            K::EmptyCustomName if attr => "`custom` needs the key type's path: `custom(tenant::ByTenant)`".to_owned(),
            K::EmptyCustomName => {
                "empty custom key name; name an extractor registered on the builder, e.g. \"custom:tenant\"".to_owned()
            }
            K::CustomNameChar(name, c) => {
                format!("invalid custom key name {name:?}: {c:?} is not allowed; use letters, digits and . _ - : /")
            }
            K::CustomNameTooLong(n) => {
                format!("custom key name of {n} bytes: names are at most {MAX_CUSTOM_NAME} bytes")
            }
            K::UnknownStep(s) if attr => format!("unknown resolver `{s}`; expected {}", expected_steps(surface)),
            K::UnknownStep(s) => format!("unknown resolver {s:?}; expected {}", expected_steps(surface)),
            K::StepTakesNoArgument(s) if attr => format!("`{s}` takes no arguments"),
            K::StepTakesNoArgument(s) => format!("\"{s}\" takes no argument: write \"{s}\""),
            K::ProfileNeedsName if attr => "`profile` needs a profile name: `profile(\"standard\")`".to_owned(),
            K::ProfileNeedsName => "\"profile\" needs a profile name: \"profile:standard\"".to_owned(),
            K::EmptyProfileName if attr => {
                "empty profile name; name a profile of the configuration, e.g. `profile(\"standard\")`".to_owned()
            }
            K::EmptyProfileName => {
                "empty profile name; name a profile of the configuration, e.g. \"profile:standard\"".to_owned()
            }
            K::EmptyChain if attr => format!(
                "empty resolve list: list the steps to try, ending with `default`; steps are {}",
                expected_steps(surface)
            ),
            K::EmptyChain => "empty: list the resolvers to try, ending with \"default\"".to_owned(),
            K::DuplicateStep(_) if attr => "duplicate resolver: each step is tried once".to_owned(),
            K::DuplicateStep(s) => format!("{:?} is listed twice: each step is tried once", step_spelling(s)),
            K::DefaultNotLast if attr => {
                "`default` always answers, so the steps after it would never run: put `default` last".to_owned()
            }
            K::DefaultNotLast => "\"default\" always answers, so it must be last".to_owned(),
            K::MissingDefault if attr => {
                "the resolve list must end with `default`, which always answers: every request needs a limit".to_owned()
            }
            K::MissingDefault => {
                "must end with \"default\", which always answers (every request needs a limit)".to_owned()
            }
            K::EmptyRouteName => "empty route name; e.g. `name = \"users.get\"`".to_owned(),
            K::RouteNameChar(name, c) => {
                format!("invalid route name {name:?}: {c:?} is not allowed; use letters, digits and . _ - : /")
            }
            K::CostZero => "cost must be at least 1: a request that costs nothing is not limited (remove the \
                            attribute instead)"
                .to_owned(),
            K::CostNegative => {
                "cost must be a positive integer: it is how many units of the limit a request uses".to_owned()
            }
            K::CostTooLarge => format!("cost must fit in a u32 (at most {})", u32::MAX),
            K::UnknownCost(c) if attr => {
                format!("unknown cost `{c}`; expected a number of units (`cost = 5`) or `response_bytes(per = 1024)`")
            }
            K::UnknownCost(c) => format!(
                "unknown cost {c:?}; expected a number of units (cost = 5) or \"response_bytes:<bytes per unit>\" \
                 (cost = \"response_bytes:1024\")"
            ),
            K::BytesPerUnitZero | K::BytesPerUnitNegative if attr => {
                "`per` is how many response bytes one unit pays for: a whole number of at least 1, e.g. \
                 `response_bytes(per = 1024)`"
                    .to_owned()
            }
            K::BytesPerUnitZero | K::BytesPerUnitNegative => {
                "the bytes per unit of \"response_bytes:<n>\" must be a whole number of at least 1, e.g. \
                 \"response_bytes:1024\""
                    .to_owned()
            }
            K::BytesPerUnitTooLarge => format!("bytes per unit must fit in a u32 (at most {})", u32::MAX),
            K::BytesPerUnitNotANumber(arg) => format!(
                "bytes per unit {arg:?} is not a whole number; write the digits alone, e.g. \"response_bytes:1024\""
            ),
        }
    }
}

/// The key kinds of [`KEY_KINDS`], as `surface` writes them, for a message
/// that lists them: `` `ip`, `header("x-api-key")`, ... or
/// `custom(path::To::KeyType)` `` (the attribute), `"ip", "header:<name>",
/// ... or "custom:<name>"` (the configuration).
pub fn expected_keys(surface: Surface) -> String {
    one_of(KEY_KINDS.iter().map(|&(kind, takes)| {
        let placeholder = match (kind, surface) {
            ("header", Surface::Attribute) => "\"x-api-key\"",
            ("jwt_claim", Surface::Attribute) => "\"sub\"",
            (_, Surface::Attribute) => "path::To::KeyType",
            ("jwt_claim", Surface::Config) => "<claim>",
            (_, Surface::Config) => "<name>",
        };
        spelled(kind, takes.then_some(placeholder), surface)
    }))
}

/// The steps of [`STEPS`], as `surface` writes them, for a message that
/// lists them: `` `jwt`, `service`, `profile("name")` or `default` `` (the
/// attribute), `"jwt", "service", "profile:<name>" or "default"` (the
/// configuration).
pub fn expected_steps(surface: Surface) -> String {
    let placeholder = match surface {
        Surface::Attribute => "\"name\"",
        Surface::Config => "<name>",
    };
    one_of(
        STEPS
            .iter()
            .map(|&(step, takes)| spelled(step, takes.then_some(placeholder), surface)),
    )
}

/// A kind or step with its argument, as `surface` writes it: `` `ip` ``,
/// `` `header("x-api-key")` ``, `"ip"`, `"header:<name>"`.
fn spelled(name: &str, argument: Option<&str>, surface: Surface) -> String {
    match (surface, argument) {
        (Surface::Attribute, None) => format!("`{name}`"),
        (Surface::Attribute, Some(arg)) => format!("`{name}({arg})`"),
        (Surface::Config, None) => format!("\"{name}\""),
        (Surface::Config, Some(arg)) => format!("\"{name}:{arg}\""),
    }
}

/// `a, b, c or d`.
fn one_of(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    match items.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn key_example(kind: &str, surface: Surface) -> &'static str {
    match (kind, surface) {
        ("custom", Surface::Attribute) => "custom(tenant::ByTenant)",
        ("custom", Surface::Config) => "custom:tenant",
        ("header", Surface::Attribute) => "header(\"x-api-key\")",
        ("header", Surface::Config) => "header:x-api-key",
        (_, Surface::Attribute) => "jwt_claim(\"sub\")",
        (_, Surface::Config) => "jwt_claim:sub",
    }
}

/// A step as the configuration writes it.
fn step_spelling(step: &Step) -> String {
    match step {
        Step::Jwt => "jwt".to_owned(),
        Step::Service => "service".to_owned(),
        Step::Profile(p) => format!("profile:{p}"),
        Step::Default => "default".to_owned(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(Surface::Config))
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use crate::{expected_keys, expected_steps, key_text, step_text, Surface};

    #[test]
    fn messages_name_the_surface_spelling() {
        let e = key_text("cookie:x").unwrap_err();
        assert!(e.describe(Surface::Attribute).contains("`header(\"x-api-key\")`"));
        assert!(e.to_string().contains("\"header:<name>\""));
        let e = step_text("profile").unwrap_err();
        assert!(e.describe(Surface::Attribute).contains("profile(\"standard\")"));
        assert!(e.to_string().contains("profile:standard"));
    }

    /// The lists of kinds and steps, read from the tables, are spelled as
    /// the messages have always spelled them.
    #[test]
    fn lists_of_kinds_and_steps() {
        assert_eq!(
            expected_keys(Surface::Attribute),
            "`ip`, `header(\"x-api-key\")`, `jwt_claim(\"sub\")`, `route` or `custom(path::To::KeyType)`"
        );
        assert_eq!(
            expected_keys(Surface::Config),
            "\"ip\", \"header:<name>\", \"jwt_claim:<claim>\", \"route\" or \"custom:<name>\""
        );
        assert_eq!(
            expected_steps(Surface::Attribute),
            "`jwt`, `service`, `profile(\"name\")` or `default`"
        );
        assert_eq!(
            expected_steps(Surface::Config),
            "\"jwt\", \"service\", \"profile:<name>\" or \"default\""
        );
    }
}
