//! `bosun infra render [DIR]`: the deployment of bosun on AKS, written from
//! the code's own topology and settings so it cannot drift from them.
//!
//! - `kubernetes/` ([`kubernetes`]): a kustomize base (`base/`) with, per consumer of
//!   the registry, a ServiceAccount for workload identity, a Deployment
//!   running `bosun serve --consumers NAME` with probes on the ops port, a
//!   PodDisruptionBudget and a KEDA ScaledObject on the consumer's queue and
//!   its subscription of the events topic; the API as its own Deployment and
//!   Service; in every pod an init container running `bosun migrate` before
//!   bosun starts; the Namespace (Pod Security `restricted`); the
//!   monitoring ([`kubernetes::monitoring`]: a Prometheus Operator
//!   PodMonitor and PrometheusRule, and [`kubernetes::dashboard`], a
//!   Grafana dashboard for the dashboard sidecar); and
//!   `overlays/example/`, an environment to copy and edit.
//! - [`identities`]: `bosun infra identities --from-deployment`, an
//!   overlay's `identities.yaml` from the outputs of the Bicep deployment.
//! - `bicep/` ([`bicep`]): `topology.json` (the Service Bus entities, the
//!   blob containers and each identity's rights, rendered from the routing
//!   table) and `main.bicep`, which reads it with `loadJsonContent`.
//!
//! The files are checked in under `infra/`; a test fails when they differ
//! from what this module renders with the default settings
//! (`BOSUN_UPDATE_INFRA=1 cargo test --lib tools::infra` rewrites them).

use std::path::{Path, PathBuf};

use bosun_contracts::routing::{self, EVENTS_TOPIC};

use crate::backends::servicebus::plan::TopologyOptions;
use crate::host::claim_check;
use crate::runtime::config::Settings;
use crate::runtime::registry;
use crate::wiring::{self, StartError};

pub mod bicep;
pub mod check;
pub mod identities;
pub mod kubernetes;
pub mod network;
pub mod yaml;

pub use yaml::YamlError;

#[cfg(test)]
mod bicep_tests;
#[cfg(test)]
mod check_tests;
#[cfg(test)]
mod monitoring_tests;
#[cfg(test)]
mod promtool_tests;
#[cfg(test)]
mod scaling_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upgrade_tests;

/// The port of the ops server in every pod (`BOSUN_OPS_ADDR`).
pub const OPS_PORT: u16 = 9090;
/// The port of the API's HTTP server in its pod.
pub const API_PORT: u16 = 8080;
/// The consumer kept at one replica while the others scale to zero: its
/// host runs the outbox dispatcher (which sends any consumer's committed
/// but unsent messages) and retention for the whole shared store, and it is
/// the canary.
pub const ALWAYS_ON: &str = bosun_consumers::probe::NAME;
/// The blob containers the storage account gets: the claim check's first,
/// then those the consumers' registrations declare (logs, reports, results
/// and artifacts), each once ([`registry::blob_containers`]).
pub fn blob_containers() -> Vec<&'static str> {
    let mut containers = vec![claim_check::CONTAINER];
    containers.extend(
        registry::blob_containers()
            .into_iter()
            .filter(|container| *container != claim_check::CONTAINER),
    );
    containers
}

/// One file `bosun infra render` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedFile {
    /// Its path under the output directory, with `/` separators.
    pub path: String,
    /// Its text.
    pub text: String,
}

/// What rendering needs to know about one consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerInfra {
    /// The consumer's name: its queue, its subscription, its Deployment's
    /// `--consumers`.
    pub name: String,
    /// Its subscription of the events topic, when it handles events.
    pub subscription: Option<String>,
    /// Whether KEDA may scale it to zero replicas.
    pub scales_to_zero: bool,
    /// Whether it keeps blobs of its own beyond the claim check.
    pub keeps_blobs: bool,
}

impl ConsumerInfra {
    /// Its Kubernetes objects' name (Deployment, ServiceAccount, ...).
    pub fn object_name(&self) -> String {
        format!("bosun-{}", self.name)
    }
}

