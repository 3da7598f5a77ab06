//! bosun's Azure DevOps adapters (repository provisioning, commits, pull
//! requests, pipeline generation, the pipeline monitor and build
//! ingestion) against the Azure DevOps double of `bosun-azure-doubles`,
//! with a 429 (with `Retry-After`) and a 5xx injected into each: every
//! failure must be one the runtime retries, the retried request must end
//! as one request would, and handling the same request again must change
//! nothing (one repository, one push, one pull request, one pipeline, one
//! run), as the double's state shows. With Entra ID tokens from
//! `azure_identity`'s workload identity credential against the Entra
//! double (`support`): a token refused before its expiry is replaced once
//! by a new one, and a new token refused too is a permanent error saying
//! so; a static token refused is permanent at once.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use bosun_azure_doubles::devops::{DevOpsDouble, RunResult, RunScript, ScriptedTest};
use bosun_azure_doubles::entra::EntraDouble;
use bosun_azure_doubles::{Auth, Fault, FaultRule, Faults, Journal, TokenBook};
use bosun_consumers::build_ingestion::azure::AzureBuildResults;
use bosun_consumers::build_ingestion::{BuildResults, IngestRequest};
use bosun_consumers::delivery::azure::credential::FRESH_TOKEN_REFUSED;
use bosun_consumers::delivery::azure::devops::{AZURE_DEVOPS_SCOPE, AzureDevOpsAuth, AzureDevOpsConfig};
use bosun_consumers::delivery::blob::{BlobStore, FilesystemBlobStore};
use bosun_consumers::delivery::git::commit::{AzureCommitWriter, CommitSpec, CommitWriter, FileWrite};
use bosun_consumers::iac_provisioning::port::{ProgramCommit, ProvisionRequest};
use bosun_consumers::iac_provisioning::program::{GitProgram, RepositoryUrls};
use bosun_consumers::pipeline_generation::azure::AzurePipelineGenerator;
use bosun_consumers::pipeline_generation::{DefinitionSpec, PipelineFile, PipelineHost, RunSpec};
use bosun_consumers::pipeline_monitor::azure::AzureRunStatus;
use bosun_consumers::pipeline_monitor::{PipelineRunStatus, RunQuery, RunState};
use bosun_consumers::pull_request::azure::AzurePullRequests;
use bosun_consumers::pull_request::{CheckStatus, PullRequestHost, PullRequestSpec};
use bosun_consumers::repository_provisioning::azure::AzureRepositoryHost;
use bosun_consumers::repository_provisioning::{RepositoryHost, RepositorySpec};
use bosun_contracts::messages::{GitIdentity, PipelineResult, PullRequestStatus};
use time::OffsetDateTime;

const PAT: &str = "bosun-test-pat";
const PROJECT: &str = "delivery";
const TENANT: &str = "contoso";
const REPOSITORY: &str = "payments-api";
const SERVICE: &str = "devops";

/// Calls `$call` until it succeeds; every failure must be retryable (the
/// runtime would deliver the message again). Evaluates to the value and
/// the failures seen.
macro_rules! retried {
    ($call:expr) => {{
        let mut failures: Vec<String> = Vec::new();
        loop {
            match $call.await {
                Ok(value) => break (value, failures),
                Err(err) => {
                    assert!(err.is_retryable(), "a failure the runtime would not retry: {err}");
                    failures.push(err.to_string());
                    assert!(failures.len() <= 4, "retried too often: {failures:#?}");
                }
            }
        }
    }};
}

struct World {
    double: DevOpsDouble,
    faults: Faults,
    journal: Journal,
    config: AzureDevOpsConfig,
}

impl World {
    async fn start() -> Self {
        let faults = Faults::default();
        let journal = Journal::default();
        let double = DevOpsDouble::start(
            faults.clone(),
            journal.clone(),
            Auth::default().basic_password(PAT),
            "contoso",
        )
        .await
        .unwrap();
        double.add_project(PROJECT);
        let config = AzureDevOpsConfig::new(double.organization_url(), PROJECT, AzureDevOpsAuth::Pat(PAT.to_owned()));
        Self {
            double,
            faults,
            journal,
            config,
        }
    }

