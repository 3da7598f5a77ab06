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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use syn::visit::{self, Visit};

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

// ---------------------------------------------------------------------------
// The checks.

/// Every top-level module in a layer, every layer a module.
fn undeclared(graph: &Graph, layers: &[&str]) -> Vec<String> {
    let tops: BTreeSet<&str> = graph.modules[Graph::ROOT].children.keys().map(String::as_str).collect();
    let mut problems = Vec::new();
    for top in &tops {
        if !layers.contains(top) {
            problems.push(format!(
                "module `{top}` is in no layer: add it to the layers in tests/layers.rs"
            ));
        }
    }
    for layer in layers {
        if !tops.contains(layer) {
            problems.push(format!(
                "layer `{layer}` is no module: remove it from the layers in tests/layers.rs"
            ));
        }
    }
    problems
}

/// Each use of a top-level module by one below it in `layers`, as
/// `file:line: ...`.
fn arrows_up(graph: &Graph, layers: &[&str]) -> Vec<String> {
    let rank = |module: ModuleId| {
        let top = graph.modules[module].path.first()?;
        layers.iter().position(|layer| layer == top)
    };
    let mut uses: BTreeMap<(ModuleId, ModuleId), Vec<Edge>> = BTreeMap::new();
    for edge in graph.edges() {
        if let (Some(from), Some(to)) = (rank(edge.from), rank(edge.to))
            && to > from
        {
            uses.entry((edge.from, edge.to)).or_default().push(edge);
        }
    }
    let mut problems = Vec::new();
    for ((from, to), edges) in &uses {
        let (from, to) = (&graph.modules[*from].path[0], &graph.modules[*to].path[0]);
        for mention in shown(edges) {
            problems.push(format!(
                "{}:{}: {from} uses {to} (`{}`), a layer above it",
                mention.file,
                mention.line,
                mention.segments.join("::")
            ));
        }
    }
    problems
}

/// The sibling modules at `depth` (1: the top-level modules, 2: the modules
/// inside one) that use each other, directly or round a loop: one report
/// per loop, naming every use in it with its file and line.
fn sibling_cycles(graph: &Graph, depth: usize) -> Vec<String> {
    // (parent, from, to) -> the uses.
    let mut uses: BTreeMap<(String, String, String), Vec<Edge>> = BTreeMap::new();
    for edge in graph.edges() {
        let (from, to) = (&graph.modules[edge.from].path, &graph.modules[edge.to].path);
        if from.len() < depth || to.len() < depth || from[..depth - 1] != to[..depth - 1] {
            continue;
        }
        if from[depth - 1] == to[depth - 1] {
            continue;
        }
        let key = (
            from[..depth - 1].join("::"),
            from[..depth].join("::"),
            to[..depth].join("::"),
        );
        uses.entry(key).or_default().push(edge);
    }
    let mut parents: BTreeMap<&str, BTreeMap<&str, BTreeSet<&str>>> = BTreeMap::new();
    for (parent, from, to) in uses.keys() {
        parents.entry(parent).or_default().entry(from).or_default().insert(to);
    }
    let mut reports = Vec::new();
    for (parent, arrows) in &parents {
        for component in strongly_connected(arrows) {
            let mut report = format!(
                "{} use each other:",
                component.iter().cloned().collect::<Vec<_>>().join(", ")
            );
            for from in &component {
                for to in arrows
                    .get(from)
                    .into_iter()
                    .flatten()
                    .filter(|to| component.contains(*to))
                {
                    report.push_str(&format!("\n  {from} -> {to}"));
                    let key = ((*parent).to_owned(), (*from).to_owned(), (*to).to_owned());
                    for mention in shown(&uses[&key]) {
                        report.push_str(&format!(
                            "\n    {}:{}: `{}`",
                            mention.file,
                            mention.line,
                            mention.segments.join("::")
                        ));
                    }
                }
            }
            reports.push(report);
        }
    }
    reports
}

