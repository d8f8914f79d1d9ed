//! Claims: what a verified token says about its bearer. Found for a request
//! by [`KeyContext::claims`](crate::key::KeyContext::claims): an upstream
//! layer's, else the bearer token's, verified once per request.

use std::sync::Arc;

use serde_json::Value;

/// The token of a single `Authorization: Bearer <token>` header of
/// `headers` (none for two headers, another scheme, or a value that is not
/// text): what the verifier reads, and `ratelimit explain` too.
pub(crate) fn bearer_of(headers: &http::HeaderMap) -> Option<&str> {
    token_text(bearer_bytes(headers)?)
}

/// The token of [`bearer_of`] as the header's bytes, not yet checked to be
/// text: what the verifier's cache is keyed by. A token of hundreds of
/// bytes is checked (and hashed) once when it is verified; a cache hit,
/// the same bytes, needs no second look at them.
pub(crate) fn bearer_bytes(headers: &http::HeaderMap) -> Option<&[u8]> {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    // Byte searches: no Unicode-aware trimming or splitting.
    let value = value.as_bytes().trim_ascii();
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, token) = (&value[..space], &value[space + 1..]);
    scheme.eq_ignore_ascii_case(b"bearer").then(|| token.trim_ascii())
}

/// A token's bytes as text by `HeaderValue::to_str`'s rule (visible ASCII
/// and tab): a header value holds no other control character, so "ASCII" is
/// the same rule, checked a word at a time.
pub(crate) fn token_text(token: &[u8]) -> Option<&str> {
    if !token.is_ascii() {
        return None;
    }
    std::str::from_utf8(token).ok()
}

/// Claims of a token whose signature, expiry, issuer and audience have been
/// verified, by this crate or by an upstream authentication layer that puts
/// this type in the request's extensions. Claims from anything else (an
/// unverified or expired token) must never be wrapped in this type: the
/// limiter trusts it completely.
///
/// The top-level claims are kept as a slice, not a map: a token carries a
/// handful of claims, and the request path reads one or two of them by
/// name, where comparing lengths first beats a tree's string comparisons.
#[derive(Clone, PartialEq)]
pub struct VerifiedClaims(Arc<[(String, Value)]>);

impl std::fmt::Debug for VerifiedClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(k, v)| (k, v))).finish()
    }
}

impl VerifiedClaims {
    /// Wraps verified claims.
    pub fn new(claims: serde_json::Map<String, Value>) -> Self {
        VerifiedClaims(claims.into_iter().collect())
    }

    /// Parses a JSON object of already verified claims (for tests and for
    /// layers that hand over the payload as text).
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json).map(Self::new)
    }

    /// The top-level claim `name`.
    fn top(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k.as_str() == name).map(|(_, v)| v)
    }

    /// A claim by name, or by dotted path (`"org.id"` reads
    /// `{"org": {"id": ...}}`). A top-level claim whose name is the whole
    /// path comes first, so namespaced claims such as
    /// `"https://example.com/tenant"` are found as they are. A path with an
    /// empty segment yields `None`.
    pub fn get(&self, path: &str) -> Option<&Value> {
        let bytes = path.as_bytes();
        // The common case, a claim at the top level: one lookup.
        if !bytes.contains(&b'.') {
            return if path.is_empty() { None } else { self.top(path) };
        }
        if bytes.first() == Some(&b'.') || bytes.last() == Some(&b'.') || bytes.windows(2).any(|w| w == b"..") {
            return None;
        }
        if let Some(whole) = self.top(path) {
            return Some(whole);
        }
        let mut segments = path.split('.');
        let mut value = self.top(segments.next()?)?;
        for seg in segments {
            value = value.as_object()?.get(seg)?;
        }
        Some(value)
    }

    /// A claim as text: strings as they are, integers in decimal; other
    /// types (objects, arrays, floats, booleans) are not keys. A string and
    /// the integer it spells (`"42"`, `42`) are one key: one client to the
    /// local limit, the limit service and the fleet alike.
    pub fn get_text(&self, path: &str) -> Option<std::borrow::Cow<'_, str>> {
        Some(match self.get_key(path)? {
            ClaimKey::Text(s) => std::borrow::Cow::Borrowed(s),
            digits @ ClaimKey::Integer { .. } => std::borrow::Cow::Owned(digits.as_str().to_owned()),
        })
    }

    /// A claim usable as a key, without allocating: a non-empty string or an
    /// integer (the same rule as [`get_text`](Self::get_text)).
    pub(crate) fn get_key(&self, path: &str) -> Option<ClaimKey<'_>> {
        match self.get(path)? {
            Value::String(s) if !s.is_empty() => Some(ClaimKey::Text(s)),
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .map(ClaimKey::integer),
            _ => None,
        }
    }
}

