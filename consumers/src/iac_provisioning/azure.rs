//! The cloud adapter: the Pulumi CLI, driving a Pulumi program (e.g. one
//! declaring Azure resources with `azure-native`) for each stack.
//!
//! The program comes from a configured folder or, per plan, from Git
//! (the module's repository at the release's commit, or a configured
//! repository): see [`super::program`]. Every call runs `pulumi` (the
//! configured binary) in the program folder,
//! non-interactively, with the configured environment (backend URL,
//! credentials — never logged) and:
//!
//! `S` is the tenant's Pulumi stack ([`tenant_stack`]): the request's
//! `[organization/][project/]name` with the name written `<tenant>.<name>`
//! (tenant ids hold no `.`, so no two tenants' stacks can meet), so two
//! tenants provisioning the same stack get two Pulumi stacks, two states
//! and two histories.
//!
//! 0. `pulumi stack select --stack S` (without `--create`) tells whether
//!    the tenant's stack exists. When it does not, and the stack of the
//!    request's bare name does (one created before stacks were scoped by
//!    tenant), the request is refused ([`IacError::UnscopedStack`]):
//!    Pulumi records nothing that says whose that stack is, and creating a
//!    second stack beside it would deploy its resources a second time. An
//!    operator gives it to its owner with
//!    `pulumi stack rename --stack <name> <tenant stack>` and replays;
//! 1. `pulumi stack select --create --stack S` — the stack exists;
//! 2. `pulumi stack history --json --stack S` — idempotency on `planId`:
//!    every update bosun runs carries the message `bosun plan <planId>`, so
//!    a succeeded update with that message means the plan was applied: its
//!    `resourceChanges` are replayed and nothing runs. When the newest
//!    update did not succeed (failed or still marked in progress, i.e.
//!    interrupted), the stack is first refreshed from the cloud
//!    (`pulumi refresh --yes --skip-preview`) and a fresh preview is made
//!    (`previewedAfterInterruption`);
//! 3. otherwise drift is detected with `pulumi refresh --preview-only
//!    --json`: resources whose refreshed state differs (modified) or that
//!    are gone (deleted); when there is drift, the preview and the update
//!    run with `--refresh` so the update puts them back;
//! 4. `pulumi preview --json [--save-plan <file>]` — the preview, always,
//!    with the request's configuration as `--config key=value`;
//! 5. unless `previewOnly`: `pulumi up --yes --json [--plan <file>]` — the
//!    update constrained to the previewed plan when update plans are on
//!    ([`PulumiConfig::use_update_plans`]); a failed `up` is
//!    [`IacError::ApplyInterrupted`] (the retry refreshes and previews
//!    again);
//! 6. `pulumi stack output --json --stack S` — outputs, secrets shown as
//!    `"[secret]"` (Pulumi's default).
//!
//! `ProvisionInfrastructure.resources` is ignored: the Pulumi program
//! declares its resources. Tests drive a fake `pulumi` script that records
//! its arguments and prints JSON shaped like Pulumi's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{DriftKind, DriftedResource, ResourceChanges};
use bosun_contracts::validate;
use serde::Deserialize;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::process::Command;

use super::port::{IacError, InfrastructureEngine, ProvisionReport, ProvisionRequest};
use super::program::ProgramSource;
use crate::delivery::blob::sha256_hex;

/// Longest stderr excerpt kept in an error.
const MAX_STDERR: usize = 2000;

/// How to run the Pulumi CLI.
#[derive(Clone)]
pub struct PulumiConfig {
    /// The `pulumi` executable (a path, or a name looked up on `PATH`).
    pub binary: PathBuf,
    /// Where the Pulumi program (the folder holding `Pulumi.yaml`, where
    /// the CLI runs) comes from: a folder, or Git per plan.
    pub program: ProgramSource,
    /// Folder for saved update plans, and for the programs fetched from
    /// Git (`programs/<tenant>.<planId>`, removed after each plan).
    pub work_dir: PathBuf,
    /// Environment given to the CLI (e.g. `PULUMI_BACKEND_URL`,
    /// `PULUMI_CONFIG_PASSPHRASE`, `ARM_*`); values are never logged.
    pub environment: BTreeMap<String, String>,
    /// Save the preview as an update plan and constrain `up` to it.
    pub use_update_plans: bool,
    /// Longest time one CLI call may take.
    pub command_timeout: Duration,
}

