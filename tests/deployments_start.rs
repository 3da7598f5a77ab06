//! Every Deployment of `infra/kubernetes` starts as its pods would: the
//! init container's command (`bosun migrate --compatible-only`), then the
//! container's, each with the environment its pod gets — the base's
//! ConfigMap, the example overlay's `config.yaml` over it, the overlay's
//! `secrets.env` as the Secret, and what the AKS workload identity webhook
//! injects — and each must answer `/readyz` on its ops port.
//!
//! Only addresses and the credentials that name them are replaced, each in
//! [`replaced`], by the test's stand-ins: the Service Bus test broker (a
//! connection string instead of the namespace and workload identity: the
//! broker speaks plain AMQP), Azurite (a connection string instead of the
//! storage account and workload identity: Azurite takes Entra tokens only
//! over HTTPS), a fresh PostgreSQL schema, and the Azure doubles for Azure
//! DevOps, Azure Artifacts, ACR (login server and Resource Manager) and
//! Argo CD. A setting a consumer needs that the render or the overlay does
//! not give therefore fails here, naming the Deployment and the setting.
//!
//! Workload identity is not replaced: each pod gets the variables the
//! webhook injects (its client id, the tenant, a projected token of its
//! ServiceAccount, the authority), the authority being the Entra double
//! over HTTPS, and Azure DevOps takes only that double's tokens. Once every
//! pod is ready, a `ProvisionRepository` sent over the broker must come out
//! as a repository in the Azure DevOps double, asked for with
//! repository-provisioning's own token.
//!
//! Ignored unless Azurite runs (scripts/test starts it and runs this with
//! --ignored); it needs PostgreSQL too.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bosun::tools::infra::check::Overlay;
use bosun_azure_doubles::acr::{AcrConfig, AcrDouble};
use bosun_azure_doubles::argocd::ArgoCdDouble;
use bosun_azure_doubles::artifacts::ArtifactsDouble;
use bosun_azure_doubles::devops::DevOpsDouble;
use bosun_azure_doubles::entra::{
    EntraDouble, FederatedCredential, FederatedToken, GrantKind, TOKEN_EXCHANGE_AUDIENCE,
};
use bosun_azure_doubles::{Auth, Faults, Journal, TlsIdentity, TokenBook};
use serde_json::Value;

/// The Entra tenant the pods' identities are in.
const TENANT_ID: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// The cluster's OIDC issuer, as the workload identity webhook's projected
/// service-account tokens name it.
const ISSUER: &str = "https://oidc.prod-aks.azure.com/deployments-start/";

/// How long a pod may take to turn ready (the rendered startup probe
/// allows five minutes; here nothing is slow).
const READY_WITHIN: Duration = Duration::from_secs(90);