/// A claim value that can key a client, as its text: a string as it is, an
/// integer as its decimal digits (`-` if negative), written on the stack.
/// Every identity of a claim key (the local cell's hash, the limit
/// service's id, the fleet id) is taken from [`as_str`](Self::as_str), so a
/// token saying `"sub": "42"` and one saying `"sub": 42` are one client
/// everywhere: JSON's type is the token issuer's spelling, not a second
/// identity (a client would otherwise hold two buckets, one per spelling).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ClaimKey<'a> {
    Text(&'a str),
    /// Digits in `buf[start..]` (an `i128` has at most 40 characters).
    Integer {
        buf: [u8; 40],
        start: u8,
    },
}

impl<'a> ClaimKey<'a> {
    fn integer(n: i128) -> ClaimKey<'a> {
        let mut buf = [0u8; 40];
        let mut i = buf.len();
        let mut m = n.unsigned_abs();
        loop {
            i -= 1;
            buf[i] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if n < 0 {
            i -= 1;
            buf[i] = b'-';
        }
        ClaimKey::Integer { buf, start: i as u8 }
    }

    /// The key's text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            ClaimKey::Text(s) => s,
            // ASCII digits and `-`, written above.
            ClaimKey::Integer { buf, start } => std::str::from_utf8(&buf[usize::from(*start)..]).unwrap_or(""),
        }
    }
}

/// Hashed as its text: one cell for a string and the integer it spells.
impl std::hash::Hash for ClaimKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq for ClaimKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for ClaimKey<'_> {}

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

    /// Integers read as their decimal digits, at the extremes too; a string
    /// and the integer it spells are one key, other spellings are not.
    #[test]
    fn an_integer_claim_is_the_key_of_its_decimal_text() {
        let c = VerifiedClaims::from_json(&format!(
            r#"{{"n": 42, "s": "42", "neg": -42, "zero": 0, "min": {}, "max": {}, "pad": "042", "f": 42.0, "e": ""}}"#,
            i64::MIN,
            u64::MAX
        ))
        .unwrap();
        let key = |p: &str| c.get_key(p).map(|k| k.as_str().to_owned());
        assert_eq!(key("n").as_deref(), Some("42"));
        assert_eq!(c.get_key("n"), c.get_key("s"));
        assert_eq!(key("neg").as_deref(), Some("-42"));
        assert_eq!(key("zero").as_deref(), Some("0"));
        assert_eq!(key("min"), Some(i64::MIN.to_string()));
        assert_eq!(key("max"), Some(u64::MAX.to_string()));
        assert_ne!(c.get_key("pad"), c.get_key("n"));
        // Not keys: a float (even a whole one) and an empty string.
        assert_eq!(key("f"), None);
        assert_eq!(key("e"), None);
        assert_eq!(c.get_text("n").as_deref(), Some("42"));
        for n in [i128::MIN, i128::MAX, -1, 1] {
            assert_eq!(super::ClaimKey::integer(n).as_str(), n.to_string());
        }
    }

    /// The token as `HeaderValue::to_str` would give it: ASCII only (a
    /// value with obs-text carries none), the scheme in any case, spaces
    /// around trimmed.
    #[test]
    fn the_bearer_token_is_read_as_to_str_reads_it() {
        let token = |v: &[u8]| {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, http::HeaderValue::from_bytes(v).unwrap());
            super::bearer_of(&h).map(str::to_owned)
        };
        assert_eq!(token(b"Bearer abc.def").as_deref(), Some("abc.def"));
        assert_eq!(token(b"  bEaReR   abc  ").as_deref(), Some("abc"));
        assert_eq!(token(b"Bearer ab\xc3\xa9c"), None, "obs-text, even valid UTF-8");
        assert_eq!(token(b"Basic abc"), None);
        assert_eq!(token(b"Bearer\tabc"), None);
        assert_eq!(token(b"Bearer"), None);
    }
}
