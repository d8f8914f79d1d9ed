//! `ConfigHandle`: the current configuration, swappable at run time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Config, ConfigError};

/// The live configuration, shared by every request and replaced atomically
/// on reload.
///
/// Readers get a consistent snapshot (profiles and routes from one version,
/// never a mix). Client state is not part of the configuration: it lives in
/// the limiter's store, keyed by route and client, so a reload keeps every
/// client's state, and a client whose profile changes keeps its theoretical
/// arrival time (no fresh burst).
///
/// ```
/// use ratelimit::config::{Config, ConfigHandle};
///
/// let v1 = Config::from_toml_str("[profiles.std]\nrate = \"10/s\"\n").unwrap();
/// let handle = ConfigHandle::new(v1);
/// assert_eq!(handle.load().default_quota().count(), 10);
///
/// let v2 = Config::from_toml_str("[profiles.std]\nrate = \"20/s\"\n").unwrap();
/// handle.store(v2);
/// assert_eq!(handle.load().default_quota().count(), 20);
/// ```
#[derive(Debug, Clone)]
pub struct ConfigHandle {
    current: Arc<ArcSwap<Config>>,
    path: Option<PathBuf>,
}

impl ConfigHandle {
    /// A handle holding `config`.
    pub fn new(config: Config) -> Self {
        ConfigHandle {
            current: Arc::new(ArcSwap::from_pointee(config)),
            path: None,
        }
    }

    /// Loads `path` (with environment overrides) and remembers it for
    /// [`reload`](ConfigHandle::reload).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref().to_path_buf();
        let config = Config::from_file(&path)?;
        Ok(ConfigHandle {
            current: Arc::new(ArcSwap::from_pointee(config)),
            path: Some(path),
        })
    }

    /// The current configuration. Cheap (no lock, no allocation); hold the
    /// guard for the duration of one request.
    pub fn load(&self) -> arc_swap::Guard<Arc<Config>> {
        self.current.load()
    }

    /// Replaces the configuration.
    pub fn store(&self, config: Config) {
        self.current.store(Arc::new(config));
    }

    /// Replaces the configuration and says what changed, against the one it
    /// replaced (in one atomic swap: two reloads at once each diff against
    /// what they really replaced).
    pub(crate) fn replace(&self, config: Config) -> super::ConfigChanges {
        let new = Arc::new(config);
        let old = self.current.swap(Arc::clone(&new));
        new.changes_from(&old)
    }

    /// Re-reads the file this handle was loaded from, and says what
    /// changed. On error the current configuration stays in force and the
    /// error says why the new one was refused.
    pub fn reload(&self) -> Result<super::ConfigChanges, ConfigError> {
        let Some(path) = &self.path else {
            return Err(ConfigError::new("<config>", "this handle was not loaded from a file"));
        };
        let config = Config::from_file(path)?;
        Ok(self.replace(config))
    }
}