    /// A 429 and then a 503 on the next requests of `method` whose path
    /// contains `path`.
    fn throttle_then_fail(&self, method: &str, path: &str) {
        self.faults
            .add(FaultRule::new(SERVICE, path, Fault::Throttle { retry_after_secs: 1 }, 1).method(method));
        self.faults.add(
            FaultRule::new(SERVICE, path, Fault::Status(503), 1)
                .method(method)
                .after(1),
        );
    }

    /// Every planned fault fired, as the journal shows.
    fn assert_faults_fired(&self, expected: usize) {
        assert!(
            self.faults.pending().is_empty(),
            "faults not fired: {:?}",
            self.faults.pending()
        );
        assert_eq!(self.journal.faults().len(), expected, "{:?}", self.journal.faults());
    }

    async fn provision(&self, reviewers: u32) {
        let host = AzureRepositoryHost::new(&self.config).unwrap();
        host.provision(&repository_spec(reviewers)).await.unwrap();
    }

    async fn commit(&self, branch: &str, files: &[(&str, &str)], delete: &[&str]) -> String {
        let writer = AzureCommitWriter::new(&self.config).unwrap();
        writer
            .commit(&commit_spec(branch, files, delete))
            .await
            .unwrap()
            .commit_sha
    }
}

fn repository_spec(reviewers: u32) -> RepositorySpec {
    RepositorySpec {
        tenant: TENANT.to_owned(),
        name: REPOSITORY.to_owned(),
        project: None,
        default_branch: "main".to_owned(),
        description: None,
        minimum_reviewers: reviewers,
    }
}

fn date() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_767_225_600).unwrap()
}

fn commit_spec(branch: &str, files: &[(&str, &str)], delete: &[&str]) -> CommitSpec {
    CommitSpec {
        tenant: TENANT.to_owned(),
        repository: REPOSITORY.to_owned(),
        branch: branch.to_owned(),
        base_branch: None,
        message: format!("Update {branch}\n\nBy bosun."),
        author: GitIdentity {
            name: "bosun".to_owned(),
            email: "bosun@contoso.example".to_owned(),
        },
        date: date(),
        files: files
            .iter()
            .map(|(path, content)| FileWrite {
                path: (*path).to_owned(),
                content: content.as_bytes().to_vec(),
                executable: false,
            })
            .collect(),
        delete: delete.iter().map(|path| (*path).to_owned()).collect(),
    }
}

#[tokio::test]
async fn provisioning_makes_one_repository_and_one_policy_through_a_429_and_a_503() {
    let world = World::start().await;
    world.throttle_then_fail("POST", "/_apis/git/repositories?");
    // After the repository exists: the retry must find it, not make another.
    world.faults.add(FaultRule::new(
        SERVICE,
        "/_apis/git/policy/configurations",
        Fault::Status(500),
        1,
    ));
    let host = AzureRepositoryHost::new(&world.config).unwrap();
    let (provisioned, failures) = retried!(host.provision(&repository_spec(2)));
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert_eq!(provisioned.repository.name, REPOSITORY);
    assert_eq!(provisioned.repository.project, PROJECT);
    assert_eq!(provisioned.repository.default_branch, "main");
    assert!(
        provisioned.repository.url.ends_with("/delivery/_git/payments-api"),
        "{provisioned:?}"
    );

    // The same request again: nothing new.
    let again = host.provision(&repository_spec(2)).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.repository.id, provisioned.repository.id);

    let repositories = world.double.repositories(PROJECT);
    assert_eq!(repositories.len(), 1, "{repositories:?}");
    assert_eq!(repositories[0].id, provisioned.repository.id);
    let policies = world.double.policy_configurations(PROJECT);
    assert_eq!(policies.len(), 1, "{policies:?}");
    let settings = &policies[0].1["settings"];
    assert_eq!(settings["minimumApproverCount"], 2);
    assert_eq!(settings["scope"][0]["repositoryId"], provisioned.repository.id.as_str());
    assert_eq!(settings["scope"][0]["refName"], "refs/heads/main");
    world.assert_faults_fired(3);
    assert_eq!(world.journal.succeeded(SERVICE, "POST", "/_apis/git/repositories?"), 1);
}

