//! Handler tests over an in-memory [`PullRequestHost`], and tests of the
//! local adapter (real pull requests, checks and merges in bare
//! repositories in a temporary folder) and of the Azure adapter (against a
//! scripted local HTTP server).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{CommitCreated, GitIdentity, OpenPullRequest, PullRequestOpened, PullRequestStatus};
use bosun_contracts::{Envelope, Message, samples};
use time::macros::datetime;
use uuid::Uuid;

use super::azure::AzurePullRequests;
use super::local::{CHECK_MERGEABLE, CHECK_MINIMUM_REVIEWERS, LocalPullRequests, PULL_REQUESTS_DIR};
use super::*;
use crate::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig};
use crate::delivery::azure::test_server::{MockAzure, Reply};
use crate::delivery::git::LocalGitHost;
use crate::delivery::git::commit::LocalCommitWriter;
use crate::delivery::git::commit::{CommitSpec, CommitWriter, FileWrite};
use crate::delivery::testing::provision;

const HEAD: &str = "7f3c2a1e9b8d4c6f0a5e3b2d1c9f8e7a6b5c4d3e";
const MERGE: &str = "3e4d5c6b7a8f9e1c2d3b4e5a6f0c4d8b9e1a2c3f";

fn envelope(message: &Message) -> Envelope {
    let mut envelope = Envelope::new(message, Uuid::now_v7(), "contoso", "agent:test");
    envelope.occurred_at = datetime!(2026-11-29 10:00:00 UTC);
    envelope
}

async fn handle<P: PullRequestHost>(consumer: &PullRequests<P>, message: Message) -> Result<Outcome, HandlerError> {
    let envelope = envelope(&message);
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn opened(outcome: &Outcome) -> &PullRequestOpened {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0].message {
        Message::PullRequestOpened(event) => event,
        other => panic!("expected PullRequestOpened, got {other:?}"),
    }
}

fn module_json() -> String {
    serde_json::to_string_pretty(&samples::module()).unwrap()
}

fn commit_created(branch: &str, target: Option<&str>) -> CommitCreated {
    CommitCreated {
        repository: "payments-api".to_owned(),
        repository_id: "repo-1".to_owned(),
        branch: branch.to_owned(),
        commit_sha: HEAD.to_owned(),
        tree_sha: HEAD.to_owned(),
        parent_sha: None,
        files_changed: 1,
        no_op: false,
        pull_request_target: target.map(str::to_owned),
    }
}

/// An in-memory host: records requests, answers with a fixed pull request,
/// serves files from a map.
#[derive(Default)]
struct FakeHost {
    specs: Mutex<Vec<PullRequestSpec>>,
    files: BTreeMap<String, Vec<u8>>,
    reads: Mutex<Vec<String>>,
    fail_with: Option<fn() -> PullRequestError>,
}

impl FakeHost {
    fn with_files(files: &[(&str, &str)]) -> Self {
        Self {
            files: files
                .iter()
                .map(|(path, content)| ((*path).to_owned(), content.as_bytes().to_vec()))
                .collect(),
            ..Self::default()
        }
    }
}

#[async_trait]
impl PullRequestHost for FakeHost {
    async fn open(&self, spec: &PullRequestSpec) -> Result<OpenedPullRequest, PullRequestError> {
        self.specs.lock().unwrap().push(spec.clone());
        if let Some(fail) = self.fail_with {
            return Err(fail());
        }
        Ok(OpenedPullRequest {
            pull_request_id: 7,
            title: spec.title.clone().unwrap_or_else(|| "Head subject".to_owned()),
            head_commit: HEAD.to_owned(),
            status: PullRequestStatus::Active,
            url: "https://dev.azure.com/contoso/p/_git/payments-api/pullrequest/7".to_owned(),
            created: true,
            required_checks: spec.required_checks.clone(),
            auto_complete: spec.auto_complete,
            merge_commit: None,
            checks: vec![],
        })
    }

    async fn read_file(
        &self,
        _tenant: &str,
        _repository: &str,
        commit: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PullRequestError> {
        assert_eq!(commit, HEAD);
        self.reads.lock().unwrap().push(path.to_owned());
        Ok(self.files.get(path).cloned())
    }

    async fn find_files(
        &self,
        _tenant: &str,
        _repository: &str,
        _commit: &str,
        file_name: &str,
    ) -> Result<Vec<String>, PullRequestError> {
        Ok(self
            .files
            .keys()
            .filter(|path| path.rsplit('/').next() == Some(file_name))
            .cloned()
            .collect())
    }
}

#[test]
fn name_and_retry_policy_follow_the_design() {
    let consumer = PullRequests::new(FakeHost::default());
    assert_eq!(consumer.name(), "pull-request");
    let route = bosun_contracts::routing::consumer(consumer.name()).unwrap();
    assert!(route.commands.contains(&"OpenPullRequest"));
    assert!(route.events.contains(&"CommitCreated"));
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(5));
}

#[tokio::test]
async fn commit_without_a_target_is_ignored() {
    let consumer = PullRequests::new(FakeHost::default());
    let outcome = handle(&consumer, commit_created("feature/x", None).into())
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::default());
    assert!(consumer.host().specs.lock().unwrap().is_empty());
}

#[tokio::test]
async fn commit_with_a_target_opens_a_pull_request_carrying_the_module_file() {
    let consumer = PullRequests::new(FakeHost::with_files(&[(MODULE_FILE, &module_json())]));
    let outcome = handle(
        &consumer,
        commit_created("refs/heads/feature/x", Some("refs/heads/main")).into(),
    )
    .await
    .unwrap();
    let event = opened(&outcome);
    assert_eq!(event.source_branch, "feature/x");
    assert_eq!(event.target_branch, "main");
    assert_eq!(event.title, "Head subject");
    assert_eq!(event.module, Some(samples::module()));
    assert!(!event.auto_complete);
    Message::from(event.clone()).validate().unwrap();

    let spec = consumer.host().specs.lock().unwrap()[0].clone();
    assert_eq!(spec.tenant, "contoso");
    assert_eq!(spec.title, None, "the host titles it after the head commit");
    assert!(spec.description.unwrap().contains(HEAD));
    assert_eq!(spec.date, datetime!(2026-11-29 10:00:00 UTC));
}

