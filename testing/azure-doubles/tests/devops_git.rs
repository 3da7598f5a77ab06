//! The Azure DevOps double's repositories over Git's smart HTTP protocol,
//! driven by the real `git` CLI as bosun's iac-provisioning fetches a
//! Pulumi program: commits pushed through the REST API are Git commits
//! whose ids `git ls-remote` shows and `git fetch <url> <commit>` fetches,
//! behind the same credentials and faults as the REST API.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bosun_azure_doubles::devops::DevOpsDouble;
use bosun_azure_doubles::{Auth, Fault, FaultRule, Faults, Journal, TokenBook};
use serde_json::{Value, json};

const PAT: &str = "double-pat";
const ZERO: &str = "0000000000000000000000000000000000000000";

async fn start(auth: Auth) -> (DevOpsDouble, String) {
    let double = DevOpsDouble::start(Faults::default(), Journal::default(), auth, "contoso")
        .await
        .unwrap();
    let project_id = double.add_project("delivery");
    (double, project_id)
}

/// A REST `POST` with the PAT; its status and JSON body.
async fn rest(double: &DevOpsDouble, rest: &str, body: Value) -> (u16, Value) {
    send(double, reqwest::Method::POST, rest, body).await
}

async fn send(double: &DevOpsDouble, method: reqwest::Method, rest: &str, body: Value) -> (u16, Value) {
    let url = format!("{}/delivery/_apis/{rest}?api-version=7.1", double.organization_url());
    let response = reqwest::Client::new()
        .request(method, url)
        .basic_auth("", Some(PAT))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Makes `payments-api` with two commits on `main` pushed through the REST
/// API; their ids.
async fn two_commits(double: &DevOpsDouble, project_id: &str) -> (String, String) {
    let (status, created) = rest(
        double,
        "git/repositories",
        json!({ "name": "payments-api", "project": { "id": project_id } }),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let mut old = ZERO.to_owned();
    let mut ids = Vec::new();
    let pushes = [
        json!([{ "changeType": "add", "item": { "path": "/infra/Pulumi.yaml" },
                 "newContent": { "content": "name: payments\nruntime: nodejs\n", "contentType": "rawtext" } }]),
        json!([
            { "changeType": "edit", "item": { "path": "/infra/Pulumi.yaml" },
              "newContent": { "content": "name: payments\nruntime: yaml\n", "contentType": "rawtext" } },
            { "changeType": "add", "item": { "path": "/infra/bin/logo.png" },
              "newContent": { "content": STANDARD.encode([0u8, 159, 146, 150, 255]), "contentType": "base64encoded" } },
        ]),
    ];
    for (n, changes) in pushes.into_iter().enumerate() {
        let (status, pushed) = rest(
            double,
            "git/repositories/payments-api/pushes",
            json!({
                "refUpdates": [{ "name": "refs/heads/main", "oldObjectId": old }],
                "commits": [{
                    "comment": format!("commit {n}"),
                    "author": { "name": "Ada", "email": "ada@contoso.example", "date": "2026-01-02T03:04:05Z" },
                    "changes": changes,
                }],
            }),
        )
        .await;
        assert_eq!(status, 201, "{pushed}");
        old = pushed["commits"][0]["commitId"].as_str().unwrap().to_owned();
        ids.push(old.clone());
    }
    (ids[0].clone(), ids[1].clone())
}

/// `git args` with no user or system configuration and no prompting; the
/// `Authorization` header, when given, as bosun's program fetch sends it.
fn git(dir: &Path, authorization: Option<(&str, &str)>, args: &[&str]) -> Output {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "/bin/false")
        .env_remove("GIT_DIR")
        .args(args);
    if let Some((url, value)) = authorization {
        command
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", format!("http.{url}.extraHeader"))
            .env("GIT_CONFIG_VALUE_0", format!("Authorization: {value}"));
    }
    command.output().expect("git runs")
}

fn basic() -> String {
    format!("Basic {}", STANDARD.encode(format!(":{PAT}")))
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "git failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Fetches `commit` at depth 1 into a fresh bare repository, as
/// iac-provisioning does.
fn fetch(dir: &Path, url: &str, authorization: Option<&str>, commit: &str) -> Output {
    let bare = dir.join(format!("fetch-{}.git", uuid::Uuid::new_v4()));
    let init = git(dir, None, &["init", "--quiet", "--bare", bare.to_str().unwrap()]);
    stdout(&init);
    git(
        &bare,
        authorization.map(|value| (url, value)),
        &["fetch", "--depth", "1", "--no-tags", url, commit],
    )
}

#[tokio::test]
async fn git_fetches_the_rest_commits_by_id_with_the_pat() {
    let (double, project_id) = start(Auth::default().basic_password(PAT)).await;
    let (first, second) = two_commits(&double, &project_id).await;
    assert_ne!(first, second);
    let url = double.git_url("delivery", "payments-api");
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().to_path_buf();
    let auth = basic();

    let listed = {
        let (dir, url, auth) = (dir.clone(), url.clone(), auth.clone());
        tokio::task::spawn_blocking(move || stdout(&git(&dir, Some((&url, &auth)), &["ls-remote", &url])))
            .await
            .unwrap()
    };
    assert!(listed.contains(&format!("{second}\trefs/heads/main")), "{listed}");
    assert!(listed.contains(&format!("{second}\tHEAD")), "{listed}");

    let bare = {
        let (dir, url, auth, second) = (dir.clone(), url.clone(), auth.clone(), second.clone());
        tokio::task::spawn_blocking(move || {
            let bare = dir.join("program.git");
            stdout(&git(&dir, None, &["init", "--quiet", "--bare", bare.to_str().unwrap()]));
            let fetched = git(
                &bare,
                Some((&url, &auth)),
                &["fetch", "--depth", "1", "--no-tags", &url, &second],
            );
            stdout(&fetched);
            bare
        })
        .await
        .unwrap()
    };
    let shown = git(&bare, None, &["show", &format!("{second}:infra/Pulumi.yaml")]);
    assert_eq!(stdout(&shown), "name: payments\nruntime: yaml\n");
    let logo = git(&bare, None, &["show", &format!("{second}:infra/bin/logo.png")]);
    assert!(logo.status.success());
    assert_eq!(logo.stdout, [0u8, 159, 146, 150, 255]);
    // The commit is the REST one: its parent, message and author.
    let commit = stdout(&git(&bare, None, &["cat-file", "-p", &second]));
    assert!(commit.contains(&format!("parent {first}\n")), "{commit}");
    assert!(
        commit.contains("author Ada <ada@contoso.example> 1767323045 +0000"),
        "{commit}"
    );
    assert!(commit.ends_with("\ncommit 1"), "{commit}");
    // Depth 1: the parent itself was not fetched.
    let parent = git(&bare, None, &["cat-file", "-e", &first]);
    assert!(!parent.status.success(), "a depth-1 fetch brought the parent");
    // The REST tree id is Git's.
    let (status, got) = {
        let url = format!(
            "{}/delivery/_apis/git/repositories/payments-api/commits/{second}?api-version=7.1",
            double.organization_url()
        );
        let response = reqwest::Client::new()
            .get(url)
            .basic_auth("", Some(PAT))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json::<Value>().await.unwrap())
    };
    assert_eq!(status, 200);
    let tree = stdout(&git(&bare, None, &["rev-parse", &format!("{second}^{{tree}}")]));
    assert_eq!(got["treeId"].as_str().unwrap(), tree.trim());
    assert!(
        double
            .running()
            .journal()
            .succeeded("devops", "POST", "/_git/payments-api/git-upload-pack")
            >= 1
    ); // The bare repositories go with the double.
    let root = double.git_root().to_path_buf();
    assert!(
        root.join(format!("{}.git", double.repositories("delivery")[0].id))
            .is_dir()
    );
    drop(double);
    assert!(!root.exists(), "{} left behind", root.display());
}

#[tokio::test]
async fn git_over_http_needs_the_credential_and_meets_the_faults() {
    let tokens = TokenBook::default();
    let (double, project_id) = start(Auth::default().basic_password(PAT).entra(tokens.clone())).await;
    let (_, second) = two_commits(&double, &project_id).await;
    let url = double.git_url("delivery", "payments-api");
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().to_path_buf();
    let token = tokens.issue(
        "bosun-client",
        "499b84ac-1321-427f-aa17-267ca6975798/.default",
        Duration::from_secs(600),
    );
    let faults = double.running().faults().clone();
    let journal = double.running().journal().clone();
    let url_for_unknown = double.git_url("delivery", "missing");
    let http = reqwest::Client::new();
    // An unknown repository is 404, as Azure Repos answers it.
    let missing = http
        .get(format!("{url_for_unknown}/info/refs?service=git-upload-pack"))
        .basic_auth("", Some(PAT))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    let advertised = http
        .get(format!("{url}/info/refs?service=git-upload-pack"))
        .basic_auth("", Some(PAT))
        .send()
        .await
        .unwrap();
    assert_eq!(advertised.status().as_u16(), 200);
    assert_eq!(
        advertised.headers()["content-type"],
        "application/x-git-upload-pack-advertisement"
    );
    let advertisement = advertised.bytes().await.unwrap();
    assert!(advertisement.starts_with(b"001e# service=git-upload-pack\n0000"));
    // A protocol v0 request body, gzipped as git sends large ones: the
    // answer is a NAK and the pack.
    let mut request = Vec::new();
    for line in [format!("want {second} ofs-delta\n"), "deepen 1\n".to_owned()] {
        request.extend_from_slice(format!("{:04x}{line}", line.len() + 4).as_bytes());
    }
    request.extend_from_slice(b"00000009done\n");
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gzip, &request).unwrap();
    let result = http
        .post(format!("{url}/git-upload-pack"))
        .basic_auth("", Some(PAT))
        .header("content-type", "application/x-git-upload-pack-request")
        .header("content-encoding", "gzip")
        .body(gzip.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(result.status().as_u16(), 200);
    assert_eq!(result.headers()["content-type"], "application/x-git-upload-pack-result");
    let result = result.bytes().await.unwrap();
    let pack = result.windows(4).position(|w| w == b"PACK");
    assert!(pack.is_some(), "{}", String::from_utf8_lossy(&result));

    tokio::task::spawn_blocking(move || {
        // A bearer token the Entra double issued is accepted.
        let bearer = format!("Bearer {token}");
        let fetched = fetch(&dir, &url, Some(&bearer), &second);
        stdout(&fetched);
        // Protocol v0 as well as git's default v2.
        let v0 = git(
            &dir,
            Some((&url, &bearer)),
            &["-c", "protocol.version=0", "ls-remote", &url, "refs/heads/main"],
        );
        assert_eq!(stdout(&v0), format!("{second}\trefs/heads/main\n"));
        // Without the header: 401, and git, with no credential to offer,
        // gives up.
        let before = journal.entries().len();
        let refused = fetch(&dir, &url, None, &second);
        assert!(!refused.status.success());
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("could not read Username"), "{said}");
        let answered: Vec<u16> = journal.entries()[before..].iter().map(|e| e.status).collect();
        assert_eq!(answered, [401], "the info/refs request refused");
        // A wrong PAT is refused too.
        let wrong = format!("Basic {}", STANDARD.encode(":wrong"));
        assert!(!fetch(&dir, &url, Some(&wrong), &second).status.success());
        // A 503 on the upload-pack POST makes the fetch fail.
        faults.add(FaultRule::new("devops", "/git-upload-pack", Fault::Status(503), 10).method("POST"));
        let failed = fetch(&dir, &url, Some(&basic()), &second);
        assert!(!failed.status.success());
        let said = String::from_utf8_lossy(&failed.stderr);
        assert!(said.contains("503"), "{said}");
        faults.clear();
        stdout(&fetch(&dir, &url, Some(&basic()), &second));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_pull_request_s_merge_commit_is_a_git_commit_and_refs_follow() {
    let (double, project_id) = start(Auth::default().basic_password(PAT)).await;
    let (_, second) = two_commits(&double, &project_id).await;
    let (status, pushed) = rest(
        &double,
        "git/repositories/payments-api/pushes",
        json!({
            "refUpdates": [{ "name": "refs/heads/feature", "oldObjectId": second }],
            "commits": [{ "comment": "feature", "changes": [{ "changeType": "add", "item": { "path": "/feature.txt" },
                "newContent": { "content": "on a branch\n", "contentType": "rawtext" } }] }],
        }),
    )
    .await;
    assert_eq!(status, 201, "{pushed}");
    let feature = pushed["refUpdates"][0]["newObjectId"].as_str().unwrap().to_owned();
    let (status, pr) = rest(
        &double,
        "git/repositories/payments-api/pullrequests",
        json!({ "sourceRefName": "refs/heads/feature", "targetRefName": "refs/heads/main", "title": "Feature" }),
    )
    .await;
    assert_eq!(status, 201, "{pr}");
    let id = pr["pullRequestId"].as_u64().unwrap();
    let (status, done) = send(
        &double,
        reqwest::Method::PATCH,
        &format!("git/repositories/payments-api/pullrequests/{id}"),
        json!({
            "status": "completed",
            "lastMergeSourceCommit": { "commitId": feature },
            "completionOptions": { "deleteSourceBranch": true, "mergeCommitMessage": "Merged feature" },
        }),
    )
    .await;
    assert_eq!(status, 200, "{done}");
    let merge = double.pull_requests("delivery")[0].merge_commit.clone().unwrap();
    let url = double.git_url("delivery", "payments-api");
    // Git refuses pushes: commits come through the REST API.
    let receive = reqwest::Client::new()
        .get(format!("{url}/info/refs?service=git-receive-pack"))
        .basic_auth("", Some(PAT))
        .send()
        .await
        .unwrap();
    assert_eq!(receive.status().as_u16(), 403);
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let auth = basic();
        let listed = stdout(&git(&dir, Some((&url, &auth)), &["ls-remote", &url]));
        assert_eq!(
            listed,
            format!("{merge}\tHEAD\n{merge}\trefs/heads/main\n"),
            "the source branch deleted"
        );
        let bare = dir.join("merge.git");
        stdout(&git(&dir, None, &["init", "--quiet", "--bare", bare.to_str().unwrap()]));
        stdout(&git(&bare, Some((&url, &auth)), &["fetch", "--no-tags", &url, "main"]));
        let commit = stdout(&git(&bare, None, &["cat-file", "-p", &merge]));
        assert!(
            commit.contains(&format!("parent {second}\nparent {feature}\n")),
            "{commit}"
        );
        assert!(commit.ends_with("\nMerged feature"), "{commit}");
        let file = stdout(&git(&bare, None, &["show", &format!("{merge}:feature.txt")]));
        assert_eq!(file, "on a branch\n");
    })
    .await
    .unwrap();
}
