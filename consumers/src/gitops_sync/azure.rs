//! The cloud adapter: promotions are pushed to the environment repository
//! in Azure Repos, and environments are Argo CD applications.
//!
//! Writing a promotion goes through the delivery layer's Azure DevOps
//! commit writer ([`AzureCommitWriter`], REST pushes, a no-op when the
//! manifest is already there). The repository must exist in the tenant's project (see
//! the tenants section of [`crate::delivery::azure::devops`]; provision it with
//! `ProvisionRepository`); a missing one is transient.
//!
//! Argo CD was chosen over Flux: its REST API is reachable without
//! Kubernetes credentials and reports the synced revision directly. Each
//! tenant's environment is an Argo CD Application named
//! `<prefix><tenant>.<environment>` ([`application_name`]; tenant ids hold
//! no `.`, so two tenants' `dev` are two applications) whose source is the
//! tenant's environment repository at path `<environment>` on `main`.
//! Operators create the applications; one may carry the label
//! `bosun.dev/tenant` ([`TENANT_LABEL`]), and one labelled for another
//! tenant is refused ([`GitOpsError::ForeignTenant`]).
//!
//! Applications named before tenants, `<prefix><environment>`, are used
//! only for the tenant their `bosun.dev/tenant` label names: when the
//! tenant's application does not exist (404, or 403 as Argo CD answers for
//! applications a token may not see) and the old one is labelled for the
//! tenant, it is synced; labelled for another tenant, refused; not
//! labelled, refused with what to do (create the tenant's application, or
//! label the old one) — an unlabelled application records nothing that
//! says whose it is, and syncing it would change another tenant's
//! environment.
//!
//! A reconcile is, with a bearer token:
//!
//! 0. `GET /api/v1/applications/{name}` — which application (see above);
//! 1. `POST /api/v1/applications/{name}/sync` with
//!    `{"revision": "<commit>", "prune": true}` — an "another operation is
//!    already in progress" answer is not an error: the running operation
//!    is observed instead;
//! 2. `GET /api/v1/applications/{name}` — the environment runs
//!    `status.operationState.syncResult.revision` when the operation
//!    `Succeeded`, otherwise `status.sync.revision` when `status.sync.status`
//!    is `Synced`, otherwise nothing yet (the saga retries with backoff).
//!    Applied resources come from `syncResult.resources` (their `message`
//!    ends in `created`, `configured`, `unchanged` or `pruned`); the
//!    environment is healthy when `status.health.status` is `Healthy`.
//!
//! Argo CD answers are classified by the one Azure retry policy
//! ([`crate::delivery::azure::retry`]): 401/403/404 (bad token, no such
//! application) are permanent; 408, 409, 429 and 5xx transient, or retried
//! after their `Retry-After`.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{AppliedResource, GitIdentity, SyncAction};
use bosun_contracts::validate;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::port::{
    DesiredStateCommit, DesiredStateWrite, EnvironmentReport, Environments, GitOpsError, ReconcileRequest,
};
use crate::delivery::azure::devops::AzureDevOpsConfig;
use crate::delivery::azure::http::{self, Redirects, Timeout};
use crate::delivery::azure::retry::{Disposition, retry_after};
use crate::delivery::git::commit::{
    AzureCommitWriter, CommitSpec, CommitWriter, DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME, FileWrite,
};
use crate::delivery::tenant::ForeignTenant;

/// Default timeout of one Argo CD request.
pub const DEFAULT_ARGO_CD_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest error message kept from an Argo CD answer.
const MAX_ERROR_MESSAGE: usize = 500;

/// Where and how to reach Argo CD. `Debug` never shows the token.
#[derive(Clone)]
pub struct ArgoCdConfig {
    /// The Argo CD server URL, e.g. `https://argocd.contoso.internal`.
    pub server_url: String,
    /// An Argo CD API token (a project or account token), sent as a bearer
    /// token.
    pub token: String,
    /// Prefix of the application names: the application of environment
    /// `prod` is `<prefix>prod`.
    pub application_prefix: String,
    /// Timeout of one request.
    pub request_timeout: Duration,
}

impl fmt::Debug for ArgoCdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArgoCdConfig")
            .field("server_url", &self.server_url)
            .field("token", &"[redacted]")
            .field("application_prefix", &self.application_prefix)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl ArgoCdConfig {
    /// A configuration with no application prefix and the default timeout.
    pub fn new(server_url: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            server_url: server_url.into(),
            token: token.into(),
            application_prefix: String::new(),
            request_timeout: DEFAULT_ARGO_CD_TIMEOUT,
        }
    }
}

