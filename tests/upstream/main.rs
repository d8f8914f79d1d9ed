//! What the runtime fetches: JWT verification, a JWKS URL, the limit
//! service and HTTPS for both, against loopback servers.

#[path = "../support/mod.rs"]
mod support;

mod https;
mod jwks_url;
mod jwt;
mod limit_service;
