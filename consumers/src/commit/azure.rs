//! The Azure DevOps adapter: commits are pushes to Azure Repos. The writer
//! is the delivery layer's ([`crate::delivery::git::commit::azure`]),
//! shared with the other consumers that commit files.

pub use crate::delivery::git::commit::azure::{AzureCommitWriter, MAX_ATTEMPTS};
