//! Commits: `CreateCommit` and `CommitCreated`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// How a file's `content` is encoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContentEncoding {
    /// UTF-8 text.
    #[default]
    Utf8,
    /// Standard base64 (binary files).
    Base64,
}

/// One file of an artifact bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rule::bundle_file_content)]
pub struct BundleFile {
    /// Path inside the repository, `/`-separated.
    #[schemars(transform = rule::repository_path)]
    pub path: String,
    /// File content, encoded as `encoding` says.
    pub content: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub encoding: ContentEncoding,
    /// Whether the file is executable (Git mode 100755).
    #[serde(default)]
    pub executable: bool,
}

/// Who a commit is attributed to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitIdentity {
    /// Display name.
    #[schemars(transform = rule::non_empty)]
    pub name: String,
    /// E-mail address.
    #[schemars(transform = rule::email)]
    pub email: String,
}

/// Write an artifact bundle's files into a branch and commit them. The same
/// resulting tree on the branch is a no-op that returns the existing commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = rule::create_commit_changes)]
pub struct CreateCommit {
    /// Repository name (as provisioned for the same tenant).
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Branch to commit to; created from `baseBranch` when missing.
    #[schemars(transform = rule::branch_name)]
    pub branch: String,
    /// Branch the new branch starts from; the repository's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::branch_name)]
    pub base_branch: Option<String>,
    /// Commit message.
    #[schemars(transform = rule::non_empty)]
    pub message: String,
    /// Author and committer; bosun's own identity when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<GitIdentity>,
    /// Files to add or replace; at least one unless `delete` lists a path.
    pub files: Vec<BundleFile>,
    /// Paths to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::each(rule::repository_path))]
    pub delete: Vec<String>,
    /// When set, a pull request into this branch is opened for the commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::branch_name)]
    pub pull_request_target: Option<String>,
}

impl Validate for CreateCommit {
    fn validate(&self) -> Result<(), FieldError> {
        validate::repository_name("repository", &self.repository)?;
        validate::branch_name("branch", &self.branch)?;
        if let Some(base) = &self.base_branch {
            validate::branch_name("baseBranch", base)?;
        }
        validate::non_empty("message", &self.message)?;
        if let Some(author) = &self.author {
            validate::non_empty("author.name", &author.name)?;
            if !author.email.contains('@') {
                return Err(FieldError::new(
                    "author.email",
                    format!("`{}` is not an e-mail address", author.email),
                ));
            }
        }
        if self.files.is_empty() && self.delete.is_empty() {
            return Err(FieldError::new(
                "files",
                "must list at least one file (or `delete` a path)",
            ));
        }
        for (index, file) in self.files.iter().enumerate() {
            validate::repository_path(&format!("files[{index}].path"), &file.path)?;
            if file.encoding == ContentEncoding::Base64 {
                validate::base64(&format!("files[{index}].content"), &file.content)?;
            }
        }
        for (index, path) in self.delete.iter().enumerate() {
            validate::repository_path(&format!("delete[{index}]"), path)?;
        }
        if let Some(target) = &self.pull_request_target {
            validate::branch_name("pullRequestTarget", target)?;
        }
        Ok(())
    }
}

/// The branch holds the requested tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitCreated {
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Id of the repository on its Git host.
    pub repository_id: String,
    /// The branch committed to.
    #[schemars(transform = rule::branch_name)]
    pub branch: String,
    /// The commit on the branch holding the tree.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// The tree of that commit.
    #[schemars(transform = rule::git_sha)]
    pub tree_sha: String,
    /// The commit's parent, absent for a branch's first commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = rule::git_sha)]
    pub parent_sha: Option<String>,
    /// Number of paths added, changed or deleted (0 for a no-op).
    pub files_changed: u32,
    /// `true` when the branch already had this tree and nothing was written.
    pub no_op: bool,
    /// Pull request target requested by the command, passed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request_target: Option<String>,
}

impl Validate for CommitCreated {
    fn validate(&self) -> Result<(), FieldError> {
        validate::repository_name("repository", &self.repository)?;
        validate::branch_name("branch", &self.branch)?;
        validate::git_sha("commitSha", &self.commit_sha)?;
        validate::git_sha("treeSha", &self.tree_sha)?;
        if let Some(parent) = &self.parent_sha {
            validate::git_sha("parentSha", parent)?;
        }
        Ok(())
    }
}
