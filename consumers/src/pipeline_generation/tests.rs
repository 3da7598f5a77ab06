//! Handler tests over an in-memory [`PipelineHost`]; snapshot tests of the
//! YAML each language's template renders (checked-in files under
//! `snapshots/`; run with `BOSUN_UPDATE_SNAPSHOTS=1` to rewrite them after
//! a deliberate template change, and bump [`TEMPLATE_VERSION`]); tests of
//! the local adapter (real commits and runs in a temporary folder) and of
//! the Azure adapter (against a scripted local HTTP server).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{
    ContainerSettings, ModuleLanguage, PackageSettings, PipelineGenerated, PipelineResult, PipelineRunStarted,
    ProvisionRepository, PullRequestOpened, RepositoryProvisioned, RepositoryRef,
};
use bosun_contracts::{Envelope, Message, samples};
use time::macros::datetime;
use uuid::Uuid;

use super::azure::AzurePipelineGenerator;
use super::local::LocalPipelineGenerator;
use super::*;
use crate::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig};
use crate::delivery::azure::test_server::{MockAzure, Reply};
use crate::delivery::pipeline::RunStatus;
use crate::delivery::pipeline::parse_pipeline;
use crate::delivery::pipeline::test_support::{
    Fixture, HELLO_PIPELINE, REPOSITORY, TENANT, module_files, quick_settings,
};

const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const SHA_B: &str = "b1b2b3b4b5b6b7b8b9b0bbbbbbbbbbbbbbbbbbbb";

fn envelope(message: &Message) -> Envelope {
    let mut envelope = Envelope::new(message, Uuid::now_v7(), "contoso", "agent:test");
    envelope.occurred_at = datetime!(2026-11-29 10:00:00 UTC);
    envelope
}

