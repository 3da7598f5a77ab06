//! The delivery layer: the building blocks the consumers share, below all
//! of them.
//!
//! **The rule:** consumers depend on this layer, and this layer never
//! depends on a consumer — no module here names a consumer's module (not
//! even in a test or a doc link), and a consumer reaches another
//! consumer's work only through what lives here. `consumers/tests/layering.rs`
//! reads the sources and fails when either direction is broken. Something
//! two consumers (or both adapters of one) need moves here; something only
//! one adapter needs stays in its consumer's folder.
//!
//! - [`git`] — the embedded Git host (bare repositories on disk, driven
//!   through the `git` CLI's plumbing), and writing files onto a branch as
//!   one commit on it or on Azure Repos ([`git::commit`]: the spec, the
//!   writer trait, the default author, both writers);
//! - [`archive`] — deterministic tar and ZIP reading and writing;
//! - [`oci`] — OCI image building blocks: a Dockerfile subset and a build
//!   context in, reproducible layers, config and manifest out;
//! - [`azure`] — one Azure HTTP client policy, one retry/`Retry-After`
//!   policy, Entra ID credentials and the Azure DevOps REST client;
//! - [`blob`] — the blob store port (logs, reports, artifacts) and its
//!   filesystem and Azure Blob Storage implementations;
//! - [`pipeline`] — the embedded pipeline runner: runs an Azure Pipelines
//!   YAML's steps in a checkout, like a CI agent;
//! - [`tenant`] — tenant walls: the error of a message naming another
//!   tenant's resource, the blob-key check, and the migration of local
//!   layouts to `<root>/<tenant>/...`;
//! - [`atomic_file`] — files replaced whole (temporary file and rename),
//!   and the removal of the temporaries a killed process left.

pub mod archive;
pub mod atomic_file;
pub mod azure;
pub mod blob;
pub mod git;
pub mod governance;
pub mod oci;
pub mod pipeline;
pub mod tenant;

#[cfg(test)]
pub(crate) mod testing;
