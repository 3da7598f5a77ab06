//! bosun as deployed on AKS, on one machine: every Deployment of
//! `infra/kubernetes` started as its pod would be — the init container's
//! command (`bosun migrate --compatible-only`), then the container's, each
//! with the environment its pod gets: the base's ConfigMap, the example
//! overlay's `config.yaml` over it, the overlay's `secrets.env` as the
//! Secret, and what the AKS workload identity webhook injects.
//!
//! Only addresses and the credentials that name them are replaced, each in
//! [`replaced`], by stand-ins: the Service Bus test broker (a connection
//! string instead of the namespace and workload identity: the broker
//! speaks plain AMQP), Azurite (a connection string instead of the storage
//! account and workload identity: Azurite takes Entra tokens only over
//! HTTPS), a fresh PostgreSQL schema, the Azure doubles for Azure DevOps,
//! Azure Artifacts (the PAT it takes), ACR (login server and Resource
//! Manager) and Argo CD (the token it takes). A setting a consumer needs
//! that the render or the overlay does not give therefore fails here,
//! naming the Deployment and the setting. iac-provisioning fetches its
//! Pulumi program as rendered: from the module's own repository at the
//! release's commit, over Git's smart HTTP from the Azure DevOps double,
//! with its workload identity's token.
//!
//! Workload identity is not replaced: each pod gets the variables the
//! webhook injects (its client id, the tenant, a projected token of its
//! ServiceAccount, the authority), the authority being the Entra double
//! over HTTPS; Azure DevOps, ACR's Resource Manager and its login server
//! take only that double's tokens, and every pod signs in to PostgreSQL
//! with a token of the database identity (`BOSUN_DATABASE_AUTH`, as
//! rendered), which the local server, trusting local connections, does not
//! check.
//!
//! Each pod's output goes to `<scratch>/<deployment>/pod.log`; a failure
//! shows its end.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bosun::tools::infra::check::Overlay;
use bosun_azure_doubles::acr::{self, AcrConfig, AcrDouble, BuildahConfig, DockerRegistry};
use bosun_azure_doubles::argocd::ArgoCdDouble;
use bosun_azure_doubles::artifacts::ArtifactsDouble;
use bosun_azure_doubles::devops::DevOpsDouble;
use bosun_azure_doubles::entra::{EntraDouble, FederatedCredential, FederatedToken, TOKEN_EXCHANGE_AUDIENCE};
use bosun_azure_doubles::{Auth, Faults, Journal, TlsIdentity, TokenBook};
use bosun_servicebus_broker::RunningBroker;
use serde_json::Value;

use crate::common::{self, PostgresSchema};

/// The Entra tenant the pods' identities are in.
pub const TENANT_ID: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// The cluster's OIDC issuer, as the workload identity webhook's projected
/// service-account tokens name it.
const ISSUER: &str = "https://oidc.prod-aks.azure.com/aks-test/";
/// The PAT the Azure Artifacts double takes (the overlay's
/// `BOSUN_ARTIFACTS_PAT`).
const ARTIFACTS_PAT: &str = "artifacts-pat-of-the-test";
/// The token the Argo CD double takes (the overlay's `BOSUN_ARGOCD_TOKEN`).
const ARGOCD_TOKEN: &str = "argocd-token-of-the-test";
/// The client id of the database identity every pod signs in to
/// PostgreSQL as (the overlay's `BOSUN_DATABASE_CLIENT_ID`, main.bicep's
/// `databaseClientId`): it trusts every bosun ServiceAccount's tokens.
pub const DATABASE_CLIENT_ID: &str = "client-id-of-bosun-database";

/// How long a pod may take to turn ready (the rendered startup probe
/// allows five minutes; here nothing is slow).
pub const READY_WITHIN: Duration = Duration::from_secs(90);

/// One rendered Deployment: its name, its init container's and its
/// container's arguments.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub name: String,
    pub init: Vec<Vec<String>>,
    pub args: Vec<String>,
    /// The bosun container's memory request and limit, in MiB.
    pub memory_mib: (u64, u64),
}

