//! The crate's wings and layers, checked: every `crate::` path in the
//! library's source (unit-test modules aside) points to its own layer's
//! modules or to a lower layer's, so the map in the crate docs cannot rot.
//! The wings are folders (`engine/`, `shared/`, `fleet/`, `runtime/`), and
//! the code names a module by the folder it is in (`crate::engine::store`,
//! `crate::runtime::config`: never the crate root's re-export, which is the
//! path users write); a new module is placed in [`WINGS`] or this test
//! fails naming it. Inside the layers, no two files import each other,
//! directly or around a circle: a file's imports (grouped ones expanded,
//! `super::` resolved) point one way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A layer: its name and its modules.
type Layer = (&'static str, &'static [&'static str]);

/// The wings, lowest first, each a folder of `src/` holding its layers'
/// modules, lowest layer first. A module may use its own layer's modules
/// only in a pool of leaves (the engine, the shared leaves); elsewhere only
/// lower layers'. The fleet is its own folder and module (`crate::fleet`).
const WINGS: &[(&str, &[Layer])] = &[
    (
        "engine",
        &[(
            "the engine and its leaves",
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
            ],
        )],
    ),
    (
        "shared",
        &[(
            "leaves the fleet and the runtime share",
            &["defaults", "metrics", "net", "setters"],
        )],
    ),
    ("fleet", &[("the fleet limit", &["fleet"])]),
    (
        "runtime",
        &[
            ("verified claims, profiles as data", &["claims", "limits"]),
            ("token verification", &["jwt"]),
            ("keys", &["key"]),
            ("the limit service", &["service"]),
            ("resolution", &["resolve"]),
            ("routes compiled", &["plan"]),
            ("configuration", &["config"]),
            ("integrations", &["axum"]),
        ],
    ),
];

/// The layers of every wing in order: (wing, layer name, modules, a pool).
fn layers() -> Vec<(&'static str, &'static str, &'static [&'static str], bool)> {
    WINGS
        .iter()
        .flat_map(|(wing, layers)| {
            layers
                .iter()
                .map(move |(name, modules)| (*wing, *name, *modules, matches!(*wing, "engine" | "shared")))
        })
        .collect()
}

fn layer_of(module: &str) -> Option<usize> {
    // The crate root re-exports the engine's types (`crate::Quota`), and
    // holds the exported macros' helpers (`crate::__rate_limit_*`).
    if module.starts_with(|c: char| c.is_ascii_uppercase()) || module.starts_with("__") {
        return Some(0);
    }
    layers().iter().position(|(_, _, modules, _)| modules.contains(&module))
}

/// The folder a crate-root module name lives in: `store` is `engine/store`,
/// `fleet` is `fleet` (the wing is the module).
fn folder_of(module: &str) -> Vec<String> {
    match WINGS
        .iter()
        .find(|(_, layers)| layers.iter().any(|(_, modules)| modules.contains(&module)))
    {
        Some((wing, _)) if *wing != module => vec![(*wing).to_owned(), module.to_owned()],
        _ => vec![module.to_owned()],
    }
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

/// The paths `code` names: every `use` (its groups expanded, `use
/// crate::{a, b::{c, d}}` naming `crate::a`, `crate::b::c` and
/// `crate::b::d`) and every `crate::`, `super::` or `self::` path written
/// inline, as segments.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    // `use` statements, groups expanded (`pub use`, `pub(crate) use` too).
    while let Some(at) = find_word(rest, "use") {
        let after = &rest[at + 3..];
        let Some(end) = after.find(';') else { break };
        // `a as b` kept as `a@b` (the name is `a`), then spaces dropped.
        let tree: String = after[..end]
            .replace(" as ", "@")
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        expand(&tree, &mut Vec::new(), &mut out);
        rest = &after[end..];
    }
    // Inline paths (`crate::config::Config::load()`).
    let mut rest = code;
    while let Some(at) = rest.find("::") {
        let head_start = rest[..at]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let head = &rest[head_start..at];
        let before = rest[..head_start].chars().next_back();
        let tail: String = rest[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        rest = &rest[at + 2..];
        // `$crate::` and `::crate` are not this crate's paths.
        if !matches!(head, "crate" | "super" | "self") || before.is_some_and(|c| c == '$' || c == ':') {
            continue;
        }
        let mut path = vec![head.to_owned()];
        path.extend(tail.split("::").filter(|s| !s.is_empty()).map(str::to_owned));
        out.push(path);
    }
    out
}

/// Where `word` starts in `text` as a whole word.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word).map(|i| i + from) {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if boundary(before) && boundary(after) {
            return Some(i);
        }
        from = i + word.len();
    }
    None
}

