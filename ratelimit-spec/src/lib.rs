//! The rule language of `ratelimit`: who is limited ([`KeyKind`]), how much
//! ([`Step`]s of a resolver chain), a route's name and its cost, described
//! once, with one validator and one set of errors.
//!
//! Two surfaces spell the same language:
//!
//! | | attribute (`#[rate_limit(...)]`) | configuration (`[[rules]]`) |
//! |---|---|---|
//! | key | `ip`, `header("x-api-key")`, `jwt_claim("sub")`, `global`, `custom(path::To::Type)` | `"ip"`, `"header:x-api-key"`, `"jwt_claim:sub"`, `"global"`, `"custom:<name>"` |
//! | steps | `jwt`, `service`, `profile("standard")`, `default` | `"jwt"`, `"service"`, `"profile:standard"`, `"default"` |
//! | name | `name = "users.get"` | `name = "users.get"` |
//! | cost | `cost = 5` | `cost = 5` |
//! | shadow | `shadow` | `shadow = true` |
//!
//! Each surface only splits its syntax into a kind and an optional argument
//! (`header("x")` and `"header:x"` both become `("header", Some("x"))`) and
//! calls [`key`] or [`step`]; everything else — which kinds exist, what their
//! arguments may contain, how a chain must be shaped — is decided here, so the
//! two cannot disagree. [`Error`] renders itself in the spelling of the
//! surface that reported it ([`Error::describe`]).
//!
//! This crate has no dependencies: the proc-macro crate and the runtime crate
//! both build on it. It is not a stable API of its own; use it through
//! `ratelimit`.
//!
//! ```
//! use ratelimit_spec::{key, key_text, step_text, check_chain, KeyKind, Step};
//!
//! // The attribute's `header("X-Api-Key")` and the config's "header:X-Api-Key":
//! assert_eq!(key("header", Some("X-Api-Key")), key_text("header:X-Api-Key"));
//! assert_eq!(key_text("header:X-Api-Key").unwrap(), KeyKind::Header("x-api-key".into()));
//!
//! let chain = ["jwt", "profile:standard", "default"].map(|s| step_text(s).unwrap());
//! assert_eq!(chain[1], Step::Profile("standard".into()));
//! assert!(check_chain(&chain).is_empty());
//! assert!(!check_chain(&[Step::Default, Step::Jwt]).is_empty());
//! ```

use std::fmt;

/// Who a rule limits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// The client's address.
    Ip,
    /// A request header's value; the name is lowercased.
    Header(String),
    /// A claim of a verified token, by dotted path (`org.id`).
    Claim(String),
    /// One bucket for the whole route, whoever the client.
    Global,
    /// A key source of the application's: in the attribute, the path of a
    /// type implementing `ratelimit::key::KeySource` (as written,
    /// `tenant::ByTenant`); in the configuration, the name it was
    /// registered under on the runtime's builder.
    Custom(String),
}

impl KeyKind {
    /// The type that runs this kind, in `ratelimit::__private` (what the
    /// attribute expands to), and its argument: a unit value when `None`,
    /// else `Type::from_static(argument)`.
    pub fn runtime(&self) -> (&'static str, Option<&str>) {
        match self {
            KeyKind::Ip => ("Ip", None),
            KeyKind::Header(name) => ("Header", Some(name)),
            KeyKind::Claim(path) => ("Claim", Some(path)),
            KeyKind::Global => ("Global", None),
            // The attribute names the type itself; the configuration looks
            // the name up among the extractors registered on the builder.
            KeyKind::Custom(name) => ("Custom", Some(name)),
        }
    }
}

/// A step of a resolver chain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// Limits carried by the verified token.
    Jwt,
    /// The limit service's answer for the client.
    Service,
    /// A named profile of the configuration.
    Profile(String),
    /// The route's profile, else the default profile; always answers.
    Default,
}

