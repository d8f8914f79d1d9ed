//! The rule language's words: the key kinds and the resolver steps, the
//! tables both surfaces read them from, and the limits on names. Everything
//! else in the crate (parsing, validation, messages) is built on these.

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
    Route,
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
            KeyKind::Route => ("Route", None),
            // The attribute names the type itself; the configuration looks
            // the name up among the extractors registered on the builder.
            KeyKind::Custom(name) => ("Custom", Some(name)),
        }
    }
}

/// The key kinds, as both surfaces spell them, and whether each takes an
/// argument: the one table [`key`](crate::key) and
/// [`key_takes_argument`](crate::key_takes_argument) read.
pub const KEY_KINDS: [(&str, bool); 5] = [
    ("ip", false),
    ("header", true),
    ("jwt_claim", true),
    ("route", false),
    ("custom", true),
];

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

/// The step as the configuration writes it: `jwt`, `service`,
/// `profile:<name>`, `default`.
impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Jwt => f.write_str("jwt"),
            Step::Service => f.write_str("service"),
            Step::Profile(name) => write!(f, "profile:{name}"),
            Step::Default => f.write_str("default"),
        }
    }
}

/// The resolver steps and whether each takes an argument: the one table
/// [`step`](crate::step) and
/// [`step_takes_argument`](crate::step_takes_argument) read.
pub const STEPS: [(&str, bool); 4] = [
    ("jwt", false),
    ("service", false),
    ("profile", true),
    ("default", false),
];

/// The longest header name a key may read (`http` refuses names above
/// 64 KiB; no real header comes near this).
pub const MAX_HEADER_NAME: usize = 256;

/// The longest name of a custom key (a registered name, or the type's path
/// as the attribute writes it).
pub const MAX_CUSTOM_NAME: usize = 256;
