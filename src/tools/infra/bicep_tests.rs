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

/// bosun signs in to PostgreSQL with Entra ID tokens: the server takes
/// Entra principals, password sign-in is off unless a parameter keeps it
/// for an install moving over, and the one database identity every
/// component shares is its Entra administrator, trusting every bosun
/// ServiceAccount's token (within Azure's limit of federated credentials
/// per identity).
#[test]
fn the_database_identity_is_the_servers_entra_administrator() {
    use super::bicep::{DATABASE_IDENTITY, MAX_FEDERATED_CREDENTIALS};
    let bicep = main_bicep();
    let server = body(&bicep, "postgres");
    assert!(server.contains("activeDirectoryAuth: 'Enabled'"), "{server}");
    assert!(server.contains("passwordAuth: postgresPasswordAuth"), "{server}");
    assert!(bicep.contains("param postgresPasswordAuth string = 'Disabled'"));
    assert!(
        server.contains("administratorLoginPassword: postgresPasswordAuth == 'Enabled' ? postgresAdminPassword : null"),
        "no password administrator unless password sign-in is on:\n{server}"
    );
    let administrator = body(&bicep, "databaseAdministrator");
    assert!(administrator.contains("'Microsoft.DBforPostgreSQL/flexibleServers/administrators@2024-08-01'"));
    assert!(administrator.contains("name: databaseIdentity.properties.principalId"));
    assert!(administrator.contains("principalName: databaseIdentity.name"));
    assert!(administrator.contains("principalType: 'ServicePrincipal'"));
    let credentials_at = bicep.find("resource databaseFederatedCredentials ").unwrap();
    assert!(
        bicep[..credentials_at].trim_end().ends_with("@batchSize(1)"),
        "one federated credential of an identity at a time"
    );
    let credentials = body(&bicep, "databaseFederatedCredentials");
    assert!(credentials.contains("for serviceAccount in topology.database.serviceAccounts"));
    assert!(credentials.contains("'system:serviceaccount:${kubernetesNamespace}:${serviceAccount}'"));
    assert!(bicep.contains("output databaseClientId string = databaseIdentity.properties.clientId"));

    let files = default_files();
    let topology: serde_json::Value =
        serde_json::from_str(&files.iter().find(|f| f.path == "bicep/topology.json").unwrap().text).unwrap();
    assert_eq!(topology["database"]["identity"], DATABASE_IDENTITY);
    let accounts: Vec<&str> = topology["database"]["serviceAccounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|account| account.as_str().unwrap())
        .collect();
    let mut expected: Vec<String> = super::consumers().iter().map(|c| c.object_name()).collect();
    expected.push("bosun-api".to_owned());
    assert_eq!(accounts, expected, "every ServiceAccount of bosun's, not KEDA's");
    assert!(
        accounts.len() <= MAX_FEDERATED_CREDENTIALS,
        "{} ServiceAccounts: more than one identity may trust",
        accounts.len()
    );
}
