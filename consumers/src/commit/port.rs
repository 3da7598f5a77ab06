//! The port the commit handler needs: a Git host that writes files onto a
//! branch as one commit. It is the delivery layer's commit writer
//! ([`crate::delivery::git::commit`]): the same request, trait and error
//! other consumers write their files with.

pub use crate::delivery::git::commit::{
    CommitError, CommitResult, CommitSpec, CommitWriter, DEFAULT_AUTHOR_EMAIL, DEFAULT_AUTHOR_NAME, FileWrite,
};
