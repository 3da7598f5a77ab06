//! `infra/kubernetes/`: the kustomize base (`base/`) and its example
//! overlay (`overlays/example/`; kustomize refuses a base that contains its
//! overlays, hence the two folders).
//!
//! Every pod runs the one image as user 10001 with a read-only root file
//! system (the data directory and `/tmp` are `emptyDir` volumes), no
//! privilege escalation and no capabilities, and answers its probes on the
//! ops port ([`OPS_PORT`]): liveness on `/healthz`, readiness on `/readyz`
//! (false from SIGTERM on). `terminationGracePeriodSeconds` is bosun's
//! shutdown grace plus [`GRACE_MARGIN_SECONDS`], so the kubelet never kills
//! a drain bosun would have finished. Consumer pods serve no API.
//!
//! Every pod migrates before it serves: its first container is an init
//! container ([`MIGRATE_CONTAINER`]) running `bosun migrate
//! --compatible-only` from the same
//! image, with the same settings, Secret, identity, volumes and security
//! context as the bosun container. No object has to be applied before
//! another: a new image changes the pod template, each new pod migrates
//! (under PostgreSQL's advisory lock: the first applies what is missing,
//! the others find it applied) and only then starts bosun, while the old
//! pods keep running on the expanded schema (`runs_with` of
//! `migrations/postgres/`) until new ones are ready (`maxUnavailable: 0`).
//! There is no migration Job: a Job's pod template
//! cannot change, so a Job under a fixed name fails on the next image, and
//! one named per image is ordered against nothing.

use serde_json::{Value, json};

use super::yaml::{self, YamlError};
use super::{API_PORT, ConsumerInfra, InfraSettings, OPS_PORT, RenderedFile, events_topic, header};

/// Seconds the kubelet waits beyond bosun's own shutdown grace before it
/// kills a pod (closing connections, giving prefetched messages back).
pub const GRACE_MARGIN_SECONDS: u64 = 15;
/// The image the base names; the overlay's `images:` sets its registry.
pub const IMAGE: &str = "bosun";
/// The ConfigMap every pod reads its `BOSUN_*` settings from.
pub const CONFIG_MAP: &str = "bosun-config";
/// The Secret every pod reads its secret settings from:
/// `BOSUN_DATABASE_URL`, and the PATs where workload identity is not used
/// (made by the operator, never rendered: it holds passwords).
pub const SECRETS: &str = "bosun-secrets";
/// The KEDA TriggerAuthentication of every ScaledObject.
pub const TRIGGER_AUTHENTICATION: &str = "bosun-servicebus";
/// The Service Bus namespace the base names until an overlay sets it.
pub const NAMESPACE_PLACEHOLDER: &str = "set-by-overlay";
/// Messages per replica KEDA aims for on each trigger.
pub const MESSAGES_PER_REPLICA: u32 = 5;
/// The most replicas KEDA gives one consumer.
pub const MAX_REPLICAS: u32 = 10;
/// Where the data directory is mounted (the image's `BOSUN_DATA_DIR`).
pub const DATA_DIR: &str = "/var/lib/bosun/data";
/// The uid and gid of the image's `bosun` user.
pub const RUN_AS: u32 = 10001;
/// The init container of every pod, running `bosun migrate` before bosun
/// starts.
pub const MIGRATE_CONTAINER: &str = "migrate";

/// Every file of `kubernetes/`.
pub fn render(consumers: &[ConsumerInfra], settings: &InfraSettings) -> Result<Vec<RenderedFile>, YamlError> {
    let mut files = Vec::new();
    let mut resources = vec![
        "config.yaml".to_owned(),
        "network.yaml".to_owned(),
        "keda.yaml".to_owned(),
        "api.yaml".to_owned(),
    ];
    resources.extend(consumers.iter().map(|c| format!("consumers/{}.yaml", c.name)));
    files.push(yaml_file(
        "kubernetes/base/kustomization.yaml",
        &[json!({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "labels": [{"pairs": {"app.kubernetes.io/part-of": "bosun"}, "includeSelectors": false}],
            "resources": resources,
        })],
    )?);
    files.push(base_file("kubernetes/base/config.yaml", &[config_map()])?);
    files.push(base_file("kubernetes/base/network.yaml", &network_policies())?);
    files.push(base_file("kubernetes/base/keda.yaml", &[trigger_authentication()])?);
    files.push(base_file("kubernetes/base/api.yaml", &api(settings))?);
    for consumer in consumers {
        files.push(base_file(
            &format!("kubernetes/base/consumers/{}.yaml", consumer.name),
            &consumer_objects(consumer, settings),
        )?);
    }
    files.extend(overlay(consumers, settings)?);
    Ok(files)
}

