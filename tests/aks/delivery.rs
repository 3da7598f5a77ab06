//! One delivery of the demo's module through the pods of [`super::cluster`]:
//! the commands an agent sends, what the doubles do in the services' place
//! (the pipeline's run, Pulumi), and what must have happened exactly once.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use bosun_azure_doubles::devops::{RunScript, RunStart, ScriptedStep, ScriptedTest};
use serde_json::{Value, json};

use super::cluster::Cluster;

/// The tenant the delivery belongs to.
pub const TENANT: &str = "contoso";
/// The module's repository.
pub const REPOSITORY: &str = "payments-api";
/// The environment repository gitops-sync writes promotions to.
pub const ENVIRONMENTS: &str = "environments";
/// The module's NuGet feed on Azure Artifacts (organization-scoped).
pub const FEED: &str = "payments";
/// The module's package id.
pub const PACKAGE_ID: &str = "Contoso.Payments";
/// The module's image repository.
pub const IMAGE: &str = "contoso/payments-api";
/// The Argo CD application of the tenant's `dev` (no prefix configured).
pub const APPLICATION: &str = "contoso.dev";

/// How long the whole delivery may take once sent.
pub const DELIVERY_WITHIN: Duration = Duration::from_secs(300);

/// A pipeline run as Azure Pipelines would make it of the YAML bosun
/// generated, at the commit it runs: its steps by display name, a passing
/// test run when it publishes test results, and one pipeline artifact per
/// `PublishPipelineArtifact@1` step, holding the files under the step's
/// `targetPath` at that commit plus what the module's `build.sh` writes
/// there (`out/payments`, `out/calc.sh`). A YAML without the steps bosun
/// generates fails the run, naming what was missing.
pub fn pipeline_run(run: &RunStart) -> RunScript {
    let Some(yaml) = run.yaml.as_deref() else {
        return RunScript::failed("the pipeline's YAML file is not at the run's commit");
    };
    let documents = bosun::tools::infra::yaml::parse(yaml).unwrap();
    let steps = documents[0]["steps"].as_array().cloned().unwrap_or_default();
    let built = built_files(&run.files);
    let mut script = RunScript::succeeded();
    script.steps = Vec::new();
    script.log = vec![format!("Run of {} at {}", run.yaml_path, run.commit)];
    for step in &steps {
        let name = step["displayName"]
            .as_str()
            .or_else(|| step["task"].as_str())
            .unwrap_or("Checkout")
            .to_owned();
        script.log.push(format!("Starting: {name}"));
        script.steps.push(ScriptedStep { name, succeeded: true });
        match step["task"].as_str() {
            Some("PublishTestResults@2") => {
                let title = step["inputs"]["testRunTitle"].as_str().unwrap_or("tests").to_owned();
                script = script.with_test_run(
                    &title,
                    vec![
                        ScriptedTest::passed("calc.add_two_and_three", "TestResults/unit.xml"),
                        ScriptedTest::passed("calc.fee_of_1000_is_20", "TestResults/unit.xml"),
                        ScriptedTest::passed("calc.fee_is_at_least_one", "TestResults/unit.xml"),
                    ],
                );
            }
            Some("PublishPipelineArtifact@1") => {
                let inputs = &step["inputs"];
                let name = inputs["artifact"].as_str().unwrap().to_owned();
                let target = inputs["targetPath"].as_str().unwrap();
                let folder = target
                    .strip_prefix("$(Build.SourcesDirectory)")
                    .unwrap_or_else(|| panic!("targetPath {target} is not under the sources"))
                    .trim_matches('/');
                let files: BTreeMap<String, Vec<u8>> = built
                    .iter()
                    .filter_map(|(path, bytes)| {
                        let inside = if folder.is_empty() {
                            Some(path.as_str())
                        } else {
                            path.strip_prefix(folder).and_then(|rest| rest.strip_prefix('/'))
                        };
                        inside.map(|inside| (inside.to_owned(), bytes.clone()))
                    })
                    .collect();
                assert!(!files.is_empty(), "artifact {name}: nothing under {target}");
                script = script.with_artifact(&name, files);
            }
            _ => {}
        }
        script
            .log
            .push(format!("Finishing: {}", script.steps.last().unwrap().name));
    }
    for needed in ["Build", "Test"] {
        if !script.steps.iter().any(|step| step.name == needed) {
            return RunScript::failed(&format!("the generated pipeline has no `{needed}` step"));
        }
    }
    script
}

