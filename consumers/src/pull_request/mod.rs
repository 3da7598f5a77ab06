//! The pull-request consumer: `OpenPullRequest` (command) and
//! `CommitCreated` (event) in, `PullRequestOpened` out.
//!
//! A `CommitCreated` acts only when it carries a `pullRequestTarget`: it
//! opens a pull request from the committed branch into that target
//! (titled after the head commit's subject, no required checks, no
//! auto-complete); without a target the event is ignored (empty outcome).
//! `OpenPullRequest` opens exactly what it asks for.
//!
//! Idempotent on (repository, source, target): while a pull request between
//! the two branches is open, the same request returns it with
//! `created: false` and the source's current head; a request that asks for
//! auto-complete turns it on, and its required checks are added. A request
//! whose head already merged through a completed pull request reports that
//! one. The tenant comes from the envelope, and the envelope's `occurredAt`
//! dates a merge commit, so a retried request produces the same merge.
//! Retried exponentially, 5 times (DESIGN.md).
//!
//! The event carries the module metadata: the command's `module` when it
//! gives one, else [`MODULE_FILE`] read at the pull request's head commit —
//! at the repository root, or, when the root has none, the one file of that
//! name anywhere in the tree (several are ambiguous: none is used, with a
//! warning). A file whose module directory is not the root gets that
//! directory as its `path` when it names none. An invalid file is a
//! permanent error naming the file and the field.
//!
//! - [`port`] — the [`PullRequestHost`] port and its [`PullRequestError`];
//! - [`local`] — pull requests on the local Git host, checked and merged
//!   for real ([`local::LocalPullRequests`]);
//! - [`azure`] — Azure Repos pull requests ([`azure::AzurePullRequests`]).

pub mod azure;
pub mod local;
pub mod port;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bosun_contracts::messages::{CommitCreated, ModuleMetadata, OpenPullRequest, PullRequestOpened};
use bosun_contracts::validate::{self, Validate};
use bosun_contracts::{ConsumerName, Envelope, Message};

pub use port::{CheckStatus, OpenedPullRequest, PolicyCheck, PullRequestError, PullRequestHost, PullRequestSpec};

use crate::delivery::git::short_branch;
use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "pull-request";

/// The module metadata file: a `ModuleMetadata` JSON document.
pub const MODULE_FILE: &str = "bosun.module.json";

/// Largest module metadata file read.
pub const MAX_MODULE_FILE_BYTES: usize = 256 * 1024;

/// The pull-request consumer over a [`PullRequestHost`].
#[derive(Debug, Clone)]
pub struct PullRequests<P> {
    host: P,
}

impl<P: PullRequestHost> PullRequests<P> {
    /// The consumer over a Git host: [`local::LocalPullRequests`],
    /// [`azure::AzurePullRequests`] (or any other implementation of the port).
    pub fn new(host: P) -> Self {
        Self { host }
    }

    /// The port.
    pub fn host(&self) -> &P {
        &self.host
    }
}

fn invalid(field: &str, reason: &str) -> PullRequestError {
    PullRequestError::Invalid(format!("{field}: {reason}"))
}

fn check_tenant(envelope: &Envelope) -> Result<(), PullRequestError> {
    validate::tenant_id("tenantId", &envelope.tenant_id).map_err(|err| invalid(&err.field, &err.reason))
}

/// Checks an `OpenPullRequest` and turns it into the port's request.
pub fn spec_from_command(envelope: &Envelope, command: &OpenPullRequest) -> Result<PullRequestSpec, PullRequestError> {
    check_tenant(envelope)?;
    command
        .validate()
        .map_err(|err| invalid(&format!("payload.{}", err.field), &err.reason))?;
    Ok(PullRequestSpec {
        tenant: envelope.tenant_id.clone(),
        repository: command.repository.clone(),
        source_branch: short_branch(&command.source_branch).to_owned(),
        target_branch: short_branch(&command.target_branch).to_owned(),
        title: Some(command.title.trim().to_owned()),
        description: command.description.clone(),
        required_checks: command.required_checks.clone(),
        auto_complete: command.auto_complete,
        date: envelope.occurred_at,
    })
}

/// Checks a `CommitCreated` that asks for a pull request into `target` and
/// turns it into the port's request.
pub fn spec_from_commit(
    envelope: &Envelope,
    event: &CommitCreated,
    target: &str,
) -> Result<PullRequestSpec, PullRequestError> {
    check_tenant(envelope)?;
    event
        .validate()
        .map_err(|err| invalid(&format!("payload.{}", err.field), &err.reason))?;
    validate::branch_name("pullRequestTarget", target)
        .map_err(|err| invalid(&format!("payload.{}", err.field), &err.reason))?;
    let source = short_branch(&event.branch);
    let target = short_branch(target);
    if source == target {
        return Err(invalid(
            "payload.pullRequestTarget",
            &format!("is the committed branch `{source}` itself"),
        ));
    }
    Ok(PullRequestSpec {
        tenant: envelope.tenant_id.clone(),
        repository: event.repository.clone(),
        source_branch: source.to_owned(),
        target_branch: target.to_owned(),
        title: None,
        description: Some(format!(
            "Opened by bosun for commit {} on `{source}`.",
            event.commit_sha
        )),
        required_checks: Vec::new(),
        auto_complete: false,
        date: envelope.occurred_at,
    })
}

