//! `[[rules]]`: limits applied by the config-driven `tower::Layer` to routes
//! that have no handler function to annotate (a proxy, a gateway). Each rule
//! says the same as a `#[rate_limit(...)]` attribute, in data.

use std::sync::Arc;

use http::Method;

use crate::runtime::key::AnyKey;
use crate::runtime::resolve::Step;

/// The most limits one decision stacks (attributes on a handler, or
/// `[[rules]]` entries that say `stack`); a longer stack of rules applies
/// its first eight.
pub(crate) const MAX_STACK: usize = 8;

/// One `[[rules]]` entry, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleConfig {
    /// The stable route name (for `[routes."name"]` overrides, metrics and
    /// the `RateLimit-Policy` name), kept for the process's life like a
    /// profile's ([`Profile::name`](crate::config::Profile::name)).
    pub name: &'static str,
    /// Which paths the rule applies to.
    pub path: PathPattern,
    /// Which methods; empty means every method.
    pub methods: Vec<Method>,
    /// Who is limited: the same key sources `#[rate_limit(key = ...)]` uses.
    pub key: AnyKey,
    /// How much: the same resolvers `#[rate_limit(resolve = [...])]` uses,
    /// tried in order; ends with `default`.
    pub resolve: Vec<Step>,
    /// Units each request is charged before it is served.
    pub cost: u32,
    /// `cost = "response_bytes:<n>"`: the request is settled at one unit
    /// per `n` bytes of its response body (at least one) once the body has
    /// been sent; `cost` is then the one unit reserved up front.
    pub bytes_per_unit: Option<u32>,
    /// Decide, send headers and count, but never reject.
    pub shadow: bool,
    /// The next matching rule applies too, in the same decision: the
    /// request is admitted only if every one of them admits it, and none is
    /// charged otherwise (see `docs/config.md`, stacked rules).
    pub stack: bool,
    /// `key` as the file writes it (`"header:x-api-key"`), for reports.
    pub(crate) key_text: Arc<str>,
}

impl RuleConfig {
    /// The rule compiled against `limits` (see `crate::runtime::plan`).
    pub(crate) fn plan(&self, limits: crate::runtime::limits::LimitParts<'_>) -> crate::runtime::plan::RoutePlan {
        crate::runtime::plan::RoutePlan::compile(
            limits,
            &crate::runtime::plan::RouteSource {
                name: self.name,
                id: crate::runtime::plan::rule_route_id(self.name),
                cost: self.cost,
                bytes_per_unit: self.bytes_per_unit,
                shadow: self.shadow,
                steps: &self.resolve,
            },
        )
    }

    /// The rule's cost in the rule language: units, or the response's size.
    pub fn cost_kind(&self) -> crate::runtime::config::Cost {
        match self.bytes_per_unit {
            Some(per) => crate::runtime::config::Cost::ResponseBytes { per },
            None => crate::runtime::config::Cost::Units(self.cost),
        }
    }

    /// The rule's `key` as the configuration spells it: `"ip"`,
    /// `"header:x-api-key"`, `"jwt_claim:sub"`.
    pub fn key_text(&self) -> &str {
        &self.key_text
    }

    /// Whether the rule applies to a request. A rule for `GET` also applies
    /// to `HEAD` (servers answer `HEAD` with the `GET` handler).
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        let method_ok = self.methods.is_empty()
            || self.methods.contains(method)
            || (method == Method::HEAD && self.methods.contains(&Method::GET));
        method_ok && self.path.matches(path)
    }
}

/// The rules that apply to a request, in order: the first matching one,
/// and while the last one taken says `stack = true`, the next matching one
/// too. Never allocates. The runtime decides these, and `ratelimit
/// explain` describes them.
pub(crate) fn applying<'a>(
    rules: &'a [RuleConfig],
    method: &'a Method,
    path: &'a str,
) -> impl Iterator<Item = (usize, &'a RuleConfig)> + 'a {
    let mut more = true;
    rules.iter().enumerate().filter(move |(_, r)| {
        if !more || !r.matches(method, path) {
            return false;
        }
        more = r.stack;
        true
    })
}

/// A path pattern: literal segments, `{name}` for any one segment, and a
/// final `{*name}` for any remainder (including nothing). `/api/{id}/items`,
/// `/static/{*file}`. Matching ignores the query and never allocates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    text: String,
    segments: Vec<Segment>,
    /// The segments as written, empty ones included (`/users/{id}/`,
    /// `/{p}//b`): the router matches the pattern as written, so a
    /// parameter before an empty segment may itself be empty (`/users//`).
    written: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
    Rest,
}

