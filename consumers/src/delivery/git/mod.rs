//! The Git host pieces: the embedded Git host shared by the local adapters
//! of the consumers that keep repositories (repository provisioning,
//! commits, pull requests, pipeline generation, GitOps), and writing
//! commits to it or to Azure Repos ([`commit`]).
//!
//! Bare repositories live under `<root>/<tenant>/<project>/<name>.git`; the
//! runtime passes `<data dir>/git` as the root. A repository is found by its
//! natural key, tenant + name, whatever project folder it sits in.
//!
//! All Git work goes through the `git` CLI's plumbing (`hash-object`,
//! `update-index --index-info` on a throw-away index, `write-tree`,
//! `commit-tree`, `update-ref` with compare-and-swap), never a work tree and
//! never libgit2, to keep the build lean. Every command runs with
//! `GIT_DIR` set explicitly, without system or global configuration
//! (`GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL` pointed at the null
//! device), without `HOME`-dependent behaviour, with literal pathspecs and
//! the C locale, so the same input gives the same objects on any machine.
//!
//! A repository's configuration holds bosun's metadata: `bosun.id` (a UUID v5
//! of tenant/project/name, stable across data-dir rebuilds), `bosun.tenant`,
//! `bosun.project`, `bosun.name` and `bosun.minimumReviewers`.
//!
//! - [`host`] — the host: finding and creating repositories
//!   ([`LocalGitHost`]);
//! - [`plumbing`] — the isolated `git` runner one repository's plumbing
//!   goes through ([`Git`]);
//! - [`staging`] — where new repositories are initialised, and the removal
//!   of what a killed process left there;
//! - [`commit`] — writing files onto a branch as one commit, on the local
//!   host or on Azure Repos.

pub mod commit;
pub mod host;
pub mod plumbing;
pub mod staging;

use bosun_contracts::validate::FieldError;

pub use host::{LocalGitHost, LocalRepository, NewRepository, repository_id, short_branch};
pub(crate) use plumbing::check_oid;
pub use plumbing::{Git, GitOutput, Identity, RefUpdate, TreeEntries, TreeEntry};

/// Why the local Git host failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalGitError {
    /// The `git` executable could not be started (not installed, no
    /// resources). Retrying may help once the machine is fixed.
    #[error("could not run `git {command}`: {source}")]
    Spawn {
        /// The git subcommand.
        command: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A git command exited with an error.
    #[error("`git {command}` failed ({status}): {stderr}")]
    Command {
        /// The git subcommand.
        command: String,
        /// Its exit status.
        status: String,
        /// What it wrote to stderr (trimmed, shortened).
        stderr: String,
    },
    /// git printed something we could not read.
    #[error("unexpected output from `git {command}`: {reason}")]
    UnexpectedOutput {
        /// The git subcommand.
        command: String,
        /// What was wrong.
        reason: String,
    },
    /// A file-system operation on the repository root failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A tenant, project, repository, branch or path is not acceptable as a
    /// path or ref component. Retrying cannot help.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// Which input.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl LocalGitError {
    /// Whether the error comes from the input (retrying cannot help) rather
    /// than from the machine.
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Self::Invalid { .. })
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<FieldError> for LocalGitError {
    fn from(err: FieldError) -> Self {
        Self::Invalid {
            field: err.field,
            reason: err.reason,
        }
    }
}
