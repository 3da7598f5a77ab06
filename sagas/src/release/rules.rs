//! Who may approve an environment, and how many must: a tenant's
//! [`ApprovalPolicy`] (a document stored in versions, see README "Approval
//! policies"; it also holds the promotion windows,
//! [`PromotionWindow`](super::PromotionWindow), and holds,
//! [`Hold`](super::Hold)), and the checks a person's approval goes through
//! before it counts ([`ApprovalPolicy::check`]).
//!
//! Every approval names the identities its sender answers to (the front
//! door stamps them: `key:<id>` and the key's sponsor for an API key,
//! `cli:<operator>` for the command line). The rules, each named in a
//! refusal ([`Rule`]):
//!
//! - `requester-cannot-approve`: none of them may be an identity of who
//!   requested the release (the principal that fired the delivery, and the
//!   sponsor of its key): an agent and the person it acts for never approve
//!   what the agent asked for. This rule holds under every policy, the
//!   default one included.
//! - `approver-group`: where the environment names approver groups, one of
//!   the identities must be a member of one of them.
//! - `comment-pattern`: where the environment names a pattern (a change
//!   ticket, say `^CHG-[0-9]+`), the approval's comment must match it.
//! - `required-approvals`: the environment is approved once that many
//!   distinct people approved (two approvals sharing an identity are one
//!   person's); approvals older than `expiresAfterSeconds` no longer count.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bosun_contracts::validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::verification::Verification;
use super::windows::{Hold, PromotionWindow};

/// The most approvals an environment can require.
pub const MAX_REQUIRED_APPROVALS: u32 = 16;

/// The longest comment pattern, in characters.
pub const MAX_PATTERN_CHARS: usize = 256;

/// The longest an approval can be set to count: 366 days, in seconds.
pub const MAX_EXPIRY_SECONDS: u64 = 366 * 24 * 3600;

/// The most members a group can have.
pub const MAX_GROUP_MEMBERS: usize = 256;

/// The most compiled size of a comment pattern (the `regex` crate's own
/// limit is 10 MiB; a policy's pattern needs far less).
const PATTERN_SIZE_LIMIT: usize = 64 * 1024;

/// A tenant's approval policy: named groups of identities, and per
/// environment who may approve and how many must. An environment it does
/// not name needs one approval by anyone holding the right to approve it
/// (`releases:approve`), never by its requester.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalPolicy {
    /// Groups by name: the identities (`key:<id>`, `cli:<operator>`) that
    /// belong to each.
    /// Also checked by bosun, beyond this schema: a group's name is an
    /// identifier (letters, digits, `.`, `_`, `-`), and it has 1 to 256
    /// members, each named once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, Vec<String>>,
    /// The rule of each environment that has one.
    /// Also checked by bosun, beyond this schema: each name is an
    /// environment name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environments: BTreeMap<String, ApprovalRule>,
    /// When promotions may happen: allow and deny windows (at most 32).
    /// Also checked by bosun, beyond this schema: each window's name is used once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub windows: Vec<PromotionWindow>,
    /// Holds by environment: no promotion there while one is in force.
    /// Also checked by bosun, beyond this schema: each name is an
    /// environment name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub holds: BTreeMap<String, Hold>,
    /// What a release synced in an environment must pass before it counts
    /// as verified there, by environment: soak time, checks, rollback, the
    /// environments it must be verified in first. An environment it does
    /// not name is verified by a healthy sync.
    /// Also checked by bosun, beyond this schema: each name is an environment name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub verification: BTreeMap<String, Verification>,
}

/// Who may approve one environment, and how many must.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRule {
    /// How many distinct people must approve (1 to 16; default 1).
    /// Also checked by bosun, beyond this schema: a whole number, and no
    /// more than the members of `approverGroups` when it names groups.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 16))]
    pub required_approvals: u32,
    /// The groups an approver must belong to (one of them); empty: anyone
    /// with the right.
    /// Also checked by bosun, beyond this schema: each is a group `groups`
    /// defines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approver_groups: Vec<String>,
    /// How long an approval counts, in seconds (at most 366 days): an
    /// approval given earlier than that before the environment's last
    /// approval is needed again.
    /// Also checked by bosun, beyond this schema: a whole number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 31_622_400))]
    pub expires_after_seconds: Option<u64>,
    /// A regular expression the approval's comment must match (e.g. a
    /// change ticket, `^CHG-[0-9]+`); an approval without a comment does
    /// not match.
    /// Also checked by bosun, beyond this schema: it compiles (Rust's
    /// `regex` syntax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub comment_pattern: Option<String>,
}

