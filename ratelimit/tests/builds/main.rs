//! The crate in the builds other than the suites' (`tests/` at the
//! workspace root), one module each, compiled to nothing in the others:
//!
//! * `loom_store`, `loom_concurrency`: the store's cell protocol and the
//!   concurrency limiter's permits under loom,
//!   `RUSTFLAGS="--cfg loom" cargo test -p ratelimit --test builds --release`;
//! * `missing_features`: `axum` without `jwt`, `service` or `redis`,
//!   `cargo test -p ratelimit --no-default-features --features axum --test builds`.
//!
//! `scripts/test` runs both.

mod loom_concurrency;
mod loom_store;
mod missing_features;
