//! Fixtures the suites share. Each suite's `main.rs` includes this module
//! with `#[path = "../support/mod.rs"] mod support;`.

// Each suite uses only part of it.
#![allow(dead_code, unused_imports)]

pub(crate) mod log;
pub(crate) mod pki;
pub(crate) mod quickstart;
pub(crate) mod redis;
pub(crate) mod relay;
pub(crate) mod router;
pub(crate) mod sf;
pub(crate) mod stub;
