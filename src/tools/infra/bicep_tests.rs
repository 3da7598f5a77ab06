//! `main.bicep` as a platform engineer reads it: GA API versions, the
//! PostgreSQL server's children one at a time, and no manual step left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::tests::default_files;

fn main_bicep() -> String {
    default_files()
        .into_iter()
        .find(|file| file.path == "bicep/main.bicep")
        .unwrap()
        .text
}

/// The `resource NAME 'TYPE@VERSION'` lines, as `(name, type, version)`.
fn resources(bicep: &str) -> Vec<(String, String, String)> {
    bicep
        .lines()
        .filter_map(|line| line.strip_prefix("resource "))
        .map(|rest| {
            let (name, rest) = rest.split_once(' ').unwrap();
            let quoted = rest.split('\'').nth(1).unwrap();
            let (kind, version) = quoted.split_once('@').unwrap();
            (name.to_owned(), kind.to_owned(), version.to_owned())
        })
        .collect()
}

/// The body of `resource NAME ...` up to its closing line.
fn body<'a>(bicep: &'a str, name: &str) -> &'a str {
    let start = bicep.find(&format!("resource {name} ")).unwrap();
    let rest = &bicep[start..];
    let end = rest.find("\n}\n").or_else(|| rest.find("\n]\n")).unwrap();
    &rest[..end]
}

#[test]
fn every_resource_uses_a_generally_available_api_version() {
    let bicep = main_bicep();
    let resources = resources(&bicep);
    assert!(resources.len() > 15);
    for (name, kind, version) in &resources {
        assert!(
            !version.contains("preview"),
            "{name} ({kind}) is on a preview API: {version}"
        );
        assert!(
            version.len() == 10 && version.chars().filter(|c| *c == '-').count() == 2,
            "{name}: {version}"
        );
    }
    let service_bus: Vec<&String> = resources
        .iter()
        .filter(|(_, kind, _)| kind.starts_with("Microsoft.ServiceBus/"))
        .map(|(_, _, version)| version)
        .collect();
    assert!(
        service_bus.iter().all(|version| *version == service_bus[0]),
        "one Service Bus API version"
    );
}

/// Azure Database for PostgreSQL refuses a change to a server while another
/// is applied (ServerIsBusy): its children are deployed one after another.
#[test]
fn the_postgres_server_children_are_deployed_one_at_a_time() {
    let bicep = main_bicep();
    let children: Vec<String> = resources(&bicep)
        .into_iter()
        .filter(|(_, kind, _)| kind.starts_with("Microsoft.DBforPostgreSQL/flexibleServers/"))
        .map(|(name, _, _)| name)
        .collect();
    assert!(children.len() >= 2, "{children:?}");
    for pair in children.windows(2) {
        let later = body(&bicep, &pair[1]);
        assert!(
            later.contains(&format!("dependsOn: [{}]", pair[0])),
            "{} must wait for {}:\n{later}",
            pair[1],
            pair[0]
        );
    }
}

/// Nothing is left for a person with Manage rights: the deployment removes
/// the `$Default` rules itself, after bosun's rules exist, as an identity
/// whose Manage right covers this namespace only.
#[test]
fn the_deployment_removes_the_default_rules_itself() {
    let bicep = main_bicep();
    assert!(!bicep.contains("as someone with Manage rights"));
    let script = body(&bicep, "removeDefaultRules");
    assert!(script.contains("kind: 'AzureCLI'"));
    assert!(script.contains("--name '$Default'"));
    assert!(script.contains("dependsOn: [rules, topologyGrant]"));
    assert!(script.contains("join(topology.subscriptions, ' ')"));
    let grant = body(&bicep, "topologyGrant");
    assert!(
        grant.contains("scope: serviceBus"),
        "Manage on the namespace only:\n{grant}"
    );
    assert!(grant.contains("roles.serviceBusDataOwner"));
}
