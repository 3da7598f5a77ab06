//! Handler tests over an in-memory [`CommitWriter`], and tests of the local
//! adapter (real commits in bare repositories in a temporary folder) and of
//! the Azure adapter (against a scripted local HTTP server).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use base64::Engine as _;
use bosun_contracts::messages::{
    BundleFile, CommitCreated, ContentEncoding, CreateCommit, GitIdentity, ProvisionRepository,
};
use bosun_contracts::{Envelope, Message};
use time::macros::datetime;
use uuid::Uuid;

use super::azure::AzureCommitWriter;
use super::local::LocalCommitWriter;
use super::*;
use crate::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig};
use crate::delivery::azure::test_server::{MockAzure, Reply};
use crate::delivery::git::LocalGitHost;
use crate::delivery::testing::provision;

const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const SHA_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const SHA_C: &str = "cccccccccccccccccccccccccccccccccccccccc";

fn text(path: &str, content: &str) -> BundleFile {
    BundleFile {
        path: path.to_owned(),
        content: content.to_owned(),
        encoding: ContentEncoding::Utf8,
        executable: false,
    }
}

fn binary(path: &str, bytes: &[u8]) -> BundleFile {
    BundleFile {
        path: path.to_owned(),
        content: base64::engine::general_purpose::STANDARD.encode(bytes),
        encoding: ContentEncoding::Base64,
        executable: false,
    }
}

fn command(files: Vec<BundleFile>) -> CreateCommit {
    CreateCommit {
        repository: "payments-api".to_owned(),
        branch: "main".to_owned(),
        base_branch: None,
        message: "Add the service skeleton".to_owned(),
        author: None,
        files,
        delete: vec![],
        pull_request_target: None,
    }
}

fn envelope(message: &Message) -> Envelope {
    let mut envelope = Envelope::new(message, Uuid::now_v7(), "contoso", "agent:test");
    envelope.occurred_at = datetime!(2026-11-29 10:00:00 UTC);
    envelope
}

async fn handle<P: CommitWriter>(consumer: &Commit<P>, message: Message) -> Result<Outcome, HandlerError> {
    let envelope = envelope(&message);
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn created(outcome: &Outcome) -> &CommitCreated {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0].message {
        Message::CommitCreated(event) => event,
        other => panic!("expected CommitCreated, got {other:?}"),
    }
}

/// An in-memory writer: records requests and answers with a fixed result or
/// a scripted error.
struct FakeWriter {
    specs: Mutex<Vec<CommitSpec>>,
    fail_with: Option<fn() -> CommitError>,
}

impl FakeWriter {
    fn new() -> Self {
        Self {
            specs: Mutex::new(Vec::new()),
            fail_with: None,
        }
    }
}

#[async_trait]
impl CommitWriter for FakeWriter {
    async fn commit(&self, spec: &CommitSpec) -> Result<CommitResult, CommitError> {
        self.specs.lock().unwrap().push(spec.clone());
        if let Some(fail) = self.fail_with {
            return Err(fail());
        }
        Ok(CommitResult {
            repository_id: "repo-1".to_owned(),
            commit_sha: SHA_A.to_owned(),
            tree_sha: SHA_B.to_owned(),
            parent_sha: Some(SHA_C.to_owned()),
            files_changed: u32::try_from(spec.files.len() + spec.delete.len()).unwrap(),
            no_op: false,
        })
    }
}

#[test]
fn name_and_retry_policy_follow_the_design() {
    let consumer = Commit::new(FakeWriter::new());
    assert_eq!(consumer.name(), "commit");
    assert!(bosun_contracts::routing::consumer(consumer.name()).is_some());
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(5));
}

