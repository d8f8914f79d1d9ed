//! Why a verifier could not be built.

/// Why a verifier could not be built: the key material, the settings, or
/// a JWKS URL that could not be fetched. Opaque: its message, and the
/// underlying error as [`source`](std::error::Error::source) where there is
/// one (an I/O error reading a key file).
#[derive(Clone)]
pub struct JwtConfigError {
    message: String,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

crate::engine::errors::debug_as_display!(JwtConfigError);

impl std::fmt::Display for JwtConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for JwtConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for JwtConfigError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl JwtConfigError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        JwtConfigError {
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `source`.
    pub(crate) fn caused_by(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }
}