/// iac-provisioning's program fetch (`git fetch --depth 1 <url> <commit>`
/// with the PAT as an `extraHeader`) from the module's own repository in
/// the double, over Git's smart HTTP, at the commit bosun pushed.
#[tokio::test]
async fn the_pulumi_program_is_fetched_with_git_at_the_pushed_commit() {
    let world = World::start().await;
    world.provision(0).await;
    world
        .commit("main", &[("infra/Pulumi.yaml", "name: payments\nruntime: yaml\n")], &[])
        .await;
    let commit = world
        .commit(
            "main",
            &[("infra/Pulumi.dev.yaml", "config: {}\n"), ("README.md", "# payments\n")],
            &[],
        )
        .await;
    let organization_url = world.double.organization_url();
    let mut program = GitProgram::new(
        RepositoryUrls::AzureRepos {
            organization_url: organization_url.clone(),
            project: PROJECT.to_owned(),
        },
        "infra",
    );
    program.auth = Some(AzureDevOpsAuth::Pat(PAT.to_owned()));
    program.credential_scope = format!("{organization_url}/");
    let request = ProvisionRequest {
        tenant: TENANT.to_owned(),
        plan_id: "payments-api-1.4.0-dev".to_owned(),
        stack: "payments/dev".to_owned(),
        environment: "dev".to_owned(),
        release_id: None,
        config: Default::default(),
        resources: vec![],
        preview_only: false,
        program: Some(ProgramCommit {
            repository: REPOSITORY.to_owned(),
            commit_sha: commit.clone(),
        }),
    };
    let work = tempfile::tempdir().unwrap();
    let checkout = program
        .checkout(&request, work.path(), std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let folder = checkout.program();
    assert_eq!(
        std::fs::read_to_string(folder.join("Pulumi.yaml")).unwrap(),
        "name: payments\nruntime: yaml\n"
    );
    assert_eq!(
        std::fs::read_to_string(folder.join("Pulumi.dev.yaml")).unwrap(),
        "config: {}\n"
    );
    assert!(!folder.join("README.md").exists(), "only the program folder");
    assert!(
        world
            .journal
            .succeeded(SERVICE, "POST", "/delivery/_git/payments-api/git-upload-pack")
            >= 1
    );
}

#[tokio::test]
async fn commits_push_once_through_a_429_and_a_503_and_the_files_are_readable() {
    let world = World::start().await;
    world.provision(0).await;
    world.throttle_then_fail("POST", "/pushes?");
    // After the push landed: the retry sees the branch holding the tree.
    world
        .faults
        .add(FaultRule::new(SERVICE, "/commits/", Fault::Status(502), 1));
    let writer = AzureCommitWriter::new(&world.config).unwrap();
    let spec = commit_spec(
        "main",
        &[("README.md", "# payments\n"), ("src/lib.rs", "pub fn pay() {}\n")],
        &[],
    );
    let (first, failures) = retried!(writer.commit(&spec));
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(
        first.no_op,
        "the retry after the lost answer finds the commit made: {first:?}"
    );
    let repository = &world.double.repositories(PROJECT)[0];
    assert_eq!(repository.pushes, 1);
    assert_eq!(repository.default_branch.as_deref(), Some("refs/heads/main"));
    assert_eq!(
        repository.refs,
        vec![("refs/heads/main".to_owned(), first.commit_sha.clone())]
    );
    assert_eq!(
        world.double.file(PROJECT, REPOSITORY, "main", "src/lib.rs").as_deref(),
        Some(&b"pub fn pay() {}\n"[..])
    );

    // Handled again: no new commit.
    let again = writer.commit(&spec).await.unwrap();
    assert!(again.no_op);
    assert_eq!(again.commit_sha, first.commit_sha);

    // An edit and a delete make one more commit on top.
    let next = writer
        .commit(&commit_spec("main", &[("README.md", "# payments v2\n")], &["src"]))
        .await
        .unwrap();
    assert!(!next.no_op);
    assert_eq!(next.files_changed, 2);
    assert_eq!(next.parent_sha.as_deref(), Some(first.commit_sha.as_str()));
    assert_eq!(world.double.repositories(PROJECT)[0].pushes, 2);
    assert_eq!(world.double.file(PROJECT, REPOSITORY, "main", "src/lib.rs"), None);
    assert_eq!(
        world.double.file(PROJECT, REPOSITORY, "main", "README.md").as_deref(),
        Some(&b"# payments v2\n"[..])
    );
    world.assert_faults_fired(3);
}

fn pull_request_spec(auto_complete: bool) -> PullRequestSpec {
    PullRequestSpec {
        tenant: TENANT.to_owned(),
        repository: REPOSITORY.to_owned(),
        source_branch: "feature".to_owned(),
        target_branch: "main".to_owned(),
        title: None,
        description: Some("Opened by bosun.".to_owned()),
        required_checks: Vec::new(),
        auto_complete,
        date: date(),
    }
}

#[tokio::test]
async fn one_pull_request_through_a_429_and_a_503_completed_by_auto_complete() {
    let world = World::start().await;
    world.provision(1).await;
    world.commit("main", &[("README.md", "# payments\n")], &[]).await;
    let head = world
        .commit("feature", &[("README.md", "# payments, changed\n")], &[])
        .await;
    world.throttle_then_fail("POST", "/pullrequests?");
    world.faults.add(
        FaultRule::new(
            SERVICE,
            "searchCriteria.status=active",
            Fault::Throttle { retry_after_secs: 2 },
            1,
        )
        .after(1),
    );
    let host = AzurePullRequests::new(&world.config).unwrap();
    let (opened, failures) = retried!(host.open(&pull_request_spec(true)));
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(opened.created);
    assert_eq!(opened.title, "Update feature");
    assert_eq!(opened.head_commit, head);
    assert_eq!(opened.status, PullRequestStatus::Active);
    assert!(opened.auto_complete);
    assert_eq!(opened.checks.len(), 1, "{:?}", opened.checks);
    assert_eq!(opened.checks[0].name, "Minimum number of reviewers");
    assert_eq!(opened.checks[0].status, CheckStatus::Pending);
    assert!(opened.url.ends_with(&format!(
        "/delivery/_git/payments-api/pullrequest/{}",
        opened.pull_request_id
    )));

    // Handled again: the same pull request.
    let again = host.open(&pull_request_spec(true)).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.pull_request_id, opened.pull_request_id);
    let pulls = world.double.pull_requests(PROJECT);
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert_eq!(pulls[0].status, "active");

    // The reviewer approves: auto-complete merges it, and the request
    // handled once more reports the completed pull request.
    let policy = world.double.policy_configurations(PROJECT)[0].0;
    world
        .double
        .set_policy_evaluation(opened.pull_request_id, policy, "approved");
    let done = host.open(&pull_request_spec(true)).await.unwrap();
    assert!(!done.created);
    assert_eq!(done.pull_request_id, opened.pull_request_id);
    assert_eq!(done.status, PullRequestStatus::Completed);
    let merge = done.merge_commit.clone().unwrap();
    assert_eq!(world.double.pull_requests(PROJECT).len(), 1);
    assert_eq!(
        world.double.file(PROJECT, REPOSITORY, "main", "README.md").as_deref(),
        Some(&b"# payments, changed\n"[..])
    );
    let main = world.double.repositories(PROJECT)[0]
        .refs
        .iter()
        .find(|(name, _)| name == "refs/heads/main")
        .map(|(_, commit)| commit.clone());
    assert_eq!(main, Some(merge));
    // The file reading and finding the pull request consumer does.
    assert_eq!(
        host.read_file(TENANT, REPOSITORY, &head, "README.md")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"# payments, changed\n"[..])
    );
    assert_eq!(
        host.find_files(TENANT, REPOSITORY, &head, "README.md").await.unwrap(),
        vec!["README.md".to_owned()]
    );
    world.assert_faults_fired(3);
}