async fn handle<P: PipelineHost>(consumer: &PipelineGeneration<P>, message: Message) -> Result<Outcome, HandlerError> {
    let envelope = envelope(&message);
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn events(outcome: &Outcome) -> (PipelineGenerated, PipelineRunStarted) {
    assert_eq!(outcome.messages.len(), 2, "{outcome:?}");
    for outgoing in &outcome.messages {
        assert_eq!(outgoing.delay, None);
        outgoing.message.validate().unwrap();
    }
    match (&outcome.messages[0].message, &outcome.messages[1].message) {
        (Message::PipelineGenerated(generated), Message::PipelineRunStarted(started)) => {
            (generated.clone(), started.clone())
        }
        other => panic!("expected PipelineGenerated then PipelineRunStarted, got {other:?}"),
    }
}

fn pull_request(module: Option<ModuleMetadata>) -> PullRequestOpened {
    let mut event = samples::pull_request_opened();
    event.repository = REPOSITORY.to_owned();
    event.source_branch = "feature/hello".to_owned();
    event.module = module;
    event
}

fn provisioned() -> RepositoryProvisioned {
    RepositoryProvisioned {
        repository: RepositoryRef {
            id: "repo-1".into(),
            name: REPOSITORY.into(),
            project: "contoso".into(),
            url: "file:///tmp/hello.git".into(),
            default_branch: "refs/heads/main".into(),
        },
        created: false,
    }
}

/// An in-memory pipeline host: files by (branch, path), commits counted,
/// runs by commit.
#[derive(Default)]
struct FakeHost {
    files: Mutex<BTreeMap<(String, String), Vec<u8>>>,
    commits: Mutex<Vec<PipelineFile>>,
    definitions: Mutex<Vec<DefinitionSpec>>,
    runs: Mutex<Vec<RunSpec>>,
    fail_with: Option<fn() -> PipelineError>,
}

impl FakeHost {
    fn with_file(self, branch: &str, path: &str, content: &[u8]) -> Self {
        self.files
            .lock()
            .unwrap()
            .insert((branch.to_owned(), path.to_owned()), content.to_vec());
        self
    }
}

#[async_trait]
impl PipelineHost for FakeHost {
    async fn read_file(
        &self,
        tenant: &str,
        _repository: &str,
        branch: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PipelineError> {
        assert_eq!(tenant, "contoso");
        Ok(self
            .files
            .lock()
            .unwrap()
            .get(&(branch.to_owned(), path.to_owned()))
            .cloned())
    }

    async fn commit_pipeline(&self, file: &PipelineFile) -> Result<CommittedPipeline, PipelineError> {
        if let Some(fail) = self.fail_with {
            return Err(fail());
        }
        let mut files = self.files.lock().unwrap();
        let key = (file.branch.clone(), file.path.clone());
        let no_op = files.get(&key) == Some(&file.content.clone().into_bytes());
        files.insert(key, file.content.clone().into_bytes());
        if !no_op {
            self.commits.lock().unwrap().push(file.clone());
        }
        Ok(CommittedPipeline {
            commit_sha: SHA_B.to_owned(),
            no_op,
        })
    }

    async fn ensure_pipeline(&self, definition: &DefinitionSpec) -> Result<String, PipelineError> {
        self.definitions.lock().unwrap().push(definition.clone());
        Ok("7".to_owned())
    }

    async fn queue_run(&self, run: &RunSpec) -> Result<QueuedRun, PipelineError> {
        let mut runs = self.runs.lock().unwrap();
        if !runs.contains(run) {
            runs.push(run.clone());
        }
        Ok(QueuedRun {
            run_id: "4711".to_owned(),
            queued_at: datetime!(2026-11-29 10:00:05 UTC),
            url: Some("https://dev.azure.com/contoso/p/_build/results?buildId=4711".to_owned()),
        })
    }
}

// ---- handler ----

#[test]
fn name_and_retry_policy_follow_the_design() {
    let consumer = PipelineGeneration::new(FakeHost::default());
    assert_eq!(consumer.name(), "pipeline-generation");
    let route = bosun_contracts::routing::consumer(consumer.name()).unwrap();
    assert_eq!(route.commands, ["GeneratePipeline"]);
    assert_eq!(route.events, ["RepositoryProvisioned", "PullRequestOpened"]);
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(3));
}

#[tokio::test]
async fn a_pull_request_with_a_module_gets_its_pipeline_and_a_run() {
    let consumer = PipelineGeneration::new(FakeHost::default());
    let module = samples::module();
    let outcome = handle(&consumer, pull_request(Some(module.clone())).into())
        .await
        .unwrap();
    let (generated, started) = events(&outcome);
    assert_eq!(
        generated,
        PipelineGenerated {
            repository: REPOSITORY.into(),
            branch: "feature/hello".into(),
            pipeline_path: "src/Payments.Api/azure-pipelines.yml".into(),
            module_id: "payments-api".into(),
            template_version: TEMPLATE_VERSION.into(),
            commit_sha: SHA_B.into(),
            pipeline_id: "7".into(),
            no_op: false,
        }
    );
    assert_eq!(
        started,
        PipelineRunStarted {
            pipeline_run_id: "4711".into(),
            pipeline_id: "7".into(),
            repository: REPOSITORY.into(),
            branch: "feature/hello".into(),
            commit_sha: SHA_B.into(),
            release_id: "payments-api-b1b2b3b4b5b6".into(),
            module: module.clone(),
            started_at: datetime!(2026-11-29 10:00:05 UTC),
            url: Some("https://dev.azure.com/contoso/p/_build/results?buildId=4711".into()),
        }
    );

    let host = consumer.host();
    let commits = host.commits.lock().unwrap().clone();
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].tenant, "contoso");
    assert_eq!(commits[0].content, template::render(&module, TEMPLATE_VERSION).unwrap());
    assert_eq!(commits[0].date, datetime!(2026-11-29 10:00:00 UTC));
    assert!(
        commits[0].message.contains("dotnet@2026.11.1"),
        "{}",
        commits[0].message
    );
    assert_eq!(host.definitions.lock().unwrap()[0].name, "payments-api");
    let runs = host.runs.lock().unwrap().clone();
    assert_eq!(
        runs,
        [RunSpec {
            tenant: "contoso".into(),
            repository: REPOSITORY.into(),
            branch: "feature/hello".into(),
            commit_sha: SHA_B.into(),
            pipeline_path: "src/Payments.Api/azure-pipelines.yml".into(),
            pipeline_id: "7".into(),
        }]
    );
}

