//! The pipeline file: the Azure Pipelines YAML subset the runner reads
//! (steps at the top, under `jobs`, or under `stages` → `jobs`; variables
//! as a mapping or a list; step conditions).

use std::io::ErrorKind;
use std::path::Path;
use std::time::Duration;

use bosun_contracts::validate;
use yaml_rust2::{Yaml, YamlLoader};

use super::step_error::PipelineFileError;

/// A parsed pipeline: variables and jobs of steps, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pipeline {
    pub(crate) variables: Vec<(String, String)>,
    pub(crate) jobs: Vec<Job>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    pub(crate) name: String,
    pub(crate) variables: Vec<(String, String)>,
    pub(crate) steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) name: String,
    pub(super) kind: StepKind,
    pub(super) condition: Condition,
    pub(super) working_directory: Option<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) timeout: Option<Duration>,
    pub(super) enabled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shell {
    Sh,
    Bash,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StepKind {
    Script {
        body: String,
        shell: Shell,
    },
    Checkout(String),
    Task {
        task: String,
        inputs: Vec<(String, String)>,
    },
}

/// A step's `condition:`, the forms the local runner understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Condition {
    Succeeded,
    SucceededOrFailed,
    Always,
    Failed,
    Never,
    Other(String),
}

impl Condition {
    pub(super) fn parse(text: &str) -> Self {
        let compact: String = text
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        match compact.as_str() {
            "" | "succeeded()" => Self::Succeeded,
            "succeededorfailed()" => Self::SucceededOrFailed,
            "always()" | "true" => Self::Always,
            "failed()" => Self::Failed,
            "false" => Self::Never,
            _ => Self::Other(text.to_owned()),
        }
    }

    /// Whether the step runs, given whether an earlier step failed.
    pub(super) fn allows(&self, failed: bool) -> bool {
        match self {
            Self::Succeeded | Self::Other(_) => !failed,
            Self::SucceededOrFailed | Self::Always => true,
            Self::Failed => failed,
            Self::Never => false,
        }
    }

    pub(super) fn text(&self) -> &str {
        match self {
            Self::Succeeded => "succeeded()",
            Self::SucceededOrFailed => "succeededOrFailed()",
            Self::Always => "always()",
            Self::Failed => "failed()",
            Self::Never => "false",
            Self::Other(text) => text,
        }
    }
}

pub(super) async fn read_pipeline(sources: &Path, pipeline_path: &str) -> Result<Pipeline, PipelineFileError> {
    validate::repository_path("pipelinePath", pipeline_path).map_err(|err| PipelineFileError::Invalid(err.reason))?;
    let path = sources.join(pipeline_path);
    let text = match tokio::fs::read_to_string(&path).await {
        Ok(text) => text,
        Err(err) if err.kind() == ErrorKind::NotFound => return Err(PipelineFileError::NotInCommit),
        Err(err) => return Err(PipelineFileError::Read(err)),
    };
    parse_pipeline(&text)
}

/// Parses an Azure Pipelines YAML document.
pub(crate) fn parse_pipeline(text: &str) -> Result<Pipeline, PipelineFileError> {
    let documents = YamlLoader::load_from_str(text).map_err(PipelineFileError::Yaml)?;
    let document = documents
        .first()
        .ok_or(PipelineFileError::Invalid("the file is empty".to_owned()))?;
    parse_document(document).map_err(PipelineFileError::Invalid)
}

/// The pipeline a YAML document describes; the error says where it is
/// not one the runner understands.
fn parse_document(document: &Yaml) -> Result<Pipeline, String> {
    if document.as_hash().is_none() {
        return Err("the document is not a mapping".to_owned());
    }
    if !document["extends"].is_badvalue() {
        return Err("`extends` templates are not supported by the local runner".to_owned());
    }
    let variables = parse_variables(&document["variables"], "variables")?;
    let mut jobs = Vec::new();
    if !document["steps"].is_badvalue() {
        jobs.push(parse_job(document, "Job", "")?);
    } else if let Some(list) = document["jobs"].as_vec() {
        for (index, job) in list.iter().enumerate() {
            jobs.push(parse_job(
                job,
                &format!("Job {}", index + 1),
                &format!("jobs[{index}]."),
            )?);
        }
    } else if let Some(stages) = document["stages"].as_vec() {
        for (stage_index, stage) in stages.iter().enumerate() {
            let list = stage["jobs"]
                .as_vec()
                .ok_or_else(|| format!("stages[{stage_index}]: a stage needs `jobs`"))?;
            for (index, job) in list.iter().enumerate() {
                let prefix = format!("stages[{stage_index}].jobs[{index}].");
                jobs.push(parse_job(job, &format!("Job {}", jobs.len() + 1), &prefix)?);
            }
        }
    } else {
        return Err("the pipeline has no `steps`, `jobs` or `stages`".to_owned());
    }
    Ok(Pipeline { variables, jobs })
}

