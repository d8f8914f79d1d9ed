//! The structured rate-limit fields of a response, read as a client would:
//! every `RateLimit-Policy` / `RateLimit` field line parsed as one RFC 9651
//! List with `sfv`, and each member checked against
//! draft-ietf-httpapi-ratelimit-headers-10.

use http::Response;

/// One List member: the policy name (a String), its Integer parameters
/// and its String ones (`qu`), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) params: Vec<(String, i64)>,
    pub(crate) strings: Vec<(String, String)>,
}

impl Member {
    pub(crate) fn get(&self, key: &str) -> Option<i64> {
        self.params.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
    }

    /// A String parameter (the draft's `qu`, a quota unit).
    pub(crate) fn text(&self, key: &str) -> Option<&str> {
        self.strings.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Parameters whose value is a String (the rest are Integers).
const STRING_PARAMS: &[&str] = &["qu"];

/// The field `name` of `r` as a List (its field lines joined with `, `, as
/// RFC 9651 3.1 says a List split over lines is combined); empty when the
/// field is absent. Panics, with the field value, when it does not parse or
/// a member is not an Item whose value is a String with Integer
/// parameters, or a parameter is not one `allowed` for the field.
pub(crate) fn list_of<B>(r: &Response<B>, name: &str, allowed: &[&str]) -> Vec<Member> {
    let lines: Vec<&str> = r
        .headers()
        .get_all(name)
        .iter()
        .map(|v| {
            v.to_str()
                .unwrap_or_else(|_| panic!("{name} is not visible ASCII: {v:?}"))
        })
        .collect();
    if lines.is_empty() {
        return Vec::new();
    }
    let value = lines.join(", ");
    let list: sfv::List = sfv::Parser::new(&value)
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {value:?} is not an RFC 9651 List: {e}"));
    assert!(!list.is_empty(), "{name}: {value:?} is an empty List");
    list.into_iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("{name}: {value:?} has an inner list, not an Item");
            };
            let name_value = item
                .bare_item
                .as_string()
                .unwrap_or_else(|| panic!("{name}: {value:?}: the Item value MUST be a String"))
                .as_str()
                .to_owned();
            let mut params = Vec::new();
            let mut strings = Vec::new();
            for (k, v) in item.params.iter() {
                assert!(
                    allowed.contains(&k.as_str()),
                    "{name}: {value:?}: unexpected parameter {k:?}"
                );
                if STRING_PARAMS.contains(&k.as_str()) {
                    let text = v
                        .as_string()
                        .unwrap_or_else(|| panic!("{name}: {value:?}: {k} is not a String"));
                    strings.push((k.as_str().to_owned(), text.as_str().to_owned()));
                } else {
                    let n = v
                        .as_integer()
                        .unwrap_or_else(|| panic!("{name}: {value:?}: {k} is not an Integer"));
                    params.push((k.as_str().to_owned(), i64::from(n)));
                }
            }
            Member {
                name: name_value,
                params,
                strings,
            }
        })
        .collect()
}

/// `RateLimit-Policy`: members with `q` (required, >= 0) and `w` (> 0).
pub(crate) fn policies<B>(r: &Response<B>) -> Vec<Member> {
    let list = list_of(r, "ratelimit-policy", &["q", "w", "qu", "pk"]);
    for m in &list {
        assert!(m.get("q").is_some_and(|q| q >= 0), "q is REQUIRED, non-negative: {m:?}");
        assert!(!matches!(m.get("w"), Some(w) if w <= 0), "w is non-zero: {m:?}");
    }
    list
}

/// `RateLimit`: members with `r` (required, >= 0) and `t` (>= 0).
pub(crate) fn limits<B>(r: &Response<B>) -> Vec<Member> {
    let list = list_of(r, "ratelimit", &["r", "t", "pk"]);
    for m in &list {
        assert!(m.get("r").is_some_and(|v| v >= 0), "r is REQUIRED, non-negative: {m:?}");
        assert!(!matches!(m.get("t"), Some(t) if t < 0), "t is non-negative: {m:?}");
    }
    list
}

/// `(name, q, w)` of each policy, `(name, r, t)` of each limit: compact
/// forms for assertions.
pub(crate) fn policy_triples<B>(r: &Response<B>) -> Vec<(String, i64, Option<i64>)> {
    policies(r)
        .into_iter()
        .map(|m| (m.name.clone(), m.get("q").unwrap_or(-1), m.get("w")))
        .collect()
}

pub(crate) fn limit_triples<B>(r: &Response<B>) -> Vec<(String, i64, Option<i64>)> {
    limits(r)
        .into_iter()
        .map(|m| (m.name.clone(), m.get("r").unwrap_or(-1), m.get("t")))
        .collect()
}