/// Parses and checks a module metadata file found at `path`. A file outside
/// the root that names no `path` gets its directory.
pub fn parse_module_file(path: &str, bytes: &[u8]) -> Result<ModuleMetadata, PullRequestError> {
    let bad = |field: &str, reason: String| PullRequestError::InvalidModuleFile {
        path: path.to_owned(),
        field: field.to_owned(),
        reason,
    };
    if bytes.len() > MAX_MODULE_FILE_BYTES {
        return Err(bad(
            ".",
            format!("is {} bytes, over the limit of {MAX_MODULE_FILE_BYTES}", bytes.len()),
        ));
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(bytes);
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let mut module: ModuleMetadata = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let field = match err.path().to_string() {
            path if path.is_empty() || path == "?" => ".".to_owned(),
            path => path,
        };
        bad(&field, err.into_inner().to_string())
    })?;
    deserializer
        .end()
        .map_err(|err| bad(".", format!("unexpected content after the document: {err}")))?;
    let directory = path.rsplit_once('/').map(|(directory, _)| directory);
    if module.path.is_none()
        && let Some(directory) = directory
    {
        module.path = Some(directory.to_owned());
    }
    module.validate().map_err(|err| bad(&err.field, err.reason))?;
    Ok(module)
}

/// The module metadata at `commit`: the root's [`MODULE_FILE`], else the
/// only one in the tree.
async fn module_at<P: PullRequestHost>(
    host: &P,
    spec: &PullRequestSpec,
    commit: &str,
) -> Result<Option<ModuleMetadata>, PullRequestError> {
    let read = |path: String| async move {
        let bytes = host.read_file(&spec.tenant, &spec.repository, commit, &path).await?;
        Ok::<_, PullRequestError>(bytes.map(|bytes| (path, bytes)))
    };
    let found = match read(MODULE_FILE.to_owned()).await? {
        Some(found) => Some(found),
        None => {
            let mut paths = host
                .find_files(&spec.tenant, &spec.repository, commit, MODULE_FILE)
                .await?;
            match paths.len() {
                0 => None,
                1 => match paths.pop() {
                    Some(path) => read(path).await?,
                    None => None,
                },
                count => {
                    tracing::warn!(
                        repository = %spec.repository,
                        commit,
                        count,
                        "several module files and none at the root; the pull request carries no module"
                    );
                    None
                }
            }
        }
    };
    found.map(|(path, bytes)| parse_module_file(&path, &bytes)).transpose()
}

#[async_trait]
impl<P: PullRequestHost> Consumer for PullRequests<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let (spec, given_module) = match inbound.message {
            Message::OpenPullRequest(command) => {
                (spec_from_command(inbound.envelope, command)?, command.module.clone())
            }
            Message::CommitCreated(event) => match &event.pull_request_target {
                Some(target) => (spec_from_commit(inbound.envelope, event, target)?, None),
                None => {
                    tracing::debug!(repository = %event.repository, branch = %event.branch, "commit asks for no pull request");
                    return Ok(Outcome::default());
                }
            },
            other => return Err(UnexpectedMessage::handler_error(NAME, other)),
        };
        let log_failure = |err: &PullRequestError| {
            tracing::warn!(
                tenant = %spec.tenant,
                repository = %spec.repository,
                source = %spec.source_branch,
                target = %spec.target_branch,
                retryable = err.is_retryable(),
                error = %err,
                "pull request failed"
            );
        };
        let opened = self.host.open(&spec).await.inspect_err(log_failure)?;
        let module = match given_module {
            Some(module) => Some(module),
            None => module_at(&self.host, &spec, &opened.head_commit)
                .await
                .inspect_err(log_failure)?,
        };
        for check in &opened.checks {
            tracing::debug!(
                pull_request = opened.pull_request_id,
                check = %check.name,
                status = ?check.status,
                detail = %check.detail,
                "pull request check"
            );
        }
        tracing::info!(
            tenant = %spec.tenant,
            repository = %spec.repository,
            pull_request = opened.pull_request_id,
            head = %opened.head_commit,
            status = ?opened.status,
            created = opened.created,
            merge_commit = opened.merge_commit.as_deref().unwrap_or(""),
            module = module.as_ref().map(|m| m.module_id.as_str()).unwrap_or(""),
            "pull request open"
        );
        let event = Message::from(PullRequestOpened {
            repository: spec.repository.clone(),
            pull_request_id: opened.pull_request_id,
            source_branch: spec.source_branch.clone(),
            target_branch: spec.target_branch.clone(),
            title: opened.title,
            commit_sha: opened.head_commit,
            status: opened.status,
            url: opened.url,
            created: opened.created,
            required_checks: opened.required_checks,
            auto_complete: opened.auto_complete,
            merge_commit_sha: opened.merge_commit,
            module,
        });
        event.validate().map_err(|err| {
            HandlerError::permanent(PullRequestError::Rejected(
                format!("the Git host's answer makes an invalid PullRequestOpened: {err}").into(),
            ))
        })?;
        Ok(Outcome::send([event]))
    }
}