/// Why a path pattern was refused: its text, and what is wrong with it.
#[derive(Clone, PartialEq, Eq)]
pub struct PathPatternError(String);

crate::engine::errors::debug_as_display!(PathPatternError);

impl std::fmt::Display for PathPatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PathPatternError {}

impl PathPattern {
    /// Parses a pattern, saying what is wrong with a bad one.
    ///
    /// ```
    /// use ratelimit::config::PathPattern;
    ///
    /// assert!(PathPattern::parse("/users/{id}").unwrap().matches("/users/42"));
    /// let err = PathPattern::parse("users").unwrap_err();
    /// assert_eq!(err.to_string(), "path \"users\" must start with '/'");
    /// ```
    pub fn parse(text: &str) -> Result<PathPattern, PathPatternError> {
        Self::parse_text(text).map_err(PathPatternError)
    }

    fn parse_text(text: &str) -> Result<PathPattern, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!("path {text:?} must start with '/'"));
        };
        let mut segments = Vec::new();
        // Empty segments are ignored, in patterns as in paths.
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            let segment = if let Some(name) = part.strip_prefix("{*").and_then(|p| p.strip_suffix('}')) {
                if name.is_empty() || name.contains(['{', '}', '*']) {
                    return Err(format!("path {text:?}: invalid parameter {part:?}"));
                }
                if i + 1 != parts.len() {
                    return Err(format!("path {text:?}: {{*{name}}} must be the last segment"));
                }
                Segment::Rest
            } else if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                if name.is_empty() || name.contains(['{', '}', '*']) {
                    return Err(format!("path {text:?}: invalid parameter {part:?}"));
                }
                Segment::Param
            } else if part.contains(['{', '}']) {
                return Err(format!(
                    "path {text:?}: {part:?} mixes text and a parameter; a parameter is a whole segment"
                ));
            } else {
                Segment::Literal((*part).to_owned())
            };
            segments.push(segment);
        }
        let mut parsed = segments.iter();
        let written = rest
            .split('/')
            .map(|part| match part {
                "" => Segment::Literal(String::new()),
                _ => parsed.next().cloned().unwrap_or(Segment::Rest),
            })
            .collect();
        Ok(PathPattern {
            text: text.to_owned(),
            segments,
            written,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The gRPC service the pattern names, when it is shaped as a gRPC
    /// method path: `/<service>/<Method>`, the service's last dotted part
    /// capitalised (`pkg.Service`, `RouteGuide`), and either a package
    /// with a method that is a capitalised literal or a parameter
    /// (`/pkg.Service/{*method}`), or no package and a capitalised literal
    /// method (`/RouteGuide/GetFeature`). REST paths (`/api/{id}`,
    /// `/v1.2/{id}`, `/Users/{id}`) are not.
    ///
    /// ```
    /// use ratelimit::config::PathPattern;
    ///
    /// let grpc = |p: &str| PathPattern::parse(p).unwrap().grpc_service().map(str::to_owned);
    /// assert_eq!(grpc("/routeguide.RouteGuide/GetFeature").as_deref(), Some("routeguide.RouteGuide"));
    /// assert_eq!(grpc("/routeguide.RouteGuide/{*method}").as_deref(), Some("routeguide.RouteGuide"));
    /// assert_eq!(grpc("/RouteGuide/GetFeature").as_deref(), Some("RouteGuide"));
    /// for rest in ["/api/{id}", "/users/list", "/v1.2/{id}", "/assets.v2/{*rest}", "/Users/{id}"] {
    ///     assert_eq!(grpc(rest), None, "{rest}");
    /// }
    /// ```
    pub fn grpc_service(&self) -> Option<&str> {
        let [Segment::Literal(service), method] = self.segments.as_slice() else {
            return None;
        };
        let capital = |s: &str| s.starts_with(|c: char| c.is_ascii_uppercase());
        let name = service.rsplit('.').next().unwrap_or(service);
        let shaped = capital(name)
            && match method {
                Segment::Literal(m) => capital(m),
                Segment::Param | Segment::Rest => service.contains('.'),
            };
        shaped.then_some(service.as_str())
    }

    /// Whether `path` (without the query) matches. The rule must limit at
    /// least every path the router dispatches to the route it describes:
    /// a parameter matches any non-empty segment as sent (`.`, `..`,
    /// `%2e`, `a;b` included: axum's router hands those to the handler);
    /// literal segments also match their percent-decoded spelling, and
    /// empty segments (`//`, a trailing `/`) are skipped, which can only
    /// make a rule match more; a pattern's own empty segments are also read
    /// as written, where a parameter before one may be empty (`/{p}/`
    /// takes `//`, as the router dispatches it). A pattern that is a catch-all from the root
    /// (`/{*rest}`) matches every request, including `OPTIONS *` and the
    /// empty path of `CONNECT`. Never allocates.
    pub fn matches(&self, path: &str) -> bool {
        let path = path.split('?').next().unwrap_or("");
        if !path.starts_with('/') {
            return self.segments.first() == Some(&Segment::Rest);
        }
        // Two readings, either of which matching is a match: with empty
        // segments skipped (`//a/b/` is `/a/b`), and as sent, where a
        // parameter may take an empty segment (axum routes `/users//posts`
        // to `/users/{id}/posts` with `id = ""`).
        // A third: the pattern as written too (its own empty segments and
        // trailing slash), as the router reads it (`/{p}/` takes `//`).
        self.walk(&self.segments, path, true)
            || self.walk(&self.segments, path, false)
            || self.walk(&self.written, path, false)
    }

    fn walk(&self, segments: &[Segment], path: &str, skip_empty: bool) -> bool {
        let mut parts = path[1..].split('/').filter(|p| !skip_empty || !p.is_empty());
        let last = segments.len().saturating_sub(1);
        for (i, segment) in segments.iter().enumerate() {
            match segment {
                Segment::Rest => return true,
                // The router's rule: a parameter may be empty only when more
                // of the route follows it.
                Segment::Param => match parts.next() {
                    Some("") if i == last => return false,
                    Some(_) => {}
                    None => return false,
                },
                Segment::Literal(l) => match parts.next() {
                    // As sent (the router compares bytes), or decoded.
                    Some(p) if p == l || decoded_eq(l, p) => {}
                    _ => return false,
                },
            }
        }
        parts.next().is_none()
    }
}

/// `raw` (a path segment, percent-encoded) equals `text` once decoded.
fn decoded_eq(text: &str, raw: &str) -> bool {
    let (text, raw) = (text.as_bytes(), raw.as_bytes());
    let (mut i, mut j) = (0, 0);
    while j < raw.len() {
        let (byte, used) = match raw[j] {
            b'%' if j + 2 < raw.len() => match (hex(raw[j + 1]), hex(raw[j + 2])) {
                (Some(h), Some(l)) => (h << 4 | l, 3),
                _ => (b'%', 1),
            },
            b => (b, 1),
        };
        if text.get(i) != Some(&byte) {
            return false;
        }
        i += 1;
        j += used;
    }
    i == text.len()
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(feature = "axum")]
impl RuleConfig {
    /// An attribute route read as a rule (for `explain`): its key and steps
    /// in the rule language (`"jwt_claim:sub"`, `"profile:gold"`), matching
    /// any path (the router chose the route).
    pub(crate) fn of_attribute(
        name: &str,
        key: &str,
        steps: &[&str],
        cost: u32,
        bytes_per_unit: Option<u32>,
        shadow: bool,
    ) -> Result<RuleConfig, String> {
        // An application's key type is a path, not a registered name.
        let key_kind = match key.strip_prefix("custom:") {
            Some(path) => AnyKey::from_spec(&ratelimit_spec::KeyKind::Custom(path.to_owned()))?,
            None => parse_key(key)?,
        };
        let steps: Vec<String> = steps.iter().map(|s| (*s).to_owned()).collect();
        Ok(RuleConfig {
            name: crate::runtime::limits::intern(name),
            path: PathPattern::parse_text("/{*rest}")?,
            methods: Vec::new(),
            key: key_kind,
            resolve: parse_chain(&steps).map_err(|e| e.to_string())?,
            cost,
            bytes_per_unit,
            shadow,
            stack: false,
            key_text: Arc::from(key),
        })
    }
}

/// Parses a rule's `key` (`"ip"`, `"header:<name>"`, `"jwt_claim:<path>"`):
/// the language of `ratelimit_spec`, the attribute's too.
pub(crate) fn parse_key(text: &str) -> Result<AnyKey, String> {
    let spec = ratelimit_spec::key_text(text).map_err(|e| e.to_string())?;
    AnyKey::from_spec(&spec)
}

/// Parses a rule's `resolve` list (`["jwt", "profile:<name>", "default"]`)
/// and checks its shape, reporting the first problem.
pub(crate) fn parse_chain(items: &[String]) -> Result<Vec<Step>, ratelimit_spec::Error> {
    let steps = items
        .iter()
        .map(|item| ratelimit_spec::step_text(item))
        .collect::<Result<Vec<_>, _>>()?;
    match ratelimit_spec::check_chain(&steps).into_iter().next() {
        Some((_, problem)) => Err(problem),
        None => Ok(steps),
    }
}

/// The claim names of `[jwt]`: the spec's rule for `jwt_claim` paths.
pub(crate) fn check_claim_path(path: &str) -> Result<(), ratelimit_spec::Error> {
    ratelimit_spec::claim_path(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let p = |t: &str| PathPattern::parse(t).unwrap();
        assert!(p("/").matches("/"));
        assert!(!p("/").matches("/a"));
        assert!(p("/api/{id}").matches("/api/7"));
        assert!(p("/api/{id}").matches("/api/7?x=1"));
        assert!(!p("/api/{id}").matches("/api/"));
        assert!(!p("/api/{id}").matches("/api//"));
        assert!(!p("/api/{id}").matches("/api/7/8"));
        assert!(!p("/api/{id}").matches("/api"));
        assert!(p("/static/{*f}").matches("/static/a/b/c"));
        assert!(p("/static/{*f}").matches("/static"));
        assert!(p("/static/{*f}").matches("/static/"));
        assert!(!p("/static/{*f}").matches("/statics"));
        assert!(p("/a/b").matches("/a/b"));
        assert!(!p("/a/b").matches("a/b"));
        // Spellings a server would resolve to the same path match too.
        assert!(p("/a/b").matches("/a/b/"));
        assert!(p("/a/b").matches("//a//b"));
        // A `.` segment is a segment: axum dispatches `/users/.` to
        // `/users/{id}` (and `/a/./b` to no `/a/b` route).
        assert!(!p("/a/b").matches("/a/./b"));
        assert!(p("/users/{id}").matches("/users/."));
        assert!(p("/users/{id}").matches("/users/.."));
        assert!(p("/{*rest}").matches("*"));
        assert!(p("/{*rest}").matches(""));
        assert!(!p("/a/{*rest}").matches("*"));
        // An empty segment is a parameter's value when more of the route
        // follows (the router's reading), and skipped otherwise.
        assert!(p("/users/{id}/posts").matches("/users//posts"));
        assert!(p("/{k}/x").matches("//x"));
        assert!(p("/t/{tenant}/users/{id}").matches("/t//users/1"));
        assert!(p("/users/{id}").matches("/users//7"));
        // A literal that itself holds `%` matches as sent.
        assert!(p("/a%20b").matches("/a%20b"));
        assert!(p("/a b").matches("/a%20b"));
        assert!(p("/api/login").matches("/api/%6cogin"));
        assert!(p("/api/login").matches("/api/%6Cogin"));
        assert!(!p("/api/login").matches("/api/%6"));
        assert!(!p("/api/login").matches("/api/login%"));
        assert!(p("/a%b").matches("/a%b"));
        assert!(p("/a/").matches("/a"));
        assert!(!p("/a/b").matches("/A/b"));
        assert!(PathPattern::parse("a").is_err());
        assert!(PathPattern::parse("/{*a}/b").is_err());
        assert!(PathPattern::parse("/x{id}").is_err());
        assert!(PathPattern::parse("/{}").is_err());
        assert!(PathPattern::parse("/{*}").is_err());
    }

    #[test]
    fn keys_and_chains() {
        use crate::runtime::key::{Header, Ip};
        assert_eq!(parse_key("ip"), Ok(AnyKey::Ip(Ip)));
        assert_eq!(
            parse_key("header:X-Api-Key"),
            Ok(AnyKey::Header(Header(http::HeaderName::from_static("x-api-key"))))
        );
        assert!(parse_key("header:").is_err());
        assert!(parse_key("header:x y").is_err());
        assert!(parse_key("jwt_claim:a..b").is_err());
        assert!(parse_key("cookie:x").is_err());
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(parse_chain(&s(&["jwt", "profile:a", "default"])).is_ok());
        assert!(parse_chain(&s(&[])).is_err());
        assert!(parse_chain(&s(&["default", "jwt"])).is_err());
        assert!(parse_chain(&s(&["jwt", "jwt", "default"])).is_err());
        assert!(parse_chain(&s(&["jwt"])).is_err());
        assert!(parse_chain(&s(&["profile:", "default"])).is_err());
    }
}
