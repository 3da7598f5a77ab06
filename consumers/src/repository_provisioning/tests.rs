//! Handler tests over an in-memory [`RepositoryHost`], and tests of the local
//! adapter (real bare repositories in a temporary folder) and of the Azure
//! adapter (against a scripted local HTTP server).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{CreateCommit, ProvisionRepository, RepositoryProvisioned, RepositoryRef};
use bosun_contracts::{Envelope, Message};
use uuid::Uuid;

use super::azure::{AzureRepositoryHost, MINIMUM_REVIEWERS_POLICY_TYPE};
use super::local::LocalRepositoryHost;
use super::*;
use crate::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig};
use crate::delivery::azure::test_server::{MockAzure, Reply};

fn command(name: &str) -> ProvisionRepository {
    ProvisionRepository {
        name: name.to_owned(),
        project: None,
        default_branch: "main".to_owned(),
        description: Some("Payments API".to_owned()),
        minimum_reviewers: 0,
    }
}

fn envelope(message: &Message, tenant: &str) -> Envelope {
    Envelope::new(message, Uuid::now_v7(), tenant, "agent:test")
}

async fn handle<P: RepositoryHost>(
    consumer: &RepositoryProvisioning<P>,
    tenant: &str,
    message: Message,
) -> Result<Outcome, HandlerError> {
    let envelope = envelope(&message, tenant);
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn provisioned(outcome: &Outcome) -> &RepositoryProvisioned {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    assert_eq!(outcome.messages[0].delay, None);
    match &outcome.messages[0].message {
        Message::RepositoryProvisioned(event) => event,
        other => panic!("expected RepositoryProvisioned, got {other:?}"),
    }
}

/// An in-memory Git host: repositories by (tenant, name), or a scripted error.
#[derive(Default)]
struct FakeHost {
    repositories: Mutex<BTreeMap<(String, String), RepositoryRef>>,
    calls: Mutex<Vec<RepositorySpec>>,
    fail_with: Mutex<Option<fn() -> ProvisionError>>,
}

#[async_trait]
impl RepositoryHost for FakeHost {
    async fn provision(&self, spec: &RepositorySpec) -> Result<ProvisionedRepository, ProvisionError> {
        self.calls.lock().unwrap().push(spec.clone());
        if let Some(fail) = *self.fail_with.lock().unwrap() {
            return Err(fail());
        }
        let mut repositories = self.repositories.lock().unwrap();
        let key = (spec.tenant.clone(), spec.name.clone());
        if let Some(existing) = repositories.get(&key) {
            return Ok(ProvisionedRepository {
                repository: existing.clone(),
                created: false,
            });
        }
        let repository = RepositoryRef {
            id: format!("id-{}", repositories.len() + 1),
            name: spec.name.clone(),
            project: spec.project.clone().unwrap_or_else(|| spec.tenant.clone()),
            url: format!("memory://{}/{}", spec.tenant, spec.name),
            default_branch: spec.default_branch.clone(),
        };
        repositories.insert(key, repository.clone());
        Ok(ProvisionedRepository {
            repository,
            created: true,
        })
    }
}

#[test]
fn name_and_retry_policy_follow_the_design() {
    let consumer = RepositoryProvisioning::new(FakeHost::default());
    assert_eq!(consumer.name(), "repository-provisioning");
    assert!(bosun_contracts::routing::consumer(consumer.name()).is_some());
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(5));
}

#[tokio::test]
async fn handler_emits_repository_provisioned_with_the_envelope_tenant() {
    let consumer = RepositoryProvisioning::new(FakeHost::default());
    let mut cmd = command("payments-api");
    cmd.default_branch = "refs/heads/trunk".to_owned();
    cmd.minimum_reviewers = 2;
    let outcome = handle(&consumer, "contoso", cmd.into()).await.unwrap();
    let event = provisioned(&outcome);
    assert!(event.created);
    assert_eq!(event.repository.name, "payments-api");
    assert_eq!(event.repository.project, "contoso");
    assert_eq!(event.repository.default_branch, "trunk");
    let calls = consumer.host().calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        vec![RepositorySpec {
            tenant: "contoso".to_owned(),
            name: "payments-api".to_owned(),
            project: None,
            default_branch: "trunk".to_owned(),
            description: Some("Payments API".to_owned()),
            minimum_reviewers: 2,
        }]
    );
}

