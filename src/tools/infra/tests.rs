//! `infra/` is what the code renders, and covers every entity and consumer.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::kubernetes::{self, TRIGGER_AUTHENTICATION};
use super::*;
use crate::ports::topology::Topology;

pub(super) fn default_files() -> Vec<RenderedFile> {
    render(&InfraSettings::from_settings(&Settings::with_data_dir(".bosun")).unwrap()).unwrap()
}

/// The checked-in `infra/` must equal what the code renders with the
/// default settings. Rewrite it with `cargo run -- infra render` (or
/// `BOSUN_UPDATE_INFRA=1 cargo test --lib tools::infra`).
#[test]
fn checked_in_infra_is_fresh() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("infra");
    let files = default_files();
    if std::env::var_os("BOSUN_UPDATE_INFRA").is_some() {
        write(&dir, &files).unwrap();
    }
    let mut stale: Vec<String> = files
        .iter()
        .filter(|file| std::fs::read_to_string(dir.join(&file.path)).map_or(true, |on_disk| on_disk != file.text))
        .map(|file| file.path.clone())
        .collect();
    stale.extend(
        unrendered(&dir, &files)
            .into_iter()
            .map(|path| format!("{path} (not rendered)")),
    );
    assert!(
        stale.is_empty(),
        "infra/ is stale: {stale:?}; run `cargo run -- infra render` (or `BOSUN_UPDATE_INFRA=1 cargo test --lib tools::infra`)"
    );
}

#[test]
fn rendering_is_deterministic() {
    assert_eq!(default_files(), default_files());
}

/// Every YAML document of the base: the objects of `kubernetes/` outside
/// the overlays, parsed back from the rendered text.
pub(super) fn base_objects(files: &[RenderedFile]) -> Vec<(String, Value)> {
    files
        .iter()
        .filter(|file| file.path.starts_with("kubernetes/") && !file.path.contains("overlays/"))
        .filter(|file| file.path != "kubernetes/base/kustomization.yaml")
        .flat_map(|file| {
            parse_documents(&file.text)
                .into_iter()
                .map(|object| (file.path.clone(), object))
        })
        .collect()
}

/// Reads back the YAML the writer produces with an independent YAML
/// parser, so the tests check the rendered text, not the values it was
/// made from.
pub(super) fn parse_documents(text: &str) -> Vec<Value> {
    super::yaml::parse(text).unwrap_or_else(|err| panic!("rendered YAML does not parse: {err}\n{text}"))
}

