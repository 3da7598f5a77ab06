//! The embedded adapter: commits into the local Git host's bare
//! repositories with git plumbing, never a work tree. The writer is the
//! delivery layer's ([`crate::delivery::git::commit::local`]), shared with
//! the other consumers that commit files.

pub use crate::delivery::git::commit::local::{LocalCommitWriter, MAX_ATTEMPTS};
