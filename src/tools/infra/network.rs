//! The NetworkPolicies of the kustomize base: ingress only where something
//! listens, and egress per component limited to what that component calls.
//!
//! A Kubernetes NetworkPolicy names ports, in-cluster pods and IP ranges,
//! never host names, and Azure's public endpoints have no fixed addresses.
//! So each component's egress policy allows, besides DNS, only the ports of
//! the services it calls ([`calls`]): HTTPS, AMQP over TLS to Service Bus,
//! PostgreSQL, OTLP to an in-cluster collector, and Argo CD's API server in
//! its namespace for `gitops-sync`. Nothing else leaves a bosun pod: not
//! plain HTTP (so not the node's instance metadata endpoint, whose
//! managed identity a pod on workload identity must not borrow), not SSH,
//! not another namespace's pods. The host names each component calls are
//! written on its policy (annotation [`CALLS_ANNOTATION`]) for a cluster
//! that filters by name (Cilium's FQDN policies, Azure Firewall).

use bosun_consumers::{
    build_ingestion, commit, container_build, gitops_sync, iac_provisioning, package_publishing, pipeline_generation,
    pipeline_monitor, probe, pull_request, release_orchestration, repository_provisioning,
};
use serde_json::{Value, json};

use super::bicep::API_COMPONENT;
use super::{API_PORT, ConsumerInfra, OPS_PORT};

/// The annotation on each egress policy listing the hosts its component
/// calls, comma-separated.
pub const CALLS_ANNOTATION: &str = "bosun.dev/calls";
/// The namespace Argo CD runs in when it runs in the cluster (its
/// installation's default).
pub const ARGOCD_NAMESPACE: &str = "argocd";
/// The port of Argo CD's API server pods (its Service maps 443 and 80 to it).
pub const ARGOCD_SERVER_PORT: u16 = 8080;

/// A service a component calls, and where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// Microsoft Entra ID (`login.microsoftonline.com`), for the workload
    /// identity's tokens, and Blob Storage (`*.blob.core.windows.net`):
    /// every component.
    AzureBasics,
    /// Azure Service Bus over AMQP 1.0 with TLS (port 5671).
    ServiceBus,
    /// PostgreSQL (Azure Database for PostgreSQL, port 5432).
    Postgres,
    /// An OpenTelemetry collector in the cluster (OTLP gRPC 4317, HTTP 4318).
    Otlp,
    /// Azure DevOps (`dev.azure.com`, `*.visualstudio.com`): Git, pull
    /// requests, pipelines, builds, tests.
    AzureDevOps,
    /// Azure Artifacts' NuGet feeds (`pkgs.dev.azure.com`).
    Artifacts,
    /// Azure Resource Manager (`management.azure.com`): ACR Tasks, Pulumi's
    /// azure-native provider.
    ResourceManager,
    /// Azure Container Registry (`*.azurecr.io`) and the registries base
    /// images come from.
    Registries,
    /// Pulumi's state backend and plugin downloads (`api.pulumi.com`,
    /// `get.pulumi.com`, or a blob container).
    Pulumi,
    /// Argo CD's API server: in the cluster (namespace
    /// [`ARGOCD_NAMESPACE`]), or outside it over HTTPS.
    ArgoCd,
}

impl Call {
    /// The host names, for [`CALLS_ANNOTATION`].
    pub fn hosts(self) -> &'static [&'static str] {
        match self {
            Self::AzureBasics => &["login.microsoftonline.com", "*.blob.core.windows.net"],
            Self::ServiceBus => &["*.servicebus.windows.net"],
            Self::Postgres => &["*.postgres.database.azure.com"],
            Self::Otlp => &[],
            Self::AzureDevOps => &["dev.azure.com", "*.visualstudio.com"],
            Self::Artifacts => &["pkgs.dev.azure.com"],
            Self::ResourceManager => &["management.azure.com"],
            Self::Registries => &["*.azurecr.io"],
            Self::Pulumi => &["api.pulumi.com", "get.pulumi.com"],
            Self::ArgoCd => &["argocd-server.argocd.svc"],
        }
    }
}