pub(super) fn kind_of(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

#[test]
fn every_queue_and_subscription_has_one_scaled_object_and_one_deployment_naming_a_real_consumer() {
    let files = default_files();
    let objects = base_objects(&files);
    let topology = Topology::from_routing();
    let mut queue_triggers: BTreeMap<String, usize> = BTreeMap::new();
    let mut subscription_triggers: BTreeMap<String, usize> = BTreeMap::new();
    let mut scaled_targets = Vec::new();
    for (_, object) in objects.iter().filter(|(_, o)| kind_of(o) == "ScaledObject") {
        scaled_targets.push(object["spec"]["scaleTargetRef"]["name"].as_str().unwrap().to_owned());
        for trigger in object["spec"]["triggers"].as_array().unwrap() {
            let metadata = &trigger["metadata"];
            if let Some(queue) = metadata["queueName"].as_str() {
                *queue_triggers.entry(queue.to_owned()).or_default() += 1;
            } else {
                assert_eq!(metadata["topicName"], topology.topic.as_str());
                let subscription = metadata["subscriptionName"].as_str().unwrap();
                *subscription_triggers.entry(subscription.to_owned()).or_default() += 1;
            }
        }
    }
    let expected_queues: BTreeMap<String, usize> = topology.queues.iter().map(|q| (q.clone(), 1)).collect();
    assert_eq!(queue_triggers, expected_queues, "one trigger per queue");
    let expected_subscriptions: BTreeMap<String, usize> =
        topology.subscriptions.iter().map(|s| (s.name.clone(), 1)).collect();
    assert_eq!(
        subscription_triggers, expected_subscriptions,
        "one trigger per subscription"
    );

    let known: Vec<&str> = registry::available().collect();
    let mut served = BTreeMap::new();
    for (path, object) in objects.iter().filter(|(_, o)| kind_of(o) == "Deployment") {
        let name = object["metadata"]["name"].as_str().unwrap();
        let args: Vec<&str> = object["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|arg| arg.as_str().unwrap())
            .collect();
        if args[0] == "api" {
            assert_eq!(name, "bosun-api");
            continue;
        }
        assert_eq!(args[..2], ["serve", "--consumers"], "{path}");
        let consumer = args[2];
        assert!(
            known.contains(&consumer),
            "{path} runs `{consumer}`, which is not a consumer"
        );
        assert_eq!(args.len(), 3, "{path}: one consumer per Deployment");
        *served.entry(consumer.to_owned()).or_insert(0) += 1;
        assert!(scaled_targets.contains(&name.to_owned()), "{name} has a ScaledObject");
    }
    let expected: BTreeMap<String, i32> = known.iter().map(|c| ((*c).to_owned(), 1)).collect();
    assert_eq!(served, expected, "one Deployment per consumer");
    let deployments: Vec<String> = objects
        .iter()
        .filter(|(_, o)| kind_of(o) == "Deployment")
        .map(|(_, o)| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    for target in &scaled_targets {
        assert!(
            deployments.contains(target),
            "the ScaledObject's target {target} is a Deployment"
        );
    }
}

#[test]
fn pods_probe_the_ops_port_outlive_the_grace_and_write_only_their_volumes() {
    let files = default_files();
    let grace = Settings::with_data_dir(".bosun").shutdown_grace.as_secs();
    for (path, object) in base_objects(&files) {
        let pod = match kind_of(&object) {
            "Deployment" | "Job" => &object["spec"]["template"]["spec"],
            _ => continue,
        };
        assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > grace, "{path}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{path}");
        let container = &pod["containers"][0];
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true, "{path}");
        assert_eq!(
            container["securityContext"]["allowPrivilegeEscalation"], false,
            "{path}"
        );
        let mounts: Vec<&str> = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert!(
            mounts.contains(&kubernetes::DATA_DIR),
            "{path}: the data directory is a volume"
        );
        for volume in pod["volumes"].as_array().unwrap() {
            assert!(volume["emptyDir"].is_object(), "{path}");
        }
        assert!(container["resources"]["requests"].is_object() && container["resources"]["limits"].is_object());
        if kind_of(&object) == "Deployment" {
            assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz", "{path}");
            assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz", "{path}");
            let ports = container["ports"].as_array().unwrap();
            assert!(
                ports
                    .iter()
                    .any(|p| p["name"] == "ops" && p["containerPort"] == OPS_PORT),
                "{path}: the probes' port is the ops port"
            );
            assert_eq!(
                object["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"],
                "true"
            );
            let account = pod["serviceAccountName"].as_str().unwrap();
            assert_eq!(
                account, object["metadata"]["name"],
                "{path}: a ServiceAccount of its own"
            );
        }
    }
    let config = base_objects(&files)
        .into_iter()
        .find(|(_, o)| kind_of(o) == "ConfigMap")
        .unwrap()
        .1;
    assert_eq!(config["data"]["BOSUN_OPS_ADDR"], format!("0.0.0.0:{OPS_PORT}"));
}

/// Every Deployment reads `BOSUN_COMPAT_VERSION` from the ConfigMap, empty
/// by default (the current wire); an operator sets it during an upgrade,
/// and the settings read it as that wire version.
#[test]
fn the_config_lets_an_operator_set_the_compat_version_and_it_is_empty_by_default() {
    let files = default_files();
    let config = base_objects(&files)
        .into_iter()
        .find(|(_, o)| kind_of(o) == "ConfigMap")
        .unwrap()
        .1;
    assert_eq!(config["data"]["BOSUN_COMPAT_VERSION"], "");
    let mut data: std::collections::BTreeMap<String, String> = config["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    let read = |data: &std::collections::BTreeMap<String, String>| {
        crate::runtime::config::MessageVersionSettings::read(&|name| data.get(name).cloned()).unwrap()
    };
    assert_eq!(read(&data).wire(), bosun_contracts::WIRE_VERSION);
    data.insert("BOSUN_COMPAT_VERSION".into(), "1".into());
    assert_eq!(read(&data).wire(), 1);
}

/// The KEDA objects, field by field, against KEDA's documented shape
/// (keda.sh/docs, ScaledObject spec, TriggerAuthentication, the
/// azure-servicebus scaler and the azure-workload pod identity): only
/// documented fields, the values they take.
#[test]
fn keda_objects_have_the_documented_shape() {
    let files = default_files();
    let objects = base_objects(&files);
    let keys = |value: &Value| -> Vec<String> { value.as_object().unwrap().keys().cloned().collect() };
    let authentications: Vec<&Value> = objects
        .iter()
        .map(|(_, o)| o)
        .filter(|o| kind_of(o) == "TriggerAuthentication")
        .collect();
    assert_eq!(authentications.len(), 1);
    let authentication = authentications[0];
    assert_eq!(authentication["apiVersion"], "keda.sh/v1alpha1");
    assert_eq!(authentication["metadata"]["name"], TRIGGER_AUTHENTICATION);
    assert_eq!(keys(&authentication["spec"]), ["podIdentity"]);
    assert_eq!(authentication["spec"]["podIdentity"]["provider"], "azure-workload");

    let consumers = consumers();
    let scaled: Vec<&Value> = objects
        .iter()
        .map(|(_, o)| o)
        .filter(|o| kind_of(o) == "ScaledObject")
        .collect();
    assert_eq!(scaled.len(), consumers.len());
    for object in scaled {
        assert_eq!(object["apiVersion"], "keda.sh/v1alpha1");
        assert_eq!(keys(object), ["apiVersion", "kind", "metadata", "spec"]);
        let spec = &object["spec"];
        for key in keys(spec) {
            assert!(
                [
                    "scaleTargetRef",
                    "minReplicaCount",
                    "maxReplicaCount",
                    "pollingInterval",
                    "cooldownPeriod",
                    "fallback",
                    "triggers"
                ]
                .contains(&key.as_str()),
                "ScaledObject spec field {key} is not documented"
            );
        }
        assert_eq!(
            keys(&spec["scaleTargetRef"]),
            ["name"],
            "the Deployment, by name (apps/v1 by default)"
        );
        for field in [
            "minReplicaCount",
            "maxReplicaCount",
            "pollingInterval",
            "cooldownPeriod",
        ] {
            assert!(spec[field].is_u64(), "{field} is an integer");
        }
        let name = object["metadata"]["name"].as_str().unwrap();
        let consumer = consumers.iter().find(|c| c.object_name() == name).unwrap();
        let min = spec["minReplicaCount"].as_u64().unwrap();
        assert_eq!(min == 0, consumer.scales_to_zero, "{name}");
        assert!(spec["maxReplicaCount"].as_u64().unwrap() >= min.max(1));
        for trigger in spec["triggers"].as_array().unwrap() {
            assert_eq!(keys(trigger), ["type", "metricType", "metadata", "authenticationRef"]);
            assert_eq!(trigger["type"], "azure-servicebus");
            assert_eq!(trigger["authenticationRef"]["name"], TRIGGER_AUTHENTICATION);
            let metadata = &trigger["metadata"];
            for (key, value) in metadata.as_object().unwrap() {
                assert!(
                    [
                        "queueName",
                        "topicName",
                        "subscriptionName",
                        "namespace",
                        "messageCount"
                    ]
                    .contains(&key.as_str()),
                    "azure-servicebus metadata {key} is not documented"
                );
                assert!(value.is_string(), "trigger metadata values are strings ({key})");
            }
            assert!(metadata["namespace"].is_string(), "pod identity needs the namespace");
            let count: u32 = metadata["messageCount"].as_str().unwrap().parse().unwrap();
            assert!(count > 0);
            let on_queue = metadata.get("queueName").is_some();
            let on_subscription = metadata.get("topicName").is_some() && metadata.get("subscriptionName").is_some();
            assert!(
                on_queue != on_subscription,
                "queueName, or topicName and subscriptionName"
            );
        }
    }
}

#[test]
fn identities_get_only_their_own_entities() {
    let files = default_files();
    let topology_file = files.iter().find(|f| f.path == "bicep/topology.json").unwrap();
    let json: Value = serde_json::from_str(&topology_file.text).unwrap();
    let identities = json["identities"].as_array().unwrap();
    let names = |field: &str| -> Vec<String> {
        json[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    // The saga consumers' entities require sessions (main.bicep reads these).
    assert_eq!(
        names("sessionQueues"),
        ["release-orchestration", "gitops-sync", "probe"]
    );
    assert_eq!(
        names("sessionSubscriptions"),
        ["release-orchestration", "gitops-sync", "probe"]
    );
    let main = files.iter().find(|f| f.path == "bicep/main.bicep").unwrap();
    assert!(
        main.text
            .contains("requiresSession: contains(topology.sessionQueues, queue)")
    );
    assert!(
        main.text
            .contains("requiresSession: contains(topology.sessionSubscriptions, subscription)")
    );
    let queues = json["queues"].as_array().unwrap();
    let subscriptions = json["subscriptions"].as_array().unwrap();
    for grant in json["grants"]["queues"].as_array().unwrap() {
        let identity = &identities[grant["identity"].as_u64().unwrap() as usize];
        let queue = &queues[grant["queue"].as_u64().unwrap() as usize];
        assert_eq!(
            &identity["component"], queue,
            "a consumer's rights on a queue are on its own"
        );
    }
    for grant in json["grants"]["subscriptions"].as_array().unwrap() {
        let identity = &identities[grant["identity"].as_u64().unwrap() as usize];
        let subscription = &subscriptions[grant["subscription"].as_u64().unwrap() as usize];
        assert_eq!(&identity["component"], subscription);
    }
    for grant in json["grants"]["namespace"].as_array().unwrap() {
        let identity = &identities[grant["identity"].as_u64().unwrap() as usize];
        assert!(
            identity["component"] == bicep::API_COMPONENT || identity["component"] == bicep::KEDA_COMPONENT,
            "only the API and KEDA have rights on the whole namespace: {identity}"
        );
    }
    for grant in json["grants"]["blobs"].as_array().unwrap() {
        let identity = &identities[grant["identity"].as_u64().unwrap() as usize];
        let keeps_blobs = consumers()
            .iter()
            .find(|c| identity["component"] == c.name.as_str())
            .is_none_or(|c| c.keeps_blobs);
        assert_eq!(grant["container"].is_null(), keeps_blobs, "{identity}");
    }
    // Every subscription has its two rules.
    let rules = json["rules"].as_array().unwrap();
    assert_eq!(rules.len(), subscriptions.len() * 2);
    let main = files.iter().find(|f| f.path == "bicep/main.bicep").unwrap();
    assert!(main.text.contains("loadJsonContent('topology.json')"));
}

/// The example overlay's files, parsed, by name.
fn overlay_documents(files: &[RenderedFile], name: &str) -> Vec<Value> {
    let path = format!("kubernetes/overlays/example/{name}");
    let file = files.iter().find(|f| f.path == path).unwrap();
    parse_documents(&file.text)
}

fn pods(files: &[RenderedFile]) -> Vec<(String, Value)> {
    base_objects(files)
        .into_iter()
        .filter(|(_, o)| kind_of(o) == "Deployment")
        .map(|(path, o)| (path, o["spec"]["template"]["spec"].clone()))
        .collect()
}

/// A broken KEDA identity (or a Service Bus outage) makes every scaler
/// fail; KEDA then holds each consumer at one replica instead of leaving a
/// scaled-to-zero consumer at zero with its queue filling. KEDA applies a
/// fallback only to `AverageValue` triggers.
#[test]
fn every_scaled_object_falls_back_to_a_replica_when_its_scaler_fails() {
    let files = default_files();
    let scaled: Vec<Value> = base_objects(&files)
        .into_iter()
        .map(|(_, o)| o)
        .filter(|o| kind_of(o) == "ScaledObject")
        .collect();
    assert_eq!(scaled.len(), consumers().len());
    for object in scaled {
        let spec = &object["spec"];
        let fallback = &spec["fallback"];
        let fields: Vec<&String> = fallback.as_object().unwrap().keys().collect();
        assert_eq!(fields, ["failureThreshold", "replicas"], "KEDA's documented fallback");
        assert_eq!(fallback["failureThreshold"], 3, "{object}");
        assert!(fallback["replicas"].as_u64().unwrap() >= 1, "{object}");
        assert!(fallback["replicas"].as_u64() <= spec["maxReplicaCount"].as_u64());
        for trigger in spec["triggers"].as_array().unwrap() {
            assert_eq!(trigger["metricType"], "AverageValue", "{object}");
        }
    }
}

/// KEDA's azure-servicebus scaler takes the namespace's name; bosun takes
/// the name or the host name. The overlay copies the setting into every
/// trigger keeping what precedes the first `.` (kustomize's source
/// `delimiter` and `index`), which is the name in both forms bosun reads
/// as the same namespace.
#[test]
fn keda_gets_the_service_bus_namespace_name_whichever_form_the_settings_use() {
    use crate::backends::servicebus::connection::ServiceBusEndpoint;
    let files = default_files();
    let kustomization = &overlay_documents(&files, "kustomization.yaml")[0];
    let replacements = kustomization["replacements"].as_array().unwrap();
    assert_eq!(replacements.len(), 1);
    let source = &replacements[0]["source"];
    assert_eq!(source["fieldPath"], "data.BOSUN_SERVICEBUS_NAMESPACE");
    assert_eq!(source["options"]["delimiter"], ".");
    assert_eq!(source["options"]["index"], 0);
    assert_eq!(
        replacements[0]["targets"][0]["fieldPaths"][0],
        "spec.triggers.*.metadata.namespace"
    );
    // kustomize: split the source on the delimiter, take the index.
    let keda_namespace = |configured: &str| -> String {
        let delimiter = source["options"]["delimiter"].as_str().unwrap();
        let index = source["options"]["index"].as_u64().unwrap() as usize;
        configured.split(delimiter).nth(index).unwrap().to_owned()
    };
    let example = overlay_documents(&files, "config.yaml")[0]["data"]["BOSUN_SERVICEBUS_NAMESPACE"]
        .as_str()
        .unwrap()
        .to_owned();
    for configured in [example.clone(), format!("{example}.servicebus.windows.net")] {
        let endpoint = ServiceBusEndpoint::from_namespace(&configured, "workload-identity", None).unwrap();
        assert_eq!(endpoint.host, format!("{example}.servicebus.windows.net"));
        assert_eq!(keda_namespace(&configured), example, "{configured}");
        assert!(!keda_namespace(&configured).contains('.'));
    }
}

/// Every pod at full scale (the API's replicas, each consumer at KEDA's
/// `maxReplicaCount`) with its pool full stays within the user connections
/// of the PostgreSQL server main.bicep makes by default, so scaling out
/// never turns into "too many connections".
#[test]
fn every_pod_at_full_scale_fits_the_default_servers_connections() {
    let files = default_files();
    let objects = base_objects(&files);
    let config = objects
        .iter()
        .map(|(_, o)| o)
        .find(|o| kind_of(o) == "ConfigMap")
        .unwrap();
    let pool: u32 = config["data"]["BOSUN_DATABASE_POOL_SIZE"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(pool, kubernetes::DATABASE_POOL_SIZE);
    let mut pods = 0u32;
    for (_, deployment) in objects.iter().filter(|(_, o)| kind_of(o) == "Deployment") {
        let name = deployment["metadata"]["name"].as_str().unwrap();
        let scaled = objects
            .iter()
            .map(|(_, o)| o)
            .find(|o| kind_of(o) == "ScaledObject" && o["metadata"]["name"] == name)
            .map_or(0, |o| o["spec"]["maxReplicaCount"].as_u64().unwrap());
        let replicas = deployment["spec"]["replicas"].as_u64().unwrap_or(1).max(scaled);
        pods += u32::try_from(replicas).unwrap();
    }
    assert!(
        pods * pool <= kubernetes::DEFAULT_SERVER_USER_CONNECTIONS,
        "{pods} pods x {pool} connections > {} user connections of the default server",
        kubernetes::DEFAULT_SERVER_USER_CONNECTIONS
    );
    let bicep = &files.iter().find(|f| f.path == "bicep/main.bicep").unwrap().text;
    assert!(
        bicep.contains("param postgresSkuName string = 'Standard_B2s'"),
        "DEFAULT_SERVER_USER_CONNECTIONS is Standard_B2s's; change both together"
    );
}

/// Every Deployment that may run more than one pod (the API, and every
/// consumer KEDA may scale past one) prefers one pod per zone and per
/// node, without refusing to schedule on a small cluster.
#[test]
fn multi_replica_deployments_spread_over_zones_and_nodes() {
    let files = default_files();
    let objects = base_objects(&files);
    let max_replicas = |name: &str| -> u64 {
        objects
            .iter()
            .map(|(_, o)| o)
            .find(|o| kind_of(o) == "ScaledObject" && o["metadata"]["name"] == name)
            .map_or(0, |o| o["spec"]["maxReplicaCount"].as_u64().unwrap())
    };
    let mut spread = 0;
    for (path, object) in objects.iter().filter(|(_, o)| kind_of(o) == "Deployment") {
        let name = object["metadata"]["name"].as_str().unwrap();
        let replicas = object["spec"]["replicas"].as_u64().unwrap_or(0).max(max_replicas(name));
        let constraints = &object["spec"]["template"]["spec"]["topologySpreadConstraints"];
        if replicas <= 1 {
            continue;
        }
        spread += 1;
        let constraints = constraints.as_array().unwrap_or_else(|| panic!("{path}: no spread"));
        let keys: Vec<&str> = constraints.iter().map(|c| c["topologyKey"].as_str().unwrap()).collect();
        assert_eq!(
            keys,
            ["topology.kubernetes.io/zone", "kubernetes.io/hostname"],
            "{path}"
        );
        for constraint in constraints {
            assert_eq!(constraint["whenUnsatisfiable"], "ScheduleAnyway", "{path}");
            assert_eq!(constraint["maxSkew"], 1, "{path}");
            assert_eq!(
                constraint["labelSelector"]["matchLabels"], object["spec"]["selector"]["matchLabels"],
                "{path}: counts the Deployment's own pods"
            );
        }
    }
    // Every consumer but the one kept at one replica (`probe`), and the API.
    assert_eq!(spread, consumers().len(), "the API and the scaling consumers spread");
}

/// The namespace admits only pods meeting the Pod Security Standards'
/// `restricted` profile, and every container of every pod meets it.
#[test]
fn the_namespace_enforces_pod_security_restricted_and_every_pod_meets_it() {
    let files = default_files();
    let namespaces: Vec<Value> = base_objects(&files)
        .into_iter()
        .map(|(_, o)| o)
        .filter(|o| kind_of(o) == "Namespace")
        .collect();
    assert_eq!(namespaces.len(), 1, "the base has its Namespace");
    let labels = &namespaces[0]["metadata"]["labels"];
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(labels[format!("pod-security.kubernetes.io/{mode}")], "restricted");
    }
    assert!(
        namespaces[0]["metadata"]["annotations"].is_null(),
        "no checkov skip on the Namespace"
    );
    let kustomization = files
        .iter()
        .find(|f| f.path == "kubernetes/base/kustomization.yaml")
        .unwrap();
    assert_eq!(
        parse_documents(&kustomization.text)[0]["resources"][0],
        "namespace.yaml"
    );
    for (path, pod) in pods(&files) {
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{path}");
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{path}"
        );
        assert!(pod["hostNetwork"].is_null() && pod["hostPID"].is_null() && pod["hostIPC"].is_null());
        for volume in pod["volumes"].as_array().unwrap() {
            assert!(volume["emptyDir"].is_object(), "{path}: restricted volume types");
        }
        let containers = pod["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .chain(pod["containers"].as_array().unwrap());
        for container in containers {
            let context = &container["securityContext"];
            assert_eq!(context["allowPrivilegeEscalation"], false, "{path}");
            assert_eq!(context["runAsNonRoot"], true, "{path}");
            assert_ne!(context["runAsUser"], 0, "{path}");
            assert_eq!(context["capabilities"]["drop"], serde_json::json!(["ALL"]), "{path}");
            assert!(context["capabilities"]["add"].is_null(), "{path}");
            assert!(context["privileged"].is_null(), "{path}");
            for port in container["ports"].as_array().into_iter().flatten() {
                assert!(port["hostPort"].is_null(), "{path}");
            }
        }
    }
}

/// A slow start (opening Service Bus and PostgreSQL, the topology check)
/// has minutes before liveness may restart the container; liveness and
/// readiness stay.
#[test]
fn every_bosun_container_has_a_generous_startup_probe_on_healthz() {
    let files = default_files();
    for (path, pod) in pods(&files) {
        for container in pod["containers"].as_array().unwrap() {
            let startup = &container["startupProbe"];
            assert_eq!(startup["httpGet"]["path"], "/healthz", "{path}");
            assert_eq!(startup["httpGet"]["port"], "ops", "{path}");
            let seconds = startup["periodSeconds"].as_u64().unwrap() * startup["failureThreshold"].as_u64().unwrap();
            assert!(seconds >= 120, "{path}: {seconds}s to start");
            assert!(container["livenessProbe"].is_object() && container["readinessProbe"].is_object());
        }
    }
}

/// A byte count of a Kubernetes quantity (`512Mi`, `2Gi`).
fn bytes(quantity: &Value) -> u64 {
    let text = quantity.as_str().unwrap();
    let (number, factor) = if let Some(n) = text.strip_suffix("Gi") {
        (n, 1 << 30)
    } else {
        (text.strip_suffix("Mi").unwrap(), 1 << 20)
    };
    number.parse::<u64>().unwrap() * factor
}

/// No pod can fill its node's disk through an emptyDir, and the consumers
/// known to need more (builds, Pulumi, whole logs) get more than the rest.
#[test]
fn every_empty_dir_is_limited_and_heavier_consumers_get_more() {
    let files = default_files();
    let mut by_consumer = BTreeMap::new();
    for (path, pod) in pods(&files) {
        for volume in pod["volumes"].as_array().unwrap() {
            assert!(bytes(&volume["emptyDir"]["sizeLimit"]) > 0, "{path}");
        }
        let container = &pod["containers"][0];
        let memory = bytes(&container["resources"]["limits"]["memory"]);
        assert!(bytes(&container["resources"]["requests"]["memory"]) <= memory, "{path}");
        let tmp = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "tmp")
            .map(|v| bytes(&v["emptyDir"]["sizeLimit"]))
            .unwrap();
        by_consumer.insert(pod["serviceAccountName"].as_str().unwrap().to_owned(), (memory, tmp));
    }
    let (commit_memory, commit_tmp) = by_consumer["bosun-commit"];
    for heavier in [
        "bosun-container-build",
        "bosun-iac-provisioning",
        "bosun-pipeline-monitor",
    ] {
        let (memory, tmp) = by_consumer[heavier];
        assert!(memory > commit_memory, "{heavier}: more memory than commit");
        assert!(tmp >= commit_tmp, "{heavier}");
    }
    assert!(
        by_consumer["bosun-container-build"].1 > commit_tmp,
        "builds get more /tmp"
    );
}

/// The example overlay pins the image by digest (what the base's checkov
/// skip CKV_K8S_43 relies on), generates the Secret from a file the user
/// writes (so it lands in the namespace with everything else), and its
/// files tell the user to copy and edit them.
#[test]
fn the_example_overlay_pins_the_digest_generates_the_secret_and_is_for_editing() {
    let files = default_files();
    let kustomization = &overlay_documents(&files, "kustomization.yaml")[0];
    for image in kustomization["images"].as_array().unwrap() {
        let digest = image["digest"].as_str().unwrap();
        let hex = digest.strip_prefix("sha256:").unwrap();
        assert!(
            hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()),
            "{digest}"
        );
        assert!(image["newTag"].is_null(), "the digest, not a tag");
    }
    assert_eq!(kustomization["images"][0]["name"], kubernetes::IMAGE);
    assert_eq!(kustomization["resources"], serde_json::json!(["../../base"]));
    let generator = &kustomization["secretGenerator"][0];
    assert_eq!(generator["name"], kubernetes::SECRETS);
    assert_eq!(generator["envs"], serde_json::json!([kubernetes::SECRETS_FILE]));
    let overlay: Vec<&RenderedFile> = files
        .iter()
        .filter(|f| f.path.starts_with("kubernetes/overlays/example/"))
        .collect();
    assert!(overlay.iter().any(|f| f.path.ends_with("/secrets.env")));
    for file in overlay {
        assert!(!file.text.contains("Do not edit"), "{}", file.path);
        assert!(file.text.contains("Copy this"), "{}", file.path);
    }
    let secrets = files.iter().find(|f| f.path.ends_with("/secrets.env")).unwrap();
    assert!(
        secrets
            .text
            .lines()
            .any(|line| line.starts_with("BOSUN_DATABASE_URL=postgres://"))
    );
}

/// The example overlay's settings, over the base's, with the Secret's,
/// are settings bosun starts with: Azure adapters, and container-build
/// building with ACR Tasks in the registry's subscription and group.
#[test]
fn the_example_overlay_settings_load_and_build_with_acr_tasks() {
    use crate::runtime::config::AdapterKind;
    let files = default_files();
    let base = base_objects(&files)
        .into_iter()
        .find(|(_, o)| kind_of(o) == "ConfigMap")
        .unwrap()
        .1;
    let overlay = &overlay_documents(&files, "config.yaml")[0];
    let mut data: BTreeMap<String, String> = BTreeMap::new();
    for config in [&base, overlay] {
        for (name, value) in config["data"].as_object().unwrap() {
            data.insert(name.clone(), value.as_str().unwrap().to_owned());
        }
    }
    let secrets = files.iter().find(|f| f.path.ends_with("/secrets.env")).unwrap();
    for line in secrets.text.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.split_once('=').unwrap();
        data.insert(name.to_owned(), value.to_owned());
    }
    assert_eq!(data["BOSUN_CONTAINER_BUILDER"], "acr-tasks");
    let settings = Settings::from_sources(&data, &BTreeMap::new()).unwrap_or_else(|err| panic!("{err}"));
    // PostgreSQL: Entra ID tokens of the shared database identity, for the
    // user the URL names, with no password in it.
    assert_eq!(
        settings.database_auth,
        crate::runtime::config::DatabaseAuth::EntraId {
            identity: crate::runtime::config::EntraIdentity::WorkloadIdentity,
            client_id: Some(data["BOSUN_DATABASE_CLIENT_ID"].clone()),
        }
    );
    let url = settings.database_url.as_ref().unwrap().expose();
    assert!(
        url.starts_with(&format!("postgres://{}@", super::bicep::DATABASE_IDENTITY)),
        "{url}"
    );
    let AdapterKind::Azure(azure) = settings.adapters else {
        panic!("azure adapters")
    };
    // iac-provisioning fetches each module's program from its repository.
    assert_eq!(azure.pulumi.program_dir, None);
    assert_eq!(
        azure.pulumi.repository, None,
        "the empty setting is the module's repository"
    );
    assert_eq!(azure.pulumi.path, "infra");
    assert_eq!(azure.pulumi.reference, "main");
    let tasks = azure.acr.unwrap().tasks.expect("ACR Tasks");
    assert_eq!(tasks.subscription, data["BOSUN_ACR_SUBSCRIPTION"]);
    assert_eq!(tasks.resource_group, data["BOSUN_ACR_RESOURCE_GROUP"]);
    assert_eq!(tasks.registry_name, "contoso");
}

