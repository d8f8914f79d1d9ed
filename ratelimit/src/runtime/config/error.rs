//! `ConfigError`: where a configuration is wrong, and how.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A configuration that was refused, with where and why: the source (file
/// path, `<config>` for text, or the environment variables applied), the line
/// and column when known, the field, and what was expected.
///
/// ```
/// use ratelimit::config::Config;
///
/// let err = Config::from_toml_str("default_profile = \"a\"\n[profiles.a]\nrate = \"0/s\"\n").unwrap_err();
/// assert_eq!(err.line(), Some(3));
/// assert_eq!(err.field(), Some("profiles.a.rate"));
/// assert!(err.to_string().starts_with("<config>:3:8: profiles.a.rate: invalid rate \"0/s\""), "{err}");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigError {
    source_name: String,
    line: Option<usize>,
    column: Option<usize>,
    field: Option<String>,
    message: String,
    /// The I/O error that made the file unreadable, as `source()`.
    cause: Option<IoCause>,
}

crate::engine::errors::debug_as_display!(ConfigError);

/// An I/O error shared by the clones of a `ConfigError`; two are equal when
/// they are of the same kind and say the same.
#[derive(Debug, Clone)]
struct IoCause(Arc<std::io::Error>);

impl PartialEq for IoCause {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || (self.0.kind() == other.0.kind() && self.0.to_string() == other.0.to_string())
    }
}

impl Eq for IoCause {}

impl ConfigError {
    pub(crate) fn new(source_name: &str, message: impl Into<String>) -> Self {
        ConfigError {
            source_name: source_name.to_owned(),
            line: None,
            column: None,
            field: None,
            message: message.into(),
            cause: None,
        }
    }

    /// The file could not be read; `e` stays available as `source()`.
    pub(crate) fn io(path: &Path, e: std::io::Error) -> Self {
        let mut err = Self::new(&path.display().to_string(), format!("cannot read the file: {e}"));
        err.cause = Some(IoCause(Arc::new(e)));
        err
    }

    pub(crate) fn at(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    pub(crate) fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// The file path, `<config>`, or a description of the environment
    /// overrides that caused the error.
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// 1-based line, when the error has a position in the text.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// 1-based column, when the error has a position in the text.
    pub fn column(&self) -> Option<usize> {
        self.column
    }

    /// The dotted path of the offending field (`profiles.standard.rate`), when
    /// known.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// What is wrong and what was expected.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source_name)?;
        if let (Some(line), Some(col)) = (self.line, self.column) {
            write!(f, ":{line}:{col}")?;
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_ref().map(|c| &*c.0 as _)
    }
}

/// 1-based (line, column) of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The largest char boundary `<= i` (`str::floor_char_boundary` needs a
/// newer Rust than this crate's minimum).
fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields and key positions moved to `raw::spans` with the parser's spans
    /// (`fields_and_positions_under_headers` there); lines and columns stay.
    #[test]
    fn positions() {
        let text = "a = 1\n[profiles.std]\nrate = \"x\"\n[routes.\"users.get\"]\nprofile = \"p\"\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        assert_eq!(line_col("é = 1", 3), (1, 3), "columns count characters");
    }

    #[test]
    fn an_io_error_is_the_source_and_the_text_is_unchanged() {
        use std::error::Error as _;
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let err = ConfigError::io(Path::new("limits.toml"), io);
        assert_eq!(err.to_string(), "limits.toml: cannot read the file: no such file");
        let source = err.source().expect("the I/O error");
        let io = source.downcast_ref::<std::io::Error>().expect("an io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(err.clone(), err);
        assert!(ConfigError::new("x", "y").source().is_none());
    }
}