/// One rendered Deployment: its name, its init container's and its
/// container's arguments.
struct Rendered {
    name: String,
    init: Vec<Vec<String>>,
    args: Vec<String>,
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn parse(text: &str) -> Vec<Value> {
    bosun::tools::infra::yaml::parse(text).unwrap()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| items.iter().map(|item| item.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

/// Every Deployment of the base, from the checked-in files (a lib test
/// keeps them equal to what `bosun infra render` writes).
fn rendered_deployments() -> Vec<Rendered> {
    let base = repository().join("infra/kubernetes/base");
    let mut files = vec![base.join("api.yaml")];
    let mut consumers: Vec<PathBuf> = std::fs::read_dir(base.join("consumers"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    consumers.sort();
    files.extend(consumers);
    let mut deployments = Vec::new();
    for file in files {
        for object in parse(&std::fs::read_to_string(&file).unwrap()) {
            if object["kind"] != "Deployment" {
                continue;
            }
            let pod = &object["spec"]["template"]["spec"];
            let bosun = pod["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|container| container["name"] == "bosun")
                .unwrap();
            for container in pod["containers"]
                .as_array()
                .unwrap()
                .iter()
                .chain(pod["initContainers"].as_array().unwrap())
            {
                let sources: Vec<&str> = container["envFrom"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|source| {
                        source["configMapRef"]["name"]
                            .as_str()
                            .or_else(|| source["secretRef"]["name"].as_str())
                            .unwrap()
                    })
                    .collect();
                assert_eq!(sources, ["bosun-config", "bosun-secrets"], "{}", file.display());
                assert!(
                    container["env"].is_null(),
                    "{}: settings come from the ConfigMap and Secret only",
                    file.display()
                );
            }
            deployments.push(Rendered {
                name: object["metadata"]["name"].as_str().unwrap().to_owned(),
                init: pod["initContainers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| strings(&c["args"]))
                    .collect(),
                args: strings(&bosun["args"]),
            });
        }
    }
    deployments
}

/// The addresses (and the credentials that name them) this test replaces,
/// as `(setting, value)`; `None` removes the setting.
struct StandIns {
    servicebus: String,
    servicebus_management: String,
    azurite: String,
    database: String,
    devops: String,
    artifacts: String,
    argocd: String,
    acr_registry: String,
    acr_arm: String,
}

fn replaced(stand_ins: &StandIns) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("BOSUN_SERVICEBUS_NAMESPACE", None),
        ("BOSUN_SERVICEBUS_AUTH", None),
        ("BOSUN_SERVICEBUS_CONNECTION_STRING", Some(stand_ins.servicebus.clone())),
        (
            "BOSUN_SERVICEBUS_MANAGEMENT_URL",
            Some(stand_ins.servicebus_management.clone()),
        ),
        ("BOSUN_BLOB_URL", None),
        ("BOSUN_BLOB_AUTH", None),
        ("BOSUN_BLOB_CONNECTION_STRING", Some(stand_ins.azurite.clone())),
        ("BOSUN_DATABASE_URL", Some(stand_ins.database.clone())),
        ("BOSUN_AZURE_DEVOPS_ORG_URL", Some(stand_ins.devops.clone())),
        ("BOSUN_ARTIFACTS_URL", Some(stand_ins.artifacts.clone())),
        ("BOSUN_ARGOCD_URL", Some(stand_ins.argocd.clone())),
        ("BOSUN_ACR_ENDPOINT", Some(stand_ins.acr_registry.clone())),
        ("BOSUN_ACR_ARM_ENDPOINT", Some(stand_ins.acr_arm.clone())),
    ]
}

/// The pods started, killed if the test ends early (a panic), so no
/// process outlives it.
struct Pods(Vec<(String, Child, u16)>);

impl Drop for Pods {
    fn drop(&mut self) {
        for (_, child, _) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The rendered binary's command with exactly `env` (and PATH and HOME),
/// as a container gets nothing else.
fn pod_command(args: &[String], env: &BTreeMap<String, String>, dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bosun"));
    command.env_clear();
    for name in ["PATH", "HOME"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.envs(env).args(args).current_dir(dir).stdin(Stdio::null());
    command
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut text);
    }
    text
}

#[test]
#[ignore = "needs Azurite (scripts/test starts it and runs this with --ignored) and PostgreSQL"]
fn every_rendered_deployment_starts_and_turns_ready() {
    let azurite = std::env::var("BOSUN_TEST_AZURITE_CONNECTION_STRING")
        .expect("BOSUN_TEST_AZURITE_CONNECTION_STRING: run this under scripts/azurite (scripts/test does)");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let broker = runtime.block_on(common::servicebus_test_broker());
    let schema = runtime.block_on(common::PostgresSchema::create("deployments"));
    let (faults, journal) = (Faults::default(), Journal::default());
    let overlay_dir = repository().join("infra/kubernetes/overlays/example");
    let mut pod_env = Overlay::read(&overlay_dir).unwrap().pod_settings().unwrap();
    // Azure DevOps takes only the Entra double's tokens: the pods' workload
    // identity, as rendered (`BOSUN_AZURE_DEVOPS_AUTH=workload-identity`),
    // against an authority over HTTPS, as Microsoft's clients require.
    let book = TokenBook::default();
    let (entra, devops, artifacts, argocd, acr) = runtime.block_on(async {
        let entra = EntraDouble::start_tls(faults.clone(), journal.clone(), book.clone(), TlsIdentity::loopback())
            .await
            .unwrap();
        let devops = DevOpsDouble::start(
            faults.clone(),
            journal.clone(),
            Auth::default().entra(book.clone()),
            "contoso",
        )
        .await
        .unwrap();
        devops.add_project(&pod_env["BOSUN_AZURE_DEVOPS_PROJECT"]);
        let artifacts = ArtifactsDouble::start(faults.clone(), journal.clone(), Auth::open(), "contoso")
            .await
            .unwrap();
        let argocd = ArgoCdDouble::start(faults.clone(), journal.clone(), Auth::open())
            .await
            .unwrap();
        let config = AcrConfig::new(
            &pod_env["BOSUN_ACR_SUBSCRIPTION"],
            &pod_env["BOSUN_ACR_RESOURCE_GROUP"],
            pod_env["BOSUN_ACR_REGISTRY"].split('.').next().unwrap(),
        );
        let acr = AcrDouble::start(faults.clone(), journal.clone(), Auth::open(), config)
            .await
            .unwrap();
        (entra, devops, artifacts, argocd, acr)
    });
    let stand_ins = StandIns {
        servicebus: broker.connection_string(),
        servicebus_management: format!("http://127.0.0.1:{}", broker.port()),
        azurite,
        database: schema.url.clone(),
        devops: devops.organization_url(),
        artifacts: artifacts.base_url(),
        argocd: argocd.base_url(),
        acr_registry: acr.registry_url(),
        acr_arm: acr.base_url(),
    };
    for (name, value) in replaced(&stand_ins) {
        match value {
            Some(value) => pod_env.insert(name.to_owned(), value),
            None => pod_env.remove(name),
        };
    }
    let scratch = tempfile::tempdir().unwrap();
    // What the workload identity webhook injects into a pod labelled
    // `azure.workload.identity/use: "true"` (the client id and token file
    // per pod, below), the authority being the Entra double; the pods trust
    // its certificate as they would Entra's.
    pod_env.insert("AZURE_TENANT_ID".into(), TENANT_ID.into());
    pod_env.insert("AZURE_AUTHORITY_HOST".into(), format!("{}/", entra.base_url()));
    // The certificate from the library's bytes, not its source path (the
    // test binary may have been built from another checkout).
    let certificate = scratch.path().join("entra-double.crt");
    std::fs::write(&certificate, TlsIdentity::loopback().certificate()).unwrap();
    pod_env.insert("SSL_CERT_FILE".into(), certificate.display().to_string());

    let deployments = rendered_deployments();
    assert!(deployments.len() > 10, "the API and every consumer");
    let mut pods = Pods(Vec::new());
    for deployment in &deployments {
        let dir = scratch.path().join(&deployment.name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut env = pod_env.clone();
        let ops = free_port();
        env.insert("BOSUN_DATA_DIR".into(), dir.display().to_string());
        env.insert("BOSUN_OPS_ADDR".into(), format!("127.0.0.1:{ops}"));
        // The Deployment's ServiceAccount has its name; its identity trusts
        // that account's tokens (main.bicep's federated credential).
        let client_id = format!("client-id-of-{}", deployment.name);
        let subject = format!("system:serviceaccount:bosun:{}", deployment.name);
        entra.add_federated_credential(
            TENANT_ID,
            &client_id,
            FederatedCredential {
                issuer: ISSUER.into(),
                subject: subject.clone(),
                audience: TOKEN_EXCHANGE_AUDIENCE.into(),
            },
        );
        let token_file = dir.join("azure-identity-token");
        std::fs::write(&token_file, FederatedToken::new(ISSUER, &subject).jwt()).unwrap();
        env.insert("AZURE_CLIENT_ID".into(), client_id);
        env.insert("AZURE_FEDERATED_TOKEN_FILE".into(), token_file.display().to_string());
        for init in &deployment.init {
            let output = pod_command(init, &env, &dir).output().unwrap();
            assert!(
                output.status.success(),
                "{}: its init container `bosun {}` failed:\n{}",
                deployment.name,
                init.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        // The API's own port, as the rendered one is the same in every pod.
        let args: Vec<String> = deployment
            .args
            .iter()
            .map(|arg| {
                if arg.starts_with("0.0.0.0:") {
                    format!("127.0.0.1:{}", free_port())
                } else {
                    arg.clone()
                }
            })
            .collect();
        let child = pod_command(&args, &env, &dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        eprintln!(
            "deployments_start: started {} (`bosun {}`)",
            deployment.name,
            args.join(" ")
        );
        pods.0.push((deployment.name.clone(), child, ops));
    }

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let deadline = Instant::now() + READY_WITHIN;
    let running = &mut pods.0;
    let mut waiting: Vec<usize> = (0..running.len()).collect();
    while !waiting.is_empty() {
        waiting.retain(|&i| {
            let (name, child, ops) = &mut running[i];
            if let Some(status) = child.try_wait().unwrap() {
                panic!("{name} exited ({status}) before it was ready:\n{}", stderr_of(child));
            }
            let url = format!("http://127.0.0.1:{ops}/readyz");
            let ready = runtime
                .block_on(async { client.get(url).send().await })
                .is_ok_and(|answer| answer.status().is_success());
            if ready {
                eprintln!("deployments_start: {name} is ready");
            }
            !ready
        });
        if Instant::now() > deadline {
            let names: Vec<&str> = waiting.iter().map(|&i| running[i].0.as_str()).collect();
            panic!("not ready within {READY_WITHIN:?}: {names:?}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }

    // The first hop of a delivery on the Azure path, through the pods as
    // started: a command sent over the broker, handled by
    // repository-provisioning, which asks Azure DevOps with its workload
    // identity's token from Entra.
    let mut send_env = pod_env.clone();
    send_env.insert("BOSUN_DATA_DIR".into(), scratch.path().display().to_string());
    let payload = r#"{"name": "orders", "defaultBranch": "main", "minimumReviewers": 1}"#;
    let sent = pod_command(
        &[
            "send",
            "ProvisionRepository",
            "--tenant",
            "contoso",
            "--payload",
            payload,
        ]
        .map(str::to_owned),
        &send_env,
        scratch.path(),
    )
    .output()
    .unwrap();
    assert!(
        sent.status.success(),
        "bosun send: {}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let project = &pod_env["BOSUN_AZURE_DEVOPS_PROJECT"];
    let deadline = Instant::now() + READY_WITHIN;
    while !devops
        .repositories(project)
        .iter()
        .any(|repository| repository.name == "orders")
    {
        if Instant::now() >= deadline {
            let (_, child, _) = running
                .iter_mut()
                .find(|(name, _, _)| name == "bosun-repository-provisioning")
                .unwrap();
            let _ = child.kill();
            panic!(
                "no repository `orders` in Azure DevOps within {READY_WITHIN:?}; repository-provisioning said:\n{}",
                stderr_of(child)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let grants = entra.grants();
    assert!(
        grants.iter().any(|grant| grant.kind == GrantKind::FederatedAssertion
            && grant.client_id == "client-id-of-bosun-repository-provisioning"),
        "repository-provisioning's own identity got the token: {grants:?}"
    );
    eprintln!("deployments_start: repository `orders` provisioned through the pods, with workload identity");

    for (name, child, _) in running.iter_mut() {
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "{name} exited with {status} on SIGTERM:\n{}",
                    stderr_of(child)
                );
                break;
            }
            assert!(Instant::now() < deadline, "{name} did not stop within 40 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    runtime.block_on(schema.drop());
    drop((entra, devops, artifacts, argocd, acr, broker));
}
