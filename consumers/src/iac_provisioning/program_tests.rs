//! Tests of the Pulumi program fetched from Git ([`super::program`]): a
//! local bare repository holds a program at two commits, and the fake
//! `pulumi` of the adapter's tests (wrapped to record the folder it runs in
//! and the program it sees there) provisions from it. They check that:
//!
//! - the program is the module's repository at the release's commit (not
//!   a later one), through the consumer handling a `ReleaseApproved`;
//! - the plan's folder is removed after success and after failure;
//! - a configured repository and ref win over the request's repository;
//! - a commit without the program's folder is a permanent error naming
//!   repository, commit and path; a failed fetch is transient; a request
//!   naming no repository with none configured is permanent;
//! - the Azure DevOps credential reaches git's HTTP requests as an
//!   `Authorization` header for URLs under the organization only, and
//!   never shows in an error.

#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use bosun_contracts::messages::ReleaseApproved;
use bosun_contracts::{Envelope, Message, samples};
use uuid::Uuid;

use super::azure::{PulumiConfig, PulumiEngine};
use super::program::{ConfiguredRepository, GitProgram, ProgramSource, RepositoryUrls};
use super::tests::pulumi::{FAKE, OUTPUTS, PREVIEW, UP};
use super::*;
use crate::{HandlerError, Inbound};