const PIPELINE_YAML: &str = "trigger: none\nsteps:\n- script: dotnet test\n";

/// Commits the pipeline file, makes the definition and queues a run,
/// each through a 429 and a 503; returns `(pipeline id, run id, commit)`.
async fn generate(world: &World) -> (String, String, String) {
    let host = AzurePipelineGenerator::new(&world.config).unwrap();
    let file = PipelineFile {
        tenant: TENANT.to_owned(),
        repository: REPOSITORY.to_owned(),
        branch: "main".to_owned(),
        path: "azure-pipelines.yml".to_owned(),
        content: PIPELINE_YAML.to_owned(),
        message: "Add the pipeline".to_owned(),
        date: date(),
    };
    world.throttle_then_fail("POST", "/pushes?");
    world.throttle_then_fail("POST", "/_apis/pipelines?");
    world.throttle_then_fail("POST", "/runs?");
    let (committed, failures) = retried!(host.commit_pipeline(&file));
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(!committed.no_op);
    assert_eq!(
        host.read_file(TENANT, REPOSITORY, "main", "azure-pipelines.yml")
            .await
            .unwrap()
            .as_deref(),
        Some(PIPELINE_YAML.as_bytes())
    );
    let definition = DefinitionSpec {
        tenant: TENANT.to_owned(),
        repository: REPOSITORY.to_owned(),
        pipeline_path: "azure-pipelines.yml".to_owned(),
        name: REPOSITORY.to_owned(),
    };
    let (pipeline_id, failures) = retried!(host.ensure_pipeline(&definition));
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert_eq!(host.ensure_pipeline(&definition).await.unwrap(), pipeline_id);
    let run = RunSpec {
        tenant: TENANT.to_owned(),
        repository: REPOSITORY.to_owned(),
        branch: "main".to_owned(),
        commit_sha: committed.commit_sha.clone(),
        pipeline_path: "azure-pipelines.yml".to_owned(),
        pipeline_id: pipeline_id.clone(),
    };
    let (queued, failures) = retried!(host.queue_run(&run));
    assert_eq!(failures.len(), 2, "{failures:#?}");
    assert!(queued.url.is_some());
    // Handled again: the run of this commit, not a second one.
    assert_eq!(host.queue_run(&run).await.unwrap().run_id, queued.run_id);
    (pipeline_id, queued.run_id, committed.commit_sha)
}

