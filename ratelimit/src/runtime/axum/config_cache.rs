//! The configuration as the request path reads it: each thread keeps the
//! last snapshot of each runtime's [`ConfigHandle`] it read, so a read is
//! one atomic load (the handle's generation) and a thread-local count,
//! where `ArcSwap::load` costs two locked instructions, the largest part of
//! a decision's fixed cost.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Weak};

use crate::runtime::config::reload::Current;
use crate::runtime::config::{Config, ConfigHandle};

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

/// Configurations a thread caches, one per handle: a thread serving a few
/// runtimes in turn (two routers with their own limiters) keeps each one's.
const SLOTS: usize = 4;

/// A thread's cache: the slots, and the next one to replace when all are
/// taken by live handles.
struct Slots {
    slots: [Option<Rc<Cached>>; SLOTS],
    next: usize,
}

thread_local! {
    static CACHED: RefCell<Slots> = const {
        RefCell::new(Slots {
            slots: [None, None, None, None],
            next: 0,
        })
    };
}

/// The configuration as one request reads it ([`local`]):
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
pub(crate) fn local(handle: &ConfigHandle) -> LocalConfig {
    let (id, generation) = (handle.id(), handle.generation());
    let hit = CACHED.try_with(|cell| {
        let cache = cell.try_borrow().ok()?;
        let mut slots = cache.slots.iter().flatten();
        slots.find(|c| c.id == id && c.generation == generation).map(Rc::clone)
    });
    match hit {
        Ok(Some(c)) => LocalConfig::Cached(c),
        _ => refresh(handle, generation),
    }
}

/// [`local`]'s miss: this handle's snapshot is not in the
/// thread's cache, or a replacement has happened since it was read.
#[cold]
#[inline(never)]
fn refresh(handle: &ConfigHandle, generation: u64) -> LocalConfig {
    let id = handle.id();
    // What a refresh replaces is dropped after the cache's borrow ends:
    // a configuration's drop runs the application's code (its key
    // sources), which must not find the cache borrowed.
    let mut replaced: [Option<Rc<Cached>>; SLOTS + 1] = [const { None }; SLOTS + 1];
    let mut old: Option<Cached> = None;
    let cached = CACHED.try_with(|cell| {
        // Only this function borrows it; were it borrowed (a reentrant
        // read), the shared read below would serve the request.
        let mut cache = cell.try_borrow_mut().ok()?;
        let mine = cache.slots.iter().position(|s| s.as_ref().is_some_and(|c| c.id == id));
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
            id,
            generation,
            config: handle.load_full(),
            owner: handle.downgrade(),
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
        _ => LocalConfig::Shared(handle.load_full()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::config::Config;

    fn config(rate: &str) -> Config {
        Config::from_toml_str(&format!("[profiles.std]\nrate = \"{rate}\"\n")).expect("config")
    }

    fn count(handle: &ConfigHandle) -> u32 {
        local(handle).default_quota().count()
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
        let held = local(&handle);
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