#[tokio::test]
async fn handler_decodes_files_and_emits_commit_created() {
    let consumer = Commit::new(FakeWriter::new());
    let mut wrapped = binary("bin/logo.png", &[0, 159, 146, 150, 255]);
    wrapped.content = format!("{}\n{}", &wrapped.content[..4], &wrapped.content[4..]);
    let mut script = text("run.sh", "#!/bin/sh\necho hi\n");
    script.executable = true;
    let mut cmd = command(vec![text("README.md", "# Payments\n"), wrapped, script]);
    cmd.branch = "refs/heads/feature/skeleton".to_owned();
    cmd.base_branch = Some("refs/heads/develop".to_owned());
    cmd.delete = vec!["old".to_owned()];
    cmd.pull_request_target = Some("main".to_owned());

    let outcome = handle(&consumer, cmd.into()).await.unwrap();
    let event = created(&outcome);
    assert_eq!(
        *event,
        CommitCreated {
            repository: "payments-api".to_owned(),
            repository_id: "repo-1".to_owned(),
            branch: "feature/skeleton".to_owned(),
            commit_sha: SHA_A.to_owned(),
            tree_sha: SHA_B.to_owned(),
            parent_sha: Some(SHA_C.to_owned()),
            files_changed: 4,
            no_op: false,
            pull_request_target: Some("main".to_owned()),
        }
    );
    Message::from(event.clone()).validate().unwrap();

    let spec = consumer.writer().specs.lock().unwrap()[0].clone();
    assert_eq!(spec.tenant, "contoso");
    assert_eq!(spec.branch, "feature/skeleton");
    assert_eq!(spec.base_branch.as_deref(), Some("develop"));
    assert_eq!(spec.date, datetime!(2026-11-29 10:00:00 UTC));
    assert_eq!(spec.author.name, DEFAULT_AUTHOR_NAME);
    assert_eq!(spec.author.email, DEFAULT_AUTHOR_EMAIL);
    assert_eq!(spec.files[0].content, b"# Payments\n");
    assert_eq!(spec.files[1].content, vec![0, 159, 146, 150, 255]);
    assert!(spec.files[2].executable);
    assert_eq!(spec.delete, vec!["old".to_owned()]);
    // Debug output of a request shows sizes, not contents.
    assert!(!format!("{spec:?}").contains("Payments"));
}

#[tokio::test]
async fn handler_refuses_invalid_input_before_the_port() {
    let escaping = |path: &str| command(vec![text(path, "x")]);
    let mut bad_author = command(vec![text("a", "x")]);
    bad_author.author = Some(GitIdentity {
        name: "Eve <evil@x>".to_owned(),
        email: "eve@example.com".to_owned(),
    });
    let mut bad_delete = command(vec![text("a", "x")]);
    bad_delete.delete = vec!["../../etc".to_owned()];
    let mut bad_base64 = command(vec![text("a", "x")]);
    bad_base64.files[0].encoding = ContentEncoding::Base64;
    bad_base64.files[0].content = "not base64!".to_owned();
    let cases = [
        escaping("../outside.txt"),
        escaping("a/../../outside.txt"),
        escaping("/etc/passwd"),
        escaping(".git/config"),
        escaping("hooks/../.git/hooks/pre-commit"),
        command(vec![text("a", "1"), text("a", "2")]),
        command(vec![text("a", "1"), text("a/b", "2")]),
        bad_author,
        bad_delete,
        bad_base64,
    ];
    let consumer = Commit::new(FakeWriter::new());
    for cmd in cases {
        let err = handle(&consumer, cmd.clone().into()).await.unwrap_err();
        assert!(matches!(err, HandlerError::Permanent(_)), "{cmd:?}: {err}");
    }
    assert!(consumer.writer().specs.lock().unwrap().is_empty());
}

