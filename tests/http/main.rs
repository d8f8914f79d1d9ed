//! The HTTP integration through real axum routers (and a tonic server):
//! the attribute and the `[[rules]]` layer, keys from hostile headers,
//! response headers parsed by an RFC 9651 parser, charges, probes, stacked
//! limits and gRPC. (The attribute's compile-time errors: `ui-tests/`.)

#[path = "../support/mod.rs"]
mod support;

mod adoption;
mod charge;
mod client_ip;
mod concurrency;
mod custom_key;
mod generations;
mod grpc;
mod header_key;
mod headers;
mod hooks_and_keys;
mod networks;
mod probe;
mod registry;
mod response_bytes;
mod routes;
mod stacked;
mod wiring;