fn yaml_file(path: &str, documents: &[Value]) -> Result<RenderedFile, YamlError> {
    Ok(RenderedFile {
        path: path.to_owned(),
        text: format!("{}{}", header("#"), yaml::documents(documents)?),
    })
}

/// The checkov checks the base does not meet by design, each with why
/// (checkov reads `checkov.io/skipN` annotations): every object of the base
/// has no namespace (the overlay sets it), and every pod names its image by
/// tag (the overlay's `images:` sets the registry and pins the digest) and
/// gets its settings as environment variables (bosun reads its settings,
/// secrets included, from `BOSUN_*` variables only).
const CHECKOV_SKIPS: &[(&str, &str, bool)] = &[
    ("CKV_K8S_21", "the base has no namespace; the overlay sets it", false),
    (
        "CKV_K8S_43",
        "the base names the image by tag; the overlay's images: pins the digest",
        true,
    ),
    (
        "CKV_K8S_35",
        "bosun reads its settings, secrets included, from BOSUN_* environment variables only",
        true,
    ),
];

/// A file of the base, or a patch of the overlay (which checkov reads as
/// objects too): its objects with the checkov skips that apply.
fn base_file(path: &str, documents: &[Value]) -> Result<RenderedFile, YamlError> {
    let documents: Vec<Value> = documents
        .iter()
        .cloned()
        .map(|mut object| {
            let has_pod = matches!(object["kind"].as_str(), Some("Deployment" | "Job"));
            let mut number = 0;
            for (check, why, pods_only) in CHECKOV_SKIPS {
                if *pods_only && !has_pod {
                    continue;
                }
                number += 1;
                let annotations = &mut object["metadata"]["annotations"];
                if !annotations.is_object() {
                    *annotations = json!({});
                }
                annotations[format!("checkov.io/skip{number}")] = json!(format!("{check}={why}"));
            }
            object
        })
        .collect();
    yaml_file(path, &documents)
}

/// Ingress only where something listens: the ops port on every pod (kubelet
/// probes, Prometheus) and the API's port on the API's; egress is open
/// (Azure Service Bus, Blob Storage, PostgreSQL, Azure DevOps, registries).
fn network_policies() -> Vec<Value> {
    let policy = |name: &str, selector: Value, port: u16| {
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
    vec![
        policy("bosun-ops", json!({"app.kubernetes.io/name": "bosun"}), OPS_PORT),
        policy("bosun-api", labels("api"), API_PORT),
    ]
}

fn labels(component: &str) -> Value {
    json!({"app.kubernetes.io/name": "bosun", "app.kubernetes.io/component": component})
}

fn config_map() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "labels": labels("config")},
        "data": {
            "BOSUN_TRANSPORT": "servicebus",
            "BOSUN_SERVICEBUS_NAMESPACE": NAMESPACE_PLACEHOLDER,
            "BOSUN_SERVICEBUS_AUTH": "workload-identity",
            "BOSUN_BLOB_URL": "https://set-by-overlay.blob.core.windows.net",
            "BOSUN_BLOB_AUTH": "workload-identity",
            "BOSUN_ADAPTERS": "azure",
            "BOSUN_OPS_ADDR": format!("0.0.0.0:{OPS_PORT}"),
            "BOSUN_LOG_FORMAT": "json",
            "BOSUN_DATA_DIR": DATA_DIR,
            // Empty: write the current wire version. During a rolling
            // upgrade the overlay sets the previous release's wire version
            // (`bosun version`) so every pod writes what the old pods read,
            // and empties it once no old pod runs (docs/UPGRADING.md).
            "BOSUN_COMPAT_VERSION": "",
        },
    })
}

fn trigger_authentication() -> Value {
    json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {"name": TRIGGER_AUTHENTICATION, "labels": labels("keda")},
        // KEDA's own workload identity reads the message counts (the
        // identity its operator's ServiceAccount names; README).
        "spec": {"podIdentity": {"provider": "azure-workload"}},
    })
}