#[tokio::test]
async fn the_command_module_wins_and_no_file_is_read() {
    let consumer = PullRequests::new(FakeHost::with_files(&[(MODULE_FILE, "{ not json")]));
    let command = samples::open_pull_request();
    let outcome = handle(&consumer, command.clone().into()).await.unwrap();
    let event = opened(&outcome);
    assert_eq!(event.module, command.module);
    assert_eq!(event.title, command.title);
    assert_eq!(event.required_checks, command.required_checks);
    assert!(event.auto_complete);
    assert!(consumer.host().reads.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_nested_module_file_is_found_and_gets_its_directory_as_path() {
    let mut module = samples::module();
    module.path = None;
    let json = serde_json::to_string(&module).unwrap();
    let consumer = PullRequests::new(FakeHost::with_files(&[("services/payments/bosun.module.json", &json)]));
    let outcome = handle(&consumer, commit_created("feature/x", Some("main")).into())
        .await
        .unwrap();
    let found = opened(&outcome).module.clone().unwrap();
    assert_eq!(found.path.as_deref(), Some("services/payments"));
    assert_eq!(
        *consumer.host().reads.lock().unwrap(),
        vec![MODULE_FILE.to_owned(), "services/payments/bosun.module.json".to_owned()]
    );

    // Two module files and none at the root: ambiguous, no module.
    let consumer = PullRequests::new(FakeHost::with_files(&[
        ("a/bosun.module.json", &json),
        ("b/bosun.module.json", &json),
    ]));
    let outcome = handle(&consumer, commit_created("feature/x", Some("main")).into())
        .await
        .unwrap();
    assert_eq!(opened(&outcome).module, None);

    // No module file at all.
    let consumer = PullRequests::new(FakeHost::default());
    let outcome = handle(&consumer, commit_created("feature/x", Some("main")).into())
        .await
        .unwrap();
    assert_eq!(opened(&outcome).module, None);
}

#[tokio::test]
async fn an_invalid_module_file_is_permanent_and_names_the_file_and_field() {
    let mut wrong_type: serde_json::Value = serde_json::from_str(&module_json()).unwrap();
    wrong_type["container"]["image"] = serde_json::json!(42);
    let mut bad_version: serde_json::Value = serde_json::from_str(&module_json()).unwrap();
    bad_version["version"] = serde_json::json!("1.4");
    let cases = [
        (wrong_type.to_string(), "container.image"),
        (bad_version.to_string(), "version"),
        ("{\"moduleId\": \"x\",".to_owned(), "."),
        (
            r#"{"moduleId":"x","name":"x","language":"cobol","version":"1.0.0","buildCommand":"make"}"#.to_owned(),
            "language",
        ),
    ];
    for (content, field) in cases {
        let consumer = PullRequests::new(FakeHost::with_files(&[(MODULE_FILE, &content)]));
        let err = handle(&consumer, commit_created("feature/x", Some("main")).into())
            .await
            .unwrap_err();
        assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
        let text = err.to_string();
        assert!(text.contains("bosun.module.json"), "{text}");
        assert!(text.contains(&format!("field `{field}`")), "{text}");
    }
}

#[tokio::test]
async fn handler_refuses_bad_requests_before_the_port() {
    let consumer = PullRequests::new(FakeHost::default());
    let err = handle(&consumer, commit_created("main", Some("refs/heads/main")).into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    let mut command = samples::open_pull_request();
    command.source_branch = "bad..branch".to_owned();
    let err = handle(&consumer, command.into()).await.unwrap_err();
    assert!(err.to_string().contains("payload.sourceBranch"), "{err}");
    let err = handle(&consumer, samples::create_commit().into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(consumer.host().specs.lock().unwrap().is_empty());
}

#[tokio::test]
async fn handler_maps_port_errors_to_retry_decisions() {
    type FailWith = fn() -> PullRequestError;
    let cases: [(FailWith, &str); 5] = [
        (
            || PullRequestError::RepositoryNotFound { repository: "r".into() },
            "transient",
        ),
        (|| PullRequestError::BranchNotFound { branch: "b".into() }, "transient"),
        (
            || PullRequestError::Throttled {
                after: Duration::from_secs(7),
                source: "429".into(),
            },
            "retry-after",
        ),
        (|| PullRequestError::Rejected("403".into()), "permanent"),
        (|| PullRequestError::Invalid("x".into()), "permanent"),
    ];
    for (fail, expected) in cases {
        let consumer = PullRequests::new(FakeHost {
            fail_with: Some(fail),
            ..FakeHost::default()
        });
        let err = handle(&consumer, samples::open_pull_request().into())
            .await
            .unwrap_err();
        let kind = match err {
            HandlerError::Transient(_) => "transient",
            HandlerError::Permanent(_) => "permanent",
            HandlerError::NeedsNewer(_) => "needs-newer",
            HandlerError::RetryAfter { after, .. } => {
                assert_eq!(after, Duration::from_secs(7));
                "retry-after"
            }
        };
        assert_eq!(kind, expected);
    }
}

// ---- local adapter ----

struct Fixture {
    _root: tempfile::TempDir,
    git_root: PathBuf,
    repo: PathBuf,
    host: Arc<LocalGitHost>,
    writer: LocalCommitWriter,
}

async fn fixture(minimum_reviewers: u32) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let git_root = root.path().join("git");
    let host = Arc::new(LocalGitHost::new(&git_root));
    provision(&host, "contoso", "payments-api", minimum_reviewers).await;
    let fixture = Fixture {
        repo: git_root.join("contoso/contoso/payments-api.git"),
        git_root,
        _root: root,
        writer: LocalCommitWriter::with_host(Arc::clone(&host)),
        host,
    };
    fixture
        .commit(
            "main",
            None,
            "Initial commit",
            &[("README.md", "# Payments\n"), ("src/app.txt", "v1\n")],
        )
        .await;
    fixture
}

impl Fixture {
    async fn commit(&self, branch: &str, base: Option<&str>, message: &str, files: &[(&str, &str)]) -> String {
        self.writer
            .commit(&CommitSpec {
                tenant: "contoso".into(),
                repository: "payments-api".into(),
                branch: branch.into(),
                base_branch: base.map(str::to_owned),
                message: message.into(),
                author: GitIdentity {
                    name: "Payments Agent".into(),
                    email: "agent@contoso.com".into(),
                },
                date: datetime!(2026-11-29 09:00:00 UTC),
                files: files
                    .iter()
                    .map(|(path, content)| FileWrite {
                        path: (*path).to_owned(),
                        content: content.as_bytes().to_vec(),
                        executable: false,
                    })
                    .collect(),
                delete: vec![],
            })
            .await
            .unwrap()
            .commit_sha
    }

    fn adapter(&self) -> LocalPullRequests {
        LocalPullRequests::with_host(Arc::clone(&self.host))
    }
}

fn git(repo: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .env("GIT_DIR", repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn spec(source: &str, target: &str, auto_complete: bool) -> PullRequestSpec {
    PullRequestSpec {
        tenant: "contoso".into(),
        repository: "payments-api".into(),
        source_branch: source.into(),
        target_branch: target.into(),
        title: Some("Retry card payments".into()),
        description: Some("Adds a bounded retry.".into()),
        required_checks: vec![],
        auto_complete,
        date: datetime!(2026-11-29 10:00:00 UTC),
    }
}

fn check<'a>(opened: &'a OpenedPullRequest, name: &str) -> &'a PolicyCheck {
    opened
        .checks
        .iter()
        .find(|check| check.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {:?}", opened.checks))
}

#[tokio::test]
async fn local_open_twice_yields_one_pull_request_and_follows_the_source() {
    let fixture = fixture(0).await;
    let head = fixture
        .commit(
            "feature/x",
            Some("main"),
            "Retry card payments on timeouts",
            &[("src/retry.txt", "retry\n")],
        )
        .await;
    let adapter = fixture.adapter();
    let mut request = spec("feature/x", "main", false);
    request.title = None;

    let first = adapter.open(&request).await.unwrap();
    assert!(first.created);
    assert_eq!(first.pull_request_id, 1);
    assert_eq!(
        first.title, "Retry card payments on timeouts",
        "titled after the head commit"
    );
    assert_eq!(first.head_commit, head);
    assert_eq!(first.status, PullRequestStatus::Active);
    assert_eq!(check(&first, CHECK_MERGEABLE).status, CheckStatus::Passed);
    assert_eq!(check(&first, CHECK_MINIMUM_REVIEWERS).status, CheckStatus::Passed);
    assert!(first.url.starts_with("file:///"), "{}", first.url);
    assert!(first.url.ends_with("/bosun/pull-requests/1.json"), "{}", first.url);
    assert_eq!(git(&fixture.repo, &["rev-parse", "refs/pull/1/head"]), head);
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture.repo.join(PULL_REQUESTS_DIR).join("1.json")).unwrap()).unwrap();
    assert_eq!(record["status"], "active");
    assert_eq!(record["sourceBranch"], "feature/x");

    let second = adapter.open(&request).await.unwrap();
    assert!(!second.created);
    assert_eq!(second.pull_request_id, 1);
    assert_eq!(second.title, first.title);

    // The source moves: the same pull request, with the new head.
    let moved = fixture
        .commit(
            "feature/x",
            None,
            "Cap the retries",
            &[("src/retry.txt", "retry 3 times\n")],
        )
        .await;
    let third = adapter.open(&request).await.unwrap();
    assert!(!third.created);
    assert_eq!(third.pull_request_id, 1);
    assert_eq!(third.head_commit, moved);
    assert_eq!(git(&fixture.repo, &["rev-parse", "refs/pull/1/head"]), moved);
    assert_eq!(adapter.pull_requests("contoso", "payments-api").await.unwrap().len(), 1);
    // Nothing merged.
    assert_eq!(
        git(&fixture.repo, &["rev-list", "--count", "main"]),
        "1",
        "main is untouched"
    );
}

#[tokio::test]
async fn local_auto_complete_merges_for_real_once() {
    let fixture = fixture(0).await;
    let head = fixture
        .commit(
            "feature/x",
            Some("main"),
            "Add retries",
            &[("src/retry.txt", "retry\n")],
        )
        .await;
    // main moves on independently: a real (non fast-forward) merge.
    let main_before = fixture
        .commit("main", None, "Update docs", &[("README.md", "# Payments API\n")])
        .await;
    let adapter = fixture.adapter();
    let first = adapter.open(&spec("feature/x", "main", true)).await.unwrap();
    assert!(first.created);
    assert_eq!(first.status, PullRequestStatus::Completed);
    let merge = first.merge_commit.clone().unwrap();

    let repo = &fixture.repo;
    assert_eq!(git(repo, &["rev-parse", "main"]), merge);
    assert_eq!(
        git(repo, &["rev-list", "--parents", "-n", "1", &merge]),
        format!("{merge} {main_before} {head}")
    );
    assert_eq!(git(repo, &["show", "main:src/retry.txt"]), "retry");
    assert_eq!(git(repo, &["show", "main:README.md"]), "# Payments API");
    assert_eq!(
        git(repo, &["log", "-1", "--format=%an <%ae>%n%s", &merge]),
        "bosun <bosun@localhost>\nMerged PR 1: Retry card payments"
    );
    assert_eq!(git(repo, &["rev-parse", "refs/pull/1/merge"]), merge);

    // The same request again: the completed pull request, no second merge.
    let again = adapter.open(&spec("feature/x", "main", true)).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.pull_request_id, 1);
    assert_eq!(again.status, PullRequestStatus::Completed);
    assert_eq!(again.merge_commit.as_deref(), Some(merge.as_str()));
    assert_eq!(git(repo, &["rev-parse", "main"]), merge);

    // New work on the branch opens a new pull request.
    fixture
        .commit("feature/x", None, "More retries", &[("src/retry.txt", "retry more\n")])
        .await;
    let next = adapter.open(&spec("feature/x", "main", false)).await.unwrap();
    assert!(next.created);
    assert_eq!(next.pull_request_id, 2);
    assert_eq!(next.status, PullRequestStatus::Active);
}

#[tokio::test]
async fn local_merge_recorded_late_is_not_merged_twice() {
    let fixture = fixture(0).await;
    fixture
        .commit(
            "feature/x",
            Some("main"),
            "Add retries",
            &[("src/retry.txt", "retry\n")],
        )
        .await;
    let adapter = fixture.adapter();
    let merged = adapter.open(&spec("feature/x", "main", true)).await.unwrap();
    let merge = merged.merge_commit.unwrap();
    // Simulate a crash after the target moved but before the record was
    // saved: put the record back to active.
    let path = fixture.repo.join(PULL_REQUESTS_DIR).join("1.json");
    let mut record: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    record["status"] = "active".into();
    record.as_object_mut().unwrap().remove("mergeCommit");
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();

    let again = adapter.open(&spec("feature/x", "main", true)).await.unwrap();
    assert_eq!(again.status, PullRequestStatus::Completed);
    assert_eq!(again.merge_commit.as_deref(), Some(merge.as_str()));
    assert_eq!(
        git(&fixture.repo, &["rev-parse", "main"]),
        merge,
        "no second merge commit"
    );
}

#[tokio::test]
async fn local_conflicts_fail_the_mergeable_check_and_block_completion() {
    let fixture = fixture(0).await;
    fixture
        .commit("feature/x", Some("main"), "Change app", &[("src/app.txt", "feature\n")])
        .await;
    let main = fixture
        .commit("main", None, "Change app too", &[("src/app.txt", "main\n")])
        .await;
    let opened = fixture.adapter().open(&spec("feature/x", "main", true)).await.unwrap();
    assert_eq!(opened.status, PullRequestStatus::Active);
    let mergeable = check(&opened, CHECK_MERGEABLE);
    assert_eq!(mergeable.status, CheckStatus::Failed);
    assert!(mergeable.detail.contains("src/app.txt"), "{}", mergeable.detail);
    assert_eq!(git(&fixture.repo, &["rev-parse", "main"]), main);
}

#[tokio::test]
async fn local_reviewers_and_required_checks_gate_completion() {
    let fixture = fixture(2).await;
    fixture
        .commit(
            "feature/x",
            Some("main"),
            "Add retries",
            &[("src/retry.txt", "retry\n")],
        )
        .await;
    let adapter = fixture.adapter();
    let mut request = spec("feature/x", "main", true);
    request.required_checks = vec!["payments-api-ci".into()];

    let first = adapter.open(&request).await.unwrap();
    assert_eq!(first.status, PullRequestStatus::Active);
    assert_eq!(check(&first, CHECK_MINIMUM_REVIEWERS).status, CheckStatus::Pending);
    assert_eq!(check(&first, CHECK_MINIMUM_REVIEWERS).detail, "0 of 2 approvals");
    assert_eq!(check(&first, "payments-api-ci").status, CheckStatus::Pending);

    adapter
        .approve("contoso", "payments-api", 1, "alice@contoso.com")
        .await
        .unwrap();
    adapter
        .approve("contoso", "payments-api", 1, "bob@contoso.com")
        .await
        .unwrap();
    let second = adapter.open(&request).await.unwrap();
    assert_eq!(
        second.status,
        PullRequestStatus::Active,
        "the build check is still pending"
    );
    assert_eq!(check(&second, CHECK_MINIMUM_REVIEWERS).status, CheckStatus::Passed);

    adapter
        .post_status(
            "contoso",
            "payments-api",
            1,
            "payments-api-ci",
            CheckStatus::Passed,
            "build 4711 passed",
        )
        .await
        .unwrap();
    let third = adapter.open(&request).await.unwrap();
    assert_eq!(third.status, PullRequestStatus::Completed);
    assert_eq!(git(&fixture.repo, &["rev-parse", "main"]), third.merge_commit.unwrap());
}

#[tokio::test]
async fn local_concurrent_opens_yield_one_pull_request() {
    let fixture = fixture(0).await;
    fixture
        .commit(
            "feature/x",
            Some("main"),
            "Add retries",
            &[("src/retry.txt", "retry\n")],
        )
        .await;
    fixture
        .commit("feature/y", Some("main"), "Add logging", &[("src/log.txt", "log\n")])
        .await;
    let mut tasks = Vec::new();
    for n in 0..12 {
        // Separate adapters, as separate processes would have: only the
        // files decide.
        let adapter = LocalPullRequests::new(&fixture.git_root);
        let source = if n % 2 == 0 { "feature/x" } else { "feature/y" };
        tasks.push(tokio::spawn(
            async move { adapter.open(&spec(source, "main", false)).await },
        ));
    }
    let mut created = 0;
    let mut ids = BTreeMap::new();
    for task in tasks {
        let opened = task.await.unwrap().unwrap();
        created += usize::from(opened.created);
        ids.entry(opened.head_commit.clone())
            .or_insert_with(Vec::new)
            .push(opened.pull_request_id);
    }
    assert_eq!(created, 2, "one pull request per branch pair");
    let mut distinct: Vec<u64> = ids.values().map(|ids| ids[0]).collect();
    for list in ids.values() {
        assert!(list.iter().all(|id| *id == list[0]), "{ids:?}");
    }
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 2, "{ids:?}");
    let records = fixture
        .adapter()
        .pull_requests("contoso", "payments-api")
        .await
        .unwrap();
    assert_eq!(records.len(), 2, "withdrawn records are gone");
    let open: Vec<u64> = records.iter().map(|record| record.id).collect();
    assert_eq!(open, distinct);
}