impl Step {
    /// The resolver type that runs this step, in `ratelimit::__private`, and
    /// its argument (as [`KeyKind::runtime`]).
    pub fn runtime(&self) -> (&'static str, Option<&str>) {
        match self {
            Step::Jwt => ("JwtTier", None),
            Step::Service => ("ConfiguredService", None),
            Step::Profile(name) => ("NamedProfile", Some(name)),
            Step::Default => ("DefaultProfile", None),
        }
    }

    /// The step reads verified claims (the runtime verifies the token even
    /// when the key is not a claim).
    pub fn needs_claims(&self) -> bool {
        *self == Step::Jwt
    }

    /// The step asks the limit service (the runtime computes the client id).
    pub fn needs_service(&self) -> bool {
        *self == Step::Service
    }

    /// The profile the step names, if any (checked against the
    /// configuration).
    pub fn profile(&self) -> Option<&str> {
        match self {
            Step::Profile(name) => Some(name),
            _ => None,
        }
    }
}

/// The key kinds, as both surfaces spell them, and whether each takes an
/// argument: the one table [`key`] and [`key_takes_argument`] read.
pub const KEY_KINDS: [(&str, bool); 5] = [
    ("ip", false),
    ("header", true),
    ("jwt_claim", true),
    ("global", false),
    ("custom", true),
];

/// The longest name of a custom key (a registered name, or the type's path
/// as the attribute writes it).
pub const MAX_CUSTOM_NAME: usize = 256;

/// The resolver steps and whether each takes an argument: the one table
/// [`step`] and [`step_takes_argument`] read.
pub const STEPS: [(&str, bool); 4] = [
    ("jwt", false),
    ("service", false),
    ("profile", true),
    ("default", false),
];

/// The longest header name a key may read (`http` refuses names above
/// 64 KiB; no real header comes near this).
pub const MAX_HEADER_NAME: usize = 256;

/// A request costs this many units unless the rule says otherwise.
pub const DEFAULT_COST: u32 = 1;

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
enum ErrorKind {
    UnknownKeyKind(String),
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
    fn new(kind: ErrorKind) -> Error {
        Error { kind }
    }