#[tokio::test]
async fn the_same_pull_request_twice_reports_the_same_pipeline_and_run() {
    let consumer = PipelineGeneration::new(FakeHost::default());
    let event = pull_request(Some(samples::module()));
    let first = events(&handle(&consumer, event.clone().into()).await.unwrap());
    let second = events(&handle(&consumer, event.into()).await.unwrap());
    assert!(!first.0.no_op);
    assert!(second.0.no_op);
    assert_eq!(first.1, second.1, "the same run is reported");
    assert_eq!(consumer.host().commits.lock().unwrap().len(), 1);
    assert_eq!(consumer.host().runs.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn nothing_happens_without_module_metadata() {
    let consumer = PipelineGeneration::new(FakeHost::default());
    let outcome = handle(&consumer, pull_request(None).into()).await.unwrap();
    assert_eq!(outcome, Outcome::default());
    let outcome = handle(&consumer, provisioned().into()).await.unwrap();
    assert_eq!(outcome, Outcome::default());
    assert!(consumer.host().commits.lock().unwrap().is_empty());
    assert!(consumer.host().runs.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_provisioned_repository_with_a_module_file_gets_its_pipeline_on_the_default_branch() {
    let module = samples::module();
    let host = FakeHost::default().with_file("main", MODULE_FILE, &serde_json::to_vec(&module).unwrap());
    let consumer = PipelineGeneration::new(host);
    let (generated, started) = events(&handle(&consumer, provisioned().into()).await.unwrap());
    assert_eq!(generated.branch, "main");
    assert_eq!(started.branch, "main");
    assert_eq!(started.module, module);

    let broken = FakeHost::default().with_file("main", MODULE_FILE, b"{\"moduleId\": \"x\"}");
    let err = handle(&PipelineGeneration::new(broken), provisioned().into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("bosun.module.json"), "{err}");
}

#[tokio::test]
async fn the_command_chooses_branch_path_and_template_version() {
    let consumer = PipelineGeneration::new(FakeHost::default());
    let mut command = samples::generate_pipeline();
    command.repository = REPOSITORY.into();
    command.branch = "refs/heads/release/1".into();
    command.template_version = TEMPLATE_VERSION.into();
    let (generated, _) = events(&handle(&consumer, command.clone().into()).await.unwrap());
    assert_eq!(generated.branch, "release/1");
    assert_eq!(generated.pipeline_path, "pipelines/payments-api.yml");

    // A template version this build does not have is refused for good.
    let consumer = PipelineGeneration::new(FakeHost::default());
    let mut unknown = samples::generate_pipeline();
    unknown.template_version = "2.3.0".into();
    let err = handle(&consumer, unknown.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("2.3.0"), "{err}");
    assert!(consumer.host().commits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn port_errors_map_to_retry_decisions() {
    type Failure = fn() -> PipelineError;
    let cases: [(Failure, &str); 4] = [
        (
            || PipelineError::RepositoryNotFound { repository: "r".into() },
            "transient",
        ),
        (|| PipelineError::Unavailable("down".into()), "transient"),
        (|| PipelineError::Rejected("403".into()), "permanent"),
        (
            || PipelineError::Throttled {
                after: Duration::from_secs(9),
                source: "429".into(),
            },
            "retry-after",
        ),
    ];
    for (fail, expected) in cases {
        let consumer = PipelineGeneration::new(FakeHost {
            fail_with: Some(fail),
            ..FakeHost::default()
        });
        let err = handle(&consumer, pull_request(Some(samples::module())).into())
            .await
            .unwrap_err();
        let kind = match err {
            HandlerError::Transient(_) => "transient",
            HandlerError::Permanent(_) => "permanent",
            HandlerError::NeedsNewer(_) => "needs-newer",
            HandlerError::RetryAfter { after, .. } => {
                assert_eq!(after, Duration::from_secs(9));
                "retry-after"
            }
        };
        assert_eq!(kind, expected);
    }
}

#[tokio::test]
async fn other_messages_are_refused() {
    let consumer = PipelineGeneration::new(FakeHost::default());
    let message = Message::from(ProvisionRepository {
        name: "r".into(),
        project: None,
        default_branch: "main".into(),
        description: None,
        minimum_reviewers: 0,
    });
    let err = handle(&consumer, message).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
}

#[test]
fn release_ids_use_twelve_hex_digits_of_the_commit() {
    assert_eq!(release_id("hello-api", SHA_A), "hello-api-aaaaaaaaaaaa");
    let long = release_id(&"m".repeat(128), SHA_A);
    assert_eq!(long.len(), 128);
    assert!(long.ends_with("m-aaaaaaaaaaaa"));
    assert_eq!(
        default_pipeline_path(&samples::module()),
        "src/Payments.Api/azure-pipelines.yml"
    );
    let mut module = samples::module();
    module.path = None;
    assert_eq!(default_pipeline_path(&module), "azure-pipelines.yml");
}

// ---- templates ----

fn language_modules() -> Vec<(&'static str, ModuleMetadata)> {
    let base = samples::module();
    let container = |context: Option<&str>| ContainerSettings {
        registry: "contoso.azurecr.io".into(),
        image: "contoso/app".into(),
        dockerfile: "Dockerfile".into(),
        context: context.map(str::to_owned),
        platform: "linux/amd64".into(),
        build_args: BTreeMap::new(),
    };
    let module = |id: &str, language, path: Option<&str>, build: &str, test: Option<&str>, results: Option<&str>| {
        ModuleMetadata {
            module_id: id.into(),
            name: id.into(),
            language,
            version: "1.0.0".into(),
            path: path.map(str::to_owned),
            build_command: build.into(),
            test_command: test.map(str::to_owned),
            test_results: results.map(str::to_owned),
            package: None,
            container: None,
        }
    };
    let mut node = module(
        "web-shop",
        ModuleLanguage::Node,
        Some("web"),
        "npm ci && npm run build",
        Some("npm test -- --reporter=junit --reporter-option output=reports/junit.xml"),
        Some("reports/*.xml"),
    );
    node.container = Some(container(Some("docker")));
    let python = module(
        "pricing",
        ModuleLanguage::Python,
        None,
        "pip install -r requirements.txt",
        Some("pytest --junitxml=reports/junit-pricing.xml"),
        Some("reports/junit-*.xml"),
    );
    let go = module(
        "api-gateway",
        ModuleLanguage::Go,
        Some("cmd/api"),
        "go build ./...",
        Some("go test ./..."),
        None,
    );
    let java = module(
        "ledger",
        ModuleLanguage::Java,
        Some("ledger"),
        "mvn -B package -DskipTests",
        None,
        None,
    );
    let mut rust = module(
        "risk-engine",
        ModuleLanguage::Rust,
        Some("crates/risk"),
        "cargo build --release",
        Some("cargo test"),
        Some("target/junit/**/*.xml"),
    );
    rust.container = Some(container(None));
    let mut other = module(
        "legacy-batch",
        ModuleLanguage::Other,
        Some("batch"),
        "set -e\n./configure --prefix=\"$(Build.BinariesDirectory)\"\nmake\n",
        Some("make check"),
        Some("test-reports/TEST-*.xml"),
    );
    other.package = Some(PackageSettings {
        package_id: "Contoso.Batch".into(),
        feed: "internal".into(),
        project: None,
    });
    vec![
        ("dotnet", base),
        ("node", node),
        ("python", python),
        ("go", go),
        ("java", java),
        ("rust", rust),
        ("other", other),
    ]
}

#[test]
fn every_language_renders_its_checked_in_snapshot() {
    let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/pipeline_generation/snapshots");
    let update = std::env::var_os("BOSUN_UPDATE_SNAPSHOTS").is_some();
    for (name, module) in language_modules() {
        assert_eq!(template::template_name(module.language), name);
        let yaml = template::render(&module, TEMPLATE_VERSION).unwrap();
        let path = snapshots.join(format!("{name}.yml"));
        if update {
            std::fs::create_dir_all(&snapshots).unwrap();
            std::fs::write(&path, &yaml).unwrap();
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("{}: {err} (BOSUN_UPDATE_SNAPSHOTS=1 writes it)", path.display()));
        assert_eq!(
            yaml, expected,
            "{name}: the template changed; bump TEMPLATE_VERSION and update the snapshot"
        );
        // The same module always renders the same bytes.
        assert_eq!(template::render(&module, TEMPLATE_VERSION).unwrap(), yaml);
    }
}

#[test]
fn rendered_yaml_holds_what_the_brief_requires() {
    for (name, module) in language_modules() {
        let yaml = template::render(&module, TEMPLATE_VERSION).unwrap();
        let document = &yaml_rust2::YamlLoader::load_from_str(&yaml).unwrap()[0];
        assert!(
            yaml.contains(&format!("# Template: {name}@{TEMPLATE_VERSION}.")),
            "{yaml}"
        );
        assert_eq!(document["pool"]["vmImage"].as_str(), Some("ubuntu-latest"));
        assert_eq!(document["trigger"]["batch"].as_bool(), Some(true));
        assert_eq!(
            document["variables"]["BOSUN_MODULE_ID"].as_str(),
            Some(module.module_id.as_str())
        );
        let steps = document["steps"].as_vec().unwrap();
        let module_dir = match &module.path {
            Some(path) => format!("$(Build.SourcesDirectory)/{path}"),
            None => "$(Build.SourcesDirectory)".to_owned(),
        };
        let build = steps
            .iter()
            .find(|s| s["displayName"].as_str() == Some("Build"))
            .unwrap();
        assert_eq!(build["script"].as_str(), Some(module.build_command.as_str()), "{name}");
        assert_eq!(build["workingDirectory"].as_str(), Some(module_dir.as_str()));
        let tests = steps
            .iter()
            .find(|s| s["task"].as_str() == Some("PublishTestResults@2"));
        match &module.test_results {
            Some(glob) => {
                let tests = tests.unwrap();
                assert_eq!(tests["inputs"]["testResultsFormat"].as_str(), Some("JUnit"));
                assert_eq!(tests["inputs"]["testResultsFiles"].as_str(), Some(glob.as_str()));
                assert_eq!(tests["condition"].as_str(), Some("succeededOrFailed()"));
            }
            None => assert!(tests.is_none(), "{name}"),
        }
        let artifacts: Vec<&str> = steps
            .iter()
            .filter(|s| s["task"].as_str() == Some("PublishPipelineArtifact@1"))
            .map(|s| s["inputs"]["artifact"].as_str().unwrap())
            .collect();
        let mut expected = Vec::new();
        if module.container.is_some() {
            expected.push("container-context.tar");
        }
        if module.package.is_some() {
            expected.push("package-content.tar");
        }
        assert_eq!(artifacts, expected, "{name}");
    }
}

// ---- local adapter ----

fn local_consumer(fixture: &Fixture) -> PipelineGeneration<LocalPipelineGenerator> {
    PipelineGeneration::new(LocalPipelineGenerator::with_host(
        Arc::clone(&fixture.git),
        Arc::clone(&fixture.pipelines),
    ))
}

#[tokio::test]
async fn local_pull_request_twice_makes_one_commit_and_one_run_that_really_runs() {
    let fixture = Fixture::new(quick_settings()).await;
    let head = fixture.commit("feature/hello", module_files(true)).await;
    let consumer = local_consumer(&fixture);
    let module = crate::delivery::pipeline::test_support::module();
    let mut event = pull_request(Some(module.clone()));
    event.commit_sha = head.clone();

    let (generated, started) = events(&handle(&consumer, event.clone().into()).await.unwrap());
    assert!(!generated.no_op);
    assert_ne!(generated.commit_sha, head, "a new commit holds the pipeline file");
    assert_eq!(generated.pipeline_path, "services/hello/azure-pipelines.yml");
    assert_eq!(generated.pipeline_id, "hello-api");
    assert_eq!(started.commit_sha, generated.commit_sha);
    assert_eq!(started.release_id, format!("hello-api-{}", &generated.commit_sha[..12]));
    assert!(started.url.as_deref().unwrap().starts_with("file://"), "{started:?}");
    assert_eq!(
        fixture.git_output(&["rev-parse", "feature/hello^"]),
        head,
        "committed on top of the pull request's head"
    );
    assert_eq!(
        fixture.git_output(&["show", "feature/hello:services/hello/azure-pipelines.yml"]),
        template::render(&module, TEMPLATE_VERSION).unwrap().trim_end()
    );

    // Delivered again (a new envelope, later): no commit, the same run.
    let (again_generated, again_started) = events(&handle(&consumer, event.into()).await.unwrap());
    assert!(again_generated.no_op);
    assert_eq!(again_generated.commit_sha, generated.commit_sha);
    assert_eq!(again_started, started);
    assert_eq!(fixture.git_output(&["rev-list", "--count", "feature/hello"]), "2");
    let runs = fixture.run_records();
    assert_eq!(runs, 1);
    let definition = fixture.pipelines.root().join("definitions/contoso/hello-api.json");
    assert!(definition.exists());

    let record = fixture
        .pipelines
        .wait_for_completion(TENANT, &started.pipeline_run_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.result, Some(PipelineResult::Succeeded), "{record:?}");
    assert_eq!(record.attempt, 1);
}

#[tokio::test]
async fn local_provisioned_repository_waits_for_its_module_file() {
    let fixture = Fixture::new(quick_settings()).await;
    let consumer = local_consumer(&fixture);
    // An empty repository: nothing to do.
    let outcome = handle(&consumer, provisioned().into()).await.unwrap();
    assert_eq!(outcome, Outcome::default());

    fixture.commit("main", module_files(true)).await;
    let (generated, started) = events(&handle(&consumer, provisioned().into()).await.unwrap());
    assert_eq!(generated.branch, "main");
    assert_eq!(started.module, crate::delivery::pipeline::test_support::module());
    assert_eq!(fixture.git_output(&["rev-parse", "main"]), generated.commit_sha);
}

#[tokio::test]
async fn local_missing_repository_is_transient() {
    let fixture = Fixture::new(quick_settings()).await;
    let consumer = local_consumer(&fixture);
    let mut event = pull_request(Some(samples::module()));
    event.repository = "nowhere".into();
    let err = handle(&consumer, event.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Transient(_)), "{err}");
}

// ---- Azure adapter ----

const REPO_ID: &str = "5febef5a-833d-4e14-b9c0-14cb638f91e6";
const HEAD: &str = "1111111111111111111111111111111111111111";
const NEW: &str = "2222222222222222222222222222222222222222";
const TREE: &str = "3333333333333333333333333333333333333333";

fn azure_consumer(server: &MockAzure) -> PipelineGeneration<AzurePipelineGenerator> {
    PipelineGeneration::new(
        AzurePipelineGenerator::new(&AzureDevOpsConfig::new(
            server.url("/contoso"),
            "Delivery",
            AzureDevOpsAuth::Pat("my-pat".into()),
        ))
        .unwrap(),
    )
}

fn api(rest: &str) -> String {
    format!("/contoso/Delivery/_apis{rest}")
}

fn repo_api(rest: &str) -> String {
    api(&format!("/git/repositories/{REPO_ID}{rest}"))
}

fn repository_reply() -> Reply {
    Reply::json(
        "GET",
        &api("/git/repositories/hello"),
        200,
        &format!(r#"{{"id":"{REPO_ID}","name":"hello","defaultBranch":"refs/heads/main"}}"#),
    )
}

fn refs_reply(head: &str) -> Reply {
    Reply::json(
        "GET",
        &repo_api("/refs"),
        200,
        &format!(r#"{{"value":[{{"name":"refs/heads/feature/hello","objectId":"{head}"}}],"count":1}}"#),
    )
}

#[tokio::test]
async fn azure_pull_request_twice_pushes_once_and_runs_once() {
    let module = samples::module();
    let yaml = template::render(&module, TEMPLATE_VERSION).unwrap();
    let builds_empty = Reply::json("GET", &api("/build/builds"), 200, r#"{"count":0,"value":[]}"#);
    let server = MockAzure::start(vec![
        // First delivery: push the file, create the definition, run it.
        repository_reply(),
        refs_reply(HEAD),
        Reply::json("GET", &repo_api("/items"), 404, r#"{"message":"TF401174: not found"}"#),
        Reply::json(
            "POST",
            &repo_api("/pushes"),
            201,
            &format!(r#"{{"commits":[{{"commitId":"{NEW}"}}],"refUpdates":[{{"name":"refs/heads/feature/hello","newObjectId":"{NEW}"}}]}}"#),
        ),
        Reply::json(
            "GET",
            &repo_api(&format!("/commits/{NEW}")),
            200,
            &format!(r#"{{"commitId":"{NEW}","treeId":"{TREE}","parents":["{HEAD}"]}}"#),
        ),
        Reply::json("GET", &api("/build/definitions"), 200, r#"{"count":0,"value":[]}"#),
        repository_reply(),
        Reply::json("POST", &api("/pipelines"), 200, r#"{"id":12,"name":"payments-api","folder":"\\bosun","revision":1}"#),
        builds_empty,
        Reply::json(
            "POST",
            &api("/pipelines/12/runs"),
            200,
            r#"{"id":4711,"name":"20261129.1","state":"inProgress","createdDate":"2026-11-29T10:00:07.1234567Z","_links":{"web":{"href":"https://dev.azure.com/contoso/Delivery/_build/results?buildId=4711"}}}"#,
        ),
        // Second delivery: the file is there, the definition exists, the
        // commit's run is found.
        repository_reply(),
        refs_reply(NEW),
        Reply::bytes("GET", &repo_api("/items"), 200, yaml.as_bytes()),
        Reply::json(
            "GET",
            &repo_api(&format!("/commits/{NEW}")),
            200,
            &format!(r#"{{"commitId":"{NEW}","treeId":"{TREE}","parents":["{HEAD}"]}}"#),
        ),
        Reply::json(
            "GET",
            &api("/build/definitions"),
            200,
            r#"{"count":2,"value":[{"id":9,"name":"payments-api","path":"\\bosun\\fabrikam"},{"id":12,"name":"payments-api","path":"\\bosun\\contoso"}]}"#,
        ),
        Reply::json(
            "GET",
            &api("/build/builds"),
            200,
            &format!(r#"{{"count":1,"value":[{{"id":4711,"sourceVersion":"{NEW}","queueTime":"2026-11-29T10:00:07.1234567Z","_links":{{"web":{{"href":"https://dev.azure.com/contoso/Delivery/_build/results?buildId=4711"}}}}}}]}}"#),
        ),
    ])
    .await;
    let consumer = azure_consumer(&server);
    let event = pull_request(Some(module.clone()));
    let (generated, started) = events(&handle(&consumer, event.clone().into()).await.unwrap());
    assert!(!generated.no_op);
    assert_eq!(generated.commit_sha, NEW);
    assert_eq!(generated.pipeline_id, "12");
    assert_eq!(started.pipeline_run_id, "4711");
    assert_eq!(started.started_at, datetime!(2026-11-29 10:00:07 UTC));
    assert_eq!(started.release_id, "payments-api-222222222222");
    let (again_generated, again_started) = events(&handle(&consumer, event.into()).await.unwrap());
    assert!(again_generated.no_op);
    assert_eq!(again_started, started);

    let requests = server.finish().await;
    let push = requests.iter().find(|r| r.path.ends_with("/pushes")).unwrap().json();
    assert_eq!(push["refUpdates"][0]["oldObjectId"], HEAD);
    let change = &push["commits"][0]["changes"][0];
    assert_eq!(change["changeType"], "add");
    assert_eq!(change["item"]["path"], "/src/Payments.Api/azure-pipelines.yml");
    assert_eq!(change["newContent"]["content"], yaml);
    let create = requests
        .iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/_apis/pipelines"))
        .unwrap();
    assert_eq!(create.query("api-version"), Some("7.1"));
    let create = create.json();
    assert_eq!(create["name"], "payments-api");
    assert_eq!(create["folder"], "\\bosun\\contoso", "the tenant's folder");
    assert_eq!(create["configuration"]["type"], "yaml");
    assert_eq!(create["configuration"]["path"], "/src/Payments.Api/azure-pipelines.yml");
    assert_eq!(create["configuration"]["repository"]["id"], REPO_ID);
    assert_eq!(create["configuration"]["repository"]["type"], "azureReposGit");
    let run = requests
        .iter()
        .find(|r| r.path.ends_with("/pipelines/12/runs"))
        .unwrap()
        .json();
    assert_eq!(
        run["resources"]["repositories"]["self"]["refName"],
        "refs/heads/feature/hello"
    );
    assert_eq!(run["resources"]["repositories"]["self"]["version"], NEW);
    let builds = requests.iter().find(|r| r.path.ends_with("/build/builds")).unwrap();
    assert_eq!(builds.query("definitions"), Some("12"));
    assert_eq!(builds.query("branchName"), Some("refs/heads/feature/hello"));
    let definitions = requests
        .iter()
        .find(|r| r.path.ends_with("/build/definitions"))
        .unwrap();
    assert_eq!(definitions.query("name"), Some("payments-api"));
}

/// The replies of reading the module file, finding the definition and
/// finding its run of [`NEW`], for `tenant` in `project`.
fn pipeline_replies(project: &str, tenant: &str) -> Vec<Reply> {
    let api = |rest: &str| format!("/contoso/{project}/_apis{rest}");
    vec![
        Reply::json(
            "GET",
            &api("/git/repositories/hello/items"),
            404,
            r#"{"message":"not found"}"#,
        ),
        Reply::json(
            "GET",
            &api("/build/definitions"),
            200,
            &format!(r#"{{"count":1,"value":[{{"id":9,"name":"payments-api","path":"\\bosun\\{tenant}"}}]}}"#),
        ),
        Reply::json(
            "GET",
            &api("/build/builds"),
            200,
            &format!(
                r#"{{"count":1,"value":[{{"id":4711,"sourceVersion":"{NEW}","queueTime":"2026-11-29T10:00:07Z"}}]}}"#
            ),
        ),
    ]
}

/// Reads the module file, finds the definition and its run, as `contoso`
/// then as `fabrikam`.
async fn pipelines_of_both_tenants(adapter: &AzurePipelineGenerator) {
    for tenant in ["contoso", "fabrikam"] {
        assert_eq!(
            adapter
                .read_file(tenant, "hello", "main", "bosun.module.json")
                .await
                .unwrap(),
            None
        );
        let definition = DefinitionSpec {
            tenant: tenant.into(),
            repository: "hello".into(),
            pipeline_path: "azure-pipelines.yml".into(),
            name: "payments-api".into(),
        };
        assert_eq!(adapter.ensure_pipeline(&definition).await.unwrap(), "9");
        let run = RunSpec {
            tenant: tenant.into(),
            repository: "hello".into(),
            branch: "feature/hello".into(),
            commit_sha: NEW.into(),
            pipeline_path: "azure-pipelines.yml".into(),
            pipeline_id: "9".into(),
        };
        assert_eq!(adapter.queue_run(&run).await.unwrap().run_id, "4711");
    }
}

#[tokio::test]
async fn azure_project_template_gives_each_tenant_its_own_project() {
    let mut script = pipeline_replies("delivery-contoso", "contoso");
    script.extend(pipeline_replies("delivery-fabrikam", "fabrikam"));
    let server = MockAzure::start(script).await;
    let adapter = AzurePipelineGenerator::new(&AzureDevOpsConfig::new(
        server.url("/contoso"),
        "delivery-{tenant}",
        AzureDevOpsAuth::Pat("my-pat".into()),
    ))
    .unwrap();
    pipelines_of_both_tenants(&adapter).await;
    server.finish().await;

    // Without the template variable, both tenants' definitions are in the one
    // project (in a folder each).
    let mut script = pipeline_replies("Delivery", "contoso");
    script.extend(pipeline_replies("Delivery", "fabrikam"));
    let server = MockAzure::start(script).await;
    let adapter = AzurePipelineGenerator::new(&AzureDevOpsConfig::new(
        server.url("/contoso"),
        "Delivery",
        AzureDevOpsAuth::Pat("my-pat".into()),
    ))
    .unwrap();
    pipelines_of_both_tenants(&adapter).await;
    server.finish().await;
}

#[tokio::test]
async fn azure_reads_the_module_file_of_the_default_branch() {
    let server = MockAzure::start(vec![
        Reply::json(
            "GET",
            &api("/git/repositories/hello/items"),
            404,
            r#"{"message":"not found"}"#,
        ),
        Reply::json("GET", &api("/git/repositories/hello/items"), 401, r#"{"message":"no"}"#),
    ])
    .await;
    let consumer = azure_consumer(&server);
    assert_eq!(
        handle(&consumer, provisioned().into()).await.unwrap(),
        Outcome::default()
    );
    let err = handle(&consumer, provisioned().into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    let requests = server.finish().await;
    assert_eq!(requests[0].query("path"), Some("/bosun.module.json"));
    assert_eq!(requests[0].query("versionDescriptor.version"), Some("main"));
    assert_eq!(requests[0].query("versionDescriptor.versionType"), Some("branch"));
}

#[tokio::test]
async fn azure_definitions_are_the_tenants_and_one_from_before_tenant_folders_is_reused_for_its_repository() {
    let spec = |tenant: &str| DefinitionSpec {
        tenant: tenant.into(),
        repository: "hello".into(),
        pipeline_path: "azure-pipelines.yml".into(),
        name: "payments-api".into(),
    };
    let legacy = r#"{"count":1,"value":[{"id":7,"name":"payments-api","path":"\\bosun"}]}"#;
    let server = MockAzure::start(vec![
        // The definition made before tenant folders runs this repository.
        Reply::json("GET", &api("/build/definitions"), 200, legacy),
        Reply::json(
            "GET",
            &api("/build/definitions/7"),
            200,
            r#"{"id":7,"name":"payments-api","path":"\\bosun","repository":{"id":"r","name":"hello","type":"TfsGit"}}"#,
        ),
        // Another tenant's definition of the same module id is not used.
        Reply::json(
            "GET",
            &api("/build/definitions"),
            200,
            r#"{"count":1,"value":[{"id":9,"name":"payments-api","path":"\\bosun\\contoso"}]}"#,
        ),
        repository_reply(),
        Reply::json("POST", &api("/pipelines"), 200, r#"{"id":13,"name":"payments-api"}"#),
    ])
    .await;
    let adapter = AzurePipelineGenerator::new(&AzureDevOpsConfig::new(
        server.url("/contoso"),
        "Delivery",
        AzureDevOpsAuth::Pat("my-pat".into()),
    ))
    .unwrap();
    let reused = adapter.ensure_pipeline(&spec("contoso")).await;
    let created = adapter.ensure_pipeline(&spec("fabrikam")).await;
    let requests = server.finish().await;
    assert_eq!(reused.unwrap(), "7");
    assert_eq!(created.unwrap(), "13");
    let create = requests.last().unwrap().json();
    assert_eq!(create["folder"], "\\bosun\\fabrikam");
}

#[test]
fn every_generated_template_parses_with_the_local_runner() {
    for language in [
        bosun_contracts::messages::ModuleLanguage::Dotnet,
        bosun_contracts::messages::ModuleLanguage::Node,
        bosun_contracts::messages::ModuleLanguage::Python,
        bosun_contracts::messages::ModuleLanguage::Go,
        bosun_contracts::messages::ModuleLanguage::Java,
        bosun_contracts::messages::ModuleLanguage::Rust,
        bosun_contracts::messages::ModuleLanguage::Other,
    ] {
        let mut module = crate::delivery::pipeline::test_support::module();
        module.language = language;
        let yaml = template::render(&module, TEMPLATE_VERSION).unwrap();
        let pipeline = parse_pipeline(&yaml).unwrap();
        let names: Vec<&str> = pipeline.jobs[0].steps.iter().map(|step| step.name.as_str()).collect();
        assert!(names.contains(&"Build") && names.contains(&"Test"), "{names:?}");
        assert_eq!(pipeline.variables[0], ("BOSUN_MODULE_ID".into(), "hello-api".into()));
    }
}

#[test]
fn the_runner_fixture_pipeline_is_what_the_template_renders_for_the_fixture_module() {
    let yaml = template::render(&crate::delivery::pipeline::test_support::module(), TEMPLATE_VERSION).unwrap();
    assert_eq!(
        yaml, HELLO_PIPELINE,
        "the pipeline runner's tests run consumers/src/delivery/pipeline/testdata/hello-api.azure-pipelines.yml: \
         update it to the template's output"
    );
}