#[tokio::test]
async fn local_concurrent_opens_in_one_adapter_number_densely() {
    let fixture = fixture(0).await;
    for (branch, file) in [("feature/a", "a.txt"), ("feature/b", "b.txt"), ("feature/c", "c.txt")] {
        fixture.commit(branch, Some("main"), "Work", &[(file, "x\n")]).await;
    }
    let adapter = fixture.adapter();
    let mut tasks = Vec::new();
    for n in 0..9 {
        let adapter = adapter.clone();
        let source = ["feature/a", "feature/b", "feature/c"][n % 3];
        tasks.push(tokio::spawn(
            async move { adapter.open(&spec(source, "main", false)).await },
        ));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap().unwrap().pull_request_id);
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids, vec![1, 2, 3]);
}

#[tokio::test]
async fn two_tenants_open_the_same_pull_request_each_in_its_own_repository() {
    let fixture = fixture(0).await;
    fixture
        .commit("feature/retry", Some("main"), "Retry", &[("src/app.txt", "v2\n")])
        .await;
    // Fabrikam has a repository of the same name, with the same branches.
    provision(&fixture.host, "fabrikam", "payments-api", 0).await;
    let commit_as_fabrikam = |branch: &str, base: Option<&str>, content: &str| {
        let spec = CommitSpec {
            tenant: "fabrikam".into(),
            repository: "payments-api".into(),
            branch: branch.into(),
            base_branch: base.map(str::to_owned),
            message: "fabrikam".into(),
            author: GitIdentity {
                name: "Fabrikam".into(),
                email: "dev@fabrikam.com".into(),
            },
            date: datetime!(2026-11-29 09:00:00 UTC),
            files: vec![FileWrite {
                path: "src/app.txt".into(),
                content: content.as_bytes().to_vec(),
                executable: false,
            }],
            delete: vec![],
        };
        let writer = &fixture.writer;
        async move { writer.commit(&spec).await }
    };
    commit_as_fabrikam("main", None, "f1\n").await.unwrap();
    let their_head = commit_as_fabrikam("feature/retry", Some("main"), "f2\n")
        .await
        .unwrap()
        .commit_sha;

    let adapter = fixture.adapter();
    let ours = adapter.open(&spec("feature/retry", "main", false)).await.unwrap();
    let mut fabrikam = spec("feature/retry", "main", false);
    fabrikam.tenant = "fabrikam".into();
    let theirs = adapter.open(&fabrikam).await.unwrap();
    assert!(ours.created && theirs.created, "neither finds the other's pull request");
    assert_eq!((ours.pull_request_id, theirs.pull_request_id), (1, 1));
    assert_eq!(theirs.head_commit, their_head);
    assert_ne!(ours.head_commit, theirs.head_commit);
    assert_eq!(adapter.pull_requests("contoso", "payments-api").await.unwrap().len(), 1);
    let their_repo = fixture.git_root.join("fabrikam/fabrikam/payments-api.git");
    assert_eq!(git(&their_repo, &["rev-parse", "refs/pull/1/head"]), their_head);
    assert_eq!(
        adapter
            .read_file("fabrikam", "payments-api", &ours.head_commit, "src/app.txt")
            .await
            .ok()
            .flatten(),
        None,
        "contoso's commit is not in fabrikam's repository"
    );
}

