//! Test, benchmark and example host for the `ratelimit` workspace. Not published.
//!
//! The README is included below so that its examples run as doc tests.
#![doc = include_str!("../README.md")]
