//! The names a rule holds: header names, claim paths, custom key names and
//! route names, each with its allowed characters.

use crate::error::{Error, ErrorKind};
use crate::vocabulary::{MAX_CUSTOM_NAME, MAX_HEADER_NAME};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costs::cost;

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
}