#[tokio::test]
async fn local_missing_repository_or_branch_is_transient() {
    let fixture = fixture(0).await;
    let adapter = fixture.adapter();
    let err = adapter.open(&spec("feature/none", "main", false)).await.unwrap_err();
    assert!(matches!(err, PullRequestError::BranchNotFound { .. }), "{err}");
    assert!(err.is_retryable());
    let mut request = spec("feature/x", "main", false);
    request.repository = "nope".into();
    let err = adapter.open(&request).await.unwrap_err();
    assert!(matches!(err, PullRequestError::RepositoryNotFound { .. }), "{err}");
}

#[tokio::test]
async fn local_reads_and_finds_files_at_a_commit() {
    let fixture = fixture(0).await;
    let head = fixture
        .commit(
            "feature/x",
            Some("main"),
            "Add module",
            &[
                ("services/pay/bosun.module.json", "{}"),
                ("services/pay/bosun.module.json.bak", "x"),
            ],
        )
        .await;
    let adapter = fixture.adapter();
    assert_eq!(
        adapter
            .read_file("contoso", "payments-api", &head, "README.md")
            .await
            .unwrap(),
        Some(b"# Payments\n".to_vec())
    );
    assert_eq!(
        adapter
            .read_file("contoso", "payments-api", &head, "missing.txt")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        adapter
            .read_file("contoso", "payments-api", &head, "src")
            .await
            .unwrap(),
        None,
        "a folder is not a file"
    );
    assert!(
        adapter
            .read_file("contoso", "payments-api", &head, "../escape")
            .await
            .is_err()
    );
    assert_eq!(
        adapter
            .find_files("contoso", "payments-api", &head, MODULE_FILE)
            .await
            .unwrap(),
        vec!["services/pay/bosun.module.json".to_owned()]
    );
}