/// iac-provisioning runs the image with the Pulumi CLI (the Dockerfile's
/// `iac` target), every other pod bosun's; the base's ConfigMap says
/// where its program comes from, and the overlay pins both images by
/// digest.
#[test]
fn iac_provisioning_runs_the_pulumi_image_with_its_program_settings() {
    let files = default_files();
    let overlay = &overlay_documents(&files, "kustomization.yaml")[0];
    let pinned: Vec<&str> = overlay["images"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|image| image["digest"].as_str().is_some_and(|d| d.starts_with("sha256:")))
        .map(|image| image["name"].as_str().unwrap())
        .collect();
    assert_eq!(pinned, [kubernetes::IMAGE, kubernetes::IAC_IMAGE]);
    let dockerfile = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("FROM runtime AS iac"),
        "the Dockerfile builds the iac image"
    );
    assert!(
        dockerfile.contains("sha256sum -c"),
        "the Pulumi CLI's checksum is checked"
    );
    for (path, pod) in pods(&files) {
        let expected = if path.ends_with("/iac-provisioning.yaml") {
            kubernetes::IAC_IMAGE
        } else {
            kubernetes::IMAGE
        };
        for container in pod["containers"]
            .as_array()
            .unwrap()
            .iter()
            .chain(pod["initContainers"].as_array().unwrap())
        {
            let image = container["image"].as_str().unwrap();
            assert_eq!(image.split(':').next(), Some(expected), "{path}: {image}");
        }
    }
    let config = base_objects(&files)
        .into_iter()
        .find(|(_, o)| kind_of(o) == "ConfigMap")
        .unwrap()
        .1;
    assert_eq!(config["data"]["BOSUN_PULUMI_PROGRAM_PATH"], "infra");
    assert_eq!(config["data"]["BOSUN_PULUMI_PROGRAM_REF"], "main");
    assert_eq!(config["data"]["BOSUN_PULUMI_PROGRAM_REPOSITORY"], "");
    assert!(
        config["data"].get("BOSUN_PULUMI_PROGRAM_DIR").is_none(),
        "nothing baked in by hand"
    );
}