pub(super) fn parse_job(job: &Yaml, default_name: &str, prefix: &str) -> Result<Job, String> {
    if !job["template"].is_badvalue() {
        return Err(format!(
            "{prefix}template: templates are not supported by the local runner"
        ));
    }
    let name = scalar(&job["displayName"])
        .or_else(|| scalar(&job["job"]))
        .or_else(|| scalar(&job["deployment"]))
        .unwrap_or_else(|| default_name.to_owned());
    let variables = parse_variables(&job["variables"], &format!("{prefix}variables"))?;
    let steps = match &job["steps"] {
        Yaml::Array(steps) => steps
            .iter()
            .enumerate()
            .map(|(index, step)| parse_step(step, &format!("{prefix}steps[{index}]")))
            .collect::<Result<Vec<_>, _>>()?,
        Yaml::Null | Yaml::BadValue => Vec::new(),
        _ => return Err(format!("{prefix}steps: must be a list")),
    };
    Ok(Job { name, variables, steps })
}

pub(super) fn parse_variables(node: &Yaml, field: &str) -> Result<Vec<(String, String)>, String> {
    match node {
        Yaml::BadValue | Yaml::Null => Ok(Vec::new()),
        Yaml::Hash(map) => map
            .iter()
            .map(|(key, value)| {
                let name = scalar(key).ok_or_else(|| format!("{field}: a name is not text"))?;
                Ok((name, scalar(value).unwrap_or_default()))
            })
            .collect(),
        Yaml::Array(list) => {
            let mut variables = Vec::new();
            for (index, entry) in list.iter().enumerate() {
                if !entry["group"].is_badvalue() || !entry["template"].is_badvalue() {
                    return Err(format!(
                        "{field}[{index}]: variable groups and templates are not supported by the local runner"
                    ));
                }
                let name = scalar(&entry["name"]).ok_or_else(|| format!("{field}[{index}]: `name` is missing"))?;
                variables.push((name, scalar(&entry["value"]).unwrap_or_default()));
            }
            Ok(variables)
        }
        _ => Err(format!("{field}: must be a mapping or a list")),
    }
}

pub(super) fn parse_step(step: &Yaml, field: &str) -> Result<Step, String> {
    if step.as_hash().is_none() {
        return Err(format!("{field}: a step must be a mapping"));
    }
    if !step["template"].is_badvalue() {
        return Err(format!("{field}: templates are not supported by the local runner"));
    }
    let text = |key: &str| scalar(&step[key]);
    let (kind, default_name) = if let Some(body) = text("script") {
        (StepKind::Script { body, shell: Shell::Sh }, "CmdLine".to_owned())
    } else if let Some(body) = text("bash") {
        (
            StepKind::Script {
                body,
                shell: Shell::Bash,
            },
            "Bash".to_owned(),
        )
    } else if let Some(repository) = text("checkout") {
        (StepKind::Checkout(repository), "Checkout".to_owned())
    } else if let Some(task) = text("task") {
        let inputs = match &step["inputs"] {
            Yaml::Hash(map) => map
                .iter()
                .filter_map(|(key, value)| Some((scalar(key)?, scalar(value).unwrap_or_default())))
                .collect(),
            Yaml::BadValue | Yaml::Null => Vec::new(),
            _ => return Err(format!("{field}.inputs: must be a mapping")),
        };
        let name = task.split('@').next().unwrap_or(&task).to_owned();
        (StepKind::Task { task, inputs }, name)
    } else if let Some(path) = text("publish") {
        let mut inputs = vec![("targetPath".to_owned(), path)];
        if let Some(artifact) = text("artifact") {
            inputs.push(("artifact".to_owned(), artifact));
        }
        (
            StepKind::Task {
                task: "PublishPipelineArtifact@1".to_owned(),
                inputs,
            },
            "PublishPipelineArtifact".to_owned(),
        )
    } else {
        return Err(format!(
            "{field}: a step needs one of `script`, `bash`, `checkout`, `task` or `publish`"
        ));
    };
    let env = match &step["env"] {
        Yaml::Hash(map) => map
            .iter()
            .filter_map(|(key, value)| Some((scalar(key)?, scalar(value).unwrap_or_default())))
            .collect(),
        Yaml::BadValue | Yaml::Null => Vec::new(),
        _ => return Err(format!("{field}.env: must be a mapping")),
    };
    let timeout = match &step["timeoutInMinutes"] {
        Yaml::Integer(minutes) if *minutes > 0 => Some(Duration::from_secs(u64::try_from(*minutes).unwrap_or(0) * 60)),
        Yaml::Integer(_) | Yaml::BadValue | Yaml::Null => None,
        _ => return Err(format!("{field}.timeoutInMinutes: must be a whole number")),
    };
    Ok(Step {
        name: text("displayName").or_else(|| text("name")).unwrap_or(default_name),
        kind,
        condition: text("condition")
            .map(|c| Condition::parse(&c))
            .unwrap_or(Condition::Succeeded),
        working_directory: text("workingDirectory"),
        env,
        timeout,
        enabled: step["enabled"].as_bool().unwrap_or(true),
    })
}

/// A scalar as text (`true`, `42` and `1.5` included); `None` for
/// mappings, lists and missing keys.
pub(super) fn scalar(node: &Yaml) -> Option<String> {
    match node {
        Yaml::String(text) | Yaml::Real(text) => Some(text.clone()),
        Yaml::Integer(number) => Some(number.to_string()),
        Yaml::Boolean(flag) => Some(flag.to_string()),
        Yaml::Null => Some(String::new()),
        _ => None,
    }
}
