//! `infra/kubernetes/`: the kustomize base (`base/`) and its example
//! overlay (`overlays/example/`; kustomize refuses a base that contains its
//! overlays, hence the two folders).
//!
//! Every pod runs the one image as user 10001 with a read-only root file
//! system (the data directory and `/tmp` are `emptyDir` volumes), no
//! privilege escalation and no capabilities, and answers its probes on the
//! ops port ([`OPS_PORT`]): startup and liveness on `/healthz`, readiness
//! on `/readyz` (false from SIGTERM on). The namespace enforces Pod
//! Security `restricted`, which every pod meets. `terminationGracePeriodSeconds` is bosun's
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

use bosun_consumers::iac_provisioning;
use serde_json::{Value, json};

pub mod dashboard;
pub mod monitoring;
mod size;

pub use monitoring::AlertThresholds;
pub use size::{PodSize, pod_size};

use super::bicep::{API_COMPONENT, DATABASE_IDENTITY};
use super::yaml::{self, YamlError};
use super::{API_PORT, ConsumerInfra, InfraSettings, OPS_PORT, RenderedFile, events_topic, header};

/// Seconds the kubelet waits beyond bosun's own shutdown grace before it
/// kills a pod (closing connections, giving prefetched messages back).
pub const GRACE_MARGIN_SECONDS: u64 = 15;
/// The image the base names; the overlay's `images:` sets its registry.
pub const IMAGE: &str = "bosun";
/// The image of iac-provisioning's pod: [`IMAGE`] with the Pulumi CLI (the
/// Dockerfile's `iac` target).
pub const IAC_IMAGE: &str = "bosun-iac";

/// The image a component runs: [`IAC_IMAGE`] for iac-provisioning (it
/// runs the Pulumi CLI), [`IMAGE`] for every other.
pub fn image_of(component: &str) -> &'static str {
    if component == iac_provisioning::NAME {
        IAC_IMAGE
    } else {
        IMAGE
    }
}
/// The ConfigMap every pod reads its `BOSUN_*` settings from.
pub const CONFIG_MAP: &str = "bosun-config";
/// The Secret every pod reads its secret settings from:
/// `BOSUN_DATABASE_URL` (which names the database identity and holds no
/// password), and the PATs where workload identity is not used (made by
/// the operator, never rendered: it holds tokens).
pub const SECRETS: &str = "bosun-secrets";
/// The KEDA TriggerAuthentication of every ScaledObject.
pub const TRIGGER_AUTHENTICATION: &str = "bosun-servicebus";
/// The Service Bus namespace the base names until an overlay sets it.
pub const NAMESPACE_PLACEHOLDER: &str = "set-by-overlay";
/// Messages per replica KEDA aims for on each trigger.
pub const MESSAGES_PER_REPLICA: u32 = 5;
/// The most replicas KEDA gives one consumer.
pub const MAX_REPLICAS: u32 = 10;

/// Each pod's PostgreSQL pool (`BOSUN_DATABASE_POOL_SIZE` in the
/// ConfigMap).
pub const DATABASE_POOL_SIZE: u32 = 3;

/// The user connections of the server main.bicep makes by default
/// (`Standard_B2s`: 429, less the 15 Azure keeps for itself; Azure
/// Database for PostgreSQL flexible server's limits).
pub const DEFAULT_SERVER_USER_CONNECTIONS: u32 = 414;
/// Failed reads of a scaler in a row after which KEDA holds a consumer at
/// [`FALLBACK_REPLICAS`] (a broken KEDA identity or a Service Bus outage
/// must not leave a scaled-to-zero consumer at zero with work waiting).
pub const FALLBACK_FAILURE_THRESHOLD: u32 = 3;
/// The replicas KEDA keeps while its scaler fails.
pub const FALLBACK_REPLICAS: u32 = 1;
/// Where the data directory is mounted (the image's `BOSUN_DATA_DIR`).
pub const DATA_DIR: &str = "/var/lib/bosun/data";
/// The uid and gid of the image's `bosun` user.
pub const RUN_AS: u32 = 10001;
/// The init container of every pod, running `bosun migrate` before bosun
/// starts.
pub const MIGRATE_CONTAINER: &str = "migrate";
/// The Pod Security Standards level the namespace enforces.
pub const POD_SECURITY_LEVEL: &str = "restricted";
/// The Kubernetes namespace the base's Namespace and the example overlay
/// name.
pub const OVERLAY_NAMESPACE: &str = "bosun";
/// The image digest the example overlay pins, a placeholder every
/// environment replaces with its build's (`az acr repository show`).
pub const EXAMPLE_DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
/// The API's replicas.
pub const API_REPLICAS: u32 = 2;
/// How long the startup probe gives bosun to answer `/healthz`.
pub const STARTUP_PROBE_SECONDS: u32 = 300;
/// How often the startup probe asks.
pub const STARTUP_PROBE_PERIOD_SECONDS: u32 = 5;

