//! Who a rule limits: the key kinds, their table, and a key read from its
//! kind and argument.

use crate::error::{Error, ErrorKind};
use crate::names::{claim_path, custom_name, header_name};
use crate::vocabulary::{KeyKind, KEY_KINDS};

/// A key from its kind and argument: `("ip", None)`,
/// `("header", Some("x-api-key"))`, `("jwt_claim", Some("sub"))`.
pub fn key(kind: &str, arg: Option<&str>) -> Result<KeyKind, Error> {
    if kind == "global" {
        return Err(Error::new(ErrorKind::GlobalKeyRenamed));
    }
    let Some(&(fixed, takes)) = KEY_KINDS.iter().find(|(k, _)| *k == kind) else {
        return Err(Error::new(ErrorKind::UnknownKeyKind(kind.to_owned())));
    };
    match (fixed, arg) {
        (_, Some(_)) if !takes => Err(Error::new(ErrorKind::KeyTakesNoArgument(fixed))),
        (_, None) if takes => Err(Error::new(ErrorKind::KeyNeedsArgument(fixed))),
        ("header", Some(name)) => header_name(name).map(KeyKind::Header),
        ("jwt_claim", Some(path)) => claim_path(path).map(|()| KeyKind::Claim(path.to_owned())),
        ("custom", Some(name)) => custom_name(name).map(|()| KeyKind::Custom(name.to_owned())),
        ("route", None) => Ok(KeyKind::Route),
        _ => Ok(KeyKind::Ip),
    }
}

/// Whether a key kind takes an argument; `None` when there is no such kind.
pub fn key_takes_argument(kind: &str) -> Option<bool> {
    KEY_KINDS.iter().find(|(k, _)| *k == kind).map(|&(_, takes)| takes)
}

/// A key as the configuration writes it: `"ip"`, `"header:x-api-key"`,
/// `"jwt_claim:sub"`.
pub fn key_text(text: &str) -> Result<KeyKind, Error> {
    match text.split_once(':') {
        Some((kind, arg)) => key(kind, Some(arg)),
        None => key(text, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::{MAX_CUSTOM_NAME, MAX_HEADER_NAME};

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
        assert_eq!(key_text("route"), Ok(KeyKind::Route));
        assert!(key_text("global").unwrap_err().to_string().contains("is now \"route\""));
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
}
