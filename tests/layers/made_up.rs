//! The checker on made-up crates: it must see every kind of use, and it
//! must be able to fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::checks::{arrows_up, sibling_cycles, undeclared};
use crate::graph::Graph;

/// A crate made of `files` (path, text), rooted at `src/lib.rs`.
fn made_up(files: &[(&str, &str)]) -> Graph {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(path, text)| (PathBuf::from(path), (*text).to_owned()))
        .collect();
    let read = |path: &Path| files.get(path).cloned();
    Graph::load(Path::new("src/lib.rs"), &read).expect("the made-up crate reads")
}

fn edge(from: &str, to: &str) -> (String, String) {
    (from.to_owned(), to.to_owned())
}

#[test]
fn the_checker_finds_an_arrow_up_and_cycles() {
    let graph = made_up(&[
        ("src/lib.rs", "pub mod low;\npub mod high;\n"),
        ("src/low.rs", "pub fn f() {\n    crate::high::g();\n}\n"),
        ("src/high/mod.rs", "mod a;\nmod b;\nuse crate::low::f;\npub fn g() {}\n"),
        ("src/high/a.rs", "use super::b::B;\npub struct A;\n"),
        ("src/high/b.rs", "pub struct B(crate::high::a::A);\n"),
    ]);

    let up = arrows_up(&graph, &["low", "high"]);
    assert_eq!(up, ["src/low.rs:2: low uses high (`crate::high::g`), a layer above it"]);
    let up = arrows_up(&graph, &["high", "low"]);
    assert_eq!(
        up,
        ["src/high/mod.rs:3: high uses low (`crate::low::f`), a layer above it"]
    );

    let top = sibling_cycles(&graph, 1);
    assert_eq!(top.len(), 1, "{top:?}");
    assert!(top[0].starts_with("high, low use each other:"), "{}", top[0]);
    assert!(top[0].contains("src/low.rs:2: `crate::high::g`"), "{}", top[0]);
    assert!(top[0].contains("src/high/mod.rs:3: `crate::low::f`"), "{}", top[0]);

    let inside = sibling_cycles(&graph, 2);
    assert_eq!(inside.len(), 1, "{inside:?}");
    assert!(
        inside[0].contains("high::a -> high::b\n    src/high/a.rs:1: `super::b::B`"),
        "{}",
        inside[0]
    );
    assert!(
        inside[0].contains("high::b -> high::a\n    src/high/b.rs:1: `crate::high::a::A`"),
        "{}",
        inside[0]
    );

    assert_eq!(undeclared(&graph, &["low", "high"]), Vec::<String>::new());
    assert_eq!(undeclared(&graph, &["low", "middle"]).len(), 2);
}

#[test]
fn the_checker_passes_a_crate_that_points_down() {
    let graph = made_up(&[
        ("src/lib.rs", "pub mod low;\npub mod high;\n"),
        ("src/low.rs", "pub fn f() {}\n"),
        ("src/high/mod.rs", "mod a;\nmod b;\npub use a::A;\n"),
        (
            "src/high/a.rs",
            "pub struct A(crate::high::b::B);\npub fn g() { crate::low::f() }\n",
        ),
        ("src/high/b.rs", "pub struct B;\n"),
    ]);
    assert!(arrows_up(&graph, &["low", "high"]).is_empty());
    assert!(sibling_cycles(&graph, 1).is_empty());
    assert!(sibling_cycles(&graph, 2).is_empty());
}

