//! The attribute's compile-time contract: `pass/*.rs` compile, and each
//! `fail/*.rs` case fails with the `.stderr` beside it (see `README.md`).
//!
//! A package of its own so that trybuild, which builds the cases against the
//! package's whole dependency set, builds only what the cases use.

#[cfg(test)]
mod tests {
    #[test]
    fn ui() {
        let t = trybuild::TestCases::new();
        t.pass("pass/*.rs");
        t.compile_fail("fail/*.rs");
    }
}