/// The consumers to render, in the registry's order, each with its routes
/// from the contracts' routing table.
pub fn consumers() -> Vec<ConsumerInfra> {
    registry::CONSUMERS
        .iter()
        .map(|registration| {
            let route = routing::consumer(registration.name);
            ConsumerInfra {
                name: registration.name.to_owned(),
                subscription: route
                    .filter(|route| !route.events.is_empty())
                    .map(|route| route.name.to_owned()),
                scales_to_zero: registration.name != ALWAYS_ON,
                keeps_blobs: registration.keeps_blobs,
            }
        })
        .collect()
}

/// What the rendered files take from the settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfraSettings {
    /// The Service Bus entity settings (lock duration, max delivery count,
    /// duplicate detection, TTL).
    pub topology: TopologyOptions,
    /// `BOSUN_SHUTDOWN_GRACE_MS`, in whole seconds rounded up.
    pub shutdown_grace_seconds: u64,
    /// The image version the base names (the overlay sets the registry).
    pub image_tag: String,
    /// The thresholds of the rendered alerts (not bosun settings: change
    /// the defaults in the code and render again).
    pub alerts: kubernetes::AlertThresholds,
}

impl InfraSettings {
    /// From bosun's settings.
    pub fn from_settings(settings: &Settings) -> Result<Self, StartError> {
        let grace = settings.shutdown_grace;
        Ok(Self {
            topology: wiring::topology_options(settings)?,
            shutdown_grace_seconds: grace.as_secs() + u64::from(grace.subsec_nanos() > 0),
            image_tag: env!("CARGO_PKG_VERSION").to_owned(),
            alerts: kubernetes::AlertThresholds::default(),
        })
    }
}

/// Every file of `infra/`, in a fixed order.
pub fn render(settings: &InfraSettings) -> Result<Vec<RenderedFile>, YamlError> {
    let consumers = consumers();
    let mut files = kubernetes::render(&consumers, settings)?;
    files.extend(bicep::render(&consumers, settings));
    Ok(files)
}

/// What [`write()`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Files created or changed.
    pub written: Vec<String>,
    /// Files already as rendered.
    pub unchanged: Vec<String>,
    /// Files in the rendered folders that bosun no longer renders (left
    /// as they are).
    pub not_rendered: Vec<String>,
}

/// Why `infra/` could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}; nothing after it was written")]
pub struct WriteError {
    /// The file or folder.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// Writes `files` under `dir`, leaving files that are already as rendered
/// untouched, and lists files in the rendered folders it did not render.
pub fn write(dir: &Path, files: &[RenderedFile]) -> Result<WriteReport, WriteError> {
    let mut report = WriteReport::default();
    for file in files {
        let path = dir.join(&file.path);
        if std::fs::read_to_string(&path).is_ok_and(|on_disk| on_disk == file.text) {
            report.unchanged.push(file.path.clone());
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| WriteError {
                path: parent.to_owned(),
                source,
            })?;
        }
        std::fs::write(&path, &file.text).map_err(|source| WriteError { path, source })?;
        report.written.push(file.path.clone());
    }
    report.not_rendered = unrendered(dir, files);
    Ok(report)
}

/// Files under the folders `files` live in that are not among them.
pub fn unrendered(dir: &Path, files: &[RenderedFile]) -> Vec<String> {
    let mut folders: Vec<&str> = files
        .iter()
        .filter_map(|file| file.path.rsplit_once('/').map(|(folder, _)| folder))
        .collect();
    folders.sort_unstable();
    folders.dedup();
    let mut extra = Vec::new();
    for folder in folders {
        for entry in std::fs::read_dir(dir.join(folder)).into_iter().flatten().flatten() {
            if !entry.file_type().is_ok_and(|kind| kind.is_file()) {
                continue;
            }
            let path = format!("{folder}/{}", entry.file_name().to_string_lossy());
            if !files.iter().any(|file| file.path == path) {
                extra.push(path);
            }
        }
    }
    extra.sort();
    extra
}

/// The header every rendered YAML and Bicep file starts with.
pub(crate) fn header(comment: &str) -> String {
    format!(
        "{comment} Rendered by `bosun infra render` from bosun's routing table, consumer\n\
         {comment} registry and settings. Do not edit: change the code or the overlay, then\n\
         {comment} render again (a test fails while the checked-in copy is stale).\n"
    )
}

/// The events topic's name.
pub(crate) fn events_topic() -> &'static str {
    EVENTS_TOPIC
}