#[test]
fn the_checker_reads_every_kind_of_path() {
    let graph = made_up(&[
        (
            "src/lib.rs",
            "pub mod target;\npub mod grouped;\npub mod inline;\npub mod macros;\npub mod attrs;\n\
             pub mod reexported;\npub mod relative;\npub mod tested;\npub mod quiet;\n#[path = \"odd/place.rs\"]\npub mod placed;\n",
        ),
        (
            "src/target/mod.rs",
            "pub mod deep;\npub mod other;\npub use deep::Thing;\npub struct Here;\n",
        ),
        ("src/target/deep.rs", "pub struct Thing;\n"),
        ("src/target/other.rs", "pub mod leaf { pub struct Leaf; }\n"),
        // A grouped `use` over several lines, with `self` and a rename.
        (
            "src/grouped.rs",
            "use crate::{\n    target::{self, deep::Thing as T},\n    target::other::leaf::Leaf,\n};\n",
        ),
        // A path in an expression, and in a type inside generics.
        (
            "src/inline.rs",
            "fn f() -> Option<crate::target::other::leaf::Leaf> {\n    None\n}\n",
        ),
        // In a macro call and in a `macro_rules!` body.
        (
            "src/macros.rs",
            "fn f() {\n    vec![crate::target::Here];\n}\nmacro_rules! m {\n    () => { $crate::target::deep::Thing };\n}\n",
        ),
        // In an attribute's string, not in a doc comment.
        (
            "src/attrs.rs",
            "/// See [`crate::target::other`].\n#[serde(with = \"crate::target::deep\")]\nstruct S;\n",
        ),
        // A re-export, followed to where the item is.
        ("src/reexported.rs", "use crate::target::Thing;\n"),
        // `super::`, `self::` and a child named from its parent.
        (
            "src/relative/mod.rs",
            "mod child;\nfn f() {\n    let _ = child::C;\n    let _ = self::child::C;\n}\n",
        ),
        (
            "src/relative/child.rs",
            "pub struct C;\nfn g() {\n    let _ = super::super::target::Here;\n}\n",
        ),
        // Test code is left out, wherever the `#[cfg(test)]` is.
        (
            "src/tested.rs",
            "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nuse crate::macros::M;\n\
             fn f() {\n    #[cfg(test)]\n    {\n        crate::attrs::g();\n    }\n}\n\
             #[cfg(all(test, unix))]\nfn h() {\n    crate::inline::f();\n}\n",
        ),
        ("src/tested/tests.rs", "use crate::grouped::G;\n"),
        // Comments, strings, other crates and local names are no uses.
        (
            "src/quiet.rs",
            "// crate::target::Here\nfn f() {\n    let _ = \"crate::target::Here\";\n    let _ = std::mem::size_of::<u8>();\n    \
             let _ = ::core::mem::drop(1);\n    let _ = String::new();\n}\n",
        ),
        ("src/odd/place.rs", "use crate::target::Here;\n"),
    ]);
    let edges = graph.module_edges();
    let from = |module: &str| -> BTreeSet<String> {
        edges
            .iter()
            .filter(|(from, _)| from == module)
            .map(|(_, to)| to.clone())
            .collect()
    };
    let set = |modules: &[&str]| -> BTreeSet<String> { modules.iter().map(|module| (*module).to_owned()).collect() };

    assert_eq!(from("grouped"), set(&["target", "target::deep", "target::other::leaf"]));
    assert_eq!(from("inline"), set(&["target::other::leaf"]));
    assert_eq!(from("macros"), set(&["target", "target::deep"]));
    assert_eq!(from("attrs"), set(&["target::deep"]));
    assert_eq!(from("reexported"), set(&["target::deep"]));
    assert_eq!(from("relative"), set(&["relative::child"]));
    assert_eq!(from("relative::child"), set(&["target"]));
    assert_eq!(from("tested"), set(&[]));
    assert_eq!(from("tested::tests"), set(&[]));
    assert_eq!(from("quiet"), set(&[]));
    assert_eq!(from("placed"), set(&["target"]));
    assert!(edges.contains(&edge("target", "target::deep")));

    // Each use is found on its own line.
    let lines: BTreeSet<(String, usize)> = graph
        .edges()
        .into_iter()
        .filter(|edge| graph.modules[edge.from].path == ["grouped"])
        .map(|edge| (edge.at.segments.join("::"), edge.at.line))
        .collect();
    let expected: BTreeSet<(String, usize)> = [
        ("crate::target".to_owned(), 2),
        ("crate::target::deep::Thing".to_owned(), 2),
        ("crate::target::other::leaf::Leaf".to_owned(), 3),
    ]
    .into_iter()
    .collect();
    assert_eq!(lines, expected);

    // The test code is read, only left out of the checks.
    assert!(
        graph
            .mentions
            .iter()
            .any(|mention| mention.test && mention.file == "src/tested/tests.rs")
    );
}