/// The Azure adapter's configuration: Azure DevOps for the environment
/// repository, Argo CD for the environments.
#[derive(Debug, Clone)]
pub struct AzureGitOpsConfig {
    /// The organization and project holding the environment repository.
    pub azure_devops: AzureDevOpsConfig,
    /// The Argo CD server.
    pub argo_cd: ArgoCdConfig,
}

/// Environment repositories in Azure Repos, environments in Argo CD.
#[derive(Debug, Clone)]
pub struct AzureEnvironments {
    writer: AzureCommitWriter,
    http: reqwest::Client,
    server: Url,
    application_prefix: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Application {
    metadata: ApplicationMetadata,
    status: ApplicationStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ApplicationMetadata {
    labels: std::collections::BTreeMap<String, String>,
}

impl Application {
    fn tenant(&self) -> Option<&str> {
        self.metadata.labels.get(TENANT_LABEL).map(String::as_str)
    }
}

/// The label of an Argo CD Application naming the tenant whose
/// environment it is.
pub const TENANT_LABEL: &str = "bosun.dev/tenant";

/// The Argo CD Application of a tenant's environment:
/// `<prefix><tenant>.<environment>`.
pub fn application_name(prefix: &str, tenant: &str, environment: &str) -> String {
    format!("{prefix}{tenant}.{environment}")
}

/// A failed Argo CD call: the error, Argo CD's message, the HTTP status.
type ArgoFailure = (GitOpsError, String, Option<StatusCode>);

/// An Argo CD call that got no usable answer; the cause of a
/// [`GitOpsError::Unavailable`] or [`GitOpsError::Rejected`].
#[derive(Debug, thiserror::Error)]
enum ArgoCallError {
    /// No answer, or its body could not be read.
    #[error("Argo CD {operation}: {source}")]
    Transport {
        /// Method and URL path.
        operation: String,
        /// What the HTTP client said.
        #[source]
        source: reqwest::Error,
    },
    /// An application's JSON is not what bosun reads.
    #[error("Argo CD application `{name}` is not readable: {source}")]
    Unreadable {
        /// The application.
        name: String,
        /// What the parser found.
        #[source]
        source: serde_json::Error,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ApplicationStatus {
    sync: SyncStatus,
    health: HealthStatus,
    operation_state: Option<OperationState>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct SyncStatus {
    status: String,
    revision: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct HealthStatus {
    status: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OperationState {
    phase: String,
    message: Option<String>,
    sync_result: Option<SyncResult>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct SyncResult {
    revision: Option<String>,
    resources: Vec<ResourceResult>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ResourceResult {
    kind: String,
    name: String,
    namespace: Option<String>,
    status: String,
    message: String,
}

fn action_of(resource: &ResourceResult) -> SyncAction {
    let message = resource.message.trim();
    if resource.status == "Pruned" || message.ends_with("pruned") {
        SyncAction::Pruned
    } else if message.ends_with("created") {
        SyncAction::Created
    } else if message.ends_with("unchanged") {
        SyncAction::Unchanged
    } else {
        SyncAction::Configured
    }
}

fn applied_of(result: &SyncResult) -> Vec<AppliedResource> {
    result
        .resources
        .iter()
        .filter(|resource| !resource.kind.is_empty() && !resource.name.is_empty())
        .map(|resource| AppliedResource {
            kind: resource.kind.clone(),
            name: resource.name.clone(),
            namespace: resource
                .namespace
                .clone()
                .filter(|namespace| validate::environment_name("namespace", namespace).is_ok()),
            action: action_of(resource),
        })
        .collect()
}

/// What the application reports: the commit it runs, if it can tell.
/// Whether an operation (a sync) is under way: its phase is `Running` or
/// `Terminating`.
fn operation_running(status: &ApplicationStatus) -> bool {
    status
        .operation_state
        .as_ref()
        .is_some_and(|operation| matches!(operation.phase.as_str(), "Running" | "Terminating"))
}

/// The commit the application runs: that of the last sync that succeeded,
/// else the one it is in sync with; none while an operation is under way
/// (what the previous sync left says nothing about the one running).
fn reported_commit(status: &ApplicationStatus) -> Option<String> {
    if operation_running(status) {
        return None;
    }
    let succeeded = status
        .operation_state
        .as_ref()
        .filter(|operation| operation.phase == "Succeeded")
        .and_then(|operation| operation.sync_result.as_ref())
        .and_then(|result| result.revision.clone());
    let synced = (status.sync.status == "Synced")
        .then(|| status.sync.revision.clone())
        .flatten();
    succeeded
        .or(synced)
        .filter(|commit| validate::git_sha("revision", commit).is_ok())
}

fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let mut message = parsed
        .as_ref()
        .and_then(|value| value.get("message").or_else(|| value.get("error")))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    if message.len() > MAX_ERROR_MESSAGE {
        let mut cut = MAX_ERROR_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    message
}

impl AzureEnvironments {
    /// An adapter for the configured Azure DevOps project and Argo CD
    /// server. Fails when a URL is not an absolute http(s) URL or a token
    /// cannot be sent in a header.
    pub fn new(config: &AzureGitOpsConfig) -> Result<Self, GitOpsError> {
        let writer = AzureCommitWriter::new(&config.azure_devops)
            .map_err(|err| GitOpsError::Invalid(format!("Azure DevOps: {err}")))?;
        let server = Url::parse(config.argo_cd.server_url.trim())
            .map_err(|err| GitOpsError::Invalid(format!("Argo CD server URL: {err}")))?;
        if !matches!(server.scheme(), "http" | "https") || server.cannot_be_a_base() {
            return Err(GitOpsError::Invalid(
                "the Argo CD server URL must be an http(s) URL".to_owned(),
            ));
        }
        let mut bearer = HeaderValue::from_str(&format!("Bearer {}", config.argo_cd.token.trim()))
            .map_err(|_| GitOpsError::Invalid("the Argo CD token cannot be sent in a header".to_owned()))?;
        bearer.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, bearer);
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let http = http::client(
            Timeout::Total(config.argo_cd.request_timeout),
            headers,
            Redirects::Follow,
        )
        .map_err(|err| GitOpsError::Invalid(format!("Argo CD HTTP client: {err}")))?;
        Ok(Self {
            writer,
            http,
            server,
            application_prefix: config.argo_cd.application_prefix.clone(),
        })
    }

    fn application_url(&self, name: &str, rest: &[&str]) -> Url {
        let mut url = self.server.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty()
                .extend(["api", "v1", "applications", name])
                .extend(rest);
        }
        url
    }

    /// Sends a request; the body of a 2xx answer, or the error.
    async fn send(&self, method: Method, url: Url, body: Option<&Value>) -> Result<Vec<u8>, ArgoFailure> {
        let operation = format!("{method} {}", url.path());
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = http::send(request).await.map_err(|source| {
            let permanent = matches!(Disposition::of_transport(&source), Disposition::Permanent);
            let source = Box::new(ArgoCallError::Transport {
                operation: operation.clone(),
                source,
            });
            let err = if permanent {
                GitOpsError::Rejected(source)
            } else {
                GitOpsError::Unavailable(source)
            };
            (err, String::new(), None)
        })?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = response
            .bytes()
            .await
            .map_err(|source| {
                let source = ArgoCallError::Transport {
                    operation: operation.clone(),
                    source,
                };
                (GitOpsError::Unavailable(Box::new(source)), String::new(), Some(status))
            })?
            .to_vec();
        tracing::debug!(%operation, status = status.as_u16(), "argo cd call");
        if status.is_success() {
            return Ok(bytes);
        }
        let message = error_message(&bytes);
        let source = format!("Argo CD {operation}: HTTP {}: {message}", status.as_u16());
        let err = match Disposition::of_status(status.as_u16(), retry_after) {
            Disposition::RetryAfter(after) => GitOpsError::Throttled {
                after,
                source: source.into(),
            },
            Disposition::Transient => GitOpsError::Unavailable(source.into()),
            Disposition::Permanent => GitOpsError::Rejected(source.into()),
        };
        Err((err, message, Some(status)))
    }

    /// An application and what it says, parsed.
    async fn application(&self, name: &str) -> Result<Application, ArgoFailure> {
        let bytes = self.send(Method::GET, self.application_url(name, &[]), None).await?;
        serde_json::from_slice(&bytes).map_err(|source| {
            let source = ArgoCallError::Unreadable {
                name: name.to_owned(),
                source,
            };
            (GitOpsError::Unavailable(Box::new(source)), String::new(), None)
        })
    }

    /// The name of the application to sync for a tenant's environment (see
    /// the module documentation).
    /// The tenant's application (or the one named before tenants, labelled
    /// for the tenant), as read: its name and its state.
    async fn resolve_application(&self, tenant: &str, environment: &str) -> Result<(String, Application), GitOpsError> {
        let name = application_name(&self.application_prefix, tenant, environment);
        let refuse = |app: &str, owner: &str| {
            GitOpsError::from(ForeignTenant::new(
                format!("Argo CD application `{app}`"),
                Some(owner),
                tenant,
            ))
        };
        let scoped_error = match self.application(&name).await {
            Ok(application) => {
                return match application.tenant() {
                    Some(owner) if owner != tenant => Err(refuse(&name, owner)),
                    _ => Ok((name, application)),
                };
            }
            Err((err, _, Some(StatusCode::NOT_FOUND | StatusCode::FORBIDDEN))) => err,
            Err((err, _, _)) => return Err(err),
        };
        let legacy = format!("{}{environment}", self.application_prefix);
        let application = match self.application(&legacy).await {
            Ok(application) => application,
            // Neither exists: the tenant's application is the one to make.
            Err((_, _, Some(StatusCode::NOT_FOUND | StatusCode::FORBIDDEN))) => return Err(scoped_error),
            Err((err, _, _)) => return Err(err),
        };
        match application.tenant() {
            Some(owner) if owner == tenant => {
                tracing::debug!(application = %legacy, tenant, "using the application named before tenants, labelled for this tenant");
                Ok((legacy, application))
            }
            Some(owner) => Err(refuse(&legacy, owner)),
            None => Err(GitOpsError::Rejected(
                format!(
                    "Argo CD application `{name}` does not exist, and `{legacy}` (named before tenants) has no \
                     `{TENANT_LABEL}` label saying whose it is; create `{name}` for tenant `{tenant}`, \
                     or label `{legacy}` with {TENANT_LABEL}={tenant}, then replay"
                )
                .into(),
            )),
        }
    }
}

#[async_trait]
impl Environments for AzureEnvironments {
    async fn write_desired_state(&self, write: &DesiredStateWrite) -> Result<DesiredStateCommit, GitOpsError> {
        let result = self
            .writer
            .commit(&CommitSpec {
                tenant: write.tenant.clone(),
                repository: write.repository.clone(),
                branch: "main".to_owned(),
                base_branch: None,
                message: write.message.clone(),
                author: GitIdentity {
                    name: DEFAULT_AUTHOR_NAME.to_owned(),
                    email: DEFAULT_AUTHOR_EMAIL.to_owned(),
                },
                date: write.date,
                files: vec![FileWrite {
                    path: write.path.clone(),
                    content: write.manifest.clone(),
                    executable: false,
                }],
                delete: vec![],
            })
            .await?;
        Ok(DesiredStateCommit {
            commit_sha: result.commit_sha,
            no_op: result.no_op,
        })
    }

    async fn reconcile(&self, request: &ReconcileRequest) -> Result<EnvironmentReport, GitOpsError> {
        validate::environment_name("environment", &request.environment)?;
        if let Some(commit) = &request.commit_sha {
            validate::git_sha("commitSha", commit)?;
        }
        validate::tenant_id("tenant", &request.tenant)?;
        // A sync is asked for only when one is needed: not while an
        // operation runs (it is observed instead), and not when the
        // application already runs the commit in sync (a reconcile asked
        // again, by a retry or a redelivery, starts no second sync).
        let (name, before) = self.resolve_application(&request.tenant, &request.environment).await?;
        let running = operation_running(&before.status);
        let there = request.commit_sha.as_deref().is_some_and(|commit| {
            !running
                && before.status.sync.status == "Synced"
                && reported_commit(&before.status).as_deref() == Some(commit)
        });
        let status = if running || there {
            tracing::debug!(application = %name, running, "no sync asked: observing the application");
            before.status
        } else {
            let mut body = json!({ "prune": true });
            if let Some(commit) = &request.commit_sha {
                body["revision"] = json!(commit);
            }
            match self
                .send(Method::POST, self.application_url(&name, &["sync"]), Some(&body))
                .await
            {
                Ok(_) => {}
                Err((_, message, _)) if message.contains("another operation is already in progress") => {
                    tracing::debug!(application = %name, "a sync is already running; observing it");
                }
                Err((err, _, _)) => return Err(err),
            }
            self.application(&name).await.map_err(|(err, _, _)| err)?.status
        };
        if let Some(operation) = &status.operation_state
            && matches!(operation.phase.as_str(), "Failed" | "Error")
        {
            tracing::warn!(
                application = %name,
                phase = %operation.phase,
                message = operation.message.as_deref().unwrap_or(""),
                "the Argo CD sync operation failed"
            );
        }
        let applied = status
            .operation_state
            .as_ref()
            .and_then(|operation| operation.sync_result.as_ref())
            .map(applied_of)
            .unwrap_or_default();
        Ok(EnvironmentReport {
            commit_sha: reported_commit(&status),
            applied,
            healthy: status.health.status == "Healthy",
            observed_at: OffsetDateTime::now_utc(),
        })
    }
}