fn one() -> u32 {
    1
}

impl Default for ApprovalRule {
    fn default() -> Self {
        Self {
            required_approvals: 1,
            approver_groups: Vec::new(),
            expires_after_seconds: None,
            comment_pattern: None,
        }
    }
}

impl ApprovalRule {
    /// How long an approval counts, if the rule limits it.
    pub fn expires_after(&self) -> Option<Duration> {
        self.expires_after_seconds.map(Duration::from_secs)
    }
}

/// The rule an approval did not satisfy, as named in refusals and in the
/// saga's record of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Rule {
    /// The approver is (or acts for) who requested the release.
    #[serde(rename = "requester-cannot-approve")]
    RequesterCannotApprove,
    /// The approver belongs to none of the environment's approver groups.
    #[serde(rename = "approver-group")]
    ApproverGroup,
    /// The comment does not match the environment's pattern.
    #[serde(rename = "comment-pattern")]
    CommentPattern,
}

impl Rule {
    /// The rule's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::RequesterCannotApprove => "requester-cannot-approve",
            Self::ApproverGroup => "approver-group",
            Self::CommentPattern => "comment-pattern",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an approval does not count: the rule, and what it found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused by rule `{rule}`: {reason}")]
pub struct ApprovalRefused {
    /// The rule not satisfied.
    pub rule: Rule,
    /// What it found, for a person.
    pub reason: String,
}

impl ApprovalPolicy {
    /// The rule of `environment` (the default rule when it names none).
    pub fn rule(&self, environment: &str) -> ApprovalRule {
        self.environments.get(environment).cloned().unwrap_or_default()
    }

    /// Reads a policy document (as stored, or as a person submits it):
    /// its fields as this release knows them, then [`ApprovalPolicy::validate`].
    /// The error names the field by its path in the document (empty: the
    /// document itself).
    pub fn from_document(document: &serde_json::Value) -> Result<Self, validate::FieldError> {
        let policy: Self = serde_path_to_error::deserialize(document).map_err(|err| {
            let path = err.path().to_string();
            let field = if path == "." { String::new() } else { path };
            validate::FieldError::new(field, err.inner().to_string())
        })?;
        policy.validate()?;
        Ok(policy)
    }

    /// Whether a promotion to `environment` may happen `at` under the
    /// policy's windows and holds: `None` when it may, else what closes the
    /// gate and when it opens (see [`PromotionWindow`](super::PromotionWindow) and [`Hold`](super::Hold)).
    pub fn promotion_gate(&self, environment: &str, at: time::OffsetDateTime) -> Option<super::Closure> {
        super::windows::gate(&self.windows, &self.holds, environment, at)
    }

    /// Whether this is the default policy (no group, no rule).
    pub fn is_default(&self) -> bool {
        self.groups.is_empty() && self.environments.is_empty() && self.windows.is_empty() && self.holds.is_empty()
    }

