//! The structured-field Lists the limits write into (`RateLimit-Policy`,
//! `RateLimit`): a limit's policy name, and its member added to what an
//! inner service wrote there (RFC 9651, draft-ietf-httpapi-ratelimit-headers-10).

use std::fmt::Write as _;

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

/// `<route>/<profile>`, percent-encoded where a structured-field String
/// would need an escape or cannot go (see
/// [`Outcome::policy_name`](super::Outcome::policy_name)).
pub(crate) fn policy_name(route: &str, profile: Option<&str>) -> String {
    let profile = profile.unwrap_or("custom");
    let mut out = String::with_capacity(route.len() + profile.len() + 1);
    push_encoded(&mut out, route, b"");
    out.push('/');
    // `#`: the concurrency policy's name adds `#concurrency`.
    push_encoded(&mut out, profile, b"/#");
    out
}

fn push_encoded(out: &mut String, text: &str, also: &[u8]) {
    for b in text.bytes() {
        if (0x20..=0x7e).contains(&b) && !matches!(b, b'%' | b'"' | b'\\') && !also.contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// The most bytes of an inner service's List kept in front of this limit's
/// member: an upstream cannot make the merged field grow without bound.
const MAX_UPSTREAM_LIST: usize = 2048;

/// The most bytes of an inner service's field lines parsed at all: a
/// larger value is dropped unparsed (parsing a megabyte into an sfv List
/// and serializing it back took 170 ms per field, per response, on the
/// response future's thread). Above [`MAX_UPSTREAM_LIST`], as the
/// serialized List may be shorter than what was sent (whitespace, members
/// with this limit's name removed) or longer (`a,b` becomes `a, b`).
const MAX_UPSTREAM_INPUT: usize = 4 * MAX_UPSTREAM_LIST;

/// Adds `member` (named `policy`) to the List in `name`, after the members
/// already there (RFC 9651 3.1: a List split over several field lines is
/// one List, so they are joined into one line). What is there is parsed as
/// an RFC 9651 List first: a value that is not one (an older draft's
/// `limit=10, remaining=5`, garbage) is dropped, since joining it would make
/// the whole field unparseable and hide this limit's member too; so is an
/// upstream member with this limit's name, and a List longer than
/// [`MAX_UPSTREAM_LIST`].
pub(crate) fn append_member(headers: &mut HeaderMap, name: &HeaderName, policy: &str, member: &str) {
    let lines: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    let mut value = String::new();
    let input: usize = lines.iter().map(|l| l.len() + 2).sum();
    if !lines.is_empty() && input <= MAX_UPSTREAM_INPUT {
        let joined = lines.join(", ");
        if let Ok(mut list) = sfv::Parser::new(&joined).parse::<sfv::List>() {
            list.retain(|entry| {
                !matches!(entry, sfv::ListEntry::Item(item)
                    if item.bare_item.as_string().is_some_and(|s| s.as_str() == policy))
            });
            if let Some(kept) = sfv::FieldType::serialize(&list) {
                if kept.len() <= MAX_UPSTREAM_LIST {
                    value = kept;
                    value.push_str(", ");
                }
            }
        }
    }
    value.push_str(member);
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.insert(name.clone(), v);
    }
}