fn service_account(name: &str, component: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "labels": labels(component),
            // The overlay sets the client id of this component's identity
            // (an output of infra/bicep/main.bicep).
            "annotations": {"azure.workload.identity/client-id": "set-by-overlay"},
        },
        "automountServiceAccountToken": false,
    })
}

/// The pod of one component: the migrate init container, then the bosun
/// container with `args`, its probes, its volumes and its security context.
fn pod_spec(service_account: &str, args: &[&str], ports: Value, settings: &InfraSettings) -> Value {
    let container = json!({
        "name": "bosun",
        "image": format!("{IMAGE}:{}", settings.image_tag),
        "imagePullPolicy": "Always",
        "args": args,
        "envFrom": [{"configMapRef": {"name": CONFIG_MAP}}, {"secretRef": {"name": SECRETS}}],
        "ports": ports,
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "ops"},
            "periodSeconds": 10,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "ops"},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 2,
        },
    });
    json!({
        "serviceAccountName": service_account,
        "automountServiceAccountToken": false,
        "terminationGracePeriodSeconds": settings.shutdown_grace_seconds + GRACE_MARGIN_SECONDS,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [migrate_container(&container)],
        "containers": [container],
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
        ],
    })
}

/// A pod's labels: its component's, and the workload identity webhook's
/// opt-in (every pod talks to Azure with its ServiceAccount's identity).
fn pod_labels(component: &str) -> Value {
    let mut labels = labels(component);
    labels["azure.workload.identity/use"] = json!("true");
    labels
}

/// A Deployment of `pod`. A rollout stops an old pod only once a new one
/// is ready, so a new pod that cannot migrate (or start) leaves every old
/// one serving: `maxUnavailable: 0`, and up to a quarter more pods while
/// it rolls (Kubernetes' default surge).
fn deployment(name: &str, component: &str, replicas: Option<u32>, pod: Value) -> Value {
    let mut spec = json!({
        "selector": {"matchLabels": labels(component)},
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"},
        },
        "template": {
            "metadata": {"labels": pod_labels(component)},
            "spec": pod,
        },
    });
    if let Some(replicas) = replicas {
        spec["replicas"] = json!(replicas);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels(component)},
        "spec": spec,
    })
}

fn disruption_budget(name: &str, component: &str) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "labels": labels(component)},
        // One pod at a time, whatever KEDA has scaled to (0 and 1 included).
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels(component)}},
    })
}

fn ops_port() -> Value {
    json!({"name": "ops", "containerPort": OPS_PORT, "protocol": "TCP"})
}

/// A consumer: its ServiceAccount, Deployment, PodDisruptionBudget and
/// ScaledObject.
pub fn consumer_objects(consumer: &ConsumerInfra, settings: &InfraSettings) -> Vec<Value> {
    let name = consumer.object_name();
    let component = consumer.name.as_str();
    let pod = pod_spec(
        &name,
        &["serve", "--consumers", component],
        json!([ops_port()]),
        settings,
    );
    vec![
        service_account(&name, component),
        deployment(&name, component, None, pod),
        disruption_budget(&name, component),
        scaled_object(consumer),
    ]
}

/// The KEDA ScaledObject of a consumer: one `azure-servicebus` trigger on
/// its queue and one on its subscription of the events topic.
pub fn scaled_object(consumer: &ConsumerInfra) -> Value {
    let trigger = |metadata: Value| {
        json!({
            "type": "azure-servicebus",
            "metadata": metadata,
            "authenticationRef": {"name": TRIGGER_AUTHENTICATION},
        })
    };
    let count = MESSAGES_PER_REPLICA.to_string();
    let mut triggers = vec![trigger(json!({
        "queueName": consumer.name,
        "namespace": NAMESPACE_PLACEHOLDER,
        "messageCount": count,
    }))];
    if let Some(subscription) = &consumer.subscription {
        triggers.push(trigger(json!({
            "topicName": events_topic(),
            "subscriptionName": subscription,
            "namespace": NAMESPACE_PLACEHOLDER,
            "messageCount": count,
        })));
    }
    let name = consumer.object_name();
    json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "labels": labels(&consumer.name)},
        "spec": {
            "scaleTargetRef": {"name": name},
            "minReplicaCount": u32::from(!consumer.scales_to_zero),
            "maxReplicaCount": MAX_REPLICAS,
            "pollingInterval": 15,
            "cooldownPeriod": 300,
            "triggers": triggers,
        },
    })
}

