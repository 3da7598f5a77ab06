//! The module import graph of `bosun` (`src/`, library and binary), checked
//! on its sources, and of the workspace's other crates (`contracts/`,
//! `sagas/`, `consumers/`) for cycles:
//!
//! - the top-level modules of the library are layers, declared once in
//!   [`BOSUN_LAYERS`] (lowest first); code in one layer uses only its own
//!   layer and the layers below it: no arrow up;
//! - no two sibling modules use each other, directly or round a loop: not
//!   two top-level modules (`front` and `host`), nor two modules inside one
//!   (`front::gateway` and `front::ops`).
//!
//! A use is any path in the code that names a module of the same crate:
//! `use` items (grouped, renamed, `self`, globs), paths in the code
//! (`crate::host::with_attempt(..)`, `super::ops::Readiness`,
//! `gateway::ErrorBody` from the parent), paths inside macro calls and
//! `macro_rules!` bodies, and paths in attribute strings
//! (`#[serde(with = "crate::x")]`). A path to a name that a module imports
//! (a `pub use` re-export, or a private `use` a child reaches through
//! `super::`) is followed to where the name comes from. Comments and doc
//! links are not uses. Test code (`#[cfg(test)]` items and the files they
//! declare) is left out: a unit test may assemble its layer with real parts
//! from above it (a host test with a SQLite store).
//!
//! Files are found as rustc finds them: from `lib.rs` or `main.rs` through
//! every `mod` declaration (`#[path]` included), so a file no module
//! declares is not read.
//!
//! Run it alone with `cargo test --test layers`.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The checker, in files of its own beside this one.
#[path = "layers/checks.rs"]
mod checks;
#[path = "layers/graph.rs"]
mod graph;
#[path = "layers/made_up.rs"]
mod made_up;

use std::path::{Path, PathBuf};

use checks::{arrows_up, sibling_cycles, undeclared};
use graph::Graph;

/// The layers of the `bosun` library (`src/lib.rs`), lowest first: each
/// top-level module may use the ones before it and never one after it.
/// `docs/ARCHITECTURE.md` ("Layers") says what each holds.
const BOSUN_LAYERS: &[&str] = &[
    "ports",    // the traits every backend implements, and their behaviour suites
    "backends", // SQLite, PostgreSQL, Service Bus, memory
    "runtime",  // settings (they hold the Service Bus endpoint), the registry, metrics, telemetry
    "host",     // receive, decide, execute
    "operator", // what operators and agents do
    "wiring",   // settings to backends: what the front door and the tools open theirs with
    "front",    // the HTTP API, MCP, the gateway, the ops port
    "tools",    // demo, bench (its latency row is a client of the front door), infra
];

/// The layers of the binary (`src/main.rs`): the command line, above the
/// whole library.
const BINARY_LAYERS: &[&str] = &["cli"];

/// Where this package is.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Reads a crate from the disk, naming its files relative to this package.
fn read_crate(crate_root: &str) -> Graph {
    let read = |path: &Path| std::fs::read_to_string(root().join(path)).ok();
    Graph::load(Path::new(crate_root), &read).unwrap_or_else(|err| panic!("cannot read {crate_root}: {err}"))
}

#[test]
fn the_library_uses_only_the_layers_below() {
    let graph = read_crate("src/lib.rs");
    let mut problems = undeclared(&graph, BOSUN_LAYERS);
    problems.extend(arrows_up(&graph, BOSUN_LAYERS));
    assert!(
        problems.is_empty(),
        "src/: a layer uses one above it (layers, lowest first: {}).\n\
         Move what the lower layer needs down to it (or to a layer below both), \
         and let the higher one use it from there.\n{}",
        BOSUN_LAYERS.join(" < "),
        problems.join("\n")
    );
}

#[test]
fn the_binary_uses_only_the_layers_below() {
    let graph = read_crate("src/main.rs");
    let mut problems = undeclared(&graph, BINARY_LAYERS);
    problems.extend(arrows_up(&graph, BINARY_LAYERS));
    assert!(problems.is_empty(), "src/main.rs:\n{}", problems.join("\n"));
}

#[test]
fn no_sibling_modules_use_each_other() {
    let mut problems = Vec::new();
    for crate_root in [
        "src/lib.rs",
        "src/main.rs",
        "contracts/src/lib.rs",
        "sagas/src/lib.rs",
        "consumers/src/lib.rs",
    ] {
        let graph = read_crate(crate_root);
        for depth in [1, 2] {
            problems.extend(
                sibling_cycles(&graph, depth)
                    .into_iter()
                    .map(|cycle| format!("{crate_root}: {cycle}")),
            );
        }
    }
    assert!(
        problems.is_empty(),
        "modules that use each other: move what both need into the lower one, \
         or into a small module both use.\n{}",
        problems.join("\n")
    );
}

/// The check reads the real crate: a loader that found nothing would pass
/// every check above.
#[test]
fn the_real_graph_is_read_whole() {
    let graph = read_crate("src/lib.rs");
    for module in [
        "front::gateway",
        "front::api::origin",
        "host::decision",
        "backends::servicebus::amqp",
    ] {
        assert!(graph.module(module).is_some(), "{module} not found");
    }
    let edges = graph.module_edges();
    assert!(
        edges.contains(&("front::gateway".to_owned(), "operator".to_owned())),
        "{edges:?}"
    );
    assert!(graph.modules.len() > 100, "{} modules", graph.modules.len());
    let contracts = read_crate("contracts/src/lib.rs");
    assert!(contracts.module("messages").is_some());
}

/// The most lines a non-test source file has (its inline `#[cfg(test)] mod
/// tests` left out) unless its module documentation says why it is longer
/// (a line with "over 800 lines on purpose").
const MOST_LINES: usize = 800;

/// No source file of the workspace is over [`MOST_LINES`] without saying
/// why at its top.
#[test]
fn no_source_file_is_over_800_lines_without_a_reason() {
    let mut long = Vec::new();
    let mut stack: Vec<PathBuf> = ["src", "contracts/src", "consumers/src", "sagas/src", "testing"]
        .iter()
        .map(|dir| root().join(dir))
        .collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" && name != "target" {
                    stack.push(path);
                }
                continue;
            }
            if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let code = lines
                .windows(2)
                .position(|pair| pair[0].starts_with("#[cfg(test)]") && pair[1].starts_with("mod tests {"))
                .unwrap_or(lines.len());
            let reason = lines
                .iter()
                .take_while(|line| line.starts_with("//!"))
                .any(|line| line.to_lowercase().contains("800 lines on purpose"));
            if code > MOST_LINES && !reason {
                long.push(format!(
                    "{} ({code} lines)",
                    path.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    long.sort();
    assert!(
        long.is_empty(),
        "over {MOST_LINES} lines without a reason at the top (split it, or say why in its module documentation \
         with \"over 800 lines on purpose\"):\n  {}",
        long.join("\n  ")
    );
}