#[tokio::test]
async fn handler_reports_an_existing_repository_as_provisioned() {
    let consumer = RepositoryProvisioning::new(FakeHost::default());
    let first = handle(&consumer, "contoso", command("r").into()).await.unwrap();
    let second = handle(&consumer, "contoso", command("r").into()).await.unwrap();
    assert!(provisioned(&first).created);
    assert!(!provisioned(&second).created);
    assert_eq!(provisioned(&first).repository, provisioned(&second).repository);
    // Another tenant's repository of the same name is another repository.
    let other = handle(&consumer, "fabrikam", command("r").into()).await.unwrap();
    assert!(provisioned(&other).created);
    assert_ne!(provisioned(&other).repository.id, provisioned(&first).repository.id);
}

#[tokio::test]
async fn handler_maps_port_errors_to_retry_decisions() {
    type FailWith = fn() -> ProvisionError;
    let cases: [(FailWith, &str); 4] = [
        (|| ProvisionError::Unavailable("disk full".into()), "transient"),
        (
            || ProvisionError::Throttled {
                after: Duration::from_secs(9),
                source: "429".into(),
            },
            "retry-after",
        ),
        (|| ProvisionError::Rejected("401".into()), "permanent"),
        (|| ProvisionError::ProjectNotFound { project: "p".into() }, "permanent"),
    ];
    for (fail, expected) in cases {
        let host = FakeHost::default();
        *host.fail_with.lock().unwrap() = Some(fail);
        let consumer = RepositoryProvisioning::new(host);
        let err = handle(&consumer, "contoso", command("r").into()).await.unwrap_err();
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
async fn handler_rejects_a_bad_tenant_or_payload_without_calling_the_port() {
    let consumer = RepositoryProvisioning::new(FakeHost::default());
    let err = handle(&consumer, "../etc", command("r").into()).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    let err = handle(&consumer, "contoso", command("a/b").into()).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("payload.name"), "{err}");
    assert!(consumer.host().calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn handler_refuses_other_message_types() {
    let consumer = RepositoryProvisioning::new(FakeHost::default());
    let message = Message::from(CreateCommit {
        repository: "r".into(),
        branch: "main".into(),
        base_branch: None,
        message: "m".into(),
        author: None,
        files: vec![],
        delete: vec!["x".into()],
        pull_request_target: None,
    });
    let err = handle(&consumer, "contoso", message).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
}

// ---- local adapter ----

fn spec(tenant: &str, name: &str) -> RepositorySpec {
    RepositorySpec {
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        project: None,
        default_branch: "main".to_owned(),
        description: Some("Payments API".to_owned()),
        minimum_reviewers: 2,
    }
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .env("GIT_DIR", dir)
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

#[tokio::test]
async fn local_provisioning_twice_yields_one_repository() {
    let root = tempfile::tempdir().unwrap();
    let host = LocalRepositoryHost::new(root.path());
    let mut request = spec("contoso", "payments-api");
    request.default_branch = "trunk".to_owned();

    let first = host.provision(&request).await.unwrap();
    let second = host.provision(&request).await.unwrap();
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(first.repository, second.repository);

    let path = root.path().join("contoso/contoso/payments-api.git");
    assert_eq!(git(&path, &["rev-parse", "--is-bare-repository"]), "true");
    assert_eq!(git(&path, &["symbolic-ref", "HEAD"]), "refs/heads/trunk");
    assert_eq!(git(&path, &["config", "bosun.id"]), first.repository.id);
    assert_eq!(git(&path, &["config", "bosun.minimumReviewers"]), "2");
    assert_eq!(
        std::fs::read_to_string(path.join("description")).unwrap(),
        "Payments API\n"
    );
    assert_eq!(first.repository.project, "contoso");
    assert_eq!(first.repository.default_branch, "trunk");
    assert!(first.repository.url.starts_with("file:///"), "{}", first.repository.url);
    assert!(first.repository.url.ends_with("/contoso/contoso/payments-api.git"));
    Uuid::parse_str(&first.repository.id).unwrap();

    // Exactly one repository directory for the tenant.
    let projects: Vec<_> = std::fs::read_dir(root.path().join("contoso"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| !name.starts_with('.'))
        .collect();
    assert_eq!(projects, vec!["contoso".to_owned()]);
}

#[tokio::test]
async fn local_concurrent_provisioning_of_one_name_yields_one_repository() {
    let root = tempfile::tempdir().unwrap();
    // Separate hosts, as separate processes would have: the rename into
    // place decides the winner.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let host = LocalRepositoryHost::new(root.path());
        tasks.push(tokio::spawn(async move { host.provision(&spec("contoso", "r")).await }));
    }
    let mut created = 0;
    let mut ids = Vec::new();
    for task in tasks {
        let result = task.await.unwrap().unwrap();
        created += usize::from(result.created);
        ids.push(result.repository.id);
    }
    assert_eq!(created, 1, "exactly one call creates the repository");
    ids.dedup();
    assert_eq!(ids.len(), 1);
    let staging: Vec<_> = std::fs::read_dir(root.path().join("contoso/.staging"))
        .unwrap()
        .collect();
    assert!(staging.is_empty(), "staging folders are cleaned up");
}

#[tokio::test]
async fn local_names_are_unique_per_tenant_across_projects() {
    let root = tempfile::tempdir().unwrap();
    let host = LocalRepositoryHost::new(root.path());
    let mut in_web = spec("contoso", "r");
    in_web.project = Some("web".to_owned());
    let created = host.provision(&in_web).await.unwrap();
    assert_eq!(created.repository.project, "web");

    // Without a project the existing one is found wherever it lives.
    let found = host.provision(&spec("contoso", "r")).await.unwrap();
    assert!(!found.created);
    assert_eq!(found.repository.id, created.repository.id);

    // Naming another project is a conflict an operator must resolve.
    let mut in_api = spec("contoso", "r");
    in_api.project = Some("api".to_owned());
    let err = host.provision(&in_api).await.unwrap_err();
    assert!(matches!(err, ProvisionError::NameTaken { .. }), "{err}");
    assert!(!HandlerError::from(err).is_retryable());
}

#[tokio::test]
async fn local_adapter_refuses_names_that_would_escape_the_root() {
    let root = tempfile::tempdir().unwrap();
    let host = LocalRepositoryHost::new(root.path().join("git"));
    for (tenant, name, project) in [
        ("..", "r", None),
        ("contoso", "..", None),
        ("contoso", "r", Some("../x")),
    ] {
        let mut request = spec(tenant, name);
        request.project = project.map(str::to_owned);
        let err = host.provision(&request).await.unwrap_err();
        assert!(matches!(err, ProvisionError::Invalid(_)), "{err}");
    }
    assert!(!root.path().join("git").exists());
}

#[tokio::test]
async fn local_consumer_end_to_end() {
    let root = tempfile::tempdir().unwrap();
    let consumer = RepositoryProvisioning::new(LocalRepositoryHost::new(root.path()));
    let outcome = handle(&consumer, "contoso", command("payments-api").into())
        .await
        .unwrap();
    let event = provisioned(&outcome);
    assert!(event.created);
    Message::from(event.clone()).validate().unwrap();
}

// ---- Azure adapter ----

const REPOSITORY_JSON: &str = r#"{
  "id": "5febef5a-833d-4e14-b9c0-14cb638f91e6",
  "name": "payments-api",
  "url": "https://dev.azure.com/contoso/_apis/git/repositories/5febef5a-833d-4e14-b9c0-14cb638f91e6",
  "project": {"id": "6ce954b1-ce1f-45d1-b94d-e6bf2464ba2c", "name": "Delivery", "state": "wellFormed", "visibility": "private"},
  "size": 0,
  "remoteUrl": "https://contoso@dev.azure.com/contoso/Delivery/_git/payments-api",
  "sshUrl": "git@ssh.dev.azure.com:v3/contoso/Delivery/payments-api",
  "webUrl": "https://dev.azure.com/contoso/Delivery/_git/payments-api",
  "isDisabled": false,
  "isInMaintenance": false
}"#;

const NOT_FOUND_JSON: &str = r#"{"$id":"1","innerException":null,"message":"TF401019: The Git repository with name or identifier payments-api does not exist or you do not have permissions for the operation you are attempting.","typeName":"Microsoft.TeamFoundation.Git.Server.GitRepositoryNotFoundException, Microsoft.TeamFoundation.Git.Server","typeKey":"GitRepositoryNotFoundException","errorCode":0,"eventId":3000}"#;

fn azure(server: &MockAzure) -> AzureRepositoryHost {
    azure_in(server, "Delivery")
}

/// An adapter whose project setting is `project` (a name or a template).
fn azure_in(server: &MockAzure, project: &str) -> AzureRepositoryHost {
    AzureRepositoryHost::new(&AzureDevOpsConfig::new(
        server.url("/contoso"),
        project,
        AzureDevOpsAuth::Bearer("entra-token".into()),
    ))
    .unwrap()
}

#[tokio::test]
async fn azure_existing_repository_is_returned_without_creating() {
    let mut existing: serde_json::Value = serde_json::from_str(REPOSITORY_JSON).unwrap();
    existing["defaultBranch"] = "refs/heads/develop".into();
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/contoso/Delivery/_apis/git/repositories/payments-api",
        200,
        &existing.to_string(),
    )])
    .await;
    let mut request = spec("contoso", "payments-api");
    request.minimum_reviewers = 0;
    let result = azure(&server).provision(&request).await;
    let requests = server.finish().await;
    let result = result.unwrap();
    assert!(!result.created);
    assert_eq!(
        result.repository,
        RepositoryRef {
            id: "5febef5a-833d-4e14-b9c0-14cb638f91e6".into(),
            name: "payments-api".into(),
            project: "Delivery".into(),
            url: "https://contoso@dev.azure.com/contoso/Delivery/_git/payments-api".into(),
            default_branch: "develop".into(),
        }
    );
    assert_eq!(requests[0].query("api-version"), Some("7.1"));
    assert_eq!(requests[0].header("authorization"), Some("Bearer entra-token"));
}

