//! Atomics and spin hints, swapped for loom's under `--cfg loom` so the
//! store's hand-over protocol can be model-checked (`ratelimit/tests/builds/loom_store.rs`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

pub(crate) use std::sync::atomic::Ordering;

#[cfg(loom)]
pub(crate) use loom::{hint::spin_loop, thread::yield_now};
#[cfg(not(loom))]
pub(crate) use std::{hint::spin_loop, thread::yield_now};