    /// The message, with kinds and steps spelled as `surface` writes them.
    pub fn describe(&self, surface: Surface) -> String {
        use ErrorKind as K;
        let attr = surface == Surface::Attribute;
        match &self.kind {
            K::UnknownKeyKind(k) if attr => format!(
                "unknown key kind `{k}`; expected `ip`, `header(\"x-api-key\")`, `jwt_claim(\"sub\")`, `global` or \
                 `custom(path::To::KeyType)`"
            ),
            K::UnknownKeyKind(k) => format!(
                "unknown key {k:?}; expected \"ip\", \"header:<name>\", \"jwt_claim:<claim>\", \"global\" or \
                 \"custom:<name>\""
            ),
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
            K::UnknownStep(s) if attr => {
                format!("unknown resolver `{s}`; expected `jwt`, `service`, `profile(\"name\")` or `default`")
            }
            K::UnknownStep(s) => {
                format!("unknown resolver {s:?}; expected \"jwt\", \"service\", \"profile:<name>\" or \"default\"")
            }
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
            K::EmptyChain if attr => "empty resolve list: list the steps to try, ending with `default`; steps are \
                                      `jwt`, `service`, `profile(\"name\")` or `default`"
                .to_owned(),
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

/// A key from its kind and argument: `("ip", None)`,
/// `("header", Some("x-api-key"))`, `("jwt_claim", Some("sub"))`.
pub fn key(kind: &str, arg: Option<&str>) -> Result<KeyKind, Error> {
    let Some(&(fixed, takes)) = KEY_KINDS.iter().find(|(k, _)| *k == kind) else {
        return Err(Error::new(ErrorKind::UnknownKeyKind(kind.to_owned())));
    };
    match (fixed, arg) {
        (_, Some(_)) if !takes => Err(Error::new(ErrorKind::KeyTakesNoArgument(fixed))),
        (_, None) if takes => Err(Error::new(ErrorKind::KeyNeedsArgument(fixed))),
        ("header", Some(name)) => header_name(name).map(KeyKind::Header),
        ("jwt_claim", Some(path)) => claim_path(path).map(|()| KeyKind::Claim(path.to_owned())),
        ("custom", Some(name)) => custom_name(name).map(|()| KeyKind::Custom(name.to_owned())),
        ("global", None) => Ok(KeyKind::Global),
        _ => Ok(KeyKind::Ip),
    }
}

/// Whether a key kind takes an argument; `None` when there is no such kind.
pub fn key_takes_argument(kind: &str) -> Option<bool> {
    KEY_KINDS.iter().find(|(k, _)| *k == kind).map(|&(_, takes)| takes)
}

/// Whether a step takes an argument; `None` when there is no such step.
pub fn step_takes_argument(name: &str) -> Option<bool> {
    STEPS.iter().find(|(s, _)| *s == name).map(|&(_, takes)| takes)
}

/// A key as the configuration writes it: `"ip"`, `"header:x-api-key"`,
/// `"jwt_claim:sub"`.
pub fn key_text(text: &str) -> Result<KeyKind, Error> {
    match text.split_once(':') {
        Some((kind, arg)) => key(kind, Some(arg)),
        None => key(text, None),
    }
}

/// A step from its name and argument: `("jwt", None)`,
/// `("profile", Some("standard"))`.
pub fn step(name: &str, arg: Option<&str>) -> Result<Step, Error> {
    let Some(&(fixed, takes)) = STEPS.iter().find(|(s, _)| *s == name) else {
        return Err(Error::new(ErrorKind::UnknownStep(name.to_owned())));
    };
    match (fixed, arg) {
        (_, Some(_)) if !takes => Err(Error::new(ErrorKind::StepTakesNoArgument(fixed))),
        (_, None) if takes => Err(Error::new(ErrorKind::ProfileNeedsName)),
        (_, Some(p)) if p.trim().is_empty() => Err(Error::new(ErrorKind::EmptyProfileName)),
        (_, Some(p)) => Ok(Step::Profile(p.to_owned())),
        ("jwt", None) => Ok(Step::Jwt),
        ("service", None) => Ok(Step::Service),
        _ => Ok(Step::Default),
    }
}

/// A step as the configuration writes it: `"jwt"`, `"profile:standard"`.
pub fn step_text(text: &str) -> Result<Step, Error> {
    match text.split_once(':') {
        Some((name, arg)) => step(name, Some(arg)),
        None => step(text, None),
    }
}

/// Every problem with the shape of a chain, each with the index of the step
/// it is about: listed twice, `default` before the end, and (when the steps
/// are otherwise fine) no `default` at the end. Empty when the chain is
/// valid.
pub fn check_chain(steps: &[Step]) -> Vec<(usize, Error)> {
    let steps: Vec<Option<&Step>> = steps.iter().map(Some).collect();
    check_partial_chain(&steps)
}

/// [`check_chain`] for a list some of whose steps did not parse (`None`):
/// positions stay those of the list as written, and a list with an
/// unparsed step is not also said to lack `default` or to be empty.
pub fn check_partial_chain(steps: &[Option<&Step>]) -> Vec<(usize, Error)> {
    if steps.is_empty() {
        return vec![(0, Error::new(ErrorKind::EmptyChain))];
    }
    let mut problems = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let Some(s) = s else { continue };
        if steps[..i].contains(&Some(s)) {
            problems.push((i, Error::new(ErrorKind::DuplicateStep((*s).clone()))));
        } else if **s == Step::Default && i + 1 != steps.len() {
            problems.push((i, Error::new(ErrorKind::DefaultNotLast)));
        }
    }
    let complete = steps.iter().all(Option::is_some);
    if complete && problems.is_empty() && steps.last() != Some(&Some(&Step::Default)) {
        problems.push((steps.len() - 1, Error::new(ErrorKind::MissingDefault)));
    }
    problems
}

/// An empty step list (for surfaces that parse steps one by one and find
/// none usable).
pub fn empty_chain() -> Error {
    Error::new(ErrorKind::EmptyChain)
}

/// A header name, lowercased: letters, digits and `!#$%&'*+-.^_`|~`.
pub fn header_name(name: &str) -> Result<String, Error> {
    if name.is_empty() {
        return Err(Error::new(ErrorKind::EmptyHeaderName));
    }
    if name.len() > MAX_HEADER_NAME {
        return Err(Error::new(ErrorKind::HeaderNameTooLong(name.len())));
    }
    if let Some(c) = name.chars().find(|c| !is_token_char(*c)) {
        return Err(Error::new(ErrorKind::HeaderNameChar(name.to_owned(), c)));
    }
    Ok(name.to_ascii_lowercase())
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// A claim by dotted path (`sub`, `org.id`): non-empty names joined by `.`,
/// without whitespace or control characters. Also the rule for the claim
/// names of the configuration's `[jwt]` section.
pub fn claim_path(path: &str) -> Result<(), Error> {
    if path.is_empty() {
        return Err(Error::new(ErrorKind::EmptyClaim));
    }
    if path.split('.').any(str::is_empty) {
        return Err(Error::new(ErrorKind::ClaimEmptySegment(path.to_owned())));
    }
    if path
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || is_invisible(c))
    {
        return Err(Error::new(ErrorKind::ClaimWhitespace(path.to_owned())));
    }
    Ok(())
}

/// The name of a custom key: letters, digits and `. _ - : /` (a registered
/// name such as `tenant`, or a type's path such as `auth::ByTenant`).
pub fn custom_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::new(ErrorKind::EmptyCustomName));
    }
    if name.len() > MAX_CUSTOM_NAME {
        return Err(Error::new(ErrorKind::CustomNameTooLong(name.len())));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-:/".contains(*c)))
    {
        return Err(Error::new(ErrorKind::CustomNameChar(name.to_owned(), c)));
    }
    Ok(())
}