/// What every component calls.
pub const EVERY_COMPONENT: [Call; 4] = [Call::AzureBasics, Call::ServiceBus, Call::Postgres, Call::Otlp];

/// What a component calls beyond [`EVERY_COMPONENT`]; `None` for a name
/// that is not a component (a consumer added without saying what it calls
/// fails the infra tests).
pub fn calls(component: &str) -> Option<&'static [Call]> {
    let calls: &'static [Call] = match component {
        API_COMPONENT => &[],
        repository_provisioning::NAME
        | commit::NAME
        | pull_request::NAME
        | pipeline_generation::NAME
        | build_ingestion::NAME => &[Call::AzureDevOps],
        // The pipeline runner fetches the repository and runs its steps.
        pipeline_monitor::NAME => &[Call::AzureDevOps, Call::Registries],
        package_publishing::NAME => &[Call::Artifacts],
        container_build::NAME => &[Call::ResourceManager, Call::Registries],
        // The Pulumi program comes from the module's repository.
        iac_provisioning::NAME => &[Call::AzureDevOps, Call::ResourceManager, Call::Pulumi],
        gitops_sync::NAME => &[Call::AzureDevOps, Call::ArgoCd],
        release_orchestration::NAME | probe::NAME => &[],
        _ => return None,
    };
    Some(calls)
}

/// Ingress to the ops port on every pod (kubelet probes, Prometheus) and to
/// the API's port on the API's; egress per component ([`egress_policy`]).
pub fn network_policies(consumers: &[ConsumerInfra]) -> Vec<Value> {
    let ingress = |name: &str, selector: Value, port: u16| {
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "labels": labels("network")},
            "spec": {
                "podSelector": {"matchLabels": selector},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"port": port, "protocol": "TCP"}]}],
            },
        })
    };
    let mut policies = vec![
        ingress("bosun-ops", json!({"app.kubernetes.io/name": "bosun"}), OPS_PORT),
        ingress("bosun-api", labels(API_COMPONENT), API_PORT),
    ];
    let components = std::iter::once(API_COMPONENT).chain(consumers.iter().map(|consumer| consumer.name.as_str()));
    policies.extend(components.map(|component| egress_policy(component, calls(component).unwrap_or(&[]))));
    policies
}

/// `bosun-egress-<component>`: DNS to the cluster's DNS pods, and the ports
/// of what the component calls.
pub fn egress_policy(component: &str, extra: &[Call]) -> Value {
    let all: Vec<Call> = EVERY_COMPONENT.iter().chain(extra).copied().collect();
    let mut rules = vec![json!({
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
    })];
    let anywhere =
        |port: u16| json!({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": port, "protocol": "TCP"}]});
    let mut https = false;
    for call in &all {
        match call {
            Call::ServiceBus => rules.push(anywhere(5671)),
            Call::Postgres => rules.push(anywhere(5432)),
            Call::Otlp => rules.push(json!({
                "to": [{"namespaceSelector": {}}],
                "ports": [{"port": 4317, "protocol": "TCP"}, {"port": 4318, "protocol": "TCP"}],
            })),
            Call::ArgoCd => {
                rules.push(json!({
                    "to": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ARGOCD_NAMESPACE}},
                        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "argocd-server"}},
                    }],
                    "ports": [{"port": ARGOCD_SERVER_PORT, "protocol": "TCP"}],
                }));
                https = true;
            }
            Call::AzureBasics
            | Call::AzureDevOps
            | Call::Artifacts
            | Call::ResourceManager
            | Call::Registries
            | Call::Pulumi => https = true,
        }
    }
    if https {
        rules.push(anywhere(443));
    }
    let hosts: Vec<&str> = all.iter().flat_map(|call| call.hosts().iter().copied()).collect();
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": format!("bosun-egress-{component}"),
            "labels": labels("network"),
            "annotations": {CALLS_ANNOTATION: hosts.join(",")},
        },
        "spec": {
            "podSelector": {"matchLabels": labels(component)},
            "policyTypes": ["Egress"],
            "egress": rules,
        },
    })
}

