//! Tests of `src/front/api/routes.rs`: the one list of routes is well
//! formed, and the OpenAPI document describes exactly its documented
//! routes, each path parameter as its path names it.

use std::collections::BTreeSet;

use bosun_contracts::messages::CATALOGUE;

use super::*;

/// The names of a path template's parameters, in order.
fn parameters(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|segment| segment.strip_prefix('{').and_then(|name| name.strip_suffix('}')))
        .collect()
}

#[test]
fn every_route_is_declared_once_and_one_left_out_says_why() {
    let mut seen = BTreeSet::new();
    let mut per_command = Vec::new();
    for route in routes() {
        let (method, path) = (route.method, route.path);
        assert!(seen.insert((method, path)), "{method:?} {path} is declared twice");
        assert!(path.starts_with('/'), "{path}");
        // A segment is a literal or one whole `{name}`, each name once.
        for segment in path.split('/') {
            let braces = segment.contains(['{', '}']);
            let parameter = segment.len() > 2
                && segment.starts_with('{')
                && segment.ends_with('}')
                && !segment[1..segment.len() - 1].contains(['{', '}']);
            assert!(!braces || parameter, "{path}: `{segment}` is not one `{{name}}`");
        }
        let names = parameters(path);
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "{path} names a parameter twice");
        match route.doc {
            Doc::Operation(_) => {}
            Doc::PerCommand => per_command.push(path),
            Doc::Undocumented(why) => assert!(!why.trim().is_empty(), "{path} is left out without a reason"),
        }
    }
    // The command's type is written into the path's one parameter.
    assert_eq!(per_command.len(), 1, "{per_command:?}");
    assert_eq!(parameters(per_command[0]).len(), 1, "{}", per_command[0]);
}

#[test]
fn the_document_describes_exactly_the_documented_routes() {
    let doc = document();
    let mut described = BTreeSet::new();
    for (path, operations) in doc["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            described.insert((method.clone(), path.clone()));
            // Every path parameter it documents is its path's, and the
            // other way round.
            let documented: Vec<&str> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|parameter| parameter["in"] == "path")
                .map(|parameter| parameter["name"].as_str().unwrap())
                .collect();
            assert_eq!(documented, parameters(path), "{method} {path}");
        }
    }
    let mut declared = BTreeSet::new();
    for route in routes() {
        let method = route.method.as_str().to_owned();
        match route.doc {
            Doc::Operation(_) => {
                declared.insert((method, route.path.to_owned()));
            }
            Doc::PerCommand => {
                let parameter = format!("{{{}}}", parameters(route.path)[0]);
                for spec in CATALOGUE.iter().filter(|spec| spec.is_sendable()) {
                    declared.insert((method.clone(), route.path.replace(&parameter, spec.message_type)));
                }
            }
            Doc::Undocumented(_) => {}
        }
    }
    assert_eq!(described, declared);
}