/// Invisible formatting characters (Unicode category Cf: zero-width,
/// bidirectional controls, the byte-order mark, the soft hyphen): a claim
/// name holding one looks like another and never matches it.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{ad}' | '\u{600}'..='\u{605}' | '\u{61c}' | '\u{6dd}' | '\u{70f}' | '\u{180e}'
        | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}' | '\u{e0001}' | '\u{e0020}'..='\u{e007f}')
}

/// A stable route name: letters, digits and `. _ - : /` (it appears in
/// metrics labels and in the `RateLimit-Policy` header).
pub fn route_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::new(ErrorKind::EmptyRouteName));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-:/".contains(*c)))
    {
        return Err(Error::new(ErrorKind::RouteNameChar(name.to_owned(), c)));
    }
    Ok(())
}

/// A cost: a whole number of units from 1 to `u32::MAX`.
pub fn cost(value: i128) -> Result<u32, Error> {
    match value {
        v if v < 0 => Err(Error::new(ErrorKind::CostNegative)),
        0 => Err(Error::new(ErrorKind::CostZero)),
        v => u32::try_from(v).map_err(|_| Error::new(ErrorKind::CostTooLarge)),
    }
}

/// What a request costs: a fixed number of units, or its response's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Cost {
    /// `cost = 5`: this many units, charged before the handler runs.
    Units(u32),
    /// `cost = response_bytes(per = 1024)` (`cost = "response_bytes:1024"`):
    /// one unit is reserved before the handler runs (a client with no room
    /// left is refused), and the request is settled at
    /// `max(1, ceil(bytes / per))` units once its response body has been
    /// sent (or dropped part way).
    ResponseBytes {
        /// Response bytes one unit pays for (at least 1).
        per: u32,
    },
}

impl Cost {
    /// The units charged before the handler runs.
    pub fn reserved(&self) -> u32 {
        match self {
            Cost::Units(n) => *n,
            Cost::ResponseBytes { .. } => 1,
        }
    }

