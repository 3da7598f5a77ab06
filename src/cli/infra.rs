//! `bosun infra render [DIR]`: writes the AKS deployment (kustomize base
//! and overlay, Bicep and its topology) from the code and the settings.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;

use bosun::runtime::config::Settings;
use bosun::tools::infra::{self, InfraSettings};

use super::output::outln;

/// `bosun infra ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum InfraCommand {
    /// Write infra/kubernetes (kustomize base, KEDA, overlays/example) and
    /// infra/bicep (main.bicep, topology.json) from bosun's topology and
    /// settings (lock duration, max delivery count, shutdown grace).
    Render {
        /// Where to write.
        #[arg(default_value = "infra")]
        dir: PathBuf,
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
    }
}