fn failing_tests() -> RunScript {
    RunScript::failed("Unit tests").with_test_run(
        "unit",
        vec![
            ScriptedTest::passed("Payments.Tests.Pays", "Payments.Tests.dll"),
            ScriptedTest::failed("Payments.Tests.Refunds", "Payments.Tests.dll", "expected 1, got 2"),
        ],
    )
}

#[tokio::test]
async fn pipeline_generation_makes_one_pipeline_and_one_run_through_429s_and_503s() {
    let world = World::start().await;
    world.provision(0).await;
    world.commit("main", &[("README.md", "# payments\n")], &[]).await;
    let (pipeline_id, run_id, commit) = generate(&world).await;
    let pipelines = world.double.pipelines(PROJECT);
    assert_eq!(
        pipelines,
        vec![(
            pipeline_id.parse().unwrap(),
            "\\bosun\\contoso".to_owned(),
            REPOSITORY.to_owned(),
            "/azure-pipelines.yml".to_owned()
        )]
    );
    let runs = world.double.runs(PROJECT);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].id.to_string(), run_id);
    assert_eq!(runs[0].commit, commit);
    assert_eq!(runs[0].branch, "refs/heads/main");
    assert_eq!(runs[0].result, Some(RunResult::Succeeded));
    world.assert_faults_fired(6);
}

#[tokio::test]
async fn the_monitor_follows_a_run_and_copies_its_log_and_tests_through_a_429_and_a_503() {
    let world = World::start().await;
    world.provision(0).await;
    world.commit("main", &[("README.md", "# payments\n")], &[]).await;
    world.double.on_run(|_| failing_tests().held());
    let (pipeline_id, run_id, commit) = generate(&world).await;
    let dir = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FilesystemBlobStore::new(dir.path()));
    let monitor = AzureRunStatus::new(&world.config, Arc::clone(&blobs)).unwrap();
    let query = RunQuery {
        tenant: TENANT.to_owned(),
        pipeline_run_id: run_id.clone(),
        pipeline_id,
        repository: REPOSITORY.to_owned(),
        commit_sha: commit,
    };
    match monitor.run_status(&query).await.unwrap() {
        RunState::InProgress { status } => assert_eq!(status, "inProgress"),
        RunState::Finished(run) => panic!("the held run finished: {run:?}"),
    }
    assert!(world.double.finish_run(run_id.parse().unwrap()));
    world.throttle_then_fail("GET", "/timeline?");
    world.throttle_then_fail("GET", "/logs/1?");
    let (state, failures) = retried!(monitor.run_status(&query));
    assert_eq!(failures.len(), 4, "{failures:#?}");
    let RunState::Finished(run) = state else {
        panic!("the run did not finish: {state:?}");
    };
    assert_eq!(run.result, PipelineResult::Failed);
    assert_eq!(run.failed_step.as_deref(), Some("Unit tests"));
    assert!(run.started_at.is_some());
    let log = String::from_utf8(blobs.get(run.log.as_ref().unwrap()).await.unwrap()).unwrap();
    assert!(log.contains("##[error]Unit tests failed"), "{log}");
    assert_eq!(run.test_results.len(), 1);
    let junit = String::from_utf8(blobs.get(&run.test_results[0]).await.unwrap()).unwrap();
    assert!(junit.contains("tests=\"2\" failures=\"1\""), "{junit}");
    assert!(junit.contains("expected 1, got 2"), "{junit}");
    assert_eq!(world.double.test_run_count(PROJECT), 1);
    world.assert_faults_fired(10);
}