/// Records where it runs and the program it finds there, then runs the
/// fake `pulumi`.
const WRAPPER: &str = r#"#!/bin/sh
echo "$(pwd) $(cat Pulumi.yaml) $(ls | tr '\n' ',')" >> "$FAKE_PULUMI_DIR/seen.log"
exec "$FAKE_PULUMI_DIR/fake-pulumi" "$@"
"#;

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A tenant's bare repository `<root>/contoso/<name>.git` whose branch
/// `main` has two commits, each with a program (`name: <name>-v1`, then
/// `-v2`) under `infra/`.
fn repository(root: &Path, name: &str) {
    let work = root.join("work").join(name);
    std::fs::create_dir_all(work.join("infra")).unwrap();
    git(&work, &["init", "--quiet"]);
    for version in ["v1", "v2"] {
        std::fs::write(work.join("infra/Pulumi.yaml"), format!("name: {name}-{version}\n")).unwrap();
        std::fs::write(work.join("infra/index.ts"), format!("// {version}\n")).unwrap();
        std::fs::write(work.join("README.md"), "the module\n").unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "--quiet", "-m", version]);
    }
    let bare = root.join("contoso").join(format!("{name}.git"));
    std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
    git(
        root,
        &[
            "clone",
            "--quiet",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
}

struct Setup {
    dir: tempfile::TempDir,
    engine: PulumiEngine,
    work: PathBuf,
}

fn setup(program: impl FnOnce(&Path) -> GitProgram) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("fake-pulumi");
    std::fs::write(&fake, FAKE).unwrap();
    let wrapper = dir.path().join("pulumi");
    std::fs::write(&wrapper, WRAPPER).unwrap();
    for script in [&fake, &wrapper] {
        std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(dir.path().join("preview.json"), PREVIEW).unwrap();
    std::fs::write(dir.path().join("up.json"), UP).unwrap();
    std::fs::write(dir.path().join("outputs.json"), OUTPUTS).unwrap();
    let work = dir.path().join("data").join("pulumi");
    let mut config = PulumiConfig::with_program(ProgramSource::Git(program(dir.path())), &work);
    config.binary = wrapper;
    config
        .environment
        .insert("FAKE_PULUMI_DIR".to_owned(), dir.path().display().to_string());
    let engine = PulumiEngine::new(&config).unwrap();
    Setup { dir, engine, work }
}

fn urls(root: &Path) -> RepositoryUrls {
    RepositoryUrls::Template(format!("file://{}/{{tenant}}/{{repository}}.git", root.display()))
}

impl Setup {
    fn seen(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("seen.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// What is left under the engine's folder for fetched programs.
    fn programs_left(&self) -> Vec<String> {
        match std::fs::read_dir(self.work.join("programs")) {
            Ok(entries) => entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

fn request(repository: &str, commit: &str) -> ProvisionRequest {
    ProvisionRequest {
        tenant: "contoso".to_owned(),
        plan_id: "payments-api-1.4.0-7f3c2a1-dev".to_owned(),
        stack: "payments/dev".to_owned(),
        environment: "dev".to_owned(),
        release_id: None,
        config: Default::default(),
        resources: vec![],
        preview_only: false,
        program: Some(ProgramCommit {
            repository: repository.to_owned(),
            commit_sha: commit.to_owned(),
        }),
    }
}

#[tokio::test]
async fn a_release_provisions_with_the_program_of_its_commit_and_removes_the_folder_after() {
    let setup = setup(|root| {
        repository(root, "payments-api");
        GitProgram::new(urls(root), "infra")
    });
    let commits = git(
        &setup.dir.path().join("contoso/payments-api.git"),
        &["rev-list", "--reverse", "main"],
    );
    let commits: Vec<&str> = commits.lines().collect();
    let v1 = commits[0].to_owned();
    assert_eq!(commits.len(), 2);

    // The release was built from the first commit; main has moved on since.
    let consumer = IacProvisioning::new(setup.engine.clone());
    let message = Message::from(ReleaseApproved {
        environment: "dev".to_owned(),
        repository: Some("payments-api".to_owned()),
        commit_sha: Some(v1.clone()),
        ..samples::release_approved()
    });
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "agent:test");
    let outcome = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap();
    assert_eq!(outcome.messages.len(), 1, "{:?}", outcome.messages);

    let seen = setup.seen();
    assert!(!seen.is_empty(), "pulumi ran");
    let folder = setup
        .work
        .join("programs")
        .join(format!("contoso.{}-dev", samples::release_approved().release_id))
        .join("program");
    for line in &seen {
        assert_eq!(
            line,
            &format!("{} name: payments-api-v1 Pulumi.yaml,index.ts,", folder.display()),
            "every call runs in the plan's folder with the program of the release's commit only"
        );
    }
    assert!(setup.programs_left().is_empty(), "{:?}", setup.programs_left());
}

#[tokio::test]
async fn a_configured_repository_and_ref_win_over_the_requests_repository() {
    let setup = setup(|root| {
        repository(root, "payments-api");
        repository(root, "platform-infra");
        let mut program = GitProgram::new(urls(root), "infra/");
        program.repository = Some(ConfiguredRepository {
            repository: "platform-infra".to_owned(),
            reference: "main".to_owned(),
        });
        program
    });
    let v1 = git(
        &setup.dir.path().join("contoso/payments-api.git"),
        &["rev-list", "--max-parents=0", "main"],
    );
    setup.engine.provision(&request("payments-api", &v1)).await.unwrap();
    let seen = setup.seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|line| line.contains(" name: platform-infra-v2 ")),
        "the configured repository at the head of main: {seen:?}"
    );
    assert!(setup.programs_left().is_empty());
}

#[tokio::test]
async fn a_commit_without_the_program_folder_is_a_permanent_error_naming_repository_commit_and_path() {
    let setup = setup(|root| {
        repository(root, "payments-api");
        GitProgram::new(urls(root), "deploy/pulumi")
    });
    let v2 = git(
        &setup.dir.path().join("contoso/payments-api.git"),
        &["rev-parse", "main"],
    );
    let err = setup.engine.provision(&request("payments-api", &v2)).await.unwrap_err();
    assert!(matches!(err, IacError::ProgramNotFound { .. }), "{err}");
    assert!(!err.is_retryable());
    let text = err.to_string();
    for part in [
        "`payments-api`",
        &format!("`{v2}`"),
        "`deploy/pulumi`",
        "BOSUN_PULUMI_PROGRAM_PATH",
    ] {
        assert!(text.contains(part), "{part} in: {text}");
    }
    assert!(matches!(HandlerError::from(err), HandlerError::Permanent(_)));
    assert!(setup.seen().is_empty(), "pulumi never ran");
    assert!(setup.programs_left().is_empty(), "{:?}", setup.programs_left());
}

#[tokio::test]
async fn a_folder_without_pulumi_yaml_is_no_program() {
    // The repository's root holds the module, not a Pulumi project.
    let setup = setup(|root| {
        repository(root, "payments-api");
        GitProgram::new(urls(root), ".")
    });
    let v2 = git(
        &setup.dir.path().join("contoso/payments-api.git"),
        &["rev-parse", "main"],
    );
    let err = setup.engine.provision(&request("payments-api", &v2)).await.unwrap_err();
    assert!(matches!(err, IacError::ProgramNotFound { .. }), "{err}");
    assert!(err.to_string().contains("at `.` in repository `payments-api`"), "{err}");
    assert!(setup.seen().is_empty(), "pulumi never ran");
    assert!(setup.programs_left().is_empty());
}

#[tokio::test]
async fn a_failed_fetch_is_transient_and_leaves_nothing_behind() {
    let setup = setup(|root| {
        repository(root, "payments-api");
        GitProgram::new(urls(root), "infra")
    });
    // A repository that is not there, then a commit the repository lacks.
    for (repository, commit) in [
        ("payments-web", "0123456789abcdef0123456789abcdef01234567"),
        ("payments-api", "0123456789abcdef0123456789abcdef01234567"),
    ] {
        let err = setup.engine.provision(&request(repository, commit)).await.unwrap_err();
        assert!(matches!(err, IacError::Unavailable(_)), "{err}");
        assert!(err.is_retryable(), "{err}");
        let text = err.to_string();
        assert!(text.contains(repository) && text.contains(commit), "{text}");
        assert!(matches!(HandlerError::from(err), HandlerError::Transient(_)));
    }
    assert!(setup.seen().is_empty(), "pulumi never ran");
    assert!(setup.programs_left().is_empty(), "{:?}", setup.programs_left());
}

#[tokio::test]
async fn a_request_naming_no_repository_without_a_configured_one_is_permanent_and_names_the_settings() {
    let setup = setup(|root| GitProgram::new(urls(root), "infra"));
    let mut request = request("payments-api", "0123456789abcdef0123456789abcdef01234567");
    request.program = None;
    let err = setup.engine.provision(&request).await.unwrap_err();
    assert!(matches!(err, IacError::ProgramNotConfigured), "{err}");
    assert!(!err.is_retryable());
    let text = err.to_string();
    for setting in ["BOSUN_PULUMI_PROGRAM_REPOSITORY", "BOSUN_PULUMI_PROGRAM_DIR"] {
        assert!(text.contains(setting), "{text}");
    }
}

#[test]
fn a_program_path_leaving_the_repository_is_refused() {
    let program = GitProgram::new(RepositoryUrls::Template("file:///x/{repository}".to_owned()), "../etc");
    let config = PulumiConfig::with_program(ProgramSource::Git(program), "/tmp/unused");
    let err = PulumiEngine::new(&config).unwrap_err();
    assert!(err.to_string().contains("BOSUN_PULUMI_PROGRAM_PATH"), "{err}");
}

#[test]
fn azure_repos_urls_are_the_tenants_project_percent_encoded() {
    let urls = RepositoryUrls::AzureRepos {
        organization_url: "https://dev.azure.com/contoso/".to_owned(),
        project: "Delivery {tenant}".to_owned(),
    };
    assert_eq!(
        urls.url("fabrikam", "payments-api").unwrap(),
        "https://dev.azure.com/contoso/Delivery%20fabrikam/_git/payments-api"
    );
}

/// Serves one HTTP request on a loopback port, answering 500; returns the
/// base URL and the request's head as git sent it.
async fn one_request_server() -> (String, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buffer = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let read = socket.read(&mut buffer).await.unwrap();
            if read == 0 {
                break;
            }
            head.extend_from_slice(&buffer[..read]);
        }
        socket
            .write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        String::from_utf8_lossy(&head).into_owned()
    });
    (url, served)
}