/// A Kubernetes memory quantity (`64Mi`, `1Gi`) in MiB.
fn mebibytes(quantity: &Value) -> u64 {
    let text = quantity.as_str().unwrap();
    if let Some(gi) = text.strip_suffix("Gi") {
        gi.parse::<u64>().unwrap() * 1024
    } else {
        text.strip_suffix("Mi").unwrap().parse().unwrap()
    }
}

pub fn repository() -> PathBuf {
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
pub fn rendered_deployments() -> Vec<Rendered> {
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
                memory_mib: (
                    mebibytes(&bosun["resources"]["requests"]["memory"]),
                    mebibytes(&bosun["resources"]["limits"]["memory"]),
                ),
            });
        }
    }
    deployments
}

/// The addresses (and the credentials that name them) this test replaces.
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

/// What [`StandIns`] replace, as `(setting, value)`; `None` removes it.
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
        // PostgreSQL here trusts every local connection: the pods still get
        // an Entra token for the database identity and send it as the
        // password, as on Azure, and the test sees them ask for it.
        ("BOSUN_DATABASE_URL", Some(stand_ins.database.clone())),
        ("BOSUN_DATABASE_CLIENT_ID", Some(DATABASE_CLIENT_ID.to_owned())),
        ("BOSUN_AZURE_DEVOPS_ORG_URL", Some(stand_ins.devops.clone())),
        ("BOSUN_ARTIFACTS_URL", Some(stand_ins.artifacts.clone())),
        ("BOSUN_ARTIFACTS_PAT", Some(ARTIFACTS_PAT.to_owned())),
        ("BOSUN_ARGOCD_URL", Some(stand_ins.argocd.clone())),
        ("BOSUN_ARGOCD_TOKEN", Some(ARGOCD_TOKEN.to_owned())),
        ("BOSUN_ACR_ENDPOINT", Some(stand_ins.acr_registry.clone())),
        ("BOSUN_ACR_ARM_ENDPOINT", Some(stand_ins.acr_arm.clone())),
    ]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The rendered binary's command with exactly `env` (and HOME, and PATH