/// The groups of two or more nodes that all reach each other.
fn strongly_connected<'a>(arrows: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<BTreeSet<&'a str>> {
    let reach = |start: &'a str| {
        let mut seen = BTreeSet::new();
        let mut next = vec![start];
        while let Some(node) = next.pop() {
            for &to in arrows.get(node).into_iter().flatten() {
                if seen.insert(to) {
                    next.push(to);
                }
            }
        }
        seen
    };
    let nodes: BTreeSet<&str> = arrows
        .iter()
        .flat_map(|(from, to)| to.iter().copied().chain([*from]))
        .collect();
    let reached: BTreeMap<&str, BTreeSet<&str>> = nodes.iter().map(|node| (*node, reach(node))).collect();
    let mut components: Vec<BTreeSet<&str>> = Vec::new();
    for node in &nodes {
        if components.iter().any(|component| component.contains(node)) {
            continue;
        }
        let component: BTreeSet<&str> = nodes
            .iter()
            .copied()
            .filter(|other| other == node || (reached[node].contains(other) && reached[other].contains(node)))
            .collect();
        if component.len() > 1 {
            components.push(component);
        }
    }
    components
}

// ---------------------------------------------------------------------------
// The graph.

type ModuleId = usize;

/// A module of the crate: a file or an inline `mod x { .. }`.
#[derive(Debug)]
struct Module {
    /// Its path from the crate root (empty for the root).
    path: Vec<String>,
    parent: Option<ModuleId>,
    children: BTreeMap<String, ModuleId>,
    /// The names its own `use` items bring in (globs aside), each with the
    /// path it was imported from.
    imports: BTreeMap<String, Vec<String>>,
}

/// A path written in the code.
#[derive(Debug, Clone)]
struct Mention {
    /// The module it is written in.
    module: ModuleId,
    segments: Vec<String>,
    file: String,
    line: usize,
    /// Written in test code.
    test: bool,
}

/// One use of a module by another, outside test code.
#[derive(Debug)]
struct Edge {
    from: ModuleId,
    to: ModuleId,
    at: Mention,
    /// Written out (`crate::a::B`, `super::a::B`, a `use`), not through a
    /// name imported before (`B::new` after `use crate::a::B`).
    direct: bool,
}

/// The mentions to show for the uses of one module by another: those
/// written out, or, if there are none, those through an imported name.
fn shown(uses: &[Edge]) -> impl Iterator<Item = &Mention> {
    let direct = uses.iter().any(|edge| edge.direct);
    uses.iter()
        .filter(move |edge| edge.direct || !direct)
        .map(|edge| &edge.at)
}

/// The modules of a crate and every path written in them.
#[derive(Debug)]
struct Graph {
    modules: Vec<Module>,
    mentions: Vec<Mention>,
}

/// Reads a source file by its path; `None` when there is none.
type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

impl Graph {
    const ROOT: ModuleId = 0;

    /// Reads the crate whose root file is `crate_root`.
    fn load(crate_root: &Path, read: Read<'_>) -> Result<Self, String> {
        let mut graph = Graph {
            modules: vec![Module {
                path: Vec::new(),
                parent: None,
                children: BTreeMap::new(),
                imports: BTreeMap::new(),
            }],
            mentions: Vec::new(),
        };
        let folder = crate_root.parent().unwrap_or(Path::new("")).to_path_buf();
        graph.load_file(crate_root, Self::ROOT, folder, false, read)?;
        Ok(graph)
    }