/// The commit's files plus what `build.sh` writes into `out/`.
fn built_files(files: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    let mut built = files.clone();
    if let Some(calc) = files.get("src/calc.sh") {
        built.insert("out/calc.sh".into(), calc.clone());
        built.insert(
            "out/payments".into(),
            b"#!/bin/sh\n. \"$(dirname \"$0\")/calc.sh\"\necho \"payments-api: fee for ${1:-100} is $(fee \"${1:-100}\")\"\n"
                .to_vec(),
        );
    }
    built
}

/// A `pulumi` CLI with state, in the place of Pulumi and Azure: stacks are
/// files, `up` appends a succeeded update (with its `--message`) to the
/// stack's history, `stack history --json` prints it newest first, and
/// every call is logged to `args.log` with the folder it ran in (which
/// must hold the program's `Pulumi.yaml`, fetched from Git).
pub fn scripted_pulumi(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("bin");
    let state = dir.join("pulumi-state");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(state.join("stacks")).unwrap();
    let script = format!(
        r#"#!/bin/sh
state='{state}'
echo "$(pwd)|$*" >> "$state/args.log"
if [ ! -f Pulumi.yaml ]; then echo "error: no Pulumi.yaml in $(pwd)" >&2; exit 255; fi
stack=""; message=""; create=""; prev=""
for arg in "$@"; do
  [ "$prev" = "--stack" ] && stack="$arg"
  [ "$prev" = "--message" ] && message="$arg"
  [ "$arg" = "--create" ] && create=1
  prev="$arg"
done
file="$state/stacks/$(echo "$stack" | tr '/' '+')"
case "$1 $2" in
  "stack select")
    if [ -n "$create" ]; then touch "$file"; exit 0; fi
    if [ -f "$file" ]; then exit 0; fi
    echo "error: no stack named '$stack' found" >&2; exit 255 ;;
  "stack history")
    if [ -s "$file" ]; then printf '['; tac "$file" | paste -sd, - | tr -d '\n'; printf ']\n'; else echo '[]'; fi
    exit 0 ;;
  "stack output") echo '{{"endpoint": "https://payments.dev.contoso.example"}}'; exit 0 ;;
esac
case "$1" in
  refresh) echo '{{"steps": [], "changeSummary": {{"same": 1}}}}' ;;
  preview) echo '{{"steps": [{{"op": "create", "urn": "urn:pulumi:dev::payments::azure-native:storage:StorageAccount::receipts"}}], "changeSummary": {{"create": 1}}}}' ;;
  up)
    echo "{{\"kind\": \"update\", \"message\": \"$message\", \"result\": \"succeeded\", \"endTime\": \"2026-12-05T00:00:00Z\", \"resourceChanges\": {{\"create\": 1}}}}" >> "$file"
    echo '{{"steps": [{{"op": "create", "urn": "urn:pulumi:dev::payments::azure-native:storage:StorageAccount::receipts"}}], "changeSummary": {{"create": 1}}}}' ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"#,
        state = state.display()
    );
    let path = bin.join("pulumi");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// The `up` calls of the scripted Pulumi, by their `--message` (one per