#[tokio::test]
async fn handler_maps_port_errors_to_retry_decisions() {
    let transient: [fn() -> CommitError; 3] = [
        || CommitError::RepositoryNotFound { repository: "r".into() },
        || CommitError::BaseBranchNotFound { branch: "b".into() },
        || CommitError::Unavailable("git crashed".into()),
    ];
    for fail in transient {
        let consumer = Commit::new(FakeWriter {
            specs: Mutex::new(Vec::new()),
            fail_with: Some(fail),
        });
        let err = handle(&consumer, command(vec![text("a", "x")]).into())
            .await
            .unwrap_err();
        assert!(matches!(err, HandlerError::Transient(_)), "{err}");
    }
    let consumer = Commit::new(FakeWriter {
        specs: Mutex::new(Vec::new()),
        fail_with: Some(|| CommitError::Rejected("403".into())),
    });
    let err = handle(&consumer, command(vec![text("a", "x")]).into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
}

#[tokio::test]
async fn handler_refuses_other_message_types() {
    let consumer = Commit::new(FakeWriter::new());
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

// ---- local adapter ----

struct LocalFixture {
    _root: tempfile::TempDir,
    repo: PathBuf,
    consumer: Commit<LocalCommitWriter>,
}

async fn local_fixture() -> LocalFixture {
    let root = tempfile::tempdir().unwrap();
    let host = Arc::new(LocalGitHost::new(root.path().join("git")));
    assert!(provision(&host, "contoso", "payments-api", 0).await);
    LocalFixture {
        repo: root.path().join("git/contoso/contoso/payments-api.git"),
        _root: root,
        consumer: Commit::new(LocalCommitWriter::with_host(host)),
    }
}

fn git_bytes(repo: &Path, args: &[&str]) -> Vec<u8> {
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
    output.stdout
}

fn git(repo: &Path, args: &[&str]) -> String {
    String::from_utf8(git_bytes(repo, args)).unwrap().trim().to_owned()
}

fn git_fails(repo: &Path, args: &[&str]) -> bool {
    !std::process::Command::new("git")
        .env("GIT_DIR", repo)
        .args(args)
        .output()
        .unwrap()
        .status
        .success()
}

#[tokio::test]
async fn local_commit_writes_real_files() {
    let fixture = local_fixture().await;
    let png = [0x89, b'P', b'N', b'G', 0, 0xff, 0x10];
    let mut script = text("scripts/build.sh", "#!/bin/sh\nexit 0\n");
    script.executable = true;
    let cmd = command(vec![
        text("README.md", "# Payments\n"),
        text("src/app/deep/nested/main.py", "print('hi')\n"),
        binary("assets/logo.png", &png),
        script,
        text("obsolete/notes.txt", "old\n"),
    ]);
    let first = handle(&fixture.consumer, cmd.into()).await.unwrap();
    let first = created(&first).clone();
    assert!(!first.no_op);
    assert_eq!(first.parent_sha, None, "an empty repository gets a root commit");
    assert_eq!(first.files_changed, 5);
    Message::from(first.clone()).validate().unwrap();

    let repo = &fixture.repo;
    assert_eq!(git(repo, &["rev-parse", "refs/heads/main"]), first.commit_sha);
    assert_eq!(git(repo, &["rev-parse", "main^{tree}"]), first.tree_sha);
    assert_eq!(git(repo, &["show", "main:README.md"]), "# Payments");
    assert_eq!(git(repo, &["show", "main:src/app/deep/nested/main.py"]), "print('hi')");
    assert_eq!(git_bytes(repo, &["show", "main:assets/logo.png"]), png);
    let listing = git(repo, &["ls-tree", "main", "scripts/build.sh"]);
    assert!(listing.starts_with("100755 blob "), "{listing}");
    let listing = git(repo, &["ls-tree", "main", "README.md"]);
    assert!(listing.starts_with("100644 blob "), "{listing}");
    let commit = git(repo, &["cat-file", "-p", "main"]);
    let when = datetime!(2026-11-29 10:00:00 UTC).unix_timestamp();
    assert!(
        commit.contains(&format!("author bosun <bosun@localhost> {when} +0000")),
        "{commit}"
    );
    assert!(
        commit.contains(&format!("committer bosun <bosun@localhost> {when} +0000")),
        "{commit}"
    );
    assert!(commit.ends_with("Add the service skeleton"), "{commit}");

    // Delete a folder and a file, replace a file with new content.
    let mut second = command(vec![text("README.md", "# Payments API\n")]);
    second.delete = vec![
        "obsolete".to_owned(),
        "assets/logo.png".to_owned(),
        "never/existed".to_owned(),
    ];
    second.message = "Tidy up".to_owned();
    second.author = Some(GitIdentity {
        name: "Ada".to_owned(),
        email: "ada@example.com".to_owned(),
    });
    let second = handle(&fixture.consumer, second.into()).await.unwrap();
    let second = created(&second).clone();
    assert_eq!(second.parent_sha.as_deref(), Some(first.commit_sha.as_str()));
    assert_eq!(second.files_changed, 3);
    assert_eq!(git(repo, &["show", "main:README.md"]), "# Payments API");
    assert!(git_fails(repo, &["cat-file", "-e", "main:obsolete/notes.txt"]));
    assert!(git_fails(repo, &["cat-file", "-e", "main:assets/logo.png"]));
    assert_eq!(git(repo, &["show", "main:src/app/deep/nested/main.py"]), "print('hi')");
    assert!(git(repo, &["cat-file", "-p", "main"]).contains("author Ada <ada@example.com>"));
}

#[tokio::test]
async fn local_same_commit_twice_is_a_no_op_with_the_same_sha() {
    let fixture = local_fixture().await;
    let cmd = command(vec![text("a.txt", "a\n"), text("dir/b.txt", "b\n")]);
    let first = handle(&fixture.consumer, cmd.clone().into()).await.unwrap();
    let second = handle(&fixture.consumer, cmd.into()).await.unwrap();
    let (first, second) = (created(&first), created(&second));
    assert!(!first.no_op);
    assert!(second.no_op);
    assert_eq!(second.files_changed, 0);
    assert_eq!(first.commit_sha, second.commit_sha);
    assert_eq!(first.tree_sha, second.tree_sha);
    assert_eq!(first.parent_sha, second.parent_sha);
    assert_eq!(git(&fixture.repo, &["rev-list", "--count", "main"]), "1");
}

#[tokio::test]
async fn local_commits_are_deterministic() {
    // The same command on the same history gives the same commit id in two
    // independent repositories: a retry after a crash cannot fork history.
    let (one, two) = (local_fixture().await, local_fixture().await);
    let cmd = command(vec![text("a.txt", "a\n")]);
    let first = handle(&one.consumer, cmd.clone().into()).await.unwrap();
    let second = handle(&two.consumer, cmd.into()).await.unwrap();
    assert_eq!(created(&first).commit_sha, created(&second).commit_sha);
}

#[tokio::test]
async fn local_commit_to_a_missing_repository_is_transient() {
    let root = tempfile::tempdir().unwrap();
    let consumer = Commit::new(LocalCommitWriter::new(root.path()));
    let err = handle(&consumer, command(vec![text("a", "x")]).into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Transient(_)), "{err}");
    assert!(err.to_string().contains("not found"), "{err}");
}

#[tokio::test]
async fn two_tenants_commit_to_repositories_of_the_same_name_each_to_its_own() {
    let root = tempfile::tempdir().unwrap();
    let host = Arc::new(LocalGitHost::new(root.path().join("git")));
    for tenant in ["contoso", "fabrikam"] {
        assert!(provision(&host, tenant, "payments-api", 0).await, "{tenant}");
    }
    let consumer = Commit::new(LocalCommitWriter::with_host(host));
    let as_tenant = |tenant: &'static str, message: Message| {
        let consumer = &consumer;
        async move {
            let mut envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "agent:test");
            envelope.occurred_at = datetime!(2026-11-29 10:00:00 UTC);
            consumer.handle(Inbound::new(&envelope, &message)).await
        }
    };
    let ours = as_tenant("contoso", command(vec![text("README.md", "contoso")]).into())
        .await
        .unwrap();
    let theirs = as_tenant("fabrikam", command(vec![text("README.md", "fabrikam")]).into())
        .await
        .unwrap();
    let (ours, theirs) = (created(&ours), created(&theirs));
    assert_ne!(ours.repository_id, theirs.repository_id);
    let contoso_repo = root.path().join("git/contoso/contoso/payments-api.git");
    let fabrikam_repo = root.path().join("git/fabrikam/fabrikam/payments-api.git");
    assert_eq!(git(&contoso_repo, &["show", "main:README.md"]), "contoso");
    assert_eq!(git(&fabrikam_repo, &["show", "main:README.md"]), "fabrikam");
    assert_eq!(git(&contoso_repo, &["rev-list", "--count", "main"]), "1");

    // A tenant without the repository gets what a name nobody has gets.
    let northwind = as_tenant("northwind", command(vec![text("a", "x")]).into())
        .await
        .unwrap_err();
    let mut nobody = command(vec![text("a", "x")]);
    nobody.repository = "nobody-has-it".into();
    let nobody = as_tenant("contoso", nobody.into()).await.unwrap_err();
    assert_eq!(
        northwind.to_string().replace("payments-api", "<name>"),
        nobody.to_string().replace("nobody-has-it", "<name>")
    );
}

