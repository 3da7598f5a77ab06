//! The crate's layering, checked on its sources: consumers are peers on
//! the delivery layer.
//!
//! - no consumer folder (`src/<consumer>/`, tests included) names another
//!   consumer's module (`crate::commit::` inside `src/gitops_sync/`);
//! - nothing under `src/delivery/` names any consumer's module: the layer
//!   the consumers stand on never depends on one of them.
//!
//! A consumer is a folder of `src/` other than `delivery`. A mention is a
//! module path (`crate::<consumer>`, `bosun_consumers::<consumer>`, or
//! `super::super::<consumer>` from inside a consumer folder), in code,
//! tests, comments and doc links alike.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The folder of the shared building blocks.
const DELIVERY: &str = "delivery";

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The consumer folders of `src/`.
fn consumers() -> BTreeSet<String> {
    std::fs::read_dir(src())
        .expect("read src/")
        .map(|entry| entry.expect("an entry of src/"))
        .filter(|entry| entry.file_type().expect("a file type").is_dir())
        .map(|entry| entry.file_name().into_string().expect("a UTF-8 folder name"))
        .filter(|name| name != DELIVERY)
        .collect()
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("read a source folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The paths in `text` that name module `module`: `crate::<module>`,
/// `bosun_consumers::<module>` and, with `relative`,
/// `super::super::<module>`, each followed by something that ends a path
/// segment; as `(line number, line)`.
fn mentions(text: &str, module: &str, relative: bool) -> Vec<(usize, String)> {
    let mut prefixes = vec![format!("crate::{module}"), format!("bosun_consumers::{module}")];
    if relative {
        prefixes.push(format!("super::super::{module}"));
    }
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let hit = prefixes.iter().any(|prefix| {
            line.match_indices(prefix.as_str()).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + prefix.len()..].chars().next();
                let starts_a_path = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
                let ends_the_segment = !after.is_some_and(|c| c.is_alphanumeric() || c == '_');
                starts_a_path && ends_the_segment
            })
        });
        if hit {
            found.push((number + 1, line.trim().to_owned()));
        }
    }
    found
}

fn relative(path: &Path) -> String {
    path.strip_prefix(src())
        .map(|path| format!("src/{}", path.display()))
        .unwrap_or_else(|_| path.display().to_string())
}

#[test]
fn the_check_sees_what_it_must() {
    assert_eq!(
        mentions("use crate::commit::{CommitSpec, FileWrite};", "commit", false).len(),
        1
    );
    assert_eq!(mentions("/// See [`crate::commit`].", "commit", false).len(), 1);
    assert_eq!(mentions("x = bosun_consumers::commit::NAME;", "commit", false).len(), 1);
    assert_eq!(mentions("use super::super::commit::local;", "commit", true).len(), 1);
    assert!(mentions("use crate::delivery::git::commit::CommitSpec;", "commit", false).is_empty());
    assert!(mentions("use crate::committed::X;", "commit", false).is_empty());
    assert!(mentions("use super::super::commit::local;", "commit", false).is_empty());
    assert!(mentions("// the commit consumer's port", "commit", true).is_empty());
}

#[test]
fn there_are_consumers_and_a_delivery_layer() {
    let consumers = consumers();
    for expected in [
        "commit",
        "gitops_sync",
        "pipeline_generation",
        "pull_request",
        "container_build",
    ] {
        assert!(consumers.contains(expected), "{expected} not found in {consumers:?}");
    }
    assert!(consumers.len() >= 11, "{consumers:?}");
    assert!(src().join(DELIVERY).join("mod.rs").is_file());
}

#[test]
fn no_consumer_names_another_consumer() {
    let consumers = consumers();
    let mut violations = Vec::new();
    for consumer in &consumers {
        for file in rust_files(&src().join(consumer)) {
            let text = std::fs::read_to_string(&file).expect("read a source file");
            for other in consumers.iter().filter(|other| *other != consumer) {
                for (line, excerpt) in mentions(&text, other, true) {
                    violations.push(format!("{}:{line}: names `{other}`: {excerpt}", relative(&file)));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "consumers are peers: what two of them share belongs in src/delivery/\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_delivery_layer_names_no_consumer() {
    let consumers = consumers();
    let mut violations = Vec::new();
    for file in rust_files(&src().join(DELIVERY)) {
        let text = std::fs::read_to_string(&file).expect("read a source file");
        for consumer in &consumers {
            for (line, excerpt) in mentions(&text, consumer, false) {
                violations.push(format!("{}:{line}: names `{consumer}`: {excerpt}", relative(&file)));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "src/delivery/ is below every consumer and depends on none of them\n{}",
        violations.join("\n")
    );
}
