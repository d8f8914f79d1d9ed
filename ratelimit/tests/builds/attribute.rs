//! The attribute's compile-time contract: `ui-tests/pass` compile, and each
//! `ui-tests/fail` case fails with the `.stderr` beside it (see
//! `ui-tests/README.md`). Here rather than in the workspace's suites:
//! trybuild builds the cases against the package's dependencies, and this
//! package's are the runtime's own, not the suites' (benchmarks, gRPC
//! servers, parsers), so the cases build in a fraction of the time.
#![cfg(all(not(loom), feature = "axum", feature = "jwt", feature = "service"))]

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("../ui-tests/pass/*.rs");
    t.compile_fail("../ui-tests/fail/*.rs");
}
