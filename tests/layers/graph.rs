//! The module graph of one crate, read from its sources with `syn`:
//! the modules (files and inline `mod x { .. }`, found through `mod`
//! declarations as rustc finds them), every path written in them, and
//! which module each path names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, Span, TokenStream, TokenTree};
use syn::visit::{self, Visit};

pub(crate) type ModuleId = usize;

/// A module of the crate: a file or an inline `mod x { .. }`.
#[derive(Debug)]
pub(crate) struct Module {
    /// Its path from the crate root (empty for the root).
    pub(crate) path: Vec<String>,
    pub(crate) parent: Option<ModuleId>,
    pub(crate) children: BTreeMap<String, ModuleId>,
    /// The names its own `use` items bring in (globs aside), each with the
    /// path it was imported from.
    pub(crate) imports: BTreeMap<String, Vec<String>>,
}

/// A path written in the code.
#[derive(Debug, Clone)]
pub(crate) struct Mention {
    /// The module it is written in.
    pub(crate) module: ModuleId,
    pub(crate) segments: Vec<String>,
    pub(crate) file: String,
    pub(crate) line: usize,
    /// Written in test code.
    pub(crate) test: bool,
}

/// One use of a module by another, outside test code.
#[derive(Debug)]
pub(crate) struct Edge {
    pub(crate) from: ModuleId,
    pub(crate) to: ModuleId,
    pub(crate) at: Mention,
    /// Written out (`crate::a::B`, `super::a::B`, a `use`), not through a
    /// name imported before (`B::new` after `use crate::a::B`).
    pub(crate) direct: bool,
}

/// The modules of a crate and every path written in them.
#[derive(Debug)]
pub(crate) struct Graph {
    pub(crate) modules: Vec<Module>,
    pub(crate) mentions: Vec<Mention>,
}

/// Reads a source file by its path; `None` when there is none.
pub(crate) type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

impl Graph {
    pub(crate) const ROOT: ModuleId = 0;

    /// Reads the crate whose root file is `crate_root`.
    pub(crate) fn load(crate_root: &Path, read: Read<'_>) -> Result<Self, String> {
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
    pub(crate) fn module(&self, path: &str) -> Option<ModuleId> {
        path.split("::").try_fold(Self::ROOT, |module, name| {
            self.modules[module].children.get(name).copied()
        })
    }

    /// The module a path written in `from` names, or the module of the item
    /// it names (followed through imports to where the item is from);
    /// `None` when it leaves the crate (`std::..`, another crate, a local
    /// name).
    pub(crate) fn resolve(&self, from: ModuleId, segments: &[String], hops: usize) -> Option<ModuleId> {
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
    pub(crate) fn edges(&self) -> Vec<Edge> {
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
    pub(crate) fn module_edges(&self) -> BTreeSet<(String, String)> {
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