#[tokio::test]
async fn local_consumer_end_to_end_commit_created_twice_is_one_pull_request() {
    let fixture = fixture(0).await;
    let mut module = samples::module();
    module.path = None;
    let head = fixture
        .commit(
            "feature/x",
            Some("main"),
            "Add the payments module",
            &[(MODULE_FILE, &serde_json::to_string_pretty(&module).unwrap())],
        )
        .await;
    let consumer = PullRequests::new(LocalPullRequests::new(&fixture.git_root));
    let mut event = commit_created("feature/x", Some("main"));
    event.commit_sha = head.clone();

    let first = handle(&consumer, event.clone().into()).await.unwrap();
    let second = handle(&consumer, event.into()).await.unwrap();
    let (first, second) = (opened(&first), opened(&second));
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(first.pull_request_id, second.pull_request_id);
    assert_eq!(first.commit_sha, head);
    assert_eq!(first.title, "Add the payments module");
    assert_eq!(first.module, Some(module));
    assert_eq!(first.status, PullRequestStatus::Active);
    Message::from(first.clone()).validate().unwrap();
    Message::from(second.clone()).validate().unwrap();
    assert_eq!(
        consumer
            .host()
            .pull_requests("contoso", "payments-api")
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn local_consumer_open_pull_request_twice_merges_once() {
    let fixture = fixture(0).await;
    fixture
        .commit(
            "feature/payments-retry",
            Some("main"),
            "Add retries",
            &[("src/retry.txt", "retry\n")],
        )
        .await;
    let consumer = PullRequests::new(LocalPullRequests::new(&fixture.git_root));
    let mut command: OpenPullRequest = samples::open_pull_request();
    command.required_checks.clear();
    let first = handle(&consumer, command.clone().into()).await.unwrap();
    let second = handle(&consumer, command.into()).await.unwrap();
    let (first, second) = (opened(&first), opened(&second));
    assert_eq!(first.status, PullRequestStatus::Completed);
    assert!(first.created && !second.created);
    assert_eq!(first.merge_commit_sha, second.merge_commit_sha);
    assert_eq!(git(&fixture.repo, &["rev-list", "--merges", "--count", "main"]), "1");
    Message::from(first.clone()).validate().unwrap();
}

// ---- Azure adapter ----

const REPOSITORY_PATH: &str = "/contoso/Delivery/_apis/git/repositories/payments-api";

fn azure(server: &MockAzure) -> AzurePullRequests {
    AzurePullRequests::new(&AzureDevOpsConfig::new(
        server.url("/contoso"),
        "Delivery",
        AzureDevOpsAuth::Pat("secret-pat".into()),
    ))
    .unwrap()
}

fn pull_request_json(status: &str, auto_complete: bool) -> String {
    let mut pr = serde_json::json!({
        "repository": {
            "id": "3411ebc1-d5aa-464f-9615-0b527bc66719",
            "name": "payments-api",
            "url": "https://dev.azure.com/contoso/_apis/git/repositories/3411ebc1-d5aa-464f-9615-0b527bc66719",
            "webUrl": "https://dev.azure.com/contoso/Delivery/_git/payments-api",
            "project": {"id": "a7573007-bbb3-4341-b726-0c4148a07853", "name": "Delivery", "state": "wellFormed"}
        },
        "pullRequestId": 42,
        "codeReviewId": 42,
        "status": status,
        "createdBy": {"displayName": "bosun", "id": "d6245f20-2af8-44f4-9451-8107cb2767db", "uniqueName": "bosun@contoso.com"},
        "creationDate": "2026-11-29T10:00:01.5Z",
        "title": "Retry card payments",
        "description": "Adds a bounded retry.",
        "sourceRefName": "refs/heads/feature/x",
        "targetRefName": "refs/heads/main",
        "mergeStatus": "queued",
        "mergeId": "f5fc8381-3fb2-49fe-8a0d-27dcc2d6ef82",
        "lastMergeSourceCommit": {"commitId": HEAD},
        "lastMergeTargetCommit": {"commitId": "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d"},
        "reviewers": [],
        "url": "https://dev.azure.com/contoso/_apis/git/repositories/3411ebc1-d5aa-464f-9615-0b527bc66719/pullRequests/42",
        "supportsIterations": true
    });
    if auto_complete {
        pr["autoCompleteSetBy"] = serde_json::json!({"id": "d6245f20-2af8-44f4-9451-8107cb2767db"});
    }
    if status == "completed" {
        pr["lastMergeCommit"] = serde_json::json!({"commitId": MERGE});
        pr["closedDate"] = serde_json::json!("2026-11-29T10:05:00Z");
    }
    pr.to_string()
}

fn list(items: &[String]) -> String {
    format!(r#"{{"value":[{}],"count":{}}}"#, items.join(","), items.len())
}

fn refs_json(branch: &str, commit: &str) -> String {
    format!(
        r#"{{"value":[{{"name":"refs/heads/{branch}","objectId":"{commit}"}},{{"name":"refs/heads/{branch}-old","objectId":"{MERGE}"}}],"count":2}}"#
    )
}

const EVALUATIONS_JSON: &str = r#"{"value":[
  {"evaluationId":"e1","status":"approved","configuration":{"isBlocking":true,"type":{"id":"fa6ba5fd-ee4a-4c6f-9f9e-5ee3e79ff4c3","displayName":"Minimum number of reviewers"}}},
  {"evaluationId":"e2","status":"queued","configuration":{"isBlocking":true,"type":{"id":"0609b952-1397-4640-95ec-e00a01b2c241","displayName":"Build"}}},
  {"evaluationId":"e3","status":"notApplicable","configuration":{"isBlocking":false,"type":{"id":"x","displayName":"Comment requirements"}}}
],"count":3}"#;

#[tokio::test]
async fn azure_opens_a_pull_request_and_sets_auto_complete() {
    let server = MockAzure::start(vec![
        Reply::json("GET", &format!("{REPOSITORY_PATH}/pullrequests"), 200, &list(&[])),
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/refs"),
            200,
            &refs_json("feature/x", HEAD),
        ),
        Reply::json("GET", &format!("{REPOSITORY_PATH}/pullrequests"), 200, &list(&[])),
        Reply::json(
            "POST",
            &format!("{REPOSITORY_PATH}/pullrequests"),
            201,
            &pull_request_json("active", false),
        ),
        Reply::json(
            "PATCH",
            &format!("{REPOSITORY_PATH}/pullrequests/42"),
            200,
            &pull_request_json("active", true),
        ),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/policy/evaluations",
            200,
            EVALUATIONS_JSON,
        ),
    ])
    .await;
    let mut request = spec("feature/x", "main", true);
    request.required_checks = vec!["payments-api-ci".into()];
    let opened = azure(&server).open(&request).await;
    let requests = server.finish().await;
    let opened = opened.unwrap();
    assert!(opened.created);
    assert_eq!(opened.pull_request_id, 42);
    assert_eq!(opened.head_commit, HEAD);
    assert_eq!(opened.status, PullRequestStatus::Active);
    assert!(opened.auto_complete);
    assert_eq!(
        opened.url,
        "https://dev.azure.com/contoso/Delivery/_git/payments-api/pullrequest/42"
    );
    assert_eq!(opened.required_checks, vec!["payments-api-ci".to_owned()]);
    assert_eq!(
        opened.checks,
        vec![
            PolicyCheck {
                name: "Minimum number of reviewers".into(),
                status: CheckStatus::Passed,
                detail: "approved (blocking)".into()
            },
            PolicyCheck {
                name: "Build".into(),
                status: CheckStatus::Pending,
                detail: "queued (blocking)".into()
            },
        ]
    );

    let search = &requests[0];
    assert_eq!(
        search.query("searchCriteria.sourceRefName"),
        Some("refs/heads/feature/x")
    );
    assert_eq!(search.query("searchCriteria.targetRefName"), Some("refs/heads/main"));
    assert_eq!(search.query("searchCriteria.status"), Some("active"));
    assert_eq!(search.query("api-version"), Some("7.1"));
    assert_eq!(requests[1].query("filter"), Some("heads/feature/x"));
    assert_eq!(requests[2].query("searchCriteria.status"), Some("completed"));
    assert_eq!(
        requests[3].json(),
        serde_json::json!({
            "sourceRefName": "refs/heads/feature/x",
            "targetRefName": "refs/heads/main",
            "title": "Retry card payments",
            "description": "Adds a bounded retry."
        })
    );
    let patch = &requests[4];
    assert_eq!(patch.query("api-version"), Some("7.1"));
    assert_eq!(patch.header("content-type"), Some("application/json"));
    assert_eq!(
        patch.json()["autoCompleteSetBy"]["id"],
        "d6245f20-2af8-44f4-9451-8107cb2767db"
    );
    assert_eq!(patch.json()["completionOptions"]["mergeStrategy"], "noFastForward");
    assert_eq!(patch.json()["completionOptions"]["deleteSourceBranch"], false);
    let evaluations = &requests[5];
    assert_eq!(evaluations.query("api-version"), Some("7.1-preview.1"));
    assert_eq!(
        evaluations.query("artifactId"),
        Some("vstfs:///CodeReview/CodeReviewId/a7573007-bbb3-4341-b726-0c4148a07853/42")
    );
    let auth = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ":secret-pat")
    );
    for request in &requests {
        assert_eq!(
            request.header("authorization"),
            Some(auth.as_str()),
            "{} {}",
            request.method,
            request.path
        );
    }
}

