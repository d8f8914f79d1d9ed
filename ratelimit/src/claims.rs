//! Claims: what a verified token says about its bearer. Found for a request
//! by [`KeyContext::claims`](crate::key::KeyContext::claims): an upstream
//! layer's, else the bearer token's, verified once per request.

use std::sync::Arc;

use serde_json::Value;

/// The token of a single `Authorization: Bearer <token>` header of
/// `headers` (none for two headers, another scheme, or a value that is not
/// text): what the verifier reads, and `ratelimit explain` too.
pub(crate) fn bearer_of(headers: &http::HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let value = value.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Claims of a token whose signature, expiry, issuer and audience have been
/// verified, by this crate or by an upstream authentication layer that puts
/// this type in the request's extensions. Claims from anything else (an
/// unverified or expired token) must never be wrapped in this type: the
/// limiter trusts it completely.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedClaims(Arc<serde_json::Map<String, Value>>);

impl VerifiedClaims {
    /// Wraps verified claims.
    pub fn new(claims: serde_json::Map<String, Value>) -> Self {
        VerifiedClaims(Arc::new(claims))
    }

    /// Parses a JSON object of already verified claims (for tests and for
    /// layers that hand over the payload as text).
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json).map(Self::new)
    }

    /// A claim by name, or by dotted path (`"org.id"` reads
    /// `{"org": {"id": ...}}`). A top-level claim whose name is the whole
    /// path comes first, so namespaced claims such as
    /// `"https://example.com/tenant"` are found as they are. A path with an
    /// empty segment yields `None`.
    pub fn get(&self, path: &str) -> Option<&Value> {
        if path.split('.').any(str::is_empty) {
            return None;
        }
        if let Some(whole) = self.0.get(path) {
            return Some(whole);
        }
        let mut segments = path.split('.');
        let mut value = self.0.get(segments.next()?)?;
        for seg in segments {
            value = value.as_object()?.get(seg)?;
        }
        Some(value)
    }

    /// A claim as text: strings as they are, integers in decimal; other
    /// types (objects, arrays, floats, booleans) are not keys.
    pub fn get_text(&self, path: &str) -> Option<std::borrow::Cow<'_, str>> {
        Some(match self.get_key(path)? {
            ClaimKey::Text(s) => std::borrow::Cow::Borrowed(s),
            ClaimKey::Integer(i) => std::borrow::Cow::Owned(i.to_string()),
        })
    }

    /// A claim usable as a key, without building text: a non-empty string
    /// or an integer (the same rule as [`get_text`](Self::get_text)).
    pub(crate) fn get_key(&self, path: &str) -> Option<ClaimKey<'_>> {
        match self.get(path)? {
            Value::String(s) if !s.is_empty() => Some(ClaimKey::Text(s)),
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .map(ClaimKey::Integer),
            _ => None,
        }
    }
}

/// A claim value that can key a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ClaimKey<'a> {
    Text(&'a str),
    Integer(i128),
}

/// Marks a request whose token was already found unverifiable (or without
/// claims) by a rule of the runtime, so nothing beneath verifies it again.
/// Zero-sized: inserting it does not box.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NotVerified;

#[cfg(test)]
mod tests {
    use super::VerifiedClaims;

    #[test]
    fn claims_by_name_and_by_dotted_path() {
        let c = VerifiedClaims::from_json(
            r#"{"sub": "u1", "org": {"id": 42}, "https://example.com/tenant": "acme", "a.b": 1, "a": {"b": 2}}"#,
        )
        .unwrap();
        assert_eq!(c.get_text("https://example.com/tenant").as_deref(), Some("acme"));
        assert_eq!(c.get_text("org.id").as_deref(), Some("42"));
        // The whole name first, then the path.
        assert_eq!(c.get_text("a.b").as_deref(), Some("1"));
        assert_eq!(c.get_text("https://example.com/nope"), None);
        assert_eq!(c.get_text("org..id"), None);
        assert_eq!(c.get_text(".org"), None);
    }
}