    fn load_file(
        &mut self,
        file: &Path,
        module: ModuleId,
        children_folder: PathBuf,
        test: bool,
        read: Read<'_>,
    ) -> Result<(), String> {
        let text = read(file).ok_or_else(|| format!("{}: no such file", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|err| format!("{}: {err}", file.display()))?;
        let mut collector = Collector {
            graph: self,
            read,
            file: file.to_path_buf(),
            scopes: vec![Scope {
                module,
                children_folder,
                test,
                inline: false,
                nesting: 0,
            }],
            test_items: 0,
            error: None,
        };
        collector.visit_file(&parsed);
        collector.error.map_or(Ok(()), Err)
    }

    fn add_module(&mut self, parent: ModuleId, name: &str) -> ModuleId {
        let id = self.modules.len();
        let mut path = self.modules[parent].path.clone();
        path.push(name.to_owned());
        self.modules.push(Module {
            path,
            parent: Some(parent),
            children: BTreeMap::new(),
            imports: BTreeMap::new(),
        });
        self.modules[parent].children.insert(name.to_owned(), id);
        id
    }

    /// The module at `path` (`front::gateway`).
    fn module(&self, path: &str) -> Option<ModuleId> {
        path.split("::").try_fold(Self::ROOT, |module, name| {
            self.modules[module].children.get(name).copied()
        })
    }

    /// The module a path written in `from` names, or the module of the item
    /// it names (followed through imports to where the item is from);
    /// `None` when it leaves the crate (`std::..`, another crate, a local
    /// name).
    fn resolve(&self, from: ModuleId, segments: &[String], hops: usize) -> Option<ModuleId> {
        const MAX_HOPS: usize = 8;
        let (first, rest) = segments.split_first()?;
        let (mut module, mut rest) = match first.as_str() {
            "crate" => (Self::ROOT, rest),
            "self" => (from, rest),
            "super" => {
                let mut module = self.modules[from].parent?;
                let mut rest = rest;
                while let Some(("super", tail)) = rest.split_first().map(|(first, tail)| (first.as_str(), tail)) {
                    module = self.modules[module].parent?;
                    rest = tail;
                }
                (module, rest)
            }
            _ if self.modules[from].children.contains_key(first) => (from, segments),
            _ => {
                let source = self.modules[from].imports.get(first).filter(|_| hops < MAX_HOPS)?;
                // `use a::b::c;` then `c::d`: is `a::b::c::d`, from where the
                // `use` is, unless that is this very path again.
                if source.as_slice() == segments {
                    return None;
                }
                let path: Vec<String> = source.iter().chain(rest).cloned().collect();
                return self.resolve(from, &path, hops + 1);
            }
        };
        while let Some((name, tail)) = rest.split_first() {
            match self.modules[module].children.get(name) {
                Some(&child) => {
                    module = child;
                    rest = tail;
                }
                None => break,
            }
        }
        // An item the module imports: where it is from.
        if let Some((name, tail)) = rest.split_first()
            && hops < MAX_HOPS
            && let Some(source) = self.modules[module].imports.get(name)
        {
            let path: Vec<String> = source.iter().chain(tail).cloned().collect();
            if let Some(found) = self.resolve(module, &path, hops + 1) {
                return Some(found);
            }
        }
        Some(module)
    }

    /// Whether a path starts with a name its module imports.
    fn through_import(&self, mention: &Mention) -> bool {
        let module = &self.modules[mention.module];
        mention.segments.first().is_some_and(|first| {
            !matches!(first.as_str(), "crate" | "self" | "super")
                && !module.children.contains_key(first)
                && module.imports.contains_key(first)
        })
    }

    /// Every use of one module by another outside test code.
    fn edges(&self) -> Vec<Edge> {
        self.mentions
            .iter()
            .filter(|mention| !mention.test)
            .filter_map(|mention| {
                let to = self.resolve(mention.module, &mention.segments, 0)?;
                (to != mention.module).then(|| Edge {
                    from: mention.module,
                    to,
                    at: mention.clone(),
                    direct: !self.through_import(mention),
                })
            })
            .collect()
    }

    /// The uses as `(from, to)` module paths (`front::gateway`), the root as
    /// `crate`.
    fn module_edges(&self) -> BTreeSet<(String, String)> {
        let name = |module: ModuleId| match self.modules[module].path.join("::") {
            root if root.is_empty() => "crate".to_owned(),
            path => path,
        };
        self.edges()
            .into_iter()
            .map(|edge| (name(edge.from), name(edge.to)))
            .collect()
    }
}

/// A module being read.
struct Scope {
    module: ModuleId,
    /// Where the files of its `mod x;` children are.
    children_folder: PathBuf,
    /// Declared under `#[cfg(test)]`.
    test: bool,
    /// An inline `mod x { .. }`.
    inline: bool,
    /// How deep in items the visitor is (0: the module's own items).
    nesting: usize,
}

/// Walks one file, adding its modules and the paths written in it.
struct Collector<'g, 'r> {
    graph: &'g mut Graph,
    read: Read<'r>,
    file: PathBuf,
    scopes: Vec<Scope>,
    /// How many `#[cfg(test)]` items the visitor is inside.
    test_items: usize,
    error: Option<String>,
}

/// Under `#[cfg(test)]`, `#[cfg(all(test, ..))]`: compiled for tests only.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr.parse_args::<syn::Meta>().is_ok_and(|meta| match meta {
                syn::Meta::Path(path) => path.is_ident("test"),
                syn::Meta::List(list) if list.path.is_ident("all") => list
                    .tokens
                    .into_iter()
                    .any(|token| matches!(token, TokenTree::Ident(ident) if ident == "test")),
                _ => false,
            })
    })
}