#[tokio::test]
async fn azure_existing_pull_request_is_returned_with_the_current_head() {
    let moved = "9999999999999999999999999999999999999999";
    let server = MockAzure::start(vec![
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/pullrequests"),
            200,
            &list(&[pull_request_json("active", true)]),
        ),
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/refs"),
            200,
            &refs_json("feature/x", moved),
        ),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/policy/evaluations",
            200,
            r#"{"value":[],"count":0}"#,
        ),
    ])
    .await;
    let opened = azure(&server).open(&spec("feature/x", "main", true)).await;
    server.finish().await;
    let opened = opened.unwrap();
    assert!(!opened.created);
    assert_eq!(opened.pull_request_id, 42);
    assert_eq!(opened.head_commit, moved);
    assert!(opened.auto_complete, "already set: no PATCH");
}

/// The replies of an open pull request found again, in `project`, and of a
/// file read from its repository.
fn existing_pull_request_replies(project: &str) -> Vec<Reply> {
    let repository = format!("/contoso/{project}/_apis/git/repositories/payments-api");
    // Without the repository's `webUrl`, the adapter builds the link itself.
    let mut pull_request: serde_json::Value = serde_json::from_str(&pull_request_json("active", true)).unwrap();
    pull_request["repository"].as_object_mut().unwrap().remove("webUrl");
    vec![
        Reply::json(
            "GET",
            &format!("{repository}/pullrequests"),
            200,
            &list(&[pull_request.to_string()]),
        ),
        Reply::json("GET", &format!("{repository}/refs"), 200, &refs_json("feature/x", HEAD)),
        Reply::json(
            "GET",
            &format!("/contoso/{project}/_apis/policy/evaluations"),
            200,
            r#"{"value":[],"count":0}"#,
        ),
        Reply::bytes("GET", &format!("{repository}/items"), 200, module_json().as_bytes()),
    ]
}