    /// Checks one approval of `environment` by someone answering to
    /// `identities`, with `comment`, of a release requested by
    /// `requesters` (identities too; empty when unknown, e.g. a release
    /// planned before bosun recorded requesters). The first rule not
    /// satisfied is returned, in the order of the module documentation.
    pub fn check(
        &self,
        environment: &str,
        identities: &[String],
        comment: Option<&str>,
        requesters: &[String],
    ) -> Result<(), ApprovalRefused> {
        if let Some(shared) = identities.iter().find(|identity| requesters.contains(identity)) {
            return Err(ApprovalRefused {
                rule: Rule::RequesterCannotApprove,
                reason: format!("{shared} requested this release (or sponsors the key that did) and cannot approve it"),
            });
        }
        let rule = self.rule(environment);
        if !rule.approver_groups.is_empty() {
            let member = rule.approver_groups.iter().any(|group| {
                self.groups
                    .get(group)
                    .is_some_and(|members| identities.iter().any(|identity| members.contains(identity)))
            });
            if !member {
                return Err(ApprovalRefused {
                    rule: Rule::ApproverGroup,
                    reason: format!(
                        "{} is in none of the groups that approve {environment} ({})",
                        identities.join(" / "),
                        rule.approver_groups.join(", ")
                    ),
                });
            }
        }
        if let Some(pattern) = &rule.comment_pattern {
            let matched = compile(pattern).is_ok_and(|regex| comment.is_some_and(|comment| regex.is_match(comment)));
            if !matched {
                return Err(ApprovalRefused {
                    rule: Rule::CommentPattern,
                    reason: match comment {
                        Some(_) => format!("the comment does not match `{pattern}`, which {environment} requires"),
                        None => format!("{environment} requires a comment matching `{pattern}`"),
                    },
                });
            }
        }
        Ok(())
    }

    /// Checks the policy: valid group and environment names, groups with
    /// members, rules naming only known groups, a required count between 1
    /// and [`MAX_REQUIRED_APPROVALS`] that the groups can meet, a non-zero
    /// expiry and a pattern that compiles. The error names the field.
    pub fn validate(&self) -> Result<(), validate::FieldError> {
        for (name, members) in &self.groups {
            let field = format!("groups.{name}");
            validate::identifier(&field, name)?;
            if members.is_empty() {
                return Err(validate::FieldError::new(field, "has no member"));
            }
            if members.len() > MAX_GROUP_MEMBERS {
                return Err(validate::FieldError::new(
                    field,
                    format!("has {} members; at most {MAX_GROUP_MEMBERS} are allowed", members.len()),
                ));
            }
            for (index, member) in members.iter().enumerate() {
                validate::text(
                    &format!("{field}[{index}]"),
                    member,
                    bosun_contracts::messages::MAX_APPROVER_CHARS,
                )?;
            }
            validate::unique(&field, members.iter().map(String::as_str))?;
        }
        for (environment, rule) in &self.environments {
            let field = format!("environments.{environment}");
            validate::environment_name(&field, environment)?;
            if !(1..=MAX_REQUIRED_APPROVALS).contains(&rule.required_approvals) {
                return Err(validate::FieldError::new(
                    format!("{field}.requiredApprovals"),
                    format!("must be between 1 and {MAX_REQUIRED_APPROVALS}"),
                ));
            }
            let mut eligible = BTreeSet::new();
            for group in &rule.approver_groups {
                let members = self.groups.get(group).ok_or_else(|| {
                    validate::FieldError::new(
                        format!("{field}.approverGroups"),
                        format!("names group `{group}`, which `groups` does not define"),
                    )
                })?;
                eligible.extend(members.iter().map(String::as_str));
            }
            if !rule.approver_groups.is_empty() && eligible.len() < rule.required_approvals as usize {
                return Err(validate::FieldError::new(
                    format!("{field}.requiredApprovals"),
                    format!(
                        "requires {} approvals but its groups have {} members: no release could ever be approved",
                        rule.required_approvals,
                        eligible.len()
                    ),
                ));
            }
            if rule
                .expires_after_seconds
                .is_some_and(|seconds| !(1..=MAX_EXPIRY_SECONDS).contains(&seconds))
            {
                return Err(validate::FieldError::new(
                    format!("{field}.expiresAfterSeconds"),
                    format!("must be between 1 and {MAX_EXPIRY_SECONDS} (366 days)"),
                ));
            }
            if let Some(pattern) = &rule.comment_pattern {
                let pattern_field = format!("{field}.commentPattern");
                validate::max_chars(&pattern_field, pattern, MAX_PATTERN_CHARS)?;
                compile(pattern).map_err(|err| validate::FieldError::new(pattern_field, err.to_string()))?;
            }
        }
        super::windows::validate(&self.windows, &self.holds)?;
        super::verification::validate_all(&self.verification)
    }
}

fn compile(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(pattern).size_limit(PATTERN_SIZE_LIMIT).build()
}
