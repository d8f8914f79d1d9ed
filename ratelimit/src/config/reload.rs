//! `ConfigHandle`: the current configuration, swappable at run time.

#[cfg(feature = "axum")]
use std::cell::RefCell;
use std::path::{Path, PathBuf};
#[cfg(feature = "axum")]
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
#[cfg(feature = "axum")]
use std::sync::Weak;

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
    /// ([`ConfigHandle::local`]) is current while its generation is this.
    generation: AtomicU64,
    /// This configuration's own number, never reused (a new handle at a
    /// freed one's address must not match the freed one's cache entry).
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
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

#[cfg(feature = "axum")]
/// A thread's last configuration of one handle: the request path reads it
/// with one atomic load (the generation) and a thread-local reference
/// count, where `ArcSwap::load` costs two locked instructions, the largest
/// part of a decision's fixed cost.
#[derive(Debug)]
pub(crate) struct Cached {
    id: u64,
    generation: u64,
    config: Arc<Config>,
    /// The handle's shared state, to tell when every clone of the handle
    /// is gone (its configuration is then dropped from the cache at the
    /// thread's next refresh, not kept until the thread exits).
    owner: Weak<Current>,
}

#[cfg(feature = "axum")]
/// Configurations a thread caches, one per handle: a thread serving a few
/// runtimes in turn (two routers with their own limiters) keeps each one's.
const SLOTS: usize = 4;

#[cfg(feature = "axum")]
/// A thread's cache: the slots, and the next one to replace when all are
/// taken by live handles.
struct Slots {
    slots: [Option<Rc<Cached>>; SLOTS],
    next: usize,
}

#[cfg(feature = "axum")]
thread_local! {
    static CACHED: RefCell<Slots> = const {
        RefCell::new(Slots {
            slots: [None, None, None, None],
            next: 0,
        })
    };
}

#[cfg(feature = "axum")]
/// The configuration as one request reads it ([`ConfigHandle::local`]):
/// a snapshot that stays whole while it is held. Not `Send`: it is for the
/// synchronous part of a request on one thread.
#[derive(Debug)]
pub(crate) enum LocalConfig {
    Cached(Rc<Cached>),
    /// Read while the thread is exiting (its cache is gone).
    Shared(Arc<Config>),
}

#[cfg(feature = "axum")]
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

    #[cfg(feature = "axum")]
    /// The current configuration, as the request path reads it: this
    /// thread's cached copy while no replacement has happened since (one
    /// atomic load, no locked instruction), else refreshed first. A
    /// replacement is seen by every read that starts after it returns.
    ///
    /// A thread caches the last configuration it read of each of up to four
    /// handles, so a replaced configuration can stay alive in a thread until
    /// that thread reads through the handle again, another handle takes its
    /// slot, or the thread exits; a handle whose every clone is gone has its
    /// configuration released at the thread's next refresh. At most one
    /// configuration per handle and thread, and four per thread.
    pub(crate) fn local(&self) -> LocalConfig {
        let current = &*self.current;
        // Acquire: pairs with the Release bump after a replacement, so a
        // read that sees the new generation loads the new configuration.
        let generation = current.generation.load(Ordering::Acquire);
        let hit = CACHED.try_with(|cell| {
            let cache = cell.try_borrow().ok()?;
            let mut slots = cache.slots.iter().flatten();
            slots
                .find(|c| c.id == current.id && c.generation == generation)
                .map(Rc::clone)
        });
        match hit {
            Ok(Some(c)) => LocalConfig::Cached(c),
            _ => self.refresh(generation),
        }
    }

    /// [`Self::local`]'s miss: this handle's snapshot is not in the
    /// thread's cache, or a replacement has happened since it was read.
    #[cfg(feature = "axum")]
    #[cold]
    #[inline(never)]
    fn refresh(&self, generation: u64) -> LocalConfig {
        let current = &*self.current;
        // What a refresh replaces is dropped after the cache's borrow ends:
        // a configuration's drop runs the application's code (its key
        // sources), which must not find the cache borrowed.
        let mut replaced: [Option<Rc<Cached>>; SLOTS + 1] = [const { None }; SLOTS + 1];
        let mut old: Option<Cached> = None;
        let cached = CACHED.try_with(|cell| {
            // Only this function borrows it; were it borrowed (a reentrant
            // read), the shared read below would serve the request.
            let mut cache = cell.try_borrow_mut().ok()?;
            let mine = cache
                .slots
                .iter()
                .position(|s| s.as_ref().is_some_and(|c| c.id == current.id));
            // Refresh this handle's slot, else take a free one or one of a
            // handle that is gone, else the next in turn.
            let i = mine
                .or_else(|| {
                    cache
                        .slots
                        .iter()
                        .position(|s| s.as_ref().is_none_or(|c| c.owner.strong_count() == 0))
                })
                .unwrap_or(cache.next);
            cache.next = (i + 1) % SLOTS;
            let entry = Cached {
                id: current.id,
                generation,
                config: current.swap.load_full(),
                owner: Arc::downgrade(&self.current),
            };
            // Refreshed in place when no read holds the slot's snapshot (no
            // allocation), else a new one beside the held one.
            let fresh = match cache.slots[i].as_mut().and_then(Rc::get_mut) {
                Some(held) => {
                    old = Some(std::mem::replace(held, entry));
                    Rc::clone(cache.slots[i].as_ref()?)
                }
                None => {
                    let fresh = Rc::new(entry);
                    replaced[SLOTS] = cache.slots[i].replace(Rc::clone(&fresh));
                    fresh
                }
            };
            // Release the configurations of handles that are gone.
            for (slot, out) in cache.slots.iter_mut().zip(replaced.iter_mut()) {
                if slot.as_ref().is_some_and(|c| c.owner.strong_count() == 0) {
                    *out = slot.take();
                }
            }
            Some(fresh)
        });
        drop((replaced, old));
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

#[cfg(all(test, feature = "axum"))]
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
    fn a_dropped_handles_configuration_is_released_at_the_next_refresh() {
        let gone = ConfigHandle::new(config("10/s"));
        assert_eq!(count(&gone), 10);
        let weak = Arc::downgrade(&*gone.load());
        drop(gone);
        assert!(weak.upgrade().is_some(), "this thread's cache still holds it");
        // Another handle's first read on this thread is a refresh.
        let other = ConfigHandle::new(config("20/s"));
        assert_eq!(count(&other), 20);
        assert!(weak.upgrade().is_none(), "released by the refresh");
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