/// The `#[path = ".."]` of a module declaration.
fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(pair) if pair.path.is_ident("path") => match &pair.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) => Some(text.value()),
            _ => None,
        },
        _ => None,
    })
}

fn line(span: Span) -> usize {
    span.start().line
}

/// The paths (two segments or more) in a token stream: `a::b::c` as
/// `(["a", "b", "c"], line)`.
fn paths_in_tokens(tokens: TokenStream, found: &mut Vec<(Vec<String>, usize)>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let colons_at = |at: usize| {
        matches!(trees.get(at), Some(TokenTree::Punct(first)) if first.as_char() == ':' && first.spacing() == Spacing::Joint)
            && matches!(trees.get(at + 1), Some(TokenTree::Punct(second)) if second.as_char() == ':')
    };
    let mut at = 0;
    while at < trees.len() {
        match &trees[at] {
            TokenTree::Group(group) => paths_in_tokens(group.stream(), found),
            TokenTree::Ident(ident) if !(at >= 2 && colons_at(at - 2)) => {
                let mut segments = vec![ident.to_string()];
                while colons_at(at + 1)
                    && let Some(TokenTree::Ident(next)) = trees.get(at + 3)
                {
                    segments.push(next.to_string());
                    at += 3;
                }
                if segments.len() > 1 {
                    found.push((segments, line(ident.span())));
                }
            }
            _ => {}
        }
        at += 1;
    }
}

/// The path in an attribute's string (`"crate::a::b"`), if it is one.
fn path_in_string(literal: &proc_macro2::Literal) -> Option<Vec<String>> {
    let text = syn::parse_str::<syn::LitStr>(&literal.to_string()).ok()?.value();
    let path = syn::parse_str::<syn::Path>(&text).ok()?;
    (path.leading_colon.is_none() && path.segments.len() > 1)
        .then(|| path.segments.iter().map(|segment| segment.ident.to_string()).collect())
}

impl Collector<'_, '_> {
    fn scope(&self) -> &Scope {
        self.scopes.last().expect("a scope")
    }

    fn mention(&mut self, segments: Vec<String>, line: usize) {
        let scope = self.scope();
        let mention = Mention {
            module: scope.module,
            segments,
            file: self.file.display().to_string(),
            line,
            test: scope.test || self.test_items > 0,
        };
        self.graph.mentions.push(mention);
    }

    /// Visits something under `attrs`, as test code if they say so.
    fn under(&mut self, attrs: &[syn::Attribute], visit: impl FnOnce(&mut Self)) {
        let test = is_test_only(attrs);
        self.test_items += usize::from(test);
        visit(self);
        self.test_items -= usize::from(test);
    }

