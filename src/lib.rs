//! Test, benchmark and example host for the `ratelimit` workspace. Not published.
