//! The embedded adapter: repositories are bare Git repositories on this
//! machine, under `<root>/<tenant>/<project>/<name>.git` (see
//! [`crate::delivery::git`]).
//!
//! The project defaults to the tenant. A name is unique per tenant: asking
//! for an existing name returns that repository (`created: false`), and
//! naming a different project than the one it lives in is refused.
//! The description goes to the repository's `description` file; the
//! minimum reviewer count to `bosun.minimumReviewers` in its config.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bosun_contracts::messages::RepositoryRef;

use super::port::{ProvisionError, ProvisionedRepository, RepositoryHost, RepositorySpec};
use crate::delivery::git::{LocalGitError, LocalGitHost, LocalRepository, NewRepository};

/// Provisions bare repositories with the local Git host.
#[derive(Debug, Clone)]
pub struct LocalRepositoryHost {
    host: Arc<LocalGitHost>,
}

impl LocalRepositoryHost {
    /// Keeps repositories under `root` (the runtime passes `<data dir>/git`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self::with_host(Arc::new(LocalGitHost::new(root)))
    }

    /// Shares a Git host with other local adapters (e.g. the commit
    /// consumer's), so provisioning is serialised across them.
    pub fn with_host(host: Arc<LocalGitHost>) -> Self {
        Self { host }
    }

    /// The Git host.
    pub fn git_host(&self) -> &Arc<LocalGitHost> {
        &self.host
    }
}

/// The message-level reference to a local repository.
pub(crate) fn repository_ref(repository: &LocalRepository) -> RepositoryRef {
    RepositoryRef {
        id: repository.id.clone(),
        name: repository.name.clone(),
        project: repository.project.clone(),
        url: repository.url(),
        default_branch: repository.default_branch.clone(),
    }
}

impl From<LocalGitError> for ProvisionError {
    fn from(err: LocalGitError) -> Self {
        if err.is_invalid_input() {
            Self::Invalid(err.to_string())
        } else {
            Self::Unavailable(Box::new(err))
        }
    }
}

#[async_trait]
impl RepositoryHost for LocalRepositoryHost {
    async fn provision(&self, spec: &RepositorySpec) -> Result<ProvisionedRepository, ProvisionError> {
        let project = spec.project.as_deref().unwrap_or(&spec.tenant);
        let (repository, created) = self
            .host
            .find_or_create(NewRepository {
                tenant: &spec.tenant,
                project,
                name: &spec.name,
                default_branch: &spec.default_branch,
                description: spec.description.as_deref(),
                minimum_reviewers: spec.minimum_reviewers,
            })
            .await?;
        if let Some(requested) = &spec.project
            && *requested != repository.project
        {
            return Err(ProvisionError::NameTaken {
                name: spec.name.clone(),
                existing_project: repository.project,
                requested_project: requested.clone(),
            });
        }
        Ok(ProvisionedRepository {
            repository: repository_ref(&repository),
            created,
        })
    }
}
