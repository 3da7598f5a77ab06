//! The checks on a [`Graph`]: layers that point down, sibling modules
//! that do not use each other.

use std::collections::{BTreeMap, BTreeSet};

use crate::graph::{Edge, Graph, Mention, ModuleId};

/// The mentions to show for the uses of one module by another: those
/// written out, or, if there are none, those through an imported name.
fn shown(uses: &[Edge]) -> impl Iterator<Item = &Mention> {
    let direct = uses.iter().any(|edge| edge.direct);
    uses.iter()
        .filter(move |edge| edge.direct || !direct)
        .map(|edge| &edge.at)
}

/// Every top-level module in a layer, every layer a module.
pub(crate) fn undeclared(graph: &Graph, layers: &[&str]) -> Vec<String> {
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
pub(crate) fn arrows_up(graph: &Graph, layers: &[&str]) -> Vec<String> {
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
pub(crate) fn sibling_cycles(graph: &Graph, depth: usize) -> Vec<String> {
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
pub(crate) fn strongly_connected<'a>(arrows: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<BTreeSet<&'a str>> {
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