/// unless `env` has one), as a container gets nothing else.
pub fn pod_command(args: &[String], env: &BTreeMap<String, String>, dir: &Path) -> Command {
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

/// The last `lines` lines of a file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One started pod.
pub struct Pod {
    pub name: String,
    /// Its rendered memory request and limit, MiB.
    pub memory_mib: (u64, u64),
    child: Child,
    ops: u16,
    env: BTreeMap<String, String>,
    args: Vec<String>,
    dir: PathBuf,
    /// Whether it was given new ports after a bind failed.
    rebound: bool,
}

impl Pod {
    /// New loopback ports for its ops port and any port in its arguments.
    fn rebind(&mut self) {
        self.rebound = true;
        self.ops = free_port();
        self.env
            .insert("BOSUN_OPS_ADDR".into(), format!("127.0.0.1:{}", self.ops));
        for arg in &mut self.args {
            if arg.starts_with("127.0.0.1:") {
                *arg = format!("127.0.0.1:{}", free_port());
            }
        }
        // The failed start's output stays in pod.log, above the next one's.
    }

    fn log(&self) -> PathBuf {
        self.dir.join("pod.log")
    }

    /// Starts (or starts again) the container's command; its output is
    /// appended to `pod.log`.
    fn spawn(&mut self) {
        let log = File::options().create(true).append(true).open(self.log()).unwrap();
        self.child = pod_command(&self.args, &self.env, &self.dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
    }
}

/// What a test may add to one Deployment's pod environment.
pub type PodEnv = BTreeMap<&'static str, Vec<(String, String)>>;

/// The stand-ins and pods of one run.
pub struct Cluster {
    pub runtime: tokio::runtime::Runtime,
    /// Kept running as long as the cluster.
    _broker: RunningBroker,
    pub schema: Option<PostgresSchema>,
    pub journal: Journal,
    pub entra: EntraDouble,
    pub devops: DevOpsDouble,
    pub artifacts: ArtifactsDouble,
    pub argocd: ArgoCdDouble,
    pub acr: AcrDouble,
    /// With ACR Tasks building by buildah: the real registry the images
    /// land in, and the busybox base image pushed there.
    pub registry: Option<(DockerRegistry, String)>,
    /// The environment every pod shares (before its own identity).
    pub pod_env: BTreeMap<String, String>,
    pub scratch: tempfile::TempDir,
    pub pods: Vec<Pod>,
    client: reqwest::Client,
}

impl Cluster {
    /// The stand-ins, with faults from `faults`. No pod runs yet.
    /// With `buildah`, ACR Tasks runs build with buildah (real `RUN`, real
    /// base images) into a real registry (Debian's docker-registry).
    pub fn new(label: &str, faults: Faults, buildah: bool) -> Self {
        let azurite = std::env::var("BOSUN_TEST_AZURITE_CONNECTION_STRING")
            .expect("BOSUN_TEST_AZURITE_CONNECTION_STRING: run this under scripts/azurite (scripts/test does)");
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let broker = runtime.block_on(common::servicebus_test_broker());
        let schema = runtime.block_on(PostgresSchema::create(label));
        let journal = Journal::default();
        let overlay_dir = repository().join("infra/kubernetes/overlays/example");
        let mut pod_env = Overlay::read(&overlay_dir).unwrap().pod_settings().unwrap();
        let book = TokenBook::default();
        let registry = buildah.then(|| {
            if let Some(missing) = acr::missing_tools() {
                panic!("ACR Tasks with buildah: {missing}");
            }
            runtime.block_on(async {
                let registry = DockerRegistry::start().await.unwrap();
                let base = acr::push_busybox_base(&BuildahConfig::new(registry.host()), "library/busybox:stable")
                    .await
                    .unwrap();
                (registry, base)
            })
        });
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
            let artifacts = ArtifactsDouble::start(
                faults.clone(),
                journal.clone(),
                Auth::default().basic_password(ARTIFACTS_PAT),
                "contoso",
            )
            .await
            .unwrap();
            let argocd = ArgoCdDouble::start(faults.clone(), journal.clone(), Auth::default().bearer(ARGOCD_TOKEN))
                .await
                .unwrap();
            let mut config = AcrConfig::new(
                &pod_env["BOSUN_ACR_SUBSCRIPTION"],
                &pod_env["BOSUN_ACR_RESOURCE_GROUP"],
                pod_env["BOSUN_ACR_REGISTRY"].split('.').next().unwrap(),
            );
            // The login server exchanges the Entra double's tokens.
            config.entra = Some(book.clone());
            if let Some((registry, _)) = &registry {
                config = config.with_buildah(BuildahConfig::new(registry.host()));
            }
            let acr = AcrDouble::start(
                faults.clone(),
                journal.clone(),
                Auth::default().entra(book.clone()),
                config,
            )
            .await
            .unwrap();
            (entra, devops, artifacts, argocd, acr)
        });
        let scratch = tempfile::tempdir().unwrap();
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
        // What the workload identity webhook injects into a pod labelled
        // `azure.workload.identity/use: "true"` (the client id and token
        // file per pod, in `start`), the authority being the Entra double;
        // the pods trust its certificate as they would Entra's, from the
        // library's bytes (the test binary may have been built elsewhere).
        pod_env.insert("AZURE_TENANT_ID".into(), TENANT_ID.into());
        pod_env.insert("AZURE_AUTHORITY_HOST".into(), format!("{}/", entra.base_url()));
        let certificate = scratch.path().join("entra-double.crt");
        std::fs::write(&certificate, TlsIdentity::loopback().certificate()).unwrap();
        pod_env.insert("SSL_CERT_FILE".into(), certificate.display().to_string());
        Self {
            runtime,
            _broker: broker,
            schema: Some(schema),
            journal,
            entra,
            devops,
            artifacts,
            argocd,
            acr,
            registry,
            pod_env,
            scratch,
            pods: Vec::new(),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(3))
                .build()
                .unwrap(),
        }
    }

    /// Starts every rendered Deployment (its init containers first, which
    /// must succeed), each with its own identity and `extra` settings, and
    /// waits until every one is ready.
    pub fn start(&mut self, extra: &PodEnv) {
        let deployments = rendered_deployments();
        assert!(deployments.len() > 10, "the API and every consumer");
        for deployment in &deployments {
            let dir = self.scratch.path().join(&deployment.name);
            std::fs::create_dir_all(&dir).unwrap();
            let mut env = self.pod_env.clone();
            env.insert("BOSUN_DATA_DIR".into(), dir.display().to_string());
            let ops = free_port();
            env.insert("BOSUN_OPS_ADDR".into(), format!("127.0.0.1:{ops}"));
            // The Deployment's ServiceAccount has its name; its identity
            // trusts that account's tokens (main.bicep's federated
            // credential).
            let client_id = client_id(&deployment.name);
            let subject = format!("system:serviceaccount:bosun:{}", deployment.name);
            self.entra.add_federated_credential(
                TENANT_ID,
                &client_id,
                FederatedCredential {
                    issuer: ISSUER.into(),
                    subject: subject.clone(),
                    audience: TOKEN_EXCHANGE_AUDIENCE.into(),
                },
            );
            self.entra.add_federated_credential(
                TENANT_ID,
                DATABASE_CLIENT_ID,
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
            for (name, value) in extra.get(deployment.name.as_str()).into_iter().flatten() {
                env.insert(name.clone(), value.clone());
            }
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
            let mut pod = Pod {
                name: deployment.name.clone(),
                memory_mib: deployment.memory_mib,
                child: Command::new("true").spawn().unwrap(),
                ops,
                env,
                args,
                dir,
                rebound: false,
            };
            pod.spawn();
            eprintln!("aks: started {} (`bosun {}`)", pod.name, pod.args.join(" "));
            self.pods.push(pod);
        }
        let all: Vec<usize> = (0..self.pods.len()).collect();
        self.wait_ready(all);
    }

    fn pod_index(&self, name: &str) -> usize {
        self.pods
            .iter()
            .position(|pod| pod.name == name)
            .unwrap_or_else(|| panic!("no Deployment {name}"))
    }

    /// Waits until the pods `waiting` answer `/readyz`.
    fn wait_ready(&mut self, mut waiting: Vec<usize>) {
        let deadline = Instant::now() + READY_WITHIN;
        while !waiting.is_empty() {
            let (pods, runtime, client) = (&mut self.pods, &self.runtime, &self.client);
            waiting.retain(|&i| {
                let pod = &mut pods[i];
                if let Some(status) = pod.child.try_wait().unwrap() {
                    let log = tail(&pod.log(), 40);
                    // A port the test picked was taken by another process
                    // between picking and binding: pick again, once per pod
                    // start.
                    if log.contains("Address already in use") && !pod.rebound {
                        eprintln!("aks: {} found its port taken; starting it on another", pod.name);
                        pod.rebind();
                        pod.spawn();
                        return true;
                    }
                    panic!("{} exited ({status}) before it was ready:\n{log}", pod.name);
                }
                let url = format!("http://127.0.0.1:{}/readyz", pod.ops);
                let ready = runtime
                    .block_on(async { client.get(url).send().await })
                    .is_ok_and(|answer| answer.status().is_success());
                if ready {
                    eprintln!("aks: {} is ready", pod.name);
                }
                !ready
            });
            if Instant::now() > deadline {
                let names: Vec<&str> = waiting.iter().map(|&i| self.pods[i].name.as_str()).collect();
                panic!("not ready within {READY_WITHIN:?}: {names:?}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Kills the pod `name` with SIGKILL (its container dies with no
    /// chance to finish anything), then starts its container again, as
    /// the kubelet restarts it, and waits until it is ready.
    pub fn kill_and_restart(&mut self, name: &str) {
        let index = self.pod_index(name);
        let pod = &mut self.pods[index];
        pod.child.kill().unwrap();
        let status = pod.child.wait().unwrap();
        eprintln!("aks: {name} killed ({status}); restarting it");
        pod.rebound = false;
        pod.spawn();
        self.wait_ready(vec![index]);
    }

    /// The end of the pod `name`'s output.
    pub fn pod_log(&self, name: &str, lines: usize) -> String {
        tail(&self.pods[self.pod_index(name)].log(), lines)
    }

    /// Each running pod's peak resident memory (KiB, `VmHWM`), CPU time
    /// used so far (seconds), from `/proc`, and its rendered memory
    /// request and limit (MiB).
    pub fn usage(&self) -> Vec<(String, u64, f64, (u64, u64))> {
        let ticks: f64 = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0);
        self.pods
            .iter()
            .map(|pod| {
                let pid = pod.child.id();
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let peak_kib = status
                    .lines()
                    .find_map(|line| line.strip_prefix("VmHWM:"))
                    .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                    .unwrap_or(0);
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // Fields after the command's closing parenthesis: utime and
                // stime are the 12th and 13th.
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
                let cpu_ticks: f64 = fields
                    .get(11..13)
                    .map_or(0.0, |both| both.iter().filter_map(|f| f.parse::<f64>().ok()).sum());
                (pod.name.clone(), peak_kib, cpu_ticks / ticks, pod.memory_mib)
            })
            .collect()
    }

    /// Copies every pod's whole output to a folder that outlives the test
    /// (the scratch folder does not), and returns its path: what a failure
    /// points at.
    pub fn keep_logs(&self) -> PathBuf {
        let kept = std::env::temp_dir().join(format!("bosun-aks-logs-{}", std::process::id()));
        std::fs::create_dir_all(&kept).unwrap();
        for pod in &self.pods {
            let _ = std::fs::copy(pod.log(), kept.join(format!("{}.log", pod.name)));
        }
        kept
    }

    /// `bosun ARGS --json` as an operator runs it in the API's pod
    /// (`kubectl exec deploy/bosun-api -- bosun ...`: its environment and
    /// identity), its stdout read as JSON.
    pub fn bosun_json(&self, args: &[&str]) -> Value {
        let api = &self.pods[self.pod_index("bosun-api")];
        let mut env = api.env.clone();
        env.remove("BOSUN_OPS_ADDR");
        env.insert("BOSUN_OPERATOR".into(), "aks-test".into());
        let args: Vec<String> = args.iter().chain(&["--json"]).map(|arg| (*arg).to_owned()).collect();
        let output = pod_command(&args, &env, self.scratch.path()).output().unwrap();
        assert!(
            output.status.success(),
            "bosun {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "bosun {} printed no JSON ({err}): {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// Stops every pod with SIGTERM; each must exit 0 within 40 s.
    pub fn stop(&mut self) {
        for pod in &mut self.pods {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pod.child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(40);
            loop {
                if let Some(status) = pod.child.try_wait().unwrap() {
                    assert!(
                        status.success(),
                        "{} exited with {status} on SIGTERM:\n{}",
                        pod.name,
                        tail(&pod.log(), 40)
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} did not stop within 40 s of SIGTERM",
                    pod.name
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.pods.clear();
        if let Some(schema) = self.schema.take() {
            self.runtime.block_on(schema.drop());
        }
    }
}

/// The pods are killed if the test ends early (a panic), so no process
/// outlives it.
impl Drop for Cluster {
    fn drop(&mut self) {
        for pod in &mut self.pods {
            let _ = pod.child.kill();
            let _ = pod.child.wait();
        }
    }
}

/// The client id of a Deployment's identity (main.bicep makes one per
/// component; the identities file gives it to the ServiceAccount).
pub fn client_id(deployment: &str) -> String {
    format!("client-id-of-{deployment}")
}