#[tokio::test]
async fn local_new_branch_starts_from_its_base() {
    let fixture = local_fixture().await;
    let main = handle(&fixture.consumer, command(vec![text("base.txt", "base\n")]).into())
        .await
        .unwrap();
    let main = created(&main).clone();
    let develop = {
        let mut cmd = command(vec![text("develop.txt", "dev\n")]);
        cmd.branch = "develop".to_owned();
        let outcome = handle(&fixture.consumer, cmd.into()).await.unwrap();
        created(&outcome).clone()
    };
    assert_eq!(
        develop.parent_sha.as_deref(),
        Some(main.commit_sha.as_str()),
        "from the default branch"
    );

    let mut cmd = command(vec![text("feature.txt", "feature\n")]);
    cmd.branch = "feature/x".to_owned();
    cmd.base_branch = Some("develop".to_owned());
    cmd.pull_request_target = Some("develop".to_owned());
    let feature = handle(&fixture.consumer, cmd.into()).await.unwrap();
    let feature = created(&feature).clone();
    assert_eq!(feature.parent_sha.as_deref(), Some(develop.commit_sha.as_str()));
    assert_eq!(feature.files_changed, 1);
    assert_eq!(feature.pull_request_target.as_deref(), Some("develop"));
    let repo = &fixture.repo;
    assert_eq!(git(repo, &["show", "feature/x:base.txt"]), "base");
    assert_eq!(git(repo, &["show", "feature/x:develop.txt"]), "dev");
    assert_eq!(git(repo, &["show", "feature/x:feature.txt"]), "feature");
    assert_eq!(
        git(repo, &["rev-parse", "develop"]),
        develop.commit_sha,
        "the base is untouched"
    );

    // A new branch whose files are already on the base: created at the base.
    let mut cmd = command(vec![text("base.txt", "base\n")]);
    cmd.branch = "same".to_owned();
    let same = handle(&fixture.consumer, cmd.into()).await.unwrap();
    let same = created(&same);
    assert!(same.no_op);
    assert_eq!(same.commit_sha, main.commit_sha);
    assert_eq!(git(repo, &["rev-parse", "same"]), main.commit_sha);

    // A base branch that does not exist (in a non-empty repository) may
    // appear later: transient.
    let mut cmd = command(vec![text("x", "x")]);
    cmd.branch = "other".to_owned();
    cmd.base_branch = Some("release/9".to_owned());
    let err = handle(&fixture.consumer, cmd.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Transient(_)), "{err}");
}