    fn module_item(&mut self, item: &syn::ItemMod) {
        let name = item.ident.to_string();
        let parent = self.scope();
        let (module, folder, test, inline) = (
            parent.module,
            parent.children_folder.clone(),
            parent.test || self.test_items > 0,
            parent.inline,
        );
        let child = self.graph.add_module(module, &name);
        match &item.content {
            Some((_, items)) => {
                self.scopes.push(Scope {
                    module: child,
                    children_folder: folder.join(&name),
                    test,
                    inline: true,
                    nesting: 0,
                });
                for item in items {
                    self.visit_item(item);
                }
                self.scopes.pop();
            }
            None => {
                let (file, children_folder) = match path_attribute(&item.attrs) {
                    Some(path) => {
                        // Outside inline modules, relative to the file's folder.
                        let base = if inline {
                            folder
                        } else {
                            self.file.parent().unwrap_or(Path::new("")).to_path_buf()
                        };
                        let file = base.join(path);
                        let folder = file.parent().unwrap_or(Path::new("")).to_path_buf();
                        (file, folder)
                    }
                    None => {
                        let flat = folder.join(format!("{name}.rs"));
                        let file = if (self.read)(&flat).is_some() {
                            flat
                        } else {
                            folder.join(&name).join("mod.rs")
                        };
                        (file, folder.join(&name))
                    }
                };
                if let Err(err) = self.graph.load_file(&file, child, children_folder, test, self.read) {
                    self.error.get_or_insert(err);
                }
            }
        }
    }

