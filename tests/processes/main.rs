//! The examples as real processes over real sockets: the fleet limit over
//! every true sliding window, one network's flood, the operator's view
//! (metrics, reload, signals), requests in flight per client and the
//! service example.

#[path = "../support/mod.rs"]
mod support;

mod adopt_example;
mod busy_fleet;
mod commands;
mod concurrency;
mod fleet;
mod grpc_example;
mod networks;
mod operations;
mod outage;
mod shared_cells;
mod wiring;