impl std::fmt::Debug for PulumiConfig {
    /// Shows environment variable names, never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PulumiConfig")
            .field("binary", &self.binary)
            .field("program", &self.program)
            .field("work_dir", &self.work_dir)
            .field("environment", &self.environment.keys().collect::<Vec<_>>())
            .field("use_update_plans", &self.use_update_plans)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

impl PulumiConfig {
    /// `pulumi` on `PATH` for the program in `program_dir`, plans saved in
    /// `work_dir`, update plans on, 30 minutes per call.
    pub fn new(program_dir: impl Into<PathBuf>, work_dir: impl Into<PathBuf>) -> Self {
        Self::with_program(ProgramSource::Folder(program_dir.into()), work_dir)
    }

    /// The same, for a program from `program` (e.g. Git).
    pub fn with_program(program: ProgramSource, work_dir: impl Into<PathBuf>) -> Self {
        Self {
            binary: PathBuf::from("pulumi"),
            program,
            work_dir: work_dir.into(),
            environment: BTreeMap::new(),
            use_update_plans: true,
            command_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// Provisions stacks with the Pulumi CLI.
#[derive(Debug, Clone)]
pub struct PulumiEngine {
    config: PulumiConfig,
}

/// One step of `pulumi preview/up/refresh --json`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PulumiStep {
    op: String,
    urn: String,
    old_state: Option<PulumiResourceState>,
    new_state: Option<PulumiResourceState>,
    diff_reasons: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PulumiResourceState {
    #[serde(rename = "type")]
    resource_type: String,
    outputs: BTreeMap<String, Value>,
}

/// The JSON digest `preview`, `up` and `refresh` print with `--json`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PulumiDigest {
    steps: Vec<PulumiStep>,
    change_summary: BTreeMap<String, u32>,
}

/// One entry of `pulumi stack history --json`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct HistoryEntry {
    kind: String,
    message: String,
    result: String,
    end_time: Option<String>,
    resource_changes: Option<BTreeMap<String, u32>>,
}

fn changes_of(summary: &BTreeMap<String, u32>) -> ResourceChanges {
    let get = |key: &str| summary.get(key).copied().unwrap_or(0);
    ResourceChanges {
        created: get("create"),
        updated: get("update"),
        replaced: get("replace"),
        deleted: get("delete"),
        unchanged: get("same"),
    }
}

/// The logical name and type of a URN,
/// `urn:pulumi:<stack>::<project>::<type>::<name>`.
fn urn_parts(urn: &str) -> (String, String) {
    let mut parts = urn.rsplitn(3, "::");
    let name = parts.next().unwrap_or(urn).to_owned();
    let resource_type = parts
        .next()
        .map(|t| t.rsplit('$').next().unwrap_or(t).to_owned())
        .unwrap_or_default();
    (resource_type, name)
}

/// Drifted resources in a `refresh --preview-only --json` digest.
fn drift_of(digest: &PulumiDigest) -> Vec<DriftedResource> {
    let mut drifted = Vec::new();
    for step in &digest.steps {
        if step.op == "same" || step.urn.contains("pulumi:pulumi:Stack") || step.urn.contains("pulumi:providers:") {
            continue;
        }
        let (urn_type, name) = urn_parts(&step.urn);
        let resource_type = step
            .old_state
            .as_ref()
            .map(|state| state.resource_type.clone())
            .filter(|t| !t.is_empty())
            .unwrap_or(urn_type);
        let gone = step.op == "delete" || (step.old_state.is_some() && step.new_state.is_none());
        if gone {
            drifted.push(DriftedResource {
                urn: step.urn.clone(),
                resource_type,
                name,
                drift: DriftKind::Deleted,
                properties: Vec::new(),
            });
            continue;
        }
        let mut properties = step.diff_reasons.clone();
        if properties.is_empty()
            && let (Some(old), Some(new)) = (&step.old_state, &step.new_state)
        {
            properties = old
                .outputs
                .keys()
                .chain(new.outputs.keys())
                .filter(|key| old.outputs.get(*key) != new.outputs.get(*key))
                .cloned()
                .collect();
        }
        properties.sort();
        properties.dedup();
        if !properties.is_empty() || step.op == "update" {
            drifted.push(DriftedResource {
                urn: step.urn.clone(),
                resource_type,
                name,
                drift: DriftKind::Modified,
                properties,
            });
        }
    }
    drifted
}

/// The Pulumi stack of `tenant`'s stack `stack` (`[organization/][project/]name`):
/// the same with the name written `<tenant>.<name>`.
pub fn tenant_stack(tenant: &str, stack: &str) -> String {
    match stack.rsplit_once('/') {
        Some((scope, name)) => format!("{scope}/{tenant}.{name}"),
        None => format!("{tenant}.{stack}"),
    }
}

/// The message marking bosun's updates of a plan.
fn plan_message(plan_id: &str) -> String {
    format!("bosun plan {plan_id}")
}

fn config_value(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

impl PulumiEngine {
    /// An engine running the configured CLI. Fails when the program folder
    /// is not configured, or the program's path in Git is not a relative
    /// path.
    pub fn new(config: &PulumiConfig) -> Result<Self, IacError> {
        match &config.program {
            ProgramSource::Folder(dir) if dir.as_os_str().is_empty() => {
                return Err(IacError::Invalid(
                    "the Pulumi program folder is not configured".to_owned(),
                ));
            }
            ProgramSource::Folder(_) => {}
            ProgramSource::Git(git) => git.check()?,
        }
        if config.binary.as_os_str().is_empty() {
            return Err(IacError::Invalid("the pulumi binary is not configured".to_owned()));
        }
        Ok(Self { config: config.clone() })
    }

    /// Runs `pulumi <args>` and returns its stdout.
    async fn pulumi(&self, dir: &Path, args: &[String]) -> Result<String, IacError> {
        let mut command = Command::new(&self.config.binary);
        command
            .args(args)
            .arg("--non-interactive")
            .current_dir(dir)
            .env("PULUMI_SKIP_UPDATE_CHECK", "true")
            .envs(&self.config.environment)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let operation = args.iter().take(2).cloned().collect::<Vec<_>>().join(" ");
        tracing::debug!(%operation, "running pulumi");
        let output = tokio::time::timeout(self.config.command_timeout, command.output())
            .await
            .map_err(|_| {
                IacError::Unavailable(
                    format!(
                        "`pulumi {operation}` did not finish within {:?}",
                        self.config.command_timeout
                    )
                    .into(),
                )
            })?
            .map_err(|source| IacError::Io {
                context: "could not run pulumi".to_owned(),
                source,
            })?;
        if output.status.success() {
            return String::from_utf8(output.stdout)
                .map_err(|_| IacError::Unavailable(format!("`pulumi {operation}` printed non-UTF-8 output").into()));
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let mut stderr = stderr.trim().to_owned();
        if stderr.len() > MAX_STDERR {
            let mut cut = MAX_STDERR;
            while !stderr.is_char_boundary(cut) {
                cut -= 1;
            }
            stderr.truncate(cut);
        }
        let detail = format!("`pulumi {operation}` failed ({}): {stderr}", output.status);
        if stderr.contains("conflict") && stderr.contains("update") && stderr.contains("in progress") {
            // Another update holds the stack's lock.
            return Err(IacError::Throttled {
                after: Duration::from_secs(30),
                source: detail.into(),
            });
        }
        Err(IacError::Unavailable(detail.into()))
    }

    fn parse<T: for<'de> Deserialize<'de>>(operation: &str, text: &str) -> Result<T, IacError> {
        serde_json::from_str(text.trim()).map_err(|source| IacError::Json {
            context: format!("`pulumi {operation}` printed unexpected JSON"),
            source,
        })
    }

    fn config_args(request: &ProvisionRequest) -> Vec<String> {
        request
            .config
            .iter()
            .flat_map(|(key, value)| ["--config".to_owned(), format!("{key}={}", config_value(value))])
            .collect()
    }

    /// Whether a stack exists (selecting it, without creating it).
    async fn stack_exists(&self, dir: &Path, stack: &str) -> Result<bool, IacError> {
        match self
            .pulumi(dir, &["stack".into(), "select".into(), "--stack".into(), stack.into()])
            .await
        {
            Ok(_) => Ok(true),
            Err(IacError::Unavailable(err)) if err.to_string().contains("no stack named") => Ok(false),
            Err(err) => Err(err),
        }
    }

    async fn outputs(&self, dir: &Path, stack: &str) -> Result<BTreeMap<String, Value>, IacError> {
        let text = self
            .pulumi(
                dir,
                &[
                    "stack".into(),
                    "output".into(),
                    "--json".into(),
                    "--stack".into(),
                    stack.into(),
                ],
            )
            .await?;
        let outputs: BTreeMap<String, Value> = Self::parse("stack output", &text)?;
        // Output names must be identifiers on the wire.
        Ok(outputs
            .into_iter()
            .filter(|(name, _)| validate::identifier("output", name).is_ok())
            .collect())
    }
}

#[async_trait]
impl InfrastructureEngine for PulumiEngine {
    async fn provision(&self, request: &ProvisionRequest) -> Result<ProvisionReport, IacError> {
        validate::stack_name("stack", &request.stack)?;
        validate::identifier("planId", &request.plan_id)?;
        validate::tenant_id("tenant", &request.tenant)?;
        match &self.config.program {
            ProgramSource::Folder(dir) => self.provision_in(dir, request).await,
            ProgramSource::Git(git) => {
                // Removed when dropped, whatever the outcome.
                let checkout = git
                    .checkout(request, &self.config.work_dir, self.config.command_timeout)
                    .await?;
                self.provision_in(&checkout.program(), request).await
            }
        }
    }
}

impl PulumiEngine {
    /// Provisions `request` with the program in `dir`.
    async fn provision_in(&self, dir: &Path, request: &ProvisionRequest) -> Result<ProvisionReport, IacError> {
        let stack = tenant_stack(&request.tenant, &request.stack);
        let message = plan_message(&request.plan_id);
        if !self.stack_exists(dir, &stack).await? {
            if self.stack_exists(dir, &request.stack).await? {
                return Err(IacError::UnscopedStack {
                    stack: request.stack.clone(),
                    tenant_stack: stack,
                });
            }
            self.pulumi(
                dir,
                &[
                    "stack".into(),
                    "select".into(),
                    "--create".into(),
                    "--stack".into(),
                    stack.clone(),
                ],
            )
            .await?;
        }

        let text = self
            .pulumi(
                dir,
                &[
                    "stack".into(),
                    "history".into(),
                    "--json".into(),
                    "--stack".into(),
                    stack.clone(),
                ],
            )
            .await?;
        let history: Vec<HistoryEntry> = if text.trim().is_empty() {
            Vec::new()
        } else {
            Self::parse("stack history", &text)?
        };
        if let Some(applied) = history
            .iter()
            .find(|entry| entry.kind == "update" && entry.message == message && entry.result == "succeeded")
        {
            tracing::info!(tenant = %request.tenant, plan_id = %request.plan_id, %stack, "plan already applied; replaying its result");
            let provisioned_at = applied
                .end_time
                .as_deref()
                .and_then(|end| OffsetDateTime::parse(end, &Rfc3339).ok())
                .unwrap_or_else(OffsetDateTime::now_utc);
            return Ok(ProvisionReport {
                changes: applied.resource_changes.as_ref().map(changes_of).unwrap_or_default(),
                outputs: self.outputs(dir, &stack).await?,
                provisioned_at,
                preview_hash: String::new(),
                drift: Vec::new(),
                drift_plan_id: None,
                previewed_after_interruption: false,
                replayed: true,
            });
        }
        let interrupted = history
            .iter()
            .find(|entry| entry.kind == "update")
            .is_some_and(|last| last.result != "succeeded");

        let mut drift = Vec::new();
        let mut refresh_flag = Vec::new();
        if interrupted {
            tracing::warn!(
                plan_id = %request.plan_id,
                %stack,
                "the last update did not finish; refreshing from the cloud and previewing again before applying"
            );
            self.pulumi(
                dir,
                &[
                    "refresh".into(),
                    "--yes".into(),
                    "--skip-preview".into(),
                    "--stack".into(),
                    stack.clone(),
                    "--message".into(),
                    format!("{message} (refresh after an interrupted update)"),
                ],
            )
            .await?;
        } else {
            let text = self
                .pulumi(
                    dir,
                    &[
                        "refresh".into(),
                        "--preview-only".into(),
                        "--json".into(),
                        "--stack".into(),
                        stack.clone(),
                    ],
                )
                .await?;
            let digest: PulumiDigest = Self::parse("refresh", &text)?;
            drift = drift_of(&digest);
            if !drift.is_empty() {
                tracing::warn!(%stack, drifted = drift.len(), "resources drifted from the stack's state");
                refresh_flag.push("--refresh".to_owned());
            }
        }
        let drift_plan_id = history
            .iter()
            .find(|entry| entry.kind == "update" && entry.result == "succeeded")
            .and_then(|entry| entry.message.strip_prefix("bosun plan "))
            .map(str::to_owned);

        let plan_file = self
            .config
            .work_dir
            .join(format!("{}-{}.plan.json", stack.replace('/', "+"), request.plan_id));
        let mut preview_args = vec![
            "preview".to_owned(),
            "--json".to_owned(),
            "--stack".to_owned(),
            stack.clone(),
            "--message".to_owned(),
            message.clone(),
        ];
        preview_args.extend(Self::config_args(request));
        preview_args.extend(refresh_flag.iter().cloned());
        if self.config.use_update_plans && !request.preview_only {
            tokio::fs::create_dir_all(&self.config.work_dir)
                .await
                .map_err(|source| IacError::Io {
                    context: "creating the plan folder".to_owned(),
                    source,
                })?;
            preview_args.push(format!("--save-plan={}", plan_file.display()));
        }
        let text = self.pulumi(dir, &preview_args).await?;
        let preview: PulumiDigest = Self::parse("preview", &text)?;
        let listing: Vec<String> = preview
            .steps
            .iter()
            .map(|step| format!("{} {}", step.op, step.urn))
            .collect();
        let preview_hash = sha256_hex(listing.join("\n").as_bytes());
        tracing::info!(plan_id = %request.plan_id, %stack, %preview_hash, steps = preview.steps.len(), "previewed");

        if request.preview_only {
            return Ok(ProvisionReport {
                changes: changes_of(&preview.change_summary),
                outputs: BTreeMap::new(),
                provisioned_at: OffsetDateTime::now_utc(),
                preview_hash,
                drift,
                drift_plan_id,
                previewed_after_interruption: interrupted,
                replayed: false,
            });
        }

        let mut up_args = vec![
            "up".to_owned(),
            "--yes".to_owned(),
            "--json".to_owned(),
            "--stack".to_owned(),
            stack.clone(),
            "--message".to_owned(),
            message,
        ];
        up_args.extend(Self::config_args(request));
        up_args.extend(refresh_flag);
        if self.config.use_update_plans {
            up_args.push(format!("--plan={}", plan_file.display()));
        }
        let text = self
            .pulumi(dir, &up_args)
            .await
            .map_err(|err| IacError::ApplyInterrupted {
                plan_id: request.plan_id.clone(),
                done: 0,
                total: preview.steps.iter().filter(|step| step.op != "same").count(),
                source: Box::new(err),
            })?;
        let applied: PulumiDigest = Self::parse("up", &text)?;
        if self.config.use_update_plans {
            let _ = tokio::fs::remove_file(&plan_file).await;
        }
        Ok(ProvisionReport {
            changes: changes_of(&applied.change_summary),
            outputs: self.outputs(dir, &stack).await?,
            provisioned_at: OffsetDateTime::now_utc(),
            preview_hash,
            drift,
            drift_plan_id,
            previewed_after_interruption: interrupted,
            replayed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urns_give_type_and_name() {
        assert_eq!(
            urn_parts("urn:pulumi:prod::payments::azure-native:storage:StorageAccount::receipts"),
            ("azure-native:storage:StorageAccount".to_owned(), "receipts".to_owned())
        );
        assert_eq!(
            urn_parts("urn:pulumi:prod::payments::my:component:Thing$azure-native:web:WebApp::api"),
            ("azure-native:web:WebApp".to_owned(), "api".to_owned())
        );
    }

    #[test]
    fn change_summary_maps_to_changes() {
        let summary = BTreeMap::from([
            ("create".to_owned(), 2),
            ("same".to_owned(), 5),
            ("replace".to_owned(), 1),
        ]);
        assert_eq!(
            changes_of(&summary),
            ResourceChanges {
                created: 2,
                updated: 0,
                replaced: 1,
                deleted: 0,
                unchanged: 5
            }
        );
    }
}
