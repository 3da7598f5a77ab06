//! Pipeline variables: the ones an agent predefines, `$(Name)` macros and
//! their environment-variable names.

use std::collections::BTreeMap;
use std::path::Path;

use super::record::RunRecord;
use super::workspace::Workspace;

/// Pipeline variables: case-insensitive names, `$(Name)` macros.
#[derive(Debug, Clone, Default)]
pub(super) struct Variables {
    /// Lowercased name → (name as written, value), in name order.
    pub(super) values: BTreeMap<String, (String, String)>,
}

impl Variables {
    /// The variables an Azure Pipelines agent defines for a job.
    pub(super) fn predefined(record: &RunRecord, workspace: &Workspace, root: &Path, repository_url: &str) -> Self {
        let path = |path: &Path| path.display().to_string();
        let branch_name = record.branch.rsplit('/').next().unwrap_or(&record.branch).to_owned();
        let os = match std::env::consts::OS {
            "linux" => "Linux",
            "macos" => "Darwin",
            "windows" => "Windows_NT",
            other => other,
        };
        let arch = match std::env::consts::ARCH {
            "x86_64" => "X64",
            "aarch64" => "ARM64",
            "x86" => "X86",
            other => other,
        };
        let mut variables = Self::default();
        for (name, value) in [
            ("Agent.BuildDirectory", path(&workspace.root)),
            ("Agent.HomeDirectory", path(root)),
            ("Agent.Name", "bosun-local".to_owned()),
            ("Agent.OS", os.to_owned()),
            ("Agent.OSArchitecture", arch.to_owned()),
            ("Agent.TempDirectory", path(&workspace.temp)),
            ("Agent.WorkFolder", path(&root.join("work"))),
            ("Build.ArtifactStagingDirectory", path(&workspace.staging)),
            ("Build.BinariesDirectory", path(&workspace.binaries)),
            ("Build.BuildId", record.run_id.clone()),
            ("Build.BuildNumber", record.run_id.clone()),
            ("Build.DefinitionName", record.pipeline_id.clone()),
            ("Build.Reason", "Manual".to_owned()),
            ("Build.Repository.LocalPath", path(&workspace.sources)),
            ("Build.Repository.Name", record.repository.clone()),
            ("Build.Repository.Provider", "TfsGit".to_owned()),
            ("Build.Repository.Uri", repository_url.to_owned()),
            ("Build.SourceBranch", format!("refs/heads/{}", record.branch)),
            ("Build.SourceBranchName", branch_name),
            ("Build.SourceVersion", record.commit_sha.clone()),
            ("Build.SourcesDirectory", path(&workspace.sources)),
            ("Build.StagingDirectory", path(&workspace.staging)),
            ("Common.TestResultsDirectory", path(&workspace.test_results)),
            ("Pipeline.Workspace", path(&workspace.root)),
            ("System.DefaultWorkingDirectory", path(&workspace.sources)),
            ("System.DefinitionId", record.pipeline_id.clone()),
            ("System.JobAttempt", record.attempt.to_string()),
            ("System.TeamProject", record.tenant.clone()),
            ("TF_BUILD", "True".to_owned()),
        ] {
            variables.set(name, value);
        }
        variables
    }

    pub(super) fn set(&mut self, name: &str, value: String) {
        self.values.insert(name.to_ascii_lowercase(), (name.to_owned(), value));
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(&name.to_ascii_lowercase())
            .map(|(_, value)| value.as_str())
    }

    /// Replaces `$(Name)` macros of known variables; unknown ones are left
    /// as written (as Azure Pipelines does).
    pub(super) fn expand(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let replaced = after.find(')').and_then(|end| {
                let name = &after[..end];
                let valid = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
                if valid {
                    self.get(name).map(|value| (value, end))
                } else {
                    None
                }
            });
            match replaced {
                Some((value, end)) => {
                    out.push_str(value);
                    rest = &after[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Every variable as an environment variable, the Azure way:
    /// upper-cased, `.` and spaces turned into `_`.
    pub(super) fn environment(&self) -> impl Iterator<Item = (String, &str)> {
        self.values.values().map(|(name, value)| {
            let name: String = name
                .chars()
                .map(|c| {
                    if c == '.' || c == ' ' {
                        '_'
                    } else {
                        c.to_ascii_uppercase()
                    }
                })
                .collect();
            (name, value.as_str())
        })
    }
}