/// What `az deployment group show -o json` prints for a deployment of
/// `main.bicep`: its outputs under `properties.outputs`, each wrapped by
/// ARM as `{type, value}`, `clientIds` one entry per identity of
/// `topology.json` (the array `main.bicep` loops over).
fn sample_deployment(files: &[RenderedFile]) -> Value {
    let topology = files.iter().find(|f| f.path == "bicep/topology.json").unwrap();
    let topology: Value = serde_json::from_str(&topology.text).unwrap();
    let client_ids: Vec<Value> = topology["identities"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, identity)| {
            serde_json::json!({
                "component": identity["component"],
                "clientId": format!("00000000-0000-0000-0000-{i:012}"),
            })
        })
        .collect();
    serde_json::json!({
        "id": "/subscriptions/s/resourceGroups/bosun-rg/providers/Microsoft.Resources/deployments/main",
        "name": "main",
        "properties": {
            "provisioningState": "Succeeded",
            "outputs": {
                "clientIds": {"type": "Array", "value": client_ids},
                "serviceBusNamespace": {"type": "String", "value": "contoso-bosun"},
                "blobUrl": {"type": "String", "value": "https://contosobosun.blob.core.windows.net/"},
                "postgresHost": {"type": "String", "value": "contoso-bosun.postgres.database.azure.com"},
                "databaseClientId": {"type": "String", "value": "0b5c8e1a-3f2d-4c7b-9e6a-5d4c3b2a1f00"},
                "databaseUser": {"type": "String", "value": "bosun-database"},
            },
        },
    })
}