#[tokio::test]
async fn build_ingestion_reads_the_test_runs_through_a_429_and_a_503() {
    let world = World::start().await;
    world.provision(0).await;
    world.commit("main", &[("README.md", "# payments\n")], &[]).await;
    world.double.on_run(|_| failing_tests());
    let (pipeline_id, run_id, commit) = generate(&world).await;
    let dir = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FilesystemBlobStore::new(dir.path()));
    let ingestion = AzureBuildResults::new(&world.config, Arc::clone(&blobs)).unwrap();
    let mut run = bosun_contracts::samples::pipeline_run_completed();
    run.pipeline_run_id.clone_from(&run_id);
    run.pipeline_id = pipeline_id;
    run.repository = REPOSITORY.to_owned();
    run.commit_sha = commit;
    run.result = PipelineResult::Failed;
    run.log = None;
    run.test_results.clear();
    run.artifacts.clear();
    let request = IngestRequest {
        tenant: TENANT.to_owned(),
        build_id: bosun_consumers::build_ingestion::build_id(&run_id),
        run,
    };
    world.throttle_then_fail("GET", "/_apis/test/runs?");
    world.throttle_then_fail("GET", "/results?");
    let (built, failures) = retried!(ingestion.ingest(&request));
    assert_eq!(failures.len(), 4, "{failures:#?}");
    assert_eq!(built.test_summary.total, 2);
    assert_eq!(built.test_summary.passed, 1);
    assert_eq!(built.test_summary.failed, 1);
    assert_eq!(built.failed_tests.len(), 1, "{:?}", built.failed_tests);
    assert!(built.failed_tests[0].contains("Refunds"), "{:?}", built.failed_tests);
    let log = String::from_utf8(blobs.get(&built.log).await.unwrap()).unwrap();
    assert!(log.contains("##[bosun] log 1"), "{log}");
    // Ingested again: the same record.
    let again = ingestion.ingest(&request).await.unwrap();
    assert_eq!(again, built);
    world.assert_faults_fired(10);
}

#[tokio::test]
async fn an_entra_bearer_token_is_accepted_and_a_wrong_pat_is_refused_for_good() {
    let tokens = TokenBook::default();
    let double = DevOpsDouble::start(
        Faults::default(),
        Journal::default(),
        Auth::default().entra(tokens.clone()),
        "contoso",
    )
    .await
    .unwrap();
    double.add_project(PROJECT);
    let token = tokens.issue("bosun-client", AZURE_DEVOPS_SCOPE, std::time::Duration::from_secs(600));
    let bearer = AzureDevOpsConfig::new(double.organization_url(), PROJECT, AzureDevOpsAuth::Bearer(token));
    let host = AzureRepositoryHost::new(&bearer).unwrap();
    assert!(host.provision(&repository_spec(0)).await.unwrap().created);
    let wrong = AzureDevOpsConfig::new(
        double.organization_url(),
        PROJECT,
        AzureDevOpsAuth::Pat("wrong".to_owned()),
    );
    let err = AzureRepositoryHost::new(&wrong)
        .unwrap()
        .provision(&repository_spec(0))
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "a refused credential is not retried: {err}");
    assert_eq!(double.repositories(PROJECT).len(), 1);
}

/// Azure DevOps taking only tokens of the Entra double, and bosun's
/// adapters with tokens from `azure_identity`'s workload identity
/// credential against it, as the runtime makes them.
struct EntraWorld {
    _dir: tempfile::TempDir,
    _double: DevOpsDouble,
    entra: EntraDouble,
    faults: Faults,
    journal: Journal,
    config: AzureDevOpsConfig,
}

