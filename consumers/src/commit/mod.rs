//! The commit consumer: `CreateCommit` in, `CommitCreated` out.
//!
//! Writes an artifact bundle's files (UTF-8 or base64, optionally
//! executable) and deletions onto a branch as one commit. The branch is
//! created from `baseBranch` (or the repository's default branch) when
//! missing; an empty repository gets a root commit. Idempotent on content:
//! when the branch already holds the resulting tree, nothing is written and
//! the existing head commit is reported with `noOp: true`. The tenant comes
//! from the envelope, and the envelope's `occurredAt` is the commit date, so
//! a retried command produces the same commit. Retried exponentially,
//! 5 times (DESIGN.md).
//!
//! The handler decodes and checks the files before the port sees them:
//! paths must be relative repository paths (no `..`, no `.git`), unique,
//! and no file may sit where another file's folder is. Deletions are
//! applied before writes, so `delete: ["docs"]` with new `docs/...` files
//! replaces a folder.
//!
//! - [`port`] — the [`CommitWriter`] port and its [`CommitError`]: the
//!   delivery layer's commit writer ([`crate::delivery::git::commit`]),
//!   which other consumers write their files with too;
//! - [`local`] — commits into the local Git host's bare repositories
//!   ([`local::LocalCommitWriter`], from the delivery layer);
//! - [`azure`] — pushes to Azure Repos ([`azure::AzureCommitWriter`], from
//!   the delivery layer).

pub mod azure;
pub mod local;
pub mod port;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use async_trait::async_trait;
use base64::Engine as _;
use bosun_contracts::messages::{CommitCreated, ContentEncoding, CreateCommit, GitIdentity};
use bosun_contracts::validate::{self, Validate};
use bosun_contracts::{ConsumerName, Envelope, Message};

pub use port::{
    CommitError, CommitResult, CommitSpec, CommitWriter, DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME, FileWrite,
};

use crate::delivery::git::short_branch;
use crate::{Consumer, HandlerError, Inbound, Outcome, RetryPolicy, UnexpectedMessage};

/// The consumer's name: its queue and subscription.
pub const NAME: ConsumerName = "commit";

/// The commit consumer over a [`CommitWriter`].
#[derive(Debug, Clone)]
pub struct Commit<P> {
    writer: P,
}

impl<P: CommitWriter> Commit<P> {
    /// The consumer over a Git host: [`local::LocalCommitWriter`],
    /// [`azure::AzureCommitWriter`] (or any other implementation of the port).
    pub fn new(writer: P) -> Self {
        Self { writer }
    }

    /// The port.
    pub fn writer(&self) -> &P {
        &self.writer
    }
}

/// Decodes and checks a command into the port's request.
pub fn commit_spec(envelope: &Envelope, command: &CreateCommit) -> Result<CommitSpec, CommitError> {
    let invalid = |field: &str, reason: &str| CommitError::Invalid(format!("{field}: {reason}"));
    validate::tenant_id("tenantId", &envelope.tenant_id).map_err(|err| invalid(&err.field, &err.reason))?;
    command
        .validate()
        .map_err(|err| invalid(&format!("payload.{}", err.field), &err.reason))?;
    if command.message.contains('\0') {
        return Err(invalid("payload.message", "must not contain NUL"));
    }
    let author = command.author.clone().unwrap_or_else(|| GitIdentity {
        name: DEFAULT_AUTHOR_NAME.to_owned(),
        email: DEFAULT_AUTHOR_EMAIL.to_owned(),
    });
    for (field, value) in [
        ("payload.author.name", &author.name),
        ("payload.author.email", &author.email),
    ] {
        if value.chars().any(|c| matches!(c, '<' | '>' | '\n' | '\r' | '\0')) {
            return Err(invalid(field, "must not contain '<', '>', line breaks or NUL"));
        }
    }

    let mut files = Vec::with_capacity(command.files.len());
    let mut paths = BTreeSet::new();
    for (index, file) in command.files.iter().enumerate() {
        let field = format!("payload.files[{index}]");
        validate::repository_path(&format!("{field}.path"), &file.path)
            .map_err(|err| invalid(&err.field, &err.reason))?;
        if !paths.insert(file.path.as_str()) {
            return Err(invalid(
                &format!("{field}.path"),
                &format!("`{}` is listed twice", file.path),
            ));
        }
        let content = match file.encoding {
            ContentEncoding::Utf8 => file.content.clone().into_bytes(),
            ContentEncoding::Base64 => {
                let compact: String = file.content.chars().filter(|c| !c.is_ascii_whitespace()).collect();
                base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .map_err(|err| invalid(&format!("{field}.content"), &format!("is not valid base64: {err}")))?
            }
        };
        files.push(FileWrite {
            path: file.path.clone(),
            content,
            executable: file.executable,
        });
    }
    // A file may not sit where another file's folder is (`a` and `a/b`).
    for path in &paths {
        let mut prefix = String::new();
        for part in path.split('/') {
            if !prefix.is_empty() && paths.contains(prefix.as_str()) {
                return Err(invalid(
                    "payload.files",
                    &format!("`{prefix}` is both a file and the folder of `{path}`"),
                ));
            }
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
        }
    }
    for (index, path) in command.delete.iter().enumerate() {
        validate::repository_path(&format!("payload.delete[{index}]"), path)
            .map_err(|err| invalid(&err.field, &err.reason))?;
    }

    Ok(CommitSpec {
        tenant: envelope.tenant_id.clone(),
        repository: command.repository.clone(),
        branch: short_branch(&command.branch).to_owned(),
        base_branch: command.base_branch.as_deref().map(short_branch).map(str::to_owned),
        message: command.message.clone(),
        author,
        date: envelope.occurred_at,
        files,
        delete: command.delete.clone(),
    })
}

#[async_trait]
impl<P: CommitWriter> Consumer for Commit<P> {
    fn name(&self) -> ConsumerName {
        NAME
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::exponential(5)
    }

    async fn handle(&self, inbound: Inbound<'_>) -> Result<Outcome, HandlerError> {
        let Message::CreateCommit(command) = inbound.message else {
            return Err(UnexpectedMessage::handler_error(NAME, inbound.message));
        };
        let spec = commit_spec(inbound.envelope, command)?;
        let result = self.writer.commit(&spec).await.inspect_err(|err| {
            tracing::warn!(
                tenant = %spec.tenant,
                repository = %spec.repository,
                branch = %spec.branch,
                retryable = err.is_retryable(),
                error = %err,
                "commit failed"
            );
        })?;
        tracing::info!(
            tenant = %spec.tenant,
            repository = %spec.repository,
            branch = %spec.branch,
            commit = %result.commit_sha,
            files_changed = result.files_changed,
            no_op = result.no_op,
            "commit written"
        );
        Ok(Outcome::send([Message::from(CommitCreated {
            repository: command.repository.clone(),
            repository_id: result.repository_id,
            branch: spec.branch,
            commit_sha: result.commit_sha,
            tree_sha: result.tree_sha,
            parent_sha: result.parent_sha,
            files_changed: result.files_changed,
            no_op: result.no_op,
            pull_request_target: command.pull_request_target.clone(),
        })]))
    }
}