/// `bosun infra identities --from-deployment` gives every ServiceAccount
/// of the base its identity's client id from the deployment's outputs
/// (the whole `az deployment group show` JSON, or only its outputs), and
/// names the components a deployment has no identity for.
#[test]
fn identities_from_a_deployment_annotate_every_service_account_with_its_client_id() {
    let files = default_files();
    let deployment = sample_deployment(&files);
    let by_component: BTreeMap<String, String> = deployment["properties"]["outputs"]["clientIds"]["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["component"].as_str().unwrap().to_owned(),
                e["clientId"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for json in [deployment.to_string(), deployment["properties"]["outputs"].to_string()] {
        let outputs = identities::read_outputs(&json).unwrap();
        assert_eq!(outputs.client_ids, by_component);
        assert_eq!(outputs.service_bus_namespace.as_deref(), Some("contoso-bosun"));
        assert_eq!(
            outputs.database_client_id.as_deref(),
            Some("0b5c8e1a-3f2d-4c7b-9e6a-5d4c3b2a1f00")
        );
        assert_eq!(outputs.database_user.as_deref(), Some(super::bicep::DATABASE_IDENTITY));
        assert_eq!(outputs.keda_client_id(), Some(by_component["keda"].as_str()));
        let file = identities::identities_file(&consumers(), &outputs).unwrap();
        assert!(file.path.ends_with("/identities.yaml"));
        assert!(file.text.starts_with("# Written by `bosun infra identities"));
        let patches = parse_documents(&file.text);
        let accounts: Vec<Value> = base_objects(&files)
            .into_iter()
            .map(|(_, o)| o)
            .filter(|o| kind_of(o) == "ServiceAccount")
            .collect();
        assert_eq!(patches.len(), accounts.len(), "one patch per ServiceAccount");
        for account in accounts {
            let name = account["metadata"]["name"].as_str().unwrap();
            let component = account["metadata"]["labels"]["app.kubernetes.io/component"]
                .as_str()
                .unwrap();
            let patch = patches
                .iter()
                .find(|p| p["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("{name} has no client id"));
            assert_eq!(
                patch["metadata"]["annotations"]["azure.workload.identity/client-id"],
                by_component[component].as_str(),
                "{name}"
            );
        }
    }
    // A deployment of an older main.bicep, without an identity of today's.
    let mut older = deployment.clone();
    older["properties"]["outputs"]["clientIds"]["value"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["component"] != "container-build");
    let outputs = identities::read_outputs(&older.to_string()).unwrap();
    let err = identities::identities_file(&consumers(), &outputs).unwrap_err();
    assert!(err.to_string().contains("container-build"), "{err}");
    assert!(identities::read_outputs("{\"properties\": {\"outputs\": {}}}").is_err());
    assert!(identities::read_outputs("not json").is_err());
}
