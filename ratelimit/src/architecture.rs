//! The crate's layers, checked: every `crate::` path in the library's
//! source (unit-test modules aside) points to its own layer's modules or to
//! a lower layer's, so the map in the crate docs cannot rot. A new module is
//! placed in [`LAYERS`] or this test fails naming it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The top-level modules, lowest layer first. A module may use its own
/// layer's modules only where that layer is the engine (the leaf pool);
/// elsewhere only lower layers'.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "engine and leaf types",
        &[
            "clock",
            "concurrency",
            "decision",
            "errors",
            "gcra",
            "limiter",
            "quota",
            "store",
            "sync",
            "units",
            "window",
            "defaults",
            "setters",
            "metrics",
            "net",
            "claims",
        ],
    ),
    ("profiles as data, the fleet gate", &["limits", "global"]),
    ("token verification", &["jwt"]),
    ("keys", &["key"]),
    ("the limit service", &["service"]),
    ("resolution", &["resolve"]),
    ("routes compiled", &["plan"]),
    ("configuration", &["config"]),
    ("integrations", &["axum"]),
];

fn layer_of(module: &str) -> Option<usize> {
    // The crate root re-exports the engine's types (`crate::Quota`).
    if module.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Some(0);
    }
    LAYERS.iter().position(|(_, modules)| modules.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file: its unit-test module (from the first top-level
/// `#[cfg(test)]`) and comments left out; `tests.rs` files are all tests.
fn code(path: &Path) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).expect("a source file");
    let end = text.find("\n#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules `code` names as `crate::<module>`.
fn uses(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        // `$crate::` and `::crate` are not this crate's paths.
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn layers_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let top = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|c| c.trim_end_matches(".rs"))
            .expect("a file name");
        if top == "lib" || top == "architecture" {
            continue;
        }
        let Some(own) = layer_of(top) else {
            problems.push(format!(
                "{}: module `{top}` is in no layer of LAYERS",
                relative.display()
            ));
            continue;
        };
        for used in uses(&code(file)) {
            if used == top {
                continue;
            }
            match layer_of(&used) {
                None => problems.push(format!(
                    "{}: uses `crate::{used}`, a module in no layer of LAYERS",
                    relative.display()
                )),
                Some(layer) if layer > own || (layer == own && own != 0) => problems.push(format!(
                    "{}: `{top}` ({}) uses `crate::{used}` ({}), a layer above or beside it",
                    relative.display(),
                    LAYERS[own].0,
                    LAYERS[layer].0,
                )),
                Some(_) => {}
            }
        }
    }
    assert!(problems.is_empty(), "the layers:\n  {}", problems.join("\n  "));
}

#[test]
fn the_reader_sees_paths_as_written() {
    let code = "use crate::config::Config;\nlet q = crate::Quota::per_second(1);\n$crate::setters::with!(x);";
    let found: Vec<_> = uses(code).into_iter().collect();
    assert_eq!(found, ["Quota", "config"]);
}
