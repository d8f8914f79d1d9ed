//! The attribute's compile-time contract: `ui-tests/pass` compile, and each
//! `ui-tests/fail` case fails with the `.stderr` beside it (see
//! `ui-tests/README.md`).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui-tests/pass/*.rs");
    t.compile_fail("ui-tests/fail/*.rs");
}
