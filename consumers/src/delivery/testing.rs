//! Test fixtures built on the delivery layer, for the tests of any
//! consumer (a consumer's tests never build their fixtures with another
//! consumer's adapters).

use super::git::{LocalGitHost, NewRepository};

/// Creates `tenant`'s repository `name` on the local Git host, in the
/// tenant's own project and with `main` as default branch, as repository
/// provisioning's local adapter does for a `ProvisionRepository` that names
/// no project; says whether this call created it.
pub(crate) async fn provision(host: &LocalGitHost, tenant: &str, name: &str, minimum_reviewers: u32) -> bool {
    let (_, created) = host
        .find_or_create(NewRepository {
            tenant,
            project: tenant,
            name,
            default_branch: "main",
            description: None,
            minimum_reviewers,
        })
        .await
        .expect("provision a repository");
    created
}