fn api(settings: &InfraSettings) -> Vec<Value> {
    let name = "bosun-api";
    let http = format!("0.0.0.0:{API_PORT}");
    let pod = pod_spec(
        name,
        &["api", "--http", &http],
        json!([
            {"name": "http", "containerPort": API_PORT, "protocol": "TCP"},
            ops_port(),
        ]),
        settings,
    );
    vec![
        service_account(name, "api"),
        deployment(name, "api", Some(2), pod),
        disruption_budget(name, "api"),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "labels": labels("api")},
            "spec": {
                "type": "ClusterIP",
                "selector": labels("api"),
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
            },
        }),
    ]
}

/// The init container that runs `bosun migrate --compatible-only` before
/// `main` starts (the migrations the running release survives; a breaking
/// migration waits for an operator's `bosun migrate`, and the new pods wait
/// unready for it):
/// `main`'s image, settings (the `BOSUN_DATABASE_URL` of the Secret
/// included), volumes and security context, in the same pod (so with its
/// identity), with less CPU and memory and no ports or probes (it exits).
/// It has nothing to wait for: PostgreSQL's advisory lock orders the pods
/// that migrate at once, and a transient failure restarts the container.
pub fn migrate_container(main: &Value) -> Value {
    let mut container = json!({
        "name": MIGRATE_CONTAINER,
        "image": main["image"],
        "imagePullPolicy": main["imagePullPolicy"],
        "args": ["migrate", "--compatible-only"],
        "envFrom": main["envFrom"],
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "securityContext": main["securityContext"],
        "volumeMounts": main["volumeMounts"],
    });
    if let Some(env) = main.get("env") {
        container["env"] = env.clone();
    }
    container
}

/// `overlays/example/`: a namespace, the image, the identities' client ids
/// and the Service Bus namespace and storage account, copied into every
/// ScaledObject trigger by a kustomize replacement.
fn overlay(consumers: &[ConsumerInfra], settings: &InfraSettings) -> Result<Vec<RenderedFile>, YamlError> {
    let mut identities: Vec<Value> = consumers
        .iter()
        .map(|consumer| identity_patch(&consumer.object_name(), &consumer.name))
        .collect();
    identities.push(identity_patch("bosun-api", "api"));
    Ok(vec![
        yaml_file(
            "kubernetes/overlays/example/kustomization.yaml",
            &[json!({
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "bosun",
                "resources": ["namespace.yaml", "../../base"],
                "images": [{
                    "name": IMAGE,
                    "newName": "contoso.azurecr.io/bosun",
                    "newTag": settings.image_tag,
                }],
                "patches": [{"path": "config.yaml"}, {"path": "identities.yaml"}],
                "replacements": [{
                    "source": {"kind": "ConfigMap", "name": CONFIG_MAP, "fieldPath": "data.BOSUN_SERVICEBUS_NAMESPACE"},
                    "targets": [{
                        "select": {"kind": "ScaledObject"},
                        "fieldPaths": ["spec.triggers.*.metadata.namespace"],
                    }],
                }],
            })],
        )?,
        yaml_file(
            "kubernetes/overlays/example/namespace.yaml",
            &[json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": "bosun"},
            })],
        )?,
        base_file(
            "kubernetes/overlays/example/config.yaml",
            &[json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIG_MAP},
                "data": {
                    "BOSUN_SERVICEBUS_NAMESPACE": "contoso-bosun",
                    "BOSUN_BLOB_URL": "https://contosobosun.blob.core.windows.net",
                    "BOSUN_AZURE_DEVOPS_ORG_URL": "https://dev.azure.com/contoso",
                    "BOSUN_AZURE_DEVOPS_PROJECT": "platform",
                    "BOSUN_AZURE_DEVOPS_AUTH": "workload-identity",
                    "BOSUN_ACR_REGISTRY": "contoso.azurecr.io",
                    "BOSUN_ACR_AUTH": "workload-identity",
                },
            })],
        )?,
        base_file("kubernetes/overlays/example/identities.yaml", &identities)?,
    ])
}

fn identity_patch(name: &str, component: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "annotations": {
                // The `clientIds` output of infra/bicep/main.bicep, by component.
                "azure.workload.identity/client-id": format!("<clientIds.{component} of the Bicep deployment>"),
            },
        },
    })
}