    /// Response bytes per unit when the cost is the response's size.
    pub fn bytes_per_unit(&self) -> Option<u32> {
        match self {
            Cost::Units(_) => None,
            Cost::ResponseBytes { per } => Some(*per),
        }
    }

    /// The units a response of `bytes` bytes costs, at `per` bytes a unit:
    /// at least 1 (an empty response still used a request), at most
    /// `u32::MAX`.
    pub fn units_for(bytes: u64, per: u32) -> u32 {
        let per = u64::from(per.max(1));
        let units = bytes.div_ceil(per);
        u32::try_from(units.max(1)).unwrap_or(u32::MAX)
    }
}

/// The cost kinds that are not a plain number, as both surfaces spell them.
pub const COST_KINDS: [&str; 1] = ["response_bytes"];

/// `response_bytes(per = N)` / `"response_bytes:N"`: the bytes one unit
/// pays for, from 1 to `u32::MAX`.
pub fn response_bytes(per: i128) -> Result<Cost, Error> {
    match per {
        v if v < 0 => Err(Error::new(ErrorKind::BytesPerUnitNegative)),
        0 => Err(Error::new(ErrorKind::BytesPerUnitZero)),
        v => u32::try_from(v)
            .map(|per| Cost::ResponseBytes { per })
            .map_err(|_| Error::new(ErrorKind::BytesPerUnitTooLarge)),
    }
}

/// A cost as the configuration writes it when it is not a number:
/// `"response_bytes:1024"`.
pub fn cost_text(text: &str) -> Result<Cost, Error> {
    let text = text.trim();
    let (kind, arg) = text.split_once(':').unwrap_or((text, ""));
    match kind.trim() {
        "response_bytes" => {
            let arg = arg.trim();
            let digits = arg.strip_prefix('-').unwrap_or(arg);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Error::new(ErrorKind::BytesPerUnitNotANumber(arg.to_owned())));
            }
            if arg.starts_with('-') {
                return Err(Error::new(ErrorKind::BytesPerUnitNegative));
            }
            match arg.parse::<i128>() {
                Ok(per) => response_bytes(per),
                Err(_) => Err(Error::new(ErrorKind::BytesPerUnitTooLarge)),
            }
        }
        _ => Err(Error::new(ErrorKind::UnknownCost(text.to_owned()))),
    }
}