/// Every file of `kubernetes/`.
pub fn render(consumers: &[ConsumerInfra], settings: &InfraSettings) -> Result<Vec<RenderedFile>, YamlError> {
    let mut files = Vec::new();
    let mut resources = vec![
        "namespace.yaml".to_owned(),
        "config.yaml".to_owned(),
        "network.yaml".to_owned(),
        "keda.yaml".to_owned(),
        "api.yaml".to_owned(),
        "monitoring.yaml".to_owned(),
        "dashboard.yaml".to_owned(),
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
    files.push(base_file("kubernetes/base/namespace.yaml", &[namespace()])?);
    files.push(base_file("kubernetes/base/config.yaml", &[config_map()])?);
    files.push(base_file(
        "kubernetes/base/network.yaml",
        &super::network::network_policies(consumers),
    )?);
    files.push(base_file("kubernetes/base/keda.yaml", &[trigger_authentication()])?);
    files.push(base_file("kubernetes/base/api.yaml", &api(settings))?);
    files.push(base_file(
        "kubernetes/base/monitoring.yaml",
        &monitoring::objects(&settings.alerts),
    )?);
    files.push(base_file("kubernetes/base/dashboard.yaml", &[dashboard::config_map()])?);
    for consumer in consumers {
        files.push(base_file(
            &format!("kubernetes/base/consumers/{}.yaml", consumer.name),
            &consumer_objects(consumer, settings),
        )?);
    }
    files.extend(overlay(consumers)?);
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
/// but the Namespace itself names no namespace (the overlay sets it), and every pod names its image by
/// tag (the overlay's `images:` sets the registry and pins the digest) and
/// gets its settings as environment variables (bosun reads its settings,
/// secrets included, from `BOSUN_*` variables only).
const CHECKOV_SKIPS: &[(&str, &str, bool)] = &[
    (
        "CKV_K8S_21",
        "the base's objects name no namespace; the overlay's namespace: sets it (and renames the base's Namespace)",
        false,
    ),
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
            if object["kind"] == "Namespace" {
                return object;
            }
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

/// The namespace bosun runs in, admitting only pods that meet the Pod
/// Security Standards' `restricted` profile (every pod of the base does:
/// non-root, `RuntimeDefault` seccomp, no privilege escalation, no
/// capabilities), and auditing and warning on the same. The overlay's
/// `namespace:` renames it and moves every object into it.
fn namespace() -> Value {
    let mut labels = labels("namespace");
    for mode in ["enforce", "audit", "warn"] {
        labels[format!("pod-security.kubernetes.io/{mode}")] = json!(POD_SECURITY_LEVEL);
        labels[format!("pod-security.kubernetes.io/{mode}-version")] = json!("latest");
    }
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": OVERLAY_NAMESPACE, "labels": labels},
    })
}

fn labels(component: &str) -> Value {
    json!({"app.kubernetes.io/name": "bosun", "app.kubernetes.io/component": component})
}

/// The settings of the base's ConfigMap (what every pod reads before the
/// overlay's patch).
pub fn base_settings() -> std::collections::BTreeMap<String, String> {
    config_map()["data"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, value)| {
            (
                name.clone(),
                value.as_str().map_or_else(|| value.to_string(), str::to_owned),
            )
        })
        .collect()
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
            // PostgreSQL: Entra ID tokens of the database identity every
            // component shares (main.bicep's databaseClientId), asked for
            // with the pod's own ServiceAccount token.
            "BOSUN_DATABASE_AUTH": "workload-identity",
            "BOSUN_DATABASE_CLIENT_ID": NAMESPACE_PLACEHOLDER,
            "BOSUN_ADAPTERS": "azure",
            "BOSUN_OPS_ADDR": format!("0.0.0.0:{OPS_PORT}"),
            "BOSUN_LOG_FORMAT": "json",
            "BOSUN_DATA_DIR": DATA_DIR,
            // Empty: write the current wire version. During a rolling
            // upgrade the overlay sets the previous release's wire version
            // (`bosun version`) so every pod writes what the old pods read,
            // and empties it once no old pod runs (docs/UPGRADING.md).
            "BOSUN_COMPAT_VERSION": "",
            // iac-provisioning's Pulumi program: the folder `infra` of the
            // module's repository at the release's commit. An overlay may
            // name one repository for every module (a name in the tenant's
            // project, or a URL) and its ref instead.
            "BOSUN_PULUMI_PROGRAM_REPOSITORY": "",
            "BOSUN_PULUMI_PROGRAM_REF": "main",
            "BOSUN_PULUMI_PROGRAM_PATH": "infra",
            // Each pod's PostgreSQL pool: every pod at full scale (the API's
            // replicas, each consumer at KEDA's maxReplicaCount) times this
            // stays within the default server's user connections
            // (`DEFAULT_SERVER_USER_CONNECTIONS`; a test checks it).
            "BOSUN_DATABASE_POOL_SIZE": DATABASE_POOL_SIZE.to_string(),
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
/// container with `args`, its probes, its volumes (limited to `size`) and
/// its security context (Pod Security Standards `restricted`).
fn pod_spec(
    service_account: &str,
    image: &str,
    args: &[&str],
    ports: Value,
    size: &PodSize,
    settings: &InfraSettings,
) -> Value {
    let container = json!({
        "name": "bosun",
        "image": format!("{image}:{}", settings.image_tag),
        "imagePullPolicy": "Always",
        "args": args,
        "envFrom": [{"configMapRef": {"name": CONFIG_MAP}}, {"secretRef": {"name": SECRETS}}],
        "ports": ports,
        "resources": {
            "requests": {"cpu": size.cpu_request, "memory": size.memory_request},
            "limits": {"cpu": size.cpu_limit, "memory": size.memory_limit},
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
        // Up to STARTUP_PROBE_SECONDS for bosun to open its backends
        // (Service Bus, PostgreSQL, the topology check) before liveness
        // applies, so a slow start is not a restart loop.
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": "ops"},
            "periodSeconds": STARTUP_PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 3,
            "failureThreshold": STARTUP_PROBE_SECONDS / STARTUP_PROBE_PERIOD_SECONDS,
        },
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
            {"name": "data", "emptyDir": {"sizeLimit": size.data_limit}},
            {"name": "tmp", "emptyDir": {"sizeLimit": size.tmp_limit}},
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
///
/// A Deployment that may run more than one pod (`max_replicas > 1`)
/// spreads them over zones and nodes ([`topology_spread`]).
fn deployment(name: &str, component: &str, replicas: Option<u32>, max_replicas: u32, mut pod: Value) -> Value {
    if max_replicas > 1 {
        pod["topologySpreadConstraints"] = topology_spread(component);
    }
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

/// One pod per zone and per node as far as the cluster allows: a skew of
/// one, preferred (`ScheduleAnyway`), so a single-zone or small cluster
/// still schedules every replica. `pod-template-hash` keeps a rollout's
/// new pods from being counted against the old ones.
pub fn topology_spread(component: &str) -> Value {
    let constraint = |key: &str| {
        json!({
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": labels(component)},
            "matchLabelKeys": ["pod-template-hash"],
        })
    };
    json!([
        constraint("topology.kubernetes.io/zone"),
        constraint("kubernetes.io/hostname"),
    ])
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
        image_of(component),
        &["serve", "--consumers", component],
        json!([ops_port()]),
        &pod_size(component),
        settings,
    );
    vec![
        service_account(&name, component),
        deployment(&name, component, None, max_replicas(consumer), pod),
        disruption_budget(&name, component),
        scaled_object(consumer),
    ]
}

/// The most replicas KEDA gives `consumer`: [`MAX_REPLICAS`], but one for
/// the consumer that never scales to zero (`probe`), whose host also runs
/// the outbox dispatcher and the shared store's retention.
pub fn max_replicas(consumer: &ConsumerInfra) -> u32 {
    if consumer.scales_to_zero { MAX_REPLICAS } else { 1 }
}

/// The KEDA ScaledObject of a consumer: one `azure-servicebus` trigger on
/// its queue and one on its subscription of the events topic, and a
/// `fallback` of [`FALLBACK_REPLICAS`] once the scaler has failed
/// [`FALLBACK_FAILURE_THRESHOLD`] times in a row. KEDA applies a fallback
/// only to triggers whose metric is an `AverageValue` (the
/// azure-servicebus scaler's default, spelled out so it cannot change
/// under the fallback).
pub fn scaled_object(consumer: &ConsumerInfra) -> Value {
    let trigger = |metadata: Value| {
        json!({
            "type": "azure-servicebus",
            "metricType": "AverageValue",
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
            "maxReplicaCount": max_replicas(consumer),
            "pollingInterval": 15,
            "cooldownPeriod": 300,
            "fallback": {
                "failureThreshold": FALLBACK_FAILURE_THRESHOLD,
                "replicas": FALLBACK_REPLICAS,
            },
            "triggers": triggers,
        },
    })
}

fn api(settings: &InfraSettings) -> Vec<Value> {
    let name = "bosun-api";
    let http = format!("0.0.0.0:{API_PORT}");
    let pod = pod_spec(
        name,
        IMAGE,
        &["api", "--http", &http],
        json!([
            {"name": "http", "containerPort": API_PORT, "protocol": "TCP"},
            ops_port(),
        ]),
        &pod_size("api"),
        settings,
    );
    vec![
        service_account(name, "api"),
        deployment(name, "api", Some(API_REPLICAS), API_REPLICAS, pod),
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

/// `overlays/example/`: what an environment sets, as a folder to copy and
/// edit (each file's header says what to set in it): the namespace, the
/// image by digest, the identities' client ids, the settings (the Service
/// Bus namespace, copied into every ScaledObject trigger by a kustomize
/// replacement, the storage account, Azure DevOps, ACR and ACR Tasks) and
/// the Secret, generated from `secrets.env`.
fn overlay(consumers: &[ConsumerInfra]) -> Result<Vec<RenderedFile>, YamlError> {
    let images = [IMAGE, IAC_IMAGE].map(
        |image| json!({"name": image, "newName": format!("contoso.azurecr.io/{image}"), "digest": EXAMPLE_DIGEST}),
    );
    Ok(vec![
        overlay_file(
            "kustomization.yaml",
            "the namespace and the images (bosun, and bosun-iac for iac-provisioning:\n\
             the Dockerfile's iac target): their registry (newName) and the digest\n\
             of the build you deploy (`az acr repository show -n REGISTRY\n\
             --image bosun:TAG --query digest -o tsv`, the same for bosun-iac)",
            &[json!({
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": OVERLAY_NAMESPACE,
                "resources": ["../../base"],
                "images": images,
                "patches": [{"path": "config.yaml"}, {"path": IDENTITIES_FILE}],
                // The Secret every pod reads, from the file you write; its
                // name gets a hash of its content, so a changed secret rolls
                // the pods.
                "secretGenerator": [{"name": SECRETS, "envs": [SECRETS_FILE]}],
                "replacements": [keda_namespace_replacement()],
            })],
        )?,
        overlay_patch(
            "config.yaml",
            "the Service Bus namespace, the storage account, the database\n\
             identity's client id, Azure DevOps, the registry and its subscription\n\
             and resource group (ACR Tasks builds the images), Azure Artifacts and\n\
             Argo CD",
            &[json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIG_MAP},
                "data": {
                    "BOSUN_SERVICEBUS_NAMESPACE": "contoso-bosun",
                    "BOSUN_BLOB_URL": "https://contosobosun.blob.core.windows.net",
                    "BOSUN_DATABASE_CLIENT_ID": "<databaseClientId of the Bicep deployment>",
                    "BOSUN_AZURE_DEVOPS_ORG_URL": "https://dev.azure.com/contoso",
                    "BOSUN_AZURE_DEVOPS_PROJECT": "platform",
                    "BOSUN_AZURE_DEVOPS_AUTH": "workload-identity",
                    "BOSUN_ACR_REGISTRY": "contoso.azurecr.io",
                    "BOSUN_ACR_AUTH": "workload-identity",
                    // container-build asks ACR Tasks to build: a pod needs
                    // no builder, no privileges and no build cache.
                    "BOSUN_CONTAINER_BUILDER": "acr-tasks",
                    "BOSUN_ACR_SUBSCRIPTION": "00000000-0000-0000-0000-000000000000",
                    "BOSUN_ACR_RESOURCE_GROUP": "contoso-registry-rg",
                    // package-publishing pushes to Azure Artifacts (its
                    // PAT is in secrets.env).
                    "BOSUN_ARTIFACTS_URL": "https://pkgs.dev.azure.com/contoso",
                    // gitops-sync asks Argo CD's API server to sync (its
                    // token is in secrets.env).
                    "BOSUN_ARGOCD_URL": "https://argocd.contoso.com",
                },
            })],
        )?,
        identities_file(consumers, &|component| {
            format!("<clientIds.{component} of the Bicep deployment>")
        })?,
        RenderedFile {
            path: format!("{OVERLAY_DIR}/{SECRETS_FILE}"),
            text: format!(
                "{}\
                 # The Secret's values, one NAME=value a line. Keep your copy out of Git\n\
                 # (or encrypt it: SOPS, Sealed Secrets, External Secrets).\n\
                 # PostgreSQL: no password, the pods sign in with Entra ID tokens of the\n\
                 # database identity (BOSUN_DATABASE_AUTH in the base), named as the user.\n\
                 BOSUN_DATABASE_URL=postgres://{DATABASE_IDENTITY}@POSTGRES_HOST/bosun?sslmode=require\n\
                 # Azure Artifacts takes a personal access token with Packaging (read and write)\n\
                 # (Azure DevOps and ACR use the workload identity):\n\
                 BOSUN_ARTIFACTS_PAT=<a PAT with Packaging read and write>\n\
                 # An Argo CD API token of an account that may sync the applications:\n\
                 BOSUN_ARGOCD_TOKEN=<an Argo CD API token>\n",
                overlay_header(
                    "the PostgreSQL host (the postgresHost output), the Azure Artifacts\n\
                     PAT and the Argo CD token",
                )
            ),
        },
    ])
}

/// Where the example overlay is rendered, under the infra folder.
pub const OVERLAY_DIR: &str = "kubernetes/overlays/example";
/// The overlay's file of client ids.
pub const IDENTITIES_FILE: &str = "identities.yaml";
/// The file the overlay's Secret is generated from.
pub const SECRETS_FILE: &str = "secrets.env";

/// The header of an overlay file: copy the folder, edit `what` in the copy.
fn overlay_header(what: &str) -> String {
    let what = what.replace('\n', "\n#   ");
    format!(
        "# An example environment, rendered by `bosun infra render`. Copy this\n\
         # folder (overlays/example) and, in your copy, set\n\
         #   {what}.\n\
         # Rendering again rewrites overlays/example only, never your copy.\n"
    )
}

fn overlay_file(name: &str, what: &str, documents: &[Value]) -> Result<RenderedFile, YamlError> {
    Ok(RenderedFile {
        path: format!("{OVERLAY_DIR}/{name}"),
        text: format!("{}{}", overlay_header(what), yaml::documents(documents)?),
    })
}

/// A patch of the overlay, with the checkov skips of the base (checkov
/// reads patches as objects too).
fn overlay_patch(name: &str, what: &str, documents: &[Value]) -> Result<RenderedFile, YamlError> {
    let mut file = base_file(&format!("{OVERLAY_DIR}/{name}"), documents)?;
    file.text = format!("{}{}", overlay_header(what), &file.text[header("#").len()..]);
    Ok(file)
}

/// The kustomize replacement copying the Service Bus namespace of the
/// settings into every ScaledObject trigger, as KEDA's azure-servicebus
/// scaler wants it: the namespace's name. bosun takes the name
/// (`contoso-bosun`) or the host name (`contoso-bosun.servicebus.windows.net`);
/// the replacement keeps what comes before the first `.`, so both give
/// KEDA `contoso-bosun`.
pub fn keda_namespace_replacement() -> Value {
    json!({
        "source": {
            "kind": "ConfigMap",
            "name": CONFIG_MAP,
            "fieldPath": "data.BOSUN_SERVICEBUS_NAMESPACE",
            "options": {"delimiter": ".", "index": 0},
        },
        "targets": [{
            "select": {"kind": "ScaledObject"},
            "fieldPaths": ["spec.triggers.*.metadata.namespace"],
        }],
    })
}

/// The overlay's `identities.yaml`: each ServiceAccount's
/// `azure.workload.identity/client-id`, the client id of its component's
/// identity (the `clientIds` output of `infra/bicep/main.bicep`):
/// `client_id` gives it by component (a consumer's name, or `api`).
pub fn identities_file(
    consumers: &[ConsumerInfra],
    client_id: &dyn Fn(&str) -> String,
) -> Result<RenderedFile, YamlError> {
    let mut accounts: Vec<(String, &str)> = consumers
        .iter()
        .map(|consumer| (consumer.object_name(), consumer.name.as_str()))
        .collect();
    accounts.push(("bosun-api".to_owned(), API_COMPONENT));
    let patches: Vec<Value> = accounts
        .iter()
        .map(|(name, component)| {
            json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": name,
                    "annotations": {"azure.workload.identity/client-id": client_id(component)},
                },
            })
        })
        .collect();
    overlay_patch(
        IDENTITIES_FILE,
        "each ServiceAccount's client id: the clientIds output of the Bicep\n\
         deployment (`bosun infra identities --from-deployment FILE DIR` writes\n\
         this file from `az deployment group show -o json`)",
        &patches,
    )
}
