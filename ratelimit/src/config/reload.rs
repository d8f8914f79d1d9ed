//! `ConfigHandle`: the current configuration, swappable at run time.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
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
    current: Arc<Current>,
    path: Option<PathBuf>,
}

/// The configuration every clone of a handle shares.
#[derive(Debug)]
struct Current {
    swap: ArcSwap<Config>,
    /// Bumped after every replacement: a thread's cached configuration
    /// ([`ConfigHandle::with`]) is current while its generation is this.
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

/// A thread's last configuration: the request path reads it with one
/// atomic load (the generation) and a thread-local reference count, where
/// `ArcSwap::load` costs two locked instructions, the largest part of a
/// decision's fixed cost.
#[derive(Debug)]
pub(crate) struct Cached {
    id: u64,
    generation: u64,
    config: Arc<Config>,
}

/// Slots of a thread's cache: a handle's configuration goes in slot
/// `id % SLOTS`, so a thread serving a few runtimes in turn (two routers
/// with their own limiters) keeps each one's.
const SLOTS: usize = 4;

thread_local! {
    static CACHED: RefCell<[Option<Rc<Cached>>; SLOTS]> = const { RefCell::new([None, None, None, None]) };
}

/// The configuration as one request reads it ([`ConfigHandle::local`]):
/// a snapshot that stays whole while it is held. Not `Send`: it is for the
/// synchronous part of a request on one thread.
#[derive(Debug)]
pub(crate) enum LocalConfig {
    Cached(Rc<Cached>),
    /// Read while the thread is exiting (its cache is gone).
    Shared(Arc<Config>),
}

impl std::ops::Deref for LocalConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        match self {
            LocalConfig::Cached(c) => &c.config,
            LocalConfig::Shared(c) => c,
        }
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

    /// The current configuration, as the request path reads it: this
    /// thread's cached copy while no replacement has happened since (one
    /// atomic load, no locked instruction), else refreshed first. A
    /// replacement is seen by every read that starts after it returns.
    ///
    /// A thread caches the last configuration it read of each of a few
    /// handles, so a replaced configuration can stay alive in a thread until
    /// that thread next reads through the handle (or the thread exits): the
    /// memory of one configuration per thread, at most, held a while longer.
    pub(crate) fn local(&self) -> LocalConfig {
        let current = &*self.current;
        // Acquire: pairs with the Release bump after a replacement, so a
        // read that sees the new generation loads the new configuration.
        let generation = current.generation.load(Ordering::Acquire);
        let cached = CACHED.try_with(|cell| {
            // Only this function borrows it, and never twice at once (a
            // replaced configuration's drop does not read one); but if it
            // did, the shared read below would serve it.
            let mut slots = cell.try_borrow_mut().ok()?;
            // `id % SLOTS` fits in a usize.
            let slot = &mut slots[(current.id % SLOTS as u64) as usize];
            match slot {
                Some(c) if c.id == current.id && c.generation == generation => return Some(Rc::clone(c)),
                // No request holds it: refreshed in place, no allocation.
                Some(c) => {
                    if let Some(c) = Rc::get_mut(c) {
                        *c = Cached {
                            id: current.id,
                            generation,
                            config: current.swap.load_full(),
                        };
                        return Some(Rc::clone(slot.as_ref()?));
                    }
                }
                None => {}
            }
            let fresh = Rc::new(Cached {
                id: current.id,
                generation,
                config: current.swap.load_full(),
            });
            *slot = Some(Rc::clone(&fresh));
            Some(fresh)
        });
        match cached {
            Ok(Some(c)) => LocalConfig::Cached(c),
            _ => LocalConfig::Shared(current.swap.load_full()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rate: &str) -> Config {
        Config::from_toml_str(&format!("[profiles.std]\nrate = \"{rate}\"\n")).expect("config")
    }

    fn count(handle: &ConfigHandle) -> u32 {
        handle.local().default_quota().count()
    }

    #[test]
    fn a_replacement_is_read_by_the_next_local_read() {
        let handle = ConfigHandle::new(config("10/s"));
        assert_eq!(count(&handle), 10);
        handle.store(config("20/s"));
        assert_eq!(count(&handle), 20);
        let _ = handle.replace(config("30/s"));
        assert_eq!(count(&handle), 30);
        // A clone shares the configuration and the cache entry.
        let clone = handle.clone();
        clone.store(config("40/s"));
        assert_eq!(count(&handle), 40);
    }

    #[test]
    fn a_read_held_across_a_replacement_stays_whole() {
        let handle = ConfigHandle::new(config("10/s"));
        let held = handle.local();
        handle.store(config("20/s"));
        // The held snapshot is the old one; a new read is the new one, and
        // refreshing the cache did not touch what is held.
        assert_eq!(count(&handle), 20);
        assert_eq!(held.default_quota().count(), 10);
        drop(held);
        assert_eq!(count(&handle), 20);
    }

    #[test]
    fn handles_read_in_turn_on_one_thread_each_get_their_own() {
        // More handles than the cache has slots, and handles freed and made
        // again (a new handle may sit at a freed one's address).
        let handles: Vec<ConfigHandle> = (1..=9).map(|n| ConfigHandle::new(config(&format!("{n}/s")))).collect();
        for _ in 0..3 {
            for (n, h) in (1..).zip(&handles) {
                assert_eq!(count(h), n);
            }
        }
        for n in 1..=50 {
            let h = ConfigHandle::new(config(&format!("{n}/s")));
            assert_eq!(count(&h), n);
        }
    }

    #[test]
    fn a_replacement_on_one_thread_is_read_on_another() {
        let handle = ConfigHandle::new(config("10/s"));
        let (tx, rx) = std::sync::mpsc::channel::<u32>();
        let (back, seen) = std::sync::mpsc::channel::<u32>();
        let reader = {
            let handle = handle.clone();
            std::thread::spawn(move || {
                // Each message: read now, after the sender's store returned.
                while rx.recv().is_ok() {
                    back.send(count(&handle)).expect("send");
                }
            })
        };
        for n in [10, 20, 30, 40] {
            if n != 10 {
                handle.store(config(&format!("{n}/s")));
            }
            tx.send(n).expect("send");
            assert_eq!(seen.recv().expect("reply"), n);
        }
        drop(tx);
        reader.join().expect("reader");
    }
}
