//! The fleet gate against real `redis-server` processes (and a cluster):
//! the gate under a manual clock, its faults, long windows, and TLS.

#[path = "../support/mod.rs"]
mod support;

mod gate;
mod long_windows;
mod redis_tls;
