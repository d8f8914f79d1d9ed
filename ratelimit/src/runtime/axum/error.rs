//! `SetupError`: why a runtime could not be built.

use std::fmt;
use std::sync::Arc;

/// Why a [`RateLimit`](super::RateLimit) could not be built: which section of
/// the configuration, what is wrong, and the underlying error as
/// [`source`](std::error::Error::source) where there is one.
#[derive(Clone)]
pub struct SetupError {
    section: &'static str,
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

crate::engine::errors::debug_as_display!(SetupError);

impl SetupError {
    /// An error of `section` (`"store"`, `"jwt"`, ...) with its whole message.
    pub(crate) fn new(section: &'static str, message: impl Into<String>) -> Self {
        SetupError {
            section,
            message: message.into(),
            source: None,
        }
    }

    /// `[section]<sep>{source}`, keeping `source`.
    pub(crate) fn caused_by(
        section: &'static str,
        prefix: &str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        SetupError {
            section,
            message: format!("{prefix}{source}"),
            source: Some(Arc::new(source)),
        }
    }

    /// The configuration section at fault, without brackets: `store`,
    /// `header_keys`, `jwt`, `service`, `global`.
    pub fn section(&self) -> &str {
        self.section
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}