fn labels(component: &str) -> Value {
    json!({"app.kubernetes.io/name": "bosun", "app.kubernetes.io/component": component})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::tools::infra::tests::{base_objects, default_files, kind_of};

    fn egress_ports(policy: &Value) -> Vec<u64> {
        let mut ports: Vec<u64> = policy["spec"]["egress"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|rule| {
                rule["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p["port"].as_u64().unwrap())
            })
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// Every pod's component has an egress policy selecting exactly its
    /// pods, and every registered consumer says what it calls.
    #[test]
    fn every_component_has_an_egress_policy_of_what_it_calls() {
        let files = default_files();
        let objects = base_objects(&files);
        let policies: Vec<&Value> = objects
            .iter()
            .map(|(_, object)| object)
            .filter(|object| kind_of(object) == "NetworkPolicy")
            .collect();
        let deployments: Vec<&Value> = objects
            .iter()
            .map(|(_, object)| object)
            .filter(|object| kind_of(object) == "Deployment")
            .collect();
        assert!(deployments.len() > 10);
        for deployment in deployments {
            let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
            let component = pod_labels["app.kubernetes.io/component"].as_str().unwrap();
            assert!(
                calls(component).is_some(),
                "{component} does not say what it calls (network.rs `calls`)"
            );
            let selecting: Vec<&&Value> = policies
                .iter()
                .filter(|policy| {
                    policy["spec"]["policyTypes"]
                        .as_array()
                        .unwrap()
                        .contains(&json!("Egress"))
                })
                .filter(|policy| {
                    let wanted = policy["spec"]["podSelector"]["matchLabels"].as_object().unwrap();
                    wanted.iter().all(|(key, value)| &pod_labels[key] == value)
                })
                .collect();
            assert_eq!(selecting.len(), 1, "{component}: one egress policy selects its pods");
            let policy = selecting[0];
            assert_eq!(policy["metadata"]["name"], format!("bosun-egress-{component}"));
            let ports = egress_ports(policy);
            for port in [53, 443, 4317, 4318, 5432, 5671] {
                assert!(ports.contains(&port), "{component} needs port {port}: {ports:?}");
            }
            let allowed: &[u64] = if component == gitops_sync::NAME {
                &[53, 443, 4317, 4318, 5432, 5671, 8080]
            } else {
                &[53, 443, 4317, 4318, 5432, 5671]
            };
            assert_eq!(ports, allowed, "{component}: nothing but what it calls");
            let hosts = policy["metadata"]["annotations"][CALLS_ANNOTATION].as_str().unwrap();
            assert!(hosts.contains("login.microsoftonline.com") && hosts.contains(".servicebus.windows.net"));
        }
    }

    /// DNS goes only to the cluster's DNS pods, Argo CD only to its server's
    /// pods, plain HTTP (the node's instance metadata endpoint) nowhere.
    #[test]
    fn egress_reaches_dns_and_argo_cd_pods_only_and_never_plain_http() {
        let gitops = egress_policy(gitops_sync::NAME, calls(gitops_sync::NAME).unwrap());
        let rules = gitops["spec"]["egress"].as_array().unwrap();
        for rule in rules {
            let ports: Vec<u64> = rule["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["port"].as_u64().unwrap())
                .collect();
            let to = &rule["to"][0];
            if ports.contains(&53) {
                assert_eq!(to["podSelector"]["matchLabels"]["k8s-app"], "kube-dns");
                assert_eq!(
                    to["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                    "kube-system"
                );
            }
            if ports.contains(&8080) {
                assert_eq!(
                    to["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
                    "argocd-server"
                );
                assert_eq!(
                    to["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                    ARGOCD_NAMESPACE
                );
            }
            assert!(!ports.contains(&80), "no plain HTTP");
        }
        let probe = egress_policy(probe::NAME, calls(probe::NAME).unwrap());
        let hosts = probe["metadata"]["annotations"][CALLS_ANNOTATION].as_str().unwrap();
        assert!(
            !hosts.contains("dev.azure.com"),
            "the probe calls no Azure DevOps: {hosts}"
        );
        assert!(calls("not-a-consumer").is_none());
    }
}