#[tokio::test]
async fn azure_missing_repository_is_created_with_its_policy() {
    let server = MockAzure::start(vec![
        Reply::json("GET", "/contoso/Delivery/_apis/git/repositories/payments-api", 404, NOT_FOUND_JSON),
        Reply::json(
            "GET",
            "/contoso/_apis/projects/Delivery",
            200,
            r#"{"id":"6ce954b1-ce1f-45d1-b94d-e6bf2464ba2c","name":"Delivery","state":"wellFormed","revision":40,"visibility":"private"}"#,
        ),
        Reply::json("POST", "/contoso/Delivery/_apis/git/repositories", 201, REPOSITORY_JSON),
        Reply::json("GET", "/contoso/Delivery/_apis/git/policy/configurations", 200, r#"{"count":0,"value":[]}"#),
        Reply::json("POST", "/contoso/Delivery/_apis/policy/configurations", 200, r#"{"id":17,"revision":1}"#),
    ])
    .await;
    let result = azure(&server)
        .provision(&spec("contoso", "payments-api"))
        .await
        .unwrap();
    let requests = server.finish().await;
    assert!(result.created);
    assert_eq!(result.repository.default_branch, "main");

    let create = &requests[2];
    assert_eq!(create.query("api-version"), Some("7.1"));
    assert_eq!(create.header("content-type"), Some("application/json"));
    assert_eq!(
        create.json(),
        serde_json::json!({"name": "payments-api", "project": {"id": "6ce954b1-ce1f-45d1-b94d-e6bf2464ba2c"}})
    );
    let list = &requests[3];
    assert_eq!(list.query("repositoryId"), Some("5febef5a-833d-4e14-b9c0-14cb638f91e6"));
    assert_eq!(list.query("refName"), Some("refs/heads/main"));
    assert_eq!(list.query("policyType"), Some(MINIMUM_REVIEWERS_POLICY_TYPE));
    let policy = requests[4].json();
    assert_eq!(policy["type"]["id"], MINIMUM_REVIEWERS_POLICY_TYPE);
    assert_eq!(policy["isBlocking"], true);
    assert_eq!(policy["settings"]["minimumApproverCount"], 2);
    assert_eq!(
        policy["settings"]["scope"],
        serde_json::json!([{"repositoryId": "5febef5a-833d-4e14-b9c0-14cb638f91e6", "refName": "refs/heads/main", "matchKind": "exact"}])
    );
    for request in &requests {
        assert_eq!(request.header("authorization"), Some("Bearer entra-token"));
    }
}

#[tokio::test]
async fn azure_repository_created_concurrently_is_reported_existing() {
    let server = MockAzure::start(vec![
        Reply::json("GET", "/contoso/Delivery/_apis/git/repositories/payments-api", 404, NOT_FOUND_JSON),
        Reply::json("GET", "/contoso/_apis/projects/Delivery", 200, r#"{"id":"p1","name":"Delivery"}"#),
        Reply::json(
            "POST",
            "/contoso/Delivery/_apis/git/repositories",
            409,
            r#"{"message":"TF400948: A Git repository with the name payments-api already exists.","typeKey":"GitRepositoryNameAlreadyExistsException"}"#,
        ),
        Reply::json("GET", "/contoso/Delivery/_apis/git/repositories/payments-api", 200, REPOSITORY_JSON),
    ])
    .await;
    let mut request = spec("contoso", "payments-api");
    request.minimum_reviewers = 0;
    let result = azure(&server).provision(&request).await.unwrap();
    server.finish().await;
    assert!(!result.created);
}

#[tokio::test]
async fn azure_missing_project_is_permanent_and_throttling_is_retry_after() {
    let server = MockAzure::start(vec![
        Reply::json("GET", "/contoso/Nope/_apis/git/repositories/r", 404, NOT_FOUND_JSON),
        Reply::json(
            "GET",
            "/contoso/_apis/projects/Nope",
            404,
            r#"{"message":"TF200016: The following project does not exist: Nope."}"#,
        ),
        Reply::json("GET", "/contoso/Delivery/_apis/git/repositories/r", 429, "{}").header("Retry-After", "30"),
    ])
    .await;
    let host = azure(&server);
    let mut request = spec("contoso", "r");
    request.project = Some("Nope".to_owned());
    let err = host.provision(&request).await.unwrap_err();
    assert!(matches!(err, ProvisionError::ProjectNotFound { .. }), "{err}");
    let err = HandlerError::from(host.provision(&spec("contoso", "r")).await.unwrap_err());
    assert!(
        matches!(err, HandlerError::RetryAfter { after, .. } if after == Duration::from_secs(30)),
        "{err}"
    );
    server.finish().await;
}

#[tokio::test]
async fn azure_project_template_gives_each_tenant_its_own_project() {
    let server = MockAzure::start(vec![
        Reply::json(
            "GET",
            "/contoso/delivery-contoso/_apis/git/repositories/payments-api",
            200,
            REPOSITORY_JSON,
        ),
        Reply::json(
            "GET",
            "/contoso/delivery-fabrikam/_apis/git/repositories/payments-api",
            404,
            NOT_FOUND_JSON,
        ),
        Reply::json(
            "GET",
            "/contoso/_apis/projects/delivery-fabrikam",
            200,
            r#"{"id":"f1","name":"delivery-fabrikam"}"#,
        ),
        Reply::json(
            "POST",
            "/contoso/delivery-fabrikam/_apis/git/repositories",
            201,
            REPOSITORY_JSON,
        ),
        // The tenant's own project, named explicitly (in another case).
        Reply::json(
            "GET",
            "/contoso/Delivery-Fabrikam/_apis/git/repositories/payments-api",
            200,
            REPOSITORY_JSON,
        ),
    ])
    .await;
    let host = azure_in(&server, "delivery-{tenant}");
    let mut contoso = spec("contoso", "payments-api");
    contoso.minimum_reviewers = 0;
    let mut fabrikam = spec("fabrikam", "payments-api");
    fabrikam.minimum_reviewers = 0;
    assert!(!host.provision(&contoso).await.unwrap().created);
    assert!(host.provision(&fabrikam).await.unwrap().created);
    fabrikam.project = Some("Delivery-Fabrikam".to_owned());
    assert!(!host.provision(&fabrikam).await.unwrap().created);
    let requests = server.finish().await;
    assert_eq!(requests[3].json()["project"]["id"], "f1");

    // Without the template variable, every tenant maps to the one project.
    let server = MockAzure::start(vec![
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/git/repositories/payments-api",
            200,
            REPOSITORY_JSON,
        ),
        Reply::json(
            "GET",
            "/contoso/Delivery/_apis/git/repositories/payments-api",
            200,
            REPOSITORY_JSON,
        ),
    ])
    .await;
    let host = azure(&server);
    fabrikam.project = None;
    let first = host.provision(&contoso).await.unwrap();
    let second = host.provision(&fabrikam).await.unwrap();
    server.finish().await;
    assert_eq!(first.repository, second.repository);
}

#[tokio::test]
async fn azure_project_of_another_tenant_is_refused_naming_both() {
    let server = MockAzure::start(vec![]).await;
    let consumer = RepositoryProvisioning::new(azure_in(&server, "delivery-{tenant}"));
    let mut request = command("payments-api");
    request.project = Some("delivery-contoso".to_owned());
    let err = handle(&consumer, "fabrikam", request.into()).await.unwrap_err();
    // Refused before any call to Azure DevOps.
    server.finish().await;
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    let HandlerError::Permanent(source) = &err else {
        unreachable!()
    };
    let shown = source.to_string();
    assert!(shown.contains("`fabrikam`"), "{shown}");
    assert!(shown.contains("`delivery-contoso`"), "{shown}");
    assert!(shown.contains("`delivery-fabrikam`"), "{shown}");

    // Without the template variable a named project is used as asked, as before.
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/contoso/delivery-contoso/_apis/git/repositories/payments-api",
        200,
        REPOSITORY_JSON,
    )])
    .await;
    let mut request = spec("fabrikam", "payments-api");
    request.project = Some("delivery-contoso".to_owned());
    request.minimum_reviewers = 0;
    azure(&server).provision(&request).await.unwrap();
    server.finish().await;
}

#[tokio::test]
async fn azure_consumer_end_to_end() {
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/contoso/Delivery/_apis/git/repositories/payments-api",
        200,
        REPOSITORY_JSON,
    )])
    .await;
    let consumer = RepositoryProvisioning::new(azure(&server));
    let outcome = handle(&consumer, "contoso", command("payments-api").into())
        .await
        .unwrap();
    server.finish().await;
    assert!(!provisioned(&outcome).created);
}