    /// The paths of a `use` tree under `prefix`; names it brings in are
    /// recorded as imports when `module_level`.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>, at: usize, module_level: bool) {
        let import = |collector: &mut Self, segments: Vec<String>, name: String, at: usize| {
            if module_level && name != "_" {
                let module = collector.scope().module;
                collector.graph.modules[module].imports.insert(name, segments.clone());
            }
            collector.mention(segments, at);
        };
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(&path.tree, prefix, line(path.ident.span()), module_level);
                prefix.pop();
            }
            syn::UseTree::Name(name) if name.ident == "self" => {
                if let Some(last) = prefix.last().cloned() {
                    import(self, prefix.clone(), last, line(name.ident.span()));
                }
            }
            syn::UseTree::Name(name) => {
                let segments: Vec<String> = prefix.iter().cloned().chain([name.ident.to_string()]).collect();
                import(self, segments, name.ident.to_string(), line(name.ident.span()));
            }
            syn::UseTree::Rename(rename) => {
                let mut segments = prefix.clone();
                if rename.ident != "self" {
                    segments.push(rename.ident.to_string());
                }
                import(self, segments, rename.rename.to_string(), line(rename.ident.span()));
            }
            syn::UseTree::Glob(_) => {
                if !prefix.is_empty() {
                    self.mention(prefix.clone(), at);
                }
            }
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(tree, prefix, at, module_level);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_, '_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Const(item) => &item.attrs,
            syn::Item::Enum(item) => &item.attrs,
            syn::Item::ExternCrate(item) => &item.attrs,
            syn::Item::Fn(item) => &item.attrs,
            syn::Item::ForeignMod(item) => &item.attrs,
            syn::Item::Impl(item) => &item.attrs,
            syn::Item::Macro(item) => &item.attrs,
            syn::Item::Mod(item) => &item.attrs,
            syn::Item::Static(item) => &item.attrs,
            syn::Item::Struct(item) => &item.attrs,
            syn::Item::Trait(item) => &item.attrs,
            syn::Item::TraitAlias(item) => &item.attrs,
            syn::Item::Type(item) => &item.attrs,
            syn::Item::Union(item) => &item.attrs,
            syn::Item::Use(item) => &item.attrs,
            _ => &[],
        };
        self.under(attrs, |collector| {
            let module_level = collector.scope().nesting == 0;
            if let Some(scope) = collector.scopes.last_mut() {
                scope.nesting += 1;
            }
            match item {
                syn::Item::Mod(module) => {
                    for attr in &module.attrs {
                        collector.visit_attribute(attr);
                    }
                    collector.module_item(module);
                }
                syn::Item::Use(item) if item.leading_colon.is_none() => {
                    for attr in &item.attrs {
                        collector.visit_attribute(attr);
                    }
                    collector.use_tree(&item.tree, &mut Vec::new(), 0, module_level);
                }
                syn::Item::Use(_) => {}
                item => visit::visit_item(collector, item),
            }
            if let Some(scope) = collector.scopes.last_mut() {
                scope.nesting -= 1;
            }
        });
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs: &[syn::Attribute] = match item {
            syn::ImplItem::Const(item) => &item.attrs,
            syn::ImplItem::Fn(item) => &item.attrs,
            syn::ImplItem::Type(item) => &item.attrs,
            syn::ImplItem::Macro(item) => &item.attrs,
            _ => &[],
        };
        self.under(attrs, |collector| visit::visit_impl_item(collector, item));
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs: &[syn::Attribute] = match item {
            syn::TraitItem::Const(item) => &item.attrs,
            syn::TraitItem::Fn(item) => &item.attrs,
            syn::TraitItem::Type(item) => &item.attrs,
            syn::TraitItem::Macro(item) => &item.attrs,
            _ => &[],
        };
        self.under(attrs, |collector| visit::visit_trait_item(collector, item));
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        self.under(&field.attrs, |collector| visit::visit_field(collector, field));
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        self.under(&variant.attrs, |collector| visit::visit_variant(collector, variant));
    }

    fn visit_field_value(&mut self, field: &'ast syn::FieldValue) {
        self.under(&field.attrs, |collector| visit::visit_field_value(collector, field));
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        self.under(&local.attrs, |collector| visit::visit_local(collector, local));
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        self.under(&arm.attrs, |collector| visit::visit_arm(collector, arm));
    }

    fn visit_stmt(&mut self, stmt: &'ast syn::Stmt) {
        let attrs: &[syn::Attribute] = match stmt {
            syn::Stmt::Expr(syn::Expr::Block(expr), _) => &expr.attrs,
            syn::Stmt::Expr(syn::Expr::If(expr), _) => &expr.attrs,
            syn::Stmt::Expr(syn::Expr::Call(expr), _) => &expr.attrs,
            syn::Stmt::Expr(syn::Expr::MethodCall(expr), _) => &expr.attrs,
            syn::Stmt::Expr(syn::Expr::Macro(expr), _) => &expr.attrs,
            syn::Stmt::Macro(stmt) => &stmt.attrs,
            _ => &[],
        };
        self.under(attrs, |collector| visit::visit_stmt(collector, stmt));
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            let segments = path.segments.iter().map(|segment| segment.ident.to_string()).collect();
            self.mention(segments, line(path.segments[0].ident.span()));
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        let mut found = Vec::new();
        paths_in_tokens(mac.tokens.clone(), &mut found);
        for (segments, line) in found {
            self.mention(segments, line);
        }
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if attr.path().is_ident("doc") {
            return;
        }
        let mut found = Vec::new();
        let mut strings = Vec::new();
        let mut tokens: Vec<TokenTree> = match &attr.meta {
            syn::Meta::List(list) => list.tokens.clone().into_iter().collect(),
            syn::Meta::NameValue(pair) => match &pair.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(text),
                    ..
                }) => vec![TokenTree::Literal(text.token())],
                _ => Vec::new(),
            },
            syn::Meta::Path(_) => Vec::new(),
        };
        paths_in_tokens(tokens.iter().cloned().collect(), &mut found);
        while let Some(token) = tokens.pop() {
            match token {
                TokenTree::Group(group) => tokens.extend(group.stream()),
                TokenTree::Literal(literal) => {
                    if let Some(segments) = path_in_string(&literal) {
                        strings.push((segments, line(literal.span())));
                    }
                }
                _ => {}
            }
        }
        for (segments, line) in found.into_iter().chain(strings) {
            self.mention(segments, line);
        }
    }
}

// ---------------------------------------------------------------------------
// The checker on made-up crates.

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