#[tokio::test]
async fn azure_project_template_gives_each_tenant_its_own_project() {
    let mut script = existing_pull_request_replies("delivery-contoso");
    script.extend(existing_pull_request_replies("delivery-fabrikam"));
    let server = MockAzure::start(script).await;
    let organization = server.url("/contoso");
    let adapter = AzurePullRequests::new(&AzureDevOpsConfig::new(
        organization.clone(),
        "delivery-{tenant}",
        AzureDevOpsAuth::Pat("secret-pat".into()),
    ))
    .unwrap();
    assert_eq!(
        open_and_read_for_both_tenants(&adapter).await,
        vec![
            format!("{organization}/delivery-contoso/_git/payments-api/pullrequest/42"),
            format!("{organization}/delivery-fabrikam/_git/payments-api/pullrequest/42"),
        ]
    );
    server.finish().await;

    // Without the template variable, both tenants' `payments-api` is the one
    // repository of the configured project.
    let mut script = existing_pull_request_replies("Delivery");
    script.extend(existing_pull_request_replies("Delivery"));
    let server = MockAzure::start(script).await;
    let organization = server.url("/contoso");
    assert_eq!(
        open_and_read_for_both_tenants(&azure(&server)).await,
        vec![format!("{organization}/Delivery/_git/payments-api/pullrequest/42"); 2]
    );
    server.finish().await;
}

/// Opens `feature/x` into `main` and reads a file, as `contoso` then as
/// `fabrikam`; the pull requests' links.
async fn open_and_read_for_both_tenants(adapter: &AzurePullRequests) -> Vec<String> {
    let mut urls = Vec::new();
    for tenant in ["contoso", "fabrikam"] {
        let mut request = spec("feature/x", "main", true);
        request.tenant = tenant.into();
        urls.push(adapter.open(&request).await.unwrap().url);
        let file = adapter
            .read_file(tenant, "payments-api", HEAD, "bosun.module.json")
            .await
            .unwrap();
        assert_eq!(file, Some(module_json().into_bytes()));
    }
    urls
}