#[tokio::test]
async fn local_file_replaces_folder_and_folder_replaces_file() {
    let fixture = local_fixture().await;
    handle(
        &fixture.consumer,
        command(vec![text("docs/a.md", "a"), text("config", "c")]).into(),
    )
    .await
    .unwrap();
    let outcome = handle(
        &fixture.consumer,
        command(vec![text("docs", "now a file"), text("config/app.toml", "x = 1")]).into(),
    )
    .await
    .unwrap();
    assert_eq!(created(&outcome).files_changed, 4);
    let repo = &fixture.repo;
    assert_eq!(git(repo, &["show", "main:docs"]), "now a file");
    assert_eq!(git(repo, &["show", "main:config/app.toml"]), "x = 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_concurrent_writers_do_not_lose_commits() {
    let fixture = local_fixture().await;
    handle(&fixture.consumer, command(vec![text("seed", "0")]).into())
        .await
        .unwrap();
    let consumer = Arc::new(fixture.consumer);
    let mut tasks = Vec::new();
    for index in 0..6 {
        let consumer = Arc::clone(&consumer);
        tasks.push(tokio::spawn(async move {
            let cmd = command(vec![text(&format!("writer-{index}.txt"), &index.to_string())]);
            handle(&consumer, cmd.into()).await
        }));
    }
    for task in tasks {
        let outcome = task.await.unwrap().unwrap();
        assert!(!created(&outcome).no_op);
    }
    let repo = &fixture.repo;
    assert_eq!(git(repo, &["rev-list", "--count", "main"]), "7");
    for index in 0..6 {
        assert_eq!(
            git(repo, &["show", &format!("main:writer-{index}.txt")]),
            index.to_string()
        );
    }
}

#[tokio::test]
async fn local_adapter_never_writes_an_escaping_path() {
    // Bypass the handler: the adapter checks paths itself.
    let fixture = local_fixture().await;
    for path in ["../escape.txt", ".git/config", "a/../../b", "/abs"] {
        let spec = CommitSpec {
            tenant: "contoso".into(),
            repository: "payments-api".into(),
            branch: "main".into(),
            base_branch: None,
            message: "m".into(),
            author: GitIdentity {
                name: "bosun".into(),
                email: "bosun@localhost".into(),
            },
            date: datetime!(2026-11-29 10:00:00 UTC),
            files: vec![FileWrite {
                path: path.to_owned(),
                content: b"x".to_vec(),
                executable: false,
            }],
            delete: vec![],
        };
        let err = fixture.consumer.writer().commit(&spec).await.unwrap_err();
        assert!(matches!(err, CommitError::Invalid(_)), "{path}: {err}");
    }
    assert!(git_fails(&fixture.repo, &["rev-parse", "--verify", "refs/heads/main"]));
    assert!(!fixture.repo.parent().unwrap().join("escape.txt").exists());
}

// ---- Azure adapter ----

const REPO_ID: &str = "5febef5a-833d-4e14-b9c0-14cb638f91e6";
const HEAD: &str = "1111111111111111111111111111111111111111";
const NEW: &str = "2222222222222222222222222222222222222222";
const TREE: &str = "3333333333333333333333333333333333333333";

fn repo_path(rest: &str) -> String {
    format!("/contoso/Delivery/_apis/git/repositories/{REPO_ID}{rest}")
}

fn repository_reply() -> Reply {
    Reply::json(
        "GET",
        "/contoso/Delivery/_apis/git/repositories/payments-api",
        200,
        &format!(
            r#"{{"id":"{REPO_ID}","name":"payments-api","project":{{"id":"p1","name":"Delivery"}},"defaultBranch":"refs/heads/main","remoteUrl":"https://dev.azure.com/contoso/Delivery/_git/payments-api"}}"#
        ),
    )
}

fn refs_reply(refs: &[(&str, &str)]) -> Reply {
    let value: Vec<_> = refs
        .iter()
        .map(|(name, id)| serde_json::json!({"name": name, "objectId": id, "url": "https://dev.azure.com/x"}))
        .collect();
    Reply::json(
        "GET",
        &repo_path("/refs"),
        200,
        &serde_json::json!({"value": value, "count": value.len()}).to_string(),
    )
}

fn commit_reply(commit: &str, parent: &str) -> Reply {
    Reply::json(
        "GET",
        &repo_path(&format!("/commits/{commit}")),
        200,
        &format!(r#"{{"commitId":"{commit}","treeId":"{TREE}","parents":["{parent}"],"comment":"m"}}"#),
    )
}

fn item_missing() -> Reply {
    Reply::json(
        "GET",
        &repo_path("/items"),
        404,
        r#"{"message":"TF401174: The item could not be found in the repository.","typeKey":"GitItemNotFoundException"}"#,
    )
}

fn azure_writer(server: &MockAzure) -> AzureCommitWriter {
    AzureCommitWriter::new(&AzureDevOpsConfig::new(
        server.url("/contoso"),
        "Delivery",
        AzureDevOpsAuth::Pat("my-pat".into()),
    ))
    .unwrap()
}

fn azure_spec(files: Vec<FileWrite>, delete: Vec<&str>) -> CommitSpec {
    CommitSpec {
        tenant: "contoso".into(),
        repository: "payments-api".into(),
        branch: "main".into(),
        base_branch: None,
        message: "Add the service skeleton".into(),
        author: GitIdentity {
            name: "bosun".into(),
            email: "bosun@localhost".into(),
        },
        date: datetime!(2026-11-29 10:00:00 UTC),
        files,
        delete: delete.into_iter().map(str::to_owned).collect(),
    }
}

fn write(path: &str, content: &[u8]) -> FileWrite {
    FileWrite {
        path: path.to_owned(),
        content: content.to_vec(),
        executable: false,
    }
}

#[tokio::test]
async fn azure_push_sends_only_what_changes() {
    let server = MockAzure::start(vec![
        repository_reply(),
        refs_reply(&[("refs/heads/main", HEAD), ("refs/heads/main-old", NEW)]),
        Reply::json("GET", &repo_path("/items"), 200, r#"{"objectId":"ab","gitObjectType":"blob","path":"/old.txt"}"#),
        item_missing(),
        Reply::bytes("GET", &repo_path("/items"), 200, b"# Payments\n"),
        Reply::bytes("GET", &repo_path("/items"), 200, b"print('old')\n"),
        item_missing(),
        Reply::json(
            "POST",
            &repo_path("/pushes"),
            201,
            &format!(
                r#"{{"pushId":9,"commits":[{{"commitId":"{NEW}","comment":"Add the service skeleton"}}],"refUpdates":[{{"name":"refs/heads/main","oldObjectId":"{HEAD}","newObjectId":"{NEW}"}}]}}"#
            ),
        ),
        commit_reply(NEW, HEAD),
    ])
    .await;
    let spec = azure_spec(
        vec![
            write("README.md", b"# Payments\n"),
            write("src/app.py", b"print('new')\n"),
            write("bin/tool", &[0, 255, 1]),
        ],
        vec!["old.txt", "gone.txt"],
    );
    let result = azure_writer(&server).commit(&spec).await;
    let requests = server.finish().await;
    let result = result.unwrap();
    assert_eq!(
        result,
        CommitResult {
            repository_id: REPO_ID.into(),
            commit_sha: NEW.into(),
            tree_sha: TREE.into(),
            parent_sha: Some(HEAD.into()),
            files_changed: 3,
            no_op: false,
        }
    );

    let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(":my-pat"));
    for request in &requests {
        assert_eq!(request.header("authorization"), Some(basic.as_str()));
        assert_eq!(request.query("api-version"), Some("7.1"));
    }
    assert_eq!(requests[1].query("filter"), Some("heads/main"));
    let item = &requests[4];
    assert_eq!(item.query("path"), Some("/README.md"));
    assert_eq!(item.query("versionDescriptor.version"), Some(HEAD));
    assert_eq!(item.query("versionDescriptor.versionType"), Some("commit"));
    assert_eq!(item.query("includeContent"), Some("true"));
    assert_eq!(item.header("accept"), Some("application/octet-stream"));
    assert_eq!(requests[2].query("path"), Some("/old.txt"));
    assert_eq!(
        requests[7].json(),
        serde_json::json!({
            "refUpdates": [{"name": "refs/heads/main", "oldObjectId": HEAD}],
            "commits": [{
                "comment": "Add the service skeleton",
                "author": {"name": "bosun", "email": "bosun@localhost", "date": "2026-11-29T10:00:00Z"},
                "committer": {"name": "bosun", "email": "bosun@localhost", "date": "2026-11-29T10:00:00Z"},
                "changes": [
                    {"changeType": "delete", "item": {"path": "/old.txt"}},
                    {"changeType": "edit", "item": {"path": "/src/app.py"},
                     "newContent": {"content": "print('new')\n", "contentType": "rawtext"}},
                    {"changeType": "add", "item": {"path": "/bin/tool"},
                     "newContent": {"content": "AP8B", "contentType": "base64encoded"}}
                ]
            }]
        })
    );
}

#[tokio::test]
async fn azure_unchanged_content_is_a_no_op() {
    let server = MockAzure::start(vec![
        repository_reply(),
        refs_reply(&[("refs/heads/main", HEAD)]),
        Reply::bytes("GET", &repo_path("/items"), 200, b"same\n"),
        commit_reply(HEAD, NEW),
    ])
    .await;
    let result = azure_writer(&server)
        .commit(&azure_spec(vec![write("a.txt", b"same\n")], vec![]))
        .await;
    server.finish().await;
    let result = result.unwrap();
    assert!(result.no_op);
    assert_eq!(result.files_changed, 0);
    assert_eq!(result.commit_sha, HEAD);
    assert_eq!(result.parent_sha.as_deref(), Some(NEW));
}

/// The replies of a commit that changes nothing, in `project`.
fn no_op_replies(project: &str) -> Vec<Reply> {
    let repo = format!("/contoso/{project}/_apis/git/repositories/{REPO_ID}");
    vec![
        Reply::json(
            "GET",
            &format!("/contoso/{project}/_apis/git/repositories/payments-api"),
            200,
            &format!(r#"{{"id":"{REPO_ID}","name":"payments-api","defaultBranch":"refs/heads/main"}}"#),
        ),
        Reply::json(
            "GET",
            &format!("{repo}/refs"),
            200,
            &format!(r#"{{"value":[{{"name":"refs/heads/main","objectId":"{HEAD}"}}],"count":1}}"#),
        ),
        Reply::bytes("GET", &format!("{repo}/items"), 200, b"same\n"),
        Reply::json(
            "GET",
            &format!("{repo}/commits/{HEAD}"),
            200,
            &format!(r#"{{"commitId":"{HEAD}","treeId":"{TREE}","parents":["{NEW}"],"comment":"m"}}"#),
        ),
    ]
}

#[tokio::test]
async fn azure_project_template_gives_each_tenant_its_own_project() {
    let mut script = no_op_replies("delivery-contoso");
    script.extend(no_op_replies("delivery-fabrikam"));
    let server = MockAzure::start(script).await;
    let writer = AzureCommitWriter::new(&AzureDevOpsConfig::new(
        server.url("/contoso"),
        "delivery-{tenant}",
        AzureDevOpsAuth::Pat("my-pat".into()),
    ))
    .unwrap();
    let contoso = azure_spec(vec![write("a.txt", b"same\n")], vec![]);
    let mut fabrikam = contoso.clone();
    fabrikam.tenant = "fabrikam".into();
    assert!(writer.commit(&contoso).await.unwrap().no_op);
    assert!(writer.commit(&fabrikam).await.unwrap().no_op);
    server.finish().await;

    // Without the template variable, both tenants' `payments-api` is the one
    // repository of the configured project.
    let mut script = no_op_replies("Delivery");
    script.extend(no_op_replies("Delivery"));
    let server = MockAzure::start(script).await;
    let writer = azure_writer(&server);
    assert!(writer.commit(&contoso).await.unwrap().no_op);
    assert!(writer.commit(&fabrikam).await.unwrap().no_op);
    server.finish().await;
}

#[tokio::test]
async fn azure_new_branch_is_pushed_from_its_base_and_retried_when_moved() {
    let server = MockAzure::start(vec![
        repository_reply(),
        // Attempt 1: branch missing, base found, push loses a race (409).
        refs_reply(&[]),
        refs_reply(&[("refs/heads/develop", HEAD)]),
        item_missing(),
        Reply::json(
            "POST",
            &repo_path("/pushes"),
            409,
            r#"{"message":"TF401028: The reference 'refs/heads/feature/x' has already been updated by another client, so you cannot update it. Please try again.","typeKey":"GitReferenceStaleException"}"#,
        ),
        // Attempt 2: the branch now exists.
        refs_reply(&[("refs/heads/feature/x", NEW)]),
        item_missing(),
        Reply::json(
            "POST",
            &repo_path("/pushes"),
            201,
            r#"{"refUpdates":[{"name":"refs/heads/feature/x","newObjectId":"4444444444444444444444444444444444444444"}]}"#,
        ),
        commit_reply("4444444444444444444444444444444444444444", NEW),
    ])
    .await;
    let mut spec = azure_spec(vec![write("f.txt", b"f")], vec![]);
    spec.branch = "feature/x".into();
    spec.base_branch = Some("develop".into());
    let result = azure_writer(&server).commit(&spec).await;
    let requests = server.finish().await;
    let result = result.unwrap();
    assert_eq!(result.parent_sha.as_deref(), Some(NEW));
    assert_eq!(requests[1].query("filter"), Some("heads/feature/x"));
    assert_eq!(requests[2].query("filter"), Some("heads/develop"));
    assert_eq!(
        requests[4].json()["refUpdates"][0]["oldObjectId"],
        HEAD,
        "a new branch starts at its base"
    );
    assert_eq!(requests[4].json()["commits"][0]["changes"][0]["changeType"], "add");
    assert_eq!(requests[7].json()["refUpdates"][0]["oldObjectId"], NEW);
}

#[tokio::test]
async fn azure_empty_repository_gets_a_first_push() {
    let server = MockAzure::start(vec![
        repository_reply(),
        refs_reply(&[]),
        refs_reply(&[]),
        refs_reply(&[]),
        Reply::json(
            "POST",
            &repo_path("/pushes"),
            201,
            &format!(r#"{{"commits":[{{"commitId":"{NEW}"}}]}}"#),
        ),
        Reply::json(
            "GET",
            &repo_path(&format!("/commits/{NEW}")),
            200,
            &format!(r#"{{"commitId":"{NEW}","treeId":"{TREE}","parents":[]}}"#),
        ),
    ])
    .await;
    let result = azure_writer(&server)
        .commit(&azure_spec(vec![write("a", b"a")], vec![]))
        .await;
    let requests = server.finish().await;
    let result = result.unwrap();
    assert_eq!(result.parent_sha, None);
    assert_eq!(
        requests[4].json()["refUpdates"][0]["oldObjectId"],
        "0000000000000000000000000000000000000000"
    );
}

#[tokio::test]
async fn azure_missing_repository_is_transient() {
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/contoso/Delivery/_apis/git/repositories/payments-api",
        404,
        r#"{"message":"TF401019: The Git repository with name or identifier payments-api does not exist.","typeKey":"GitRepositoryNotFoundException"}"#,
    )])
    .await;
    let consumer = Commit::new(azure_writer(&server));
    let err = handle(&consumer, command(vec![text("a", "x")]).into())
        .await
        .unwrap_err();
    server.finish().await;
    assert!(matches!(err, HandlerError::Transient(_)), "{err}");
}