/// An unknown cost kind, as the attribute names it (`cost = bytes(..)`).
pub fn unknown_cost(kind: &str) -> Error {
    Error::new(ErrorKind::UnknownCost(kind.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_bytes_costs() {
        assert_eq!(cost_text("response_bytes:1024"), Ok(Cost::ResponseBytes { per: 1024 }));
        assert_eq!(cost_text(" response_bytes : 1 "), response_bytes(1));
        assert!(cost_text("response_bytes:0").is_err());
        assert!(cost_text("response_bytes:-5").is_err());
        assert!(cost_text("response_bytes:99999999999").is_err());
        assert!(cost_text("response_bytes:").is_err());
        assert!(cost_text("response_bytes:+5").is_err());
        assert!(cost_text("response_bytes:1_024")
            .unwrap_err()
            .to_string()
            .contains("not a whole number"));
        assert!(cost_text("response_bytes:0x10").is_err());
        assert!(cost_text("response_bytes").is_err());
        assert!(cost_text("bytes:5").is_err());
        assert_eq!(Cost::units_for(0, 1024), 1);
        assert_eq!(Cost::units_for(1, 1024), 1);
        assert_eq!(Cost::units_for(1024, 1024), 1);
        assert_eq!(Cost::units_for(1025, 1024), 2);
        assert_eq!(Cost::units_for(u64::MAX, 1), u32::MAX);
        assert_eq!(Cost::units_for(10, 0), 10);
        assert_eq!(Cost::Units(3).reserved(), 3);
        assert_eq!(Cost::ResponseBytes { per: 7 }.reserved(), 1);
    }

    #[test]
    fn keys() {
        assert_eq!(key_text("ip"), Ok(KeyKind::Ip));
        assert_eq!(key_text("header:X-Api-Key"), Ok(KeyKind::Header("x-api-key".into())));
        assert_eq!(key_text("jwt_claim:org.id"), Ok(KeyKind::Claim("org.id".into())));
        assert_eq!(
            key_text("jwt_claim:https://x/y"),
            Ok(KeyKind::Claim("https://x/y".into()))
        );
        for bad in [
            "",
            "IP",
            "ip:",
            "ip:x",
            "header",
            "header:",
            "header:x y",
            "header:x:y",
            "jwt_claim",
            "jwt_claim:",
            "jwt_claim:a..b",
            "jwt_claim:.a",
            "jwt_claim:a b",
            "jwt_claim:a\u{7}",
            "cookie:x",
            "global:x",
            "custom",
            "custom:",
            "custom:a b",
            "custom:a\"b",
        ] {
            assert!(key_text(bad).is_err(), "{bad:?}");
        }
        assert_eq!(key_text("global"), Ok(KeyKind::Global));
        assert_eq!(key_text("custom:tenant"), Ok(KeyKind::Custom("tenant".into())));
        assert_eq!(key_text("custom:a::B"), Ok(KeyKind::Custom("a::B".into())));
        assert!(key("custom", Some(&"a".repeat(MAX_CUSTOM_NAME + 1))).is_err());
        assert_eq!(key("header", Some("A")), key_text("header:A"));
        assert!(key("header", Some(&"a".repeat(MAX_HEADER_NAME))).is_ok());
        assert!(key("header", Some(&"a".repeat(MAX_HEADER_NAME + 1))).is_err());
        for (kind, takes) in KEY_KINDS {
            assert_eq!(key_takes_argument(kind), Some(takes));
            assert_eq!(key(kind, None).is_err(), takes, "{kind}");
        }
    }

    #[test]
    fn steps_and_chains() {
        let chain = |v: &[&str]| v.iter().map(|s| step_text(s)).collect::<Result<Vec<_>, _>>();
        assert!(check_chain(&chain(&["jwt", "profile:a", "default"]).unwrap()).is_empty());
        assert!(check_chain(&[]).len() == 1);
        assert_eq!(check_chain(&chain(&["default", "jwt"]).unwrap())[0].0, 0);
        assert_eq!(check_chain(&chain(&["jwt", "jwt", "default"]).unwrap())[0].0, 1);
        assert_eq!(check_chain(&chain(&["jwt"]).unwrap())[0].0, 0);
        assert!(chain(&["profile:", "default"]).is_err());
        assert!(chain(&["profile: ", "default"]).is_err());
        assert!(chain(&["profile", "default"]).is_err());
        assert!(chain(&["jwt:x", "default"]).is_err());
        assert_eq!(step_text("profile:a:b"), Ok(Step::Profile("a:b".into())));
    }

    #[test]
    fn names_and_costs() {
        assert!(route_name("users.get").is_ok());
        assert!(route_name("crate::users/get-1").is_ok());
        assert!(route_name("").is_err());
        assert!(route_name("a b").is_err());
        assert!(route_name("a\"b").is_err());
        assert_eq!(cost(1), Ok(1));
        assert_eq!(cost(i128::from(u32::MAX)), Ok(u32::MAX));
        assert!(cost(0).is_err() && cost(-1).is_err() && cost(1 << 32).is_err());
    }

    #[test]
    fn messages_name_the_surface_spelling() {
        let e = key_text("cookie:x").unwrap_err();
        assert!(e.describe(Surface::Attribute).contains("`header(\"x-api-key\")`"));
        assert!(e.to_string().contains("\"header:<name>\""));
        let e = step_text("profile").unwrap_err();
        assert!(e.describe(Surface::Attribute).contains("profile(\"standard\")"));
        assert!(e.to_string().contains("profile:standard"));
    }
}