/// Expands a use tree (whitespace removed) under `prefix` into its paths.
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim_start_matches("::");
    let (head, group) = match tree.find('{') {
        Some(open) if tree.ends_with('}') => (&tree[..open], Some(&tree[open + 1..tree.len() - 1])),
        _ => (tree, None),
    };
    let depth = prefix.len();
    prefix.extend(
        head.split("::")
            .filter(|s| !s.is_empty())
            .map(|s| s.split('@').next().unwrap_or(s).to_owned()),
    );
    match group {
        None => out.push(prefix.clone()),
        Some(items) => {
            for item in split_top(items) {
                expand(item, prefix, out);
            }
        }
    }
    prefix.truncate(depth);
}

/// A group's items, split at its own commas (not at nested groups').
fn split_top(items: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in items.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&items[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&items[start..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// The modules `code` names as `crate::<module>`, a wing's module by its
/// name (`crate::engine::store` names `store`), and whether each was
/// written through its wing's folder.
fn uses(code: &str) -> BTreeSet<(String, bool)> {
    paths(code)
        .into_iter()
        .filter(|p| p.first().is_some_and(|h| h == "crate"))
        .filter_map(|p| match p.get(1).map(String::as_str) {
            Some("engine" | "shared" | "runtime") => p.get(2).map(|m| (m.clone(), true)),
            Some(m) => Some((m.to_owned(), false)),
            None => None,
        })
        .collect()
}

/// A source file's module path (`axum/mod.rs`: `["axum"]`, `lib.rs`: `[]`).
fn module_of(relative: &Path) -> Vec<String> {
    let mut segments: Vec<String> = relative
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .map(|c| c.trim_end_matches(".rs").to_owned())
        .collect();
    if segments.last().is_some_and(|s| s == "mod" || s == "lib") {
        segments.pop();
    }
    segments
}

/// `path` (as [`paths`] reads it) from the crate root, for a file of module
/// `own`: `super::` and `self::` resolved; `None` for another crate's.
fn absolute(own: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut full = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("super") => own[..own.len().saturating_sub(1)].to_vec(),
        Some("self") => own.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    while rest.first().is_some_and(|s| s == "super") {
        full.pop();
        rest = &rest[1..];
    }
    full.extend(rest.iter().cloned());
    Some(full)
}

/// The file-level import graph: each file's module, and the modules (files)
/// its paths reach, each path resolved to the longest module prefix that is
/// a file. A parent and its own child naming each other (re-exports,
/// `super::`) is Rust's shape for a module and its parts: not an edge.
fn import_graph(src: &Path, files: &[PathBuf]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(src).expect("under src")))
        .collect();
    let mut graph = BTreeMap::new();
    for file in files {
        let own = module_of(file.strip_prefix(src).expect("under src"));
        let mut targets = BTreeSet::new();
        for path in paths(&code(file)) {
            // Other heads are extern crates (or a module's own children).
            let Some(full) = absolute(&own, &path) else {
                continue;
            };
            let Some(target) = (0..=full.len())
                .rev()
                .map(|n| full[..n].to_vec())
                .find(|m| modules.contains(m))
            else {
                continue;
            };
            let parent_child = |a: &Vec<String>, b: &Vec<String>| a.len() + 1 == b.len() && b.starts_with(a);
            if target != own && !parent_child(&own, &target) && !parent_child(&target, &own) {
                targets.insert(target);
            }
        }
        graph.insert(own, targets);
    }
    graph
}

/// The strongly connected sets of more than one module (Tarjan's).
fn circles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g Vec<String>, (usize, usize)>,
        stack: Vec<&'g Vec<String>>,
        on_stack: BTreeSet<&'g Vec<String>>,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit<'g>(w: &mut Walk<'g>, v: &'g Vec<String>) {
        let n = w.index.len();
        w.index.insert(v, (n, n));
        w.stack.push(v);
        w.on_stack.insert(v);
        for t in w.graph.get(v).into_iter().flatten() {
            let Some((t, _)) = w.graph.get_key_value(t) else {
                continue;
            };
            if !w.index.contains_key(t) {
                visit(w, t);
                let low = w.index[t].1.min(w.index[v].1);
                w.index.get_mut(v).expect("visited").1 = low;
            } else if w.on_stack.contains(t) {
                let low = w.index[t].0.min(w.index[v].1);
                w.index.get_mut(v).expect("visited").1 = low;
            }
        }
        if w.index[v].0 == w.index[v].1 {
            let mut set = Vec::new();
            while let Some(m) = w.stack.pop() {
                w.on_stack.remove(m);
                set.push(m.clone());
                if m == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                w.found.push(set);
            }
        }
    }
    let mut w = Walk {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !w.index.contains_key(v) {
            visit(&mut w, v);
        }
    }
    w.found
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
        let parts: Vec<&str> = relative
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .map(|c| c.trim_end_matches(".rs"))
            .collect();
        // A wing's folder holds modules; its `mod.rs` only declares them.
        let top = match parts.as_slice() {
            ["lib" | "architecture"] | ["engine" | "shared" | "runtime", "mod"] => continue,
            ["engine" | "shared" | "runtime", module, ..] => *module,
            [module, ..] => *module,
            [] => continue,
        };
        let layers = layers();
        let Some(own) = layer_of(top) else {
            problems.push(format!(
                "{}: module `{top}` is in no layer of WINGS",
                relative.display()
            ));
            continue;
        };
        if folder_of(top).first().map(String::as_str) != parts.first().copied() {
            problems.push(format!(
                "{}: module `{top}` is in the folder of another wing than WINGS says",
                relative.display()
            ));
        }
        // `super::` and `self::` paths too, resolved from the file's module
        // (a wing's folder, then the module: `runtime/config` is `config`).
        let own_module = module_of(relative);
        let relative_uses = paths(&code(file))
            .into_iter()
            .filter(|p| p.first().is_some_and(|h| h == "super" || h == "self"))
            .filter_map(|p| absolute(&own_module, &p))
            .filter_map(|full| match full.first().map(String::as_str) {
                Some("engine" | "shared" | "runtime") => full.get(1).map(|m| (m.clone(), None)),
                Some(m) => Some((m.to_owned(), None)),
                None => None,
            })
            // (A glob of the wing's own modules names none in particular.)
            .filter(|(m, _)| m != "*");
        let crate_uses = uses(&code(file)).into_iter().map(|(m, winged)| (m, Some(winged)));
        for (used, through_wing) in crate_uses.chain(relative_uses).collect::<BTreeSet<_>>() {
            if used == top {
                continue;
            }
            // One path per module inside the crate: its wing's folder, the
            // way the files lie (`crate::runtime::config`, never the
            // public re-export `crate::config`).
            let winged = folder_of(&used).len() == 2;
            if let Some(through_wing) = through_wing.filter(|&t| t != winged) {
                problems.push(format!(
                    "{}: names `{used}` as `crate::{}{used}`; write `crate::{}`",
                    relative.display(),
                    if through_wing { "<wing>::" } else { "" },
                    folder_of(&used).join("::"),
                ));
            }
            match layer_of(&used) {
                None => problems.push(format!(
                    "{}: uses `crate::{used}`, a module in no layer of WINGS",
                    relative.display()
                )),
                Some(layer) if layer > own || (layer == own && !layers[own].3) => problems.push(format!(
                    "{}: `{top}` ({}: {}) uses `crate::{used}` ({}: {}), a layer above or beside it",
                    relative.display(),
                    layers[own].0,
                    layers[own].1,
                    layers[layer].0,
                    layers[layer].1,
                )),
                Some(_) => {}
            }
        }
    }
    assert!(problems.is_empty(), "the layers:\n  {}", problems.join("\n  "));
}

