//! An upgrade of the rendered deployment is one apply, by `kubectl apply -k`
//! or a GitOps tool, in whatever order it sends the objects: every pod that
//! reaches PostgreSQL migrates in an init container before bosun starts in
//! it, a new image changes nothing Kubernetes refuses to change in place,
//! and no object waits on another being applied first.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::kubernetes::{MIGRATE_CONTAINER, SECRETS, TRIGGER_AUTHENTICATION};
use super::tests::{base_objects, default_files, kind_of, parse_documents};
use super::*;

/// The setting every pod reads its PostgreSQL database from.
const DATABASE_URL: &str = "BOSUN_DATABASE_URL";

/// Every rendered object of `kubernetes/`, the overlay's patches included.
fn all_kubernetes_objects(files: &[RenderedFile]) -> Vec<Value> {
    files
        .iter()
        .filter(|file| {
            file.path.starts_with("kubernetes/")
                && file.path.ends_with(".yaml")
                && !file.path.ends_with("kustomization.yaml")
        })
        .flat_map(|file| parse_documents(&file.text))
        .collect()
}

/// The pod template of a workload, or the spec of a bare Pod.
fn pod_of(object: &Value) -> Option<&Value> {
    match kind_of(object) {
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => Some(&object["spec"]["template"]["spec"]),
        "CronJob" => Some(&object["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
        "Pod" => Some(&object["spec"]),
        _ => None,
    }
}

fn items(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// Whether `container` gets `BOSUN_DATABASE_URL`: by name, from a rendered
/// ConfigMap that has it, or from the operator's Secret (`bosun-secrets`,
/// which the README has the operator create with it).
fn gets_database_url(container: &Value, config_maps: &BTreeMap<String, BTreeSet<String>>) -> bool {
    let by_name = items(&container["env"]).iter().any(|var| var["name"] == DATABASE_URL);
    let by_source = items(&container["envFrom"]).iter().any(|source| {
        if let Some(name) = source["secretRef"]["name"].as_str() {
            assert_eq!(
                name, SECRETS,
                "a Secret the README does not tell the operator to create"
            );
            true
        } else if let Some(name) = source["configMapRef"]["name"].as_str() {
            config_maps.get(name).is_some_and(|keys| keys.contains(DATABASE_URL))
        } else {
            panic!("an envFrom source neither a ConfigMap nor a Secret: {source}")
        }
    });
    by_name || by_source
}

/// A CPU (`500m`, `1`) or memory (`256Mi`, `1Gi`) quantity, in milli-CPUs
/// or bytes.
fn quantity(value: &Value) -> u64 {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("a quantity is a string: {value}"));
    let units = [("m", 1), ("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)];
    for (suffix, factor) in units {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<u64>().unwrap() * factor;
        }
    }
    // A bare number: whole CPUs (memory is always given with a unit here).
    text.parse::<u64>().unwrap() * 1000
}

#[test]
fn every_pod_that_reaches_the_database_migrates_in_an_init_container_before_bosun_starts() {
    let files = default_files();
    let everything = all_kubernetes_objects(&files);
    let mut config_maps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for object in everything.iter().filter(|o| kind_of(o) == "ConfigMap") {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let keys = object["data"]
            .as_object()
            .into_iter()
            .flat_map(|data| data.keys().cloned());
        config_maps.entry(name).or_default().extend(keys);
    }
    let overlay_images: Vec<String> = files
        .iter()
        .find(|file| file.path == "kubernetes/overlays/example/kustomization.yaml")
        .map(|file| parse_documents(&file.text).remove(0)["images"].clone())
        .and_then(|images| images.as_array().cloned())
        .unwrap()
        .iter()
        .map(|image| image["name"].as_str().unwrap().to_owned())
        .collect();

    let mut migrating = BTreeSet::new();
    for (path, object) in base_objects(&files) {
        let Some(pod) = pod_of(&object) else { continue };
        let name = object["metadata"]["name"].as_str().unwrap();
        let inits = items(&pod["initContainers"]);
        for main in items(&pod["containers"]) {
            if !gets_database_url(main, &config_maps) {
                continue;
            }
            // The first init container: Kubernetes runs init containers
            // one after another, each to completion, before any container.
            let init = inits
                .first()
                .unwrap_or_else(|| panic!("{path}: {name} reaches the database but has no init container"));
            assert_eq!(init["name"], MIGRATE_CONTAINER, "{path}: migrating comes first");
            assert_eq!(
                init["args"],
                serde_json::json!(["migrate", "--compatible-only"]),
                "{path}"
            );
            assert!(
                init.get("restartPolicy").is_none(),
                "{path}: an init container that runs to completion, not a sidecar bosun would start beside"
            );
            for same in [
                "image",
                "imagePullPolicy",
                "command",
                "env",
                "envFrom",
                "securityContext",
            ] {
                assert_eq!(init.get(same), main.get(same), "{path}: the init container's {same}");
            }
            let image = init["image"].as_str().unwrap().split(':').next().unwrap();
            assert!(
                overlay_images.iter().any(|name| name == image),
                "{path}: the overlay's images: sets the init container's image with bosun's ({image} in {overlay_images:?})"
            );
            for mount in items(&init["volumeMounts"]) {
                assert!(
                    items(&main["volumeMounts"]).contains(mount),
                    "{path}: the init container mounts only bosun's volumes ({mount})"
                );
            }
            for probe in ["livenessProbe", "readinessProbe", "startupProbe", "ports"] {
                assert!(init.get(probe).is_none(), "{path}: the init container has no {probe}");
            }
            for (kind, resource) in [
                ("requests", "cpu"),
                ("requests", "memory"),
                ("limits", "cpu"),
                ("limits", "memory"),
            ] {
                let own = quantity(&init["resources"][kind][resource]);
                assert!(
                    own > 0 && own <= quantity(&main["resources"][kind][resource]),
                    "{path}: the init container's {kind}.{resource} is set, at most bosun's"
                );
            }
            if kind_of(&object) == "Deployment" {
                assert_eq!(
                    object["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
                    "{path}: no old pod stops before a new one has migrated and is ready"
                );
            }
            migrating.insert(name.to_owned());
        }
    }
    // Every Deployment is one: the API and each consumer.
    let mut expected: BTreeSet<String> = consumers().iter().map(ConsumerInfra::object_name).collect();
    expected.insert("bosun-api".to_owned());
    assert_eq!(migrating, expected);
}

/// Fields Kubernetes does not let an apply change on an existing object,
/// by kind (an apply that would change them fails, or needs the object
/// deleted first). Every kind the base renders is listed.
const IMMUTABLE: &[(&str, &[&str])] = &[
    ("Deployment", &["/spec/selector"]),
    (
        "StatefulSet",
        &["/spec/selector", "/spec/serviceName", "/spec/volumeClaimTemplates"],
    ),
    ("DaemonSet", &["/spec/selector"]),
    ("Job", &["/spec/selector", "/spec/template", "/spec/completionMode"]),
    ("Pod", &["/spec"]),
    ("Service", &["/spec/clusterIP"]),
    ("ConfigMap", &[]),
    // Only its name, which the overlay sets and no image changes.
    ("Namespace", &["/metadata/name"]),
    ("ServiceAccount", &[]),
    ("PodDisruptionBudget", &[]),
    ("NetworkPolicy", &[]),
    ("ScaledObject", &[]),
    ("TriggerAuthentication", &[]),
    ("PodMonitor", &[]),
    ("PrometheusRule", &[]),
];

#[test]
fn a_new_image_changes_nothing_kubernetes_keeps_immutable() {
    let settings = InfraSettings::from_settings(&Settings::with_data_dir(".bosun")).unwrap();
    let next = InfraSettings {
        image_tag: "99.0.0".to_owned(),
        ..settings.clone()
    };
    let key = |object: &Value| {
        (
            kind_of(object).to_owned(),
            object["metadata"]["name"].as_str().unwrap().to_owned(),
        )
    };
    let before: BTreeMap<_, Value> = base_objects(&render(&settings).unwrap())
        .into_iter()
        .map(|(_, object)| (key(&object), object))
        .collect();
    let after: BTreeMap<_, Value> = base_objects(&render(&next).unwrap())
        .into_iter()
        .map(|(_, object)| (key(&object), object))
        .collect();
    let mut templates_changed = 0;
    for ((kind, name), old) in &before {
        let fields = IMMUTABLE
            .iter()
            .find(|(known, _)| known == kind)
            .unwrap_or_else(|| panic!("{kind} {name}: say which of its fields are immutable in IMMUTABLE"))
            .1;
        let Some(new) = after.get(&(kind.clone(), name.clone())) else {
            continue;
        };
        if old["immutable"] == true {
            assert_eq!(old["data"], new["data"], "{kind} {name} is immutable");
        }
        for field in fields {
            assert_eq!(
                old.pointer(field),
                new.pointer(field),
                "{kind} {name}: a new image changes {field}, which an apply cannot change"
            );
        }
        if pod_of(old) != pod_of(new) {
            templates_changed += 1;
        }
    }
    assert!(templates_changed > 0, "a new image rolls the Deployments");
}

/// Annotations by which a tool orders, hooks, replaces or forces objects:
/// what the deployment would need if an order of apply mattered.
const ORDERING_ANNOTATIONS: &[&str] = &[
    "argocd.argoproj.io/sync-wave",
    "argocd.argoproj.io/hook",
    "argocd.argoproj.io/sync-options",
    "helm.sh/hook",
    "config.kubernetes.io/depends-on",
    "kapp.k14s.io/change-",
    "kustomize.toolkit.fluxcd.io/",
];

#[test]
fn no_object_relies_on_the_order_it_is_applied_in() {
    let files = default_files();
    let objects = base_objects(&files);
    let everything = all_kubernetes_objects(&files);
    let named = |kind: &str| -> BTreeSet<String> {
        everything
            .iter()
            .filter(|o| kind_of(o) == kind)
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let (accounts, config_maps, authentications) = (
        named("ServiceAccount"),
        named("ConfigMap"),
        named("TriggerAuthentication"),
    );
    for object in &everything {
        let name = &object["metadata"]["name"];
        for key in object["metadata"]["annotations"]
            .as_object()
            .into_iter()
            .flat_map(|a| a.keys())
        {
            assert!(
                !ORDERING_ANNOTATIONS.iter().any(|prefix| key.starts_with(prefix)),
                "{} {name} asks for an order of apply: {key}",
                kind_of(object)
            );
        }
    }
    for (path, object) in &objects {
        // A one-off pod is ordered against nothing the Deployments do
        // (kustomize emits Jobs after them): migrating is the pods' own
        // first step instead.
        assert!(
            !matches!(kind_of(object), "Job" | "CronJob" | "Pod"),
            "{path}: a one-off pod ({})",
            kind_of(object)
        );
        // What a pod or a ScaledObject names is rendered with it (or is
        // the operator's Secret), so the controllers that wait for it
        // converge whichever arrives first.
        if let Some(pod) = pod_of(object) {
            let account = pod["serviceAccountName"].as_str().unwrap();
            assert!(accounts.contains(account), "{path}: ServiceAccount {account}");
            for container in items(&pod["initContainers"]).iter().chain(items(&pod["containers"])) {
                for source in items(&container["envFrom"]) {
                    if let Some(config) = source["configMapRef"]["name"].as_str() {
                        assert!(config_maps.contains(config), "{path}: ConfigMap {config}");
                    } else {
                        assert_eq!(source["secretRef"]["name"], SECRETS, "{path}");
                    }
                }
            }
        }
        if kind_of(object) == "ScaledObject" {
            for trigger in items(&object["spec"]["triggers"]) {
                let authentication = trigger["authenticationRef"]["name"].as_str().unwrap();
                assert!(authentications.contains(authentication), "{path}");
                assert_eq!(authentication, TRIGGER_AUTHENTICATION);
            }
        }
    }
}