impl EntraWorld {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let faults = Faults::default();
        let journal = Journal::default();
        let book = TokenBook::default();
        let entra = EntraDouble::start(faults.clone(), journal.clone(), book.clone())
            .await
            .unwrap();
        let token_file = support::workload_identity(&entra, dir.path());
        let double = DevOpsDouble::start(faults.clone(), journal.clone(), Auth::default().entra(book), "contoso")
            .await
            .unwrap();
        double.add_project(PROJECT);
        let tokens = support::refreshing_token(&entra, &token_file, AZURE_DEVOPS_SCOPE);
        let config = AzureDevOpsConfig::new(
            double.organization_url(),
            PROJECT,
            AzureDevOpsAuth::Entra(Arc::new(tokens)),
        );
        Self {
            _dir: dir,
            _double: double,
            entra,
            faults,
            journal,
            config,
        }
    }

    async fn provision(&self) -> Result<bool, String> {
        let host = AzureRepositoryHost::new(&self.config).unwrap();
        match host.provision(&repository_spec(0)).await {
            Ok(provisioned) => Ok(provisioned.created),
            Err(err) => {
                assert!(!err.is_retryable(), "only permanent failures are expected here: {err}");
                Err(error_chain(&err))
            }
        }
    }

    /// How many Azure DevOps tokens the Entra double issued.
    fn grants(&self) -> usize {
        self.entra
            .grants()
            .iter()
            .filter(|grant| grant.scope == AZURE_DEVOPS_SCOPE)
            .count()
    }

    /// The requests Azure DevOps answered 401.
    fn refusals(&self) -> usize {
        self.journal
            .entries()
            .iter()
            .filter(|entry| entry.service == SERVICE && entry.status == 401)
            .count()
    }
}

/// An error's text with all its causes.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[tokio::test]
async fn an_entra_token_revoked_before_its_expiry_is_replaced_once_and_the_request_succeeds() {
    let world = EntraWorld::start().await;
    assert_eq!(world.provision().await, Ok(true));
    assert_eq!(world.grants(), 1, "one token, cached for the hour it was issued for");

    // Azure DevOps refuses the cached token (and the book forgets it: only
    // a new token works; azure_identity's own cache would give it back).
    world
        .faults
        .add(FaultRule::new(SERVICE, "/_apis/", Fault::TokenExpired, 1));
    assert_eq!(
        world.provision().await,
        Ok(false),
        "the same repository, found with a new token"
    );
    assert!(world.faults.pending().is_empty());
    assert_eq!(world.grants(), 2, "one new token from the Entra double");
    assert_eq!(world.refusals(), 1);

    // The new token serves the next requests.
    assert_eq!(world.provision().await, Ok(false));
    assert_eq!(world.grants(), 2);
    assert_eq!(world.refusals(), 1);
}

#[tokio::test]
async fn a_new_entra_token_refused_too_is_a_permanent_error_saying_so() {
    let world = EntraWorld::start().await;
    world
        .faults
        .add(FaultRule::new(SERVICE, "/_apis/", Fault::TokenExpired, 2));
    let err = world.provision().await.unwrap_err();
    assert!(err.contains("HTTP 401"), "{err}");
    assert!(err.contains(FRESH_TOKEN_REFUSED), "{err}");
    assert_eq!(world.grants(), 2, "one new token, not more");
    assert_eq!(world.refusals(), 2, "sent twice, never a third time");
}

#[tokio::test]
async fn a_static_bearer_token_refused_is_permanent_at_once() {
    let tokens = TokenBook::default();
    let faults = Faults::default();
    let journal = Journal::default();
    let double = DevOpsDouble::start(
        faults.clone(),
        journal.clone(),
        Auth::default().entra(tokens.clone()),
        "contoso",
    )
    .await
    .unwrap();
    double.add_project(PROJECT);
    let token = tokens.issue("bosun-client", AZURE_DEVOPS_SCOPE, std::time::Duration::from_secs(3600));
    let config = AzureDevOpsConfig::new(double.organization_url(), PROJECT, AzureDevOpsAuth::Bearer(token));
    faults.add(FaultRule::new(SERVICE, "/_apis/", Fault::TokenExpired, 1));
    let err = AzureRepositoryHost::new(&config)
        .unwrap()
        .provision(&repository_spec(0))
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    let text = error_chain(&err);
    assert!(!text.contains(FRESH_TOKEN_REFUSED), "no new token to fetch: {text}");
    assert_eq!(journal.entries().len(), 1, "sent once: {:?}", journal.entries());
}