#[tokio::test]
async fn azure_completed_pull_request_at_the_head_is_the_answer() {
    let server = MockAzure::start(vec![
        Reply::json("GET", &format!("{REPOSITORY_PATH}/pullrequests"), 200, &list(&[])),
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/refs"),
            200,
            &refs_json("feature/x", HEAD),
        ),
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/pullrequests"),
            200,
            &list(&[pull_request_json("completed", true)]),
        ),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/policy/evaluations",
            403,
            r#"{"message":"no policy read"}"#,
        ),
    ])
    .await;
    let opened = azure(&server).open(&spec("feature/x", "main", true)).await;
    server.finish().await;
    let opened = opened.unwrap();
    assert!(!opened.created);
    assert_eq!(opened.status, PullRequestStatus::Completed);
    assert_eq!(opened.merge_commit.as_deref(), Some(MERGE));
    assert!(opened.checks.is_empty(), "evaluations are best effort");
}

#[tokio::test]
async fn azure_pull_request_opened_concurrently_is_reported_existing() {
    let server = MockAzure::start(vec![
        Reply::json("GET", &format!("{REPOSITORY_PATH}/pullrequests"), 200, &list(&[])),
        Reply::json("GET", &format!("{REPOSITORY_PATH}/refs"), 200, &refs_json("feature/x", HEAD)),
        Reply::json("GET", &format!("{REPOSITORY_PATH}/pullrequests"), 200, &list(&[])),
        Reply::json("GET", &format!("{REPOSITORY_PATH}/commits/{HEAD}"), 200, r#"{"commitId":"x","comment":"Retry payments\n\nLonger text"}"#),
        Reply::json(
            "POST",
            &format!("{REPOSITORY_PATH}/pullrequests"),
            409,
            r#"{"message":"TF401179: An active pull request for the source and target branch already exists.","typeKey":"GitPullRequestExistsException"}"#,
        ),
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/pullrequests"),
            200,
            &list(&[pull_request_json("active", false)]),
        ),
        Reply::json("GET", "/contoso/Delivery/_apis/policy/evaluations", 200, r#"{"value":[]}"#),
    ])
    .await;
    let mut request = spec("feature/x", "main", false);
    request.title = None;
    let opened = azure(&server).open(&request).await;
    let requests = server.finish().await;
    let opened = opened.unwrap();
    assert!(!opened.created);
    assert_eq!(requests[4].json()["title"], "Retry payments");
}

#[tokio::test]
async fn azure_missing_repository_is_transient_and_throttling_is_retry_after() {
    let server = MockAzure::start(vec![
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/pullrequests"),
            404,
            r#"{"message":"TF401019: The Git repository with name or identifier payments-api does not exist.","typeKey":"GitRepositoryNotFoundException"}"#,
        ),
        Reply::json("GET", &format!("{REPOSITORY_PATH}/pullrequests"), 429, "{}").header("Retry-After", "20"),
    ])
    .await;
    let adapter = azure(&server);
    let err = adapter.open(&spec("feature/x", "main", false)).await.unwrap_err();
    assert!(matches!(err, PullRequestError::RepositoryNotFound { .. }), "{err}");
    let err = HandlerError::from(adapter.open(&spec("feature/x", "main", false)).await.unwrap_err());
    assert!(
        matches!(err, HandlerError::RetryAfter { after, .. } if after == Duration::from_secs(20)),
        "{err}"
    );
    server.finish().await;
}

#[tokio::test]
async fn azure_reads_and_finds_files() {
    let server = MockAzure::start(vec![
        Reply::bytes(
            "GET",
            &format!("{REPOSITORY_PATH}/items"),
            200,
            module_json().as_bytes(),
        ),
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/items"),
            404,
            r#"{"message":"TF401174: The item could not be found."}"#,
        ),
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/items"),
            200,
            r#"{"count":4,"value":[
              {"objectId":"a","gitObjectType":"tree","path":"/","isFolder":true},
              {"objectId":"b","gitObjectType":"tree","path":"/services","isFolder":true},
              {"objectId":"c","gitObjectType":"blob","path":"/services/pay/bosun.module.json"},
              {"objectId":"d","gitObjectType":"blob","path":"/README.md"}
            ]}"#,
        ),
    ])
    .await;
    let adapter = azure(&server);
    let content = adapter
        .read_file("contoso", "payments-api", HEAD, "bosun.module.json")
        .await
        .unwrap();
    assert_eq!(content, Some(module_json().into_bytes()));
    assert_eq!(
        adapter
            .read_file("contoso", "payments-api", HEAD, "nope.json")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        adapter
            .find_files("contoso", "payments-api", HEAD, MODULE_FILE)
            .await
            .unwrap(),
        vec!["services/pay/bosun.module.json".to_owned()]
    );
    let requests = server.finish().await;
    assert_eq!(requests[0].query("path"), Some("/bosun.module.json"));
    assert_eq!(requests[0].query("versionDescriptor.version"), Some(HEAD));
    assert_eq!(requests[0].query("versionDescriptor.versionType"), Some("commit"));
    assert_eq!(requests[2].query("recursionLevel"), Some("full"));
}

#[tokio::test]
async fn azure_consumer_end_to_end() {
    let server = MockAzure::start(vec![
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/pullrequests"),
            200,
            &list(&[pull_request_json("active", false)]),
        ),
        Reply::json(
            "GET",
            &format!("{REPOSITORY_PATH}/refs"),
            200,
            &refs_json("feature/x", HEAD),
        ),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/policy/evaluations",
            200,
            r#"{"value":[]}"#,
        ),
        Reply::bytes(
            "GET",
            &format!("{REPOSITORY_PATH}/items"),
            200,
            module_json().as_bytes(),
        ),
    ])
    .await;
    let consumer = PullRequests::new(azure(&server));
    let outcome = handle(&consumer, commit_created("feature/x", Some("main")).into())
        .await
        .unwrap();
    server.finish().await;
    let event = opened(&outcome);
    assert!(!event.created);
    assert_eq!(event.module, Some(samples::module()));
    Message::from(event.clone()).validate().unwrap();
}