#[test]
fn the_reader_sees_paths_as_written() {
    let code =
        "use crate::runtime::config::Config;\nlet q = crate::Quota::per_second(1);\n$crate::shared::setters::with!(x);";
    let found: Vec<_> = uses(code).into_iter().collect();
    assert_eq!(found, [("Quota".to_owned(), false), ("config".to_owned(), true)]);
}

#[test]
fn no_file_imports_itself_around_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let found = circles(&import_graph(&src, &files));
    let named: Vec<String> = found
        .iter()
        .map(|set| {
            set.iter()
                .map(|m| if m.is_empty() { "lib".to_owned() } else { m.join("::") })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    assert!(
        named.is_empty(),
        "import circles between files:\n  {}",
        named.join("\n  ")
    );
}

#[test]
fn grouped_imports_and_super_paths_are_read() {
    let code = "use crate::{config::{Config, ConfigError}, key::KeySource as K};\npub(crate) use super::runtime::Pending;\nfn f() { super::super::plan::compile(); self::x::y(); }";
    let found = paths(code);
    let has = |p: &[&str]| found.iter().any(|f| f == p);
    assert!(has(&["crate", "config", "Config"]), "{found:?}");
    assert!(has(&["crate", "config", "ConfigError"]), "{found:?}");
    assert!(has(&["crate", "key", "KeySource"]), "{found:?}");
    assert!(has(&["super", "runtime", "Pending"]), "{found:?}");
    assert!(has(&["super", "super", "plan", "compile"]), "{found:?}");
    assert!(has(&["self", "x", "y"]), "{found:?}");
    // A circle of two files is found; a parent and its child are not one.
    let module = |s: &str| {
        s.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut graph = BTreeMap::new();
    graph.insert(module("a/x"), BTreeSet::from([module("a/y")]));
    graph.insert(module("a/y"), BTreeSet::from([module("a/x")]));
    graph.insert(module("b"), BTreeSet::from([module("a/x")]));
    assert_eq!(circles(&graph), vec![vec![module("a/x"), module("a/y")]]);
}
