//! `bosun infra render [DIR]`: writes the AKS deployment (kustomize base
//! and overlay, Bicep and its topology) from the code and the settings;
//! `bosun infra identities --from-deployment FILE DIR`: an overlay's
//! client ids from the Bicep deployment's outputs;
//! `bosun infra check DIR`: what in an overlay would fail, before it is
//! applied.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;

use bosun::runtime::config::Settings;
use bosun::tools::infra::{self, InfraSettings, check, identities, kubernetes};

use super::output::outln;

/// `bosun infra ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum InfraCommand {
    /// Write infra/kubernetes (kustomize base, KEDA, monitoring,
    /// overlays/example) and infra/bicep (main.bicep, topology.json) from
    /// bosun's topology and settings (lock duration, max delivery count,
    /// shutdown grace).
    Render {
        /// Where to write.
        #[arg(default_value = "infra")]
        dir: PathBuf,
    },
    /// Write DIR/identities.yaml (DIR: your copy of
    /// infra/kubernetes/overlays/example) with each ServiceAccount's client
    /// id, from the outputs of the deployment of infra/bicep/main.bicep.
    Identities {
        /// The output of `az deployment group show -g RG -n main -o json`.
        #[arg(long = "from-deployment", value_name = "FILE")]
        from_deployment: PathBuf,
        /// The overlay folder to write identities.yaml in.
        dir: PathBuf,
    },
    /// Check an overlay (DIR: your copy of infra/kubernetes/overlays/example)
    /// before applying it: every pod's settings load and build every
    /// consumer, nothing is left as the example has it (digest, client ids,
    /// subscription, database URL), and KEDA can read the Service Bus
    /// namespace. Exits 1 naming each problem.
    Check {
        /// The overlay folder.
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs an infra command.
pub fn run(command: InfraCommand, settings: &Settings) -> Result<()> {
    match command {
        InfraCommand::Render { dir } => {
            let rendered = infra::render(&InfraSettings::from_settings(settings)?)?;
            let report =
                infra::write(&dir, &rendered).with_context(|| format!("bosun infra render {}", dir.display()))?;
            for path in &report.written {
                outln!("wrote {}", dir.join(path).display())?;
            }
            for path in &report.not_rendered {
                eprintln!(
                    "bosun: {} is not rendered by bosun (left as it is; delete it if it is stale)",
                    dir.join(path).display()
                );
            }
            outln!(
                "{} file(s) written, {} already up to date, in {}",
                report.written.len(),
                report.unchanged.len(),
                dir.display()
            )?;
            Ok(())
        }
        InfraCommand::Check { dir, json } => {
            let overlay = check::Overlay::read(&dir)?;
            let problems = check::check(&overlay, &infra::consumers())?;
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({ "problems": problems }))?
                )?;
            } else {
                for problem in &problems {
                    outln!("{}: {}: {}", problem.file, problem.field, problem.message)?;
                }
            }
            if problems.is_empty() {
                if !json {
                    outln!("{} is ready to apply", dir.display())?;
                }
                return Ok(());
            }
            anyhow::bail!("{} problem(s) in {}", problems.len(), dir.display())
        }
        InfraCommand::Identities { from_deployment, dir } => {
            let json = std::fs::read_to_string(&from_deployment)
                .with_context(|| format!("cannot read {}", from_deployment.display()))?;
            let outputs = identities::read_outputs(&json).with_context(|| from_deployment.display().to_string())?;
            let file = identities::identities_file(&infra::consumers(), &outputs)?;
            let path = dir.join(kubernetes::IDENTITIES_FILE);
            std::fs::write(&path, &file.text).with_context(|| format!("cannot write {}", path.display()))?;
            outln!("wrote {}", path.display())?;
            if let Some(keda) = outputs.keda_client_id() {
                outln!("KEDA's client id (podIdentity.azureWorkload.clientId): {keda}")?;
            }
            for (setting, value) in [
                ("BOSUN_SERVICEBUS_NAMESPACE", &outputs.service_bus_namespace),
                ("BOSUN_BLOB_URL", &outputs.blob_url),
                ("BOSUN_DATABASE_CLIENT_ID", &outputs.database_client_id),
            ] {
                if let Some(value) = value {
                    outln!("{setting} in config.yaml: {value}")?;
                }
            }
            if let Some(host) = &outputs.postgres_host {
                outln!("the PostgreSQL host in secrets.env: {host}")?;
            }
            if let Some(user) = &outputs.database_user {
                outln!("the PostgreSQL user in secrets.env (BOSUN_DATABASE_URL, no password): {user}")?;
            }
            Ok(())
        }
    }
}