/// plan).
pub fn pulumi_updates(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("pulumi-state/args.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('|').map(|(_, args)| args.to_owned()))
        .filter(|args| args.starts_with("up "))
        .map(|args| {
            args.split("--message ")
                .nth(1)
                .map(|rest| rest.split(" --").next().unwrap_or(rest).to_owned())
                .unwrap_or_default()
        })
        .collect()
}

/// The sample module's files, its package on the tenant's feed and its
/// image in the overlay's registry: the multi-stage `Dockerfile` (its
/// `RUN` builds and tests the service) on `base` when ACR Tasks builds
/// with buildah, else `Dockerfile.scratch` (the double's own builder runs
/// no `RUN`).
fn module_files(registry: &str, base: Option<&str>) -> Vec<Value> {
    let mut files = bosun::tools::demo::sample_files(false);
    for file in &mut files {
        if file["path"] == "bosun.module.json" {
            let mut module: Value = serde_json::from_str(file["content"].as_str().unwrap()).unwrap();
            module["package"] = json!({"packageId": PACKAGE_ID, "feed": FEED});
            module["container"] = match base {
                Some(base) => json!({"registry": registry, "image": IMAGE, "dockerfile": "Dockerfile",
                                     "buildArgs": {"BASE": base}}),
                None => json!({"registry": registry, "image": IMAGE, "dockerfile": "Dockerfile.scratch"}),
            };
            file["content"] = Value::String(serde_json::to_string_pretty(&module).unwrap() + "\n");
        }
    }
    // The module's infrastructure: the Pulumi program iac-provisioning
    // fetches at the release's commit (`BOSUN_PULUMI_PROGRAM_PATH`, `infra`).
    files.push(json!({"path": "infra/Pulumi.yaml", "content":
        "name: payments\nruntime: yaml\nresources:\n  receipts:\n    type: azure-native:storage:StorageAccount\n"}));
    files
}

/// What a delivery's messages are, by type.
pub fn message_counts(cluster: &Cluster, correlation: &str) -> BTreeMap<String, usize> {
    let delivery = cluster.bosun_json(&["deliveries", "show", correlation]);
    let mut counts = BTreeMap::new();
    for message in delivery["messages"].as_array().into_iter().flatten() {
        let handled =
            message["status"] == "completed" || message["status"] == "sent" || message["status"] == "published";
        if handled {
            *counts
                .entry(message["messageType"].as_str().unwrap_or_default().to_owned())
                .or_insert(0) += 1;
        }
    }
    counts
}

/// Waits until the delivery has `at_least` handled `message_type`s,
/// showing progress; after `within`, fails with every pod's output.
pub fn wait_for(cluster: &Cluster, correlation: &str, message_type: &str, at_least: usize, within: Duration) {
    let started = Instant::now();
    let mut shown = Instant::now();
    loop {
        let counts = message_counts(cluster, correlation);
        if counts.get(message_type).copied().unwrap_or(0) >= at_least {
            eprintln!("aks: {message_type} after {:.1}s", started.elapsed().as_secs_f64());
            return;
        }
        if shown.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "aks: waiting for {message_type} ({:.0}s): {}",
                started.elapsed().as_secs_f64(),
                counts.keys().cloned().collect::<Vec<_>>().join(", ")
            );
            shown = Instant::now();
        }
        if started.elapsed() > within {
            let mut logs = String::new();
            for pod in &cluster.pods {
                logs.push_str(&format!("\n--- {} ---\n{}", pod.name, cluster.pod_log(&pod.name, 15)));
            }
            let kept = cluster.keep_logs();
            panic!(
                "no {at_least} {message_type} within {within:?}; the delivery has {counts:?} (every pod's output is in {}){logs}",
                kept.display()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `bosun send MESSAGE_TYPE` of the tenant with `payload`, in the
/// delivery `correlation` (a new one when `None`); the delivery's
/// correlation id.
fn send(cluster: &Cluster, message_type: &str, correlation: Option<&str>, payload: &Value) -> String {
    let payload = payload.to_string();
    let mut args = vec!["send", message_type, "--tenant", TENANT, "--payload", &payload];
    if let Some(correlation) = correlation {
        args.extend(["--correlation-id", correlation]);
    }
    cluster.bosun_json(&args)["correlationId"].as_str().unwrap().to_owned()
}

/// Sends the delivery's commands as an agent would: the module's and the
/// environments' repositories, an initial commit, then the module on a
/// feature branch with a pull request into `main`. Returns the delivery's
/// correlation id once the last command is sent.
pub fn send_delivery(cluster: &Cluster) -> String {
    // The platform team's part: the tenant's Argo CD application and
    // Azure Artifacts feed exist before the first delivery.
    cluster
        .argocd
        .create_application(json!({
            "metadata": { "name": APPLICATION, "labels": { "bosun.dev/tenant": TENANT } },
            "spec": {
                "project": "default",
                "source": { "repoURL": format!("{}/{}/_git/{ENVIRONMENTS}", cluster.devops.organization_url(), cluster.pod_env["BOSUN_AZURE_DEVOPS_PROJECT"]), "path": "dev", "targetRevision": "main" },
                "destination": { "server": "https://kubernetes.default.svc", "namespace": "payments" },
            }
        }))
        .unwrap();
    cluster.artifacts.create_feed(None, FEED);

    let correlation = send(
        cluster,
        "ProvisionRepository",
        None,
        &json!({"name": REPOSITORY, "defaultBranch": "main"}),
    );
    send(
        cluster,
        "ProvisionRepository",
        Some(&correlation),
        &json!({"name": ENVIRONMENTS, "defaultBranch": "main"}),
    );
    wait_for(
        cluster,
        &correlation,
        "RepositoryProvisioned",
        2,
        Duration::from_secs(60),
    );
    send(
        cluster,
        "CreateCommit",
        Some(&correlation),
        &json!({"repository": REPOSITORY, "branch": "main", "message": "Initial commit",
                "files": [{"path": "README.md", "content": "# payments-api\n"}]}),
    );
    wait_for(cluster, &correlation, "CommitCreated", 1, DELIVERY_WITHIN);
    let registry = cluster.pod_env["BOSUN_ACR_REGISTRY"].clone();
    let base = cluster.registry.as_ref().map(|(_, base)| base.as_str());
    send(
        cluster,
        "CreateCommit",
        Some(&correlation),
        &json!({"repository": REPOSITORY, "branch": "feature/payments-api", "baseBranch": "main",
                "message": "Add the payments service", "files": module_files(&registry, base),
                "pullRequestTarget": "main"}),
    );
    correlation
}

/// The effects a delivery must have had exactly once, and every message
/// of it handled once.
pub fn assert_done_once(cluster: &Cluster, correlation: &str) {
    let project = cluster.pod_env["BOSUN_AZURE_DEVOPS_PROJECT"].clone();
    let counts = message_counts(cluster, correlation);
    for once in [
        "PullRequestOpened",
        "PipelineGenerated",
        "PipelineRunStarted",
        "PipelineRunCompleted",
        "BuildCompleted",
        "ContainerImageBuilt",
        "PackagePublished",
        "ReleasePlanned",
        "ReleaseApproved",
        "InfrastructureProvisioned",
        "DeploymentPromoted",
        "GitOpsSynced",
    ] {
        assert_eq!(counts.get(once).copied(), Some(1), "{once} in {counts:?}");
    }
    let pull_requests: Vec<_> = cluster
        .devops
        .pull_requests(&project)
        .into_iter()
        .filter(|pr| pr.repository == REPOSITORY)
        .collect();
    assert_eq!(pull_requests.len(), 1, "one pull request: {pull_requests:?}");
    let pipelines = cluster.devops.pipelines(&project);
    assert_eq!(pipelines.len(), 1, "one pipeline: {pipelines:?}");
    let runs = cluster.devops.runs(&project);
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    assert_eq!(
        cluster.artifacts.versions(None, FEED, PACKAGE_ID),
        ["1.0.0"],
        "one package version"
    );
    let acr_runs = cluster.acr.runs();
    assert_eq!(acr_runs.len(), 1, "one ACR Tasks run: {acr_runs:?}");
    let built = &acr_runs[0].output_images;
    assert!(!built.is_empty(), "the ACR Tasks run pushed the image: {acr_runs:?}");
    match &cluster.registry {
        // The image buildah built is in the real registry, under the
        // digest ACR reported.
        Some((registry, _)) => {
            for image in built {
                let url = format!("{}/v2/{}/manifests/{}", registry.url(), image.repository, image.digest);
                let status = cluster.runtime.block_on(async {
                    reqwest::Client::new()
                        .get(&url)
                        .header("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
                        .send()
                        .await
                        .map(|answer| answer.status())
                });
                assert!(status.as_ref().is_ok_and(|s| s.is_success()), "{url}: {status:?}");
            }
        }
        None => assert!(
            !cluster.acr.tags(IMAGE).is_empty(),
            "the image is in the registry: {:?}",
            cluster.acr.tags(IMAGE)
        ),
    }
    let updates = pulumi_updates(cluster.scratch.path());
    assert_eq!(updates.len(), 1, "one Pulumi update: {updates:?}");
    let syncs = cluster.argocd.syncs(APPLICATION);
    assert!(!syncs.is_empty(), "Argo CD was asked to sync {APPLICATION}");
}
