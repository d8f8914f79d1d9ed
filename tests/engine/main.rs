//! The engine through its public API: the GCRA bound as properties over
//! every interval, threads racing on one key and on many, the memory bound
//! under attacker-chosen keys, and all-or-nothing stacked checks against a
//! sequential model.

mod all_or_nothing;
mod concurrency;
mod memory_bound;
mod properties;
