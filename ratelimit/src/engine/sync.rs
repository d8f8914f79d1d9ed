//! Atomics, locks and spin hints, swapped for loom's under `--cfg loom` so
//! the store's hand-over protocol and the concurrency limiter's permits can
//! be model-checked (`ratelimit/tests/builds/loom_*.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

pub(crate) use std::sync::atomic::Ordering;

#[cfg(loom)]
pub(crate) use loom::{hint::spin_loop, thread::yield_now};
#[cfg(not(loom))]
pub(crate) use std::{hint::spin_loop, thread::yield_now};
