//! The quickstart demo as a real process: where its binary is, and a check
//! that it was built from the sources under test.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The address the quickstart listens on, from its startup line
/// (`quickstart: serving on http://ADDR (config ...)`). The tests start it
/// on port 0 and read the port here: a port picked free beforehand can be
/// taken by a parallel test before the process binds it.
pub(crate) fn serving_addr(line: &str) -> Option<SocketAddr> {
    line.split("serving on http://")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `target/<profile>/examples/quickstart`, next to this test's `deps` dir.
pub(crate) fn quickstart_binary() -> PathBuf {
    example_binary("quickstart")
}

/// `target/<profile>/examples/<name>`, checked to be newer than its sources.
pub(crate) fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the test binary");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps/");
    let bin = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: this test runs the {name} example as real processes. Build it with the \
         same profile first: `cargo build --example {name}` (a plain `cargo test` builds it too; \
         `cargo test --test <name>` alone does not)",
        bin.display()
    );
    check_fresh(&bin, name);
    bin
}

/// Fails when a source the binary was built from is newer than the binary:
/// `cargo test --test <name>` rebuilds the test but not the
/// example, and would otherwise measure the previous code. The sources are
/// the ones cargo lists in the dep-info file next to the binary.
fn check_fresh(bin: &Path, name: &str) {
    let Ok(dep_info) = std::fs::read_to_string(bin.with_extension("d")) else {
        return;
    };
    let built = std::fs::metadata(bin)
        .and_then(|m| m.modified())
        .expect("the quickstart binary's mtime");
    let line = dep_info.lines().next().unwrap_or_default();
    let deps = line.split_once(": ").map(|(_, d)| d).unwrap_or_default();
    // Paths are separated by spaces; a space inside a path is `\ `.
    let newer: Vec<String> = deps
        .replace("\\ ", "\u{0}")
        .split(' ')
        .filter(|p| !p.is_empty())
        .map(|p| p.replace('\u{0}', " "))
        .filter(|p| std::fs::metadata(p).and_then(|m| m.modified()).is_ok_and(|m| m > built))
        .collect();
    assert!(
        newer.is_empty(),
        "{} is older than its sources ({}{}): rebuild it with `cargo build --example {name}` \
         (`cargo test --test <name>` does not rebuild examples)",
        bin.display(),
        newer.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
        if newer.len() > 3 { ", ..." } else { "" }
    );
}