#[tokio::test]
async fn the_azure_devops_credential_goes_to_git_as_a_header_only_under_the_organization() {
    use crate::delivery::azure::devops::AzureDevOpsAuth;
    for (scoped, expected) in [(true, true), (false, false)] {
        let (url, served) = one_request_server().await;
        let setup = setup(|_| {
            let mut program = GitProgram::new(RepositoryUrls::Template(format!("{url}/{{repository}}")), "infra");
            program.auth = Some(AzureDevOpsAuth::Pat("s3cret-pat".to_owned()));
            program.credential_scope = if scoped {
                format!("{url}/")
            } else {
                "https://dev.azure.com/contoso/".to_owned()
            };
            program
        });
        let err = setup
            .engine
            .provision(&request("payments-api", "0123456789abcdef0123456789abcdef01234567"))
            .await
            .unwrap_err();
        assert!(err.is_retryable(), "{err}");
        assert!(!err.to_string().contains("s3cret-pat"), "{err}");
        let head = served.await.unwrap();
        assert!(
            head.starts_with("GET /payments-api/info/refs?service=git-upload-pack"),
            "{head}"
        );
        // Basic base64(":s3cret-pat").
        let header = "Authorization: Basic OnMzY3JldC1wYXQ=";
        assert_eq!(head.contains(header), expected, "scoped: {scoped}: {head}");
        assert!(setup.programs_left().is_empty());
    }
}
