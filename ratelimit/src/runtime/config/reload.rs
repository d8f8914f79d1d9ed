//! `ConfigHandle`: the current configuration, swappable at run time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

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
    current: Arc<Current>,
    path: Option<PathBuf>,
}

/// The configuration every clone of a handle shares.
#[derive(Debug)]
pub(crate) struct Current {
    swap: ArcSwap<Config>,
    /// Bumped after every replacement: a thread's cached configuration
    /// (the HTTP runtime's `config_cache`) is current while its generation
    /// is this.
    generation: AtomicU64,
    /// This configuration's own number, never reused (a new handle at a
    /// freed one's address must not match the freed one's cache entry).
    id: u64,
}

impl Current {
    fn new(config: Config) -> Arc<Current> {
        static IDS: AtomicU64 = AtomicU64::new(1);
        Arc::new(Current {
            swap: ArcSwap::from_pointee(config),
            generation: AtomicU64::new(0),
            id: IDS.fetch_add(1, Ordering::Relaxed),
        })
    }
}

impl ConfigHandle {
    /// A handle holding `config`.
    pub fn new(config: Config) -> Self {
        ConfigHandle {
            current: Current::new(config),
            path: None,
        }
    }

    /// Loads `path` (with environment overrides) and remembers it for
    /// [`reload`](ConfigHandle::reload).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref().to_path_buf();
        let config = Config::from_file(&path)?;
        Ok(ConfigHandle {
            current: Current::new(config),
            path: Some(path),
        })
    }

    /// The current configuration. Cheap (no lock, no allocation); hold the
    /// guard for the duration of one request.
    pub fn load(&self) -> arc_swap::Guard<Arc<Config>> {
        self.current.swap.load()
    }

    /// The replacements so far. Acquire: pairs with the Release bump after
    /// a replacement, so a reader that sees the new generation then loads
    /// the new configuration.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn generation(&self) -> u64 {
        self.current.generation.load(Ordering::Acquire)
    }

    /// This handle's number (its clones share it), never reused.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn id(&self) -> u64 {
        self.current.id
    }

    /// The current configuration, owned.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn load_full(&self) -> Arc<Config> {
        self.current.swap.load_full()
    }

    /// A reference that tells when every clone of this handle is gone.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn downgrade(&self) -> Weak<Current> {
        Arc::downgrade(&self.current)
    }

    /// Replaces the configuration.
    pub fn store(&self, config: Config) {
        self.current.swap.store(Arc::new(config));
        self.current.generation.fetch_add(1, Ordering::Release);
    }

    /// Replaces the configuration and says what changed, against the one it
    /// replaced (in one atomic swap: two reloads at once each diff against
    /// what they really replaced).
    pub(crate) fn replace(&self, config: Config) -> super::ConfigChanges {
        let new = Arc::new(config);
        let old = self.current.swap.swap(Arc::clone(&new));
        self.current.generation.fetch_add(1, Ordering::Release);
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
