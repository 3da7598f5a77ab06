//! `bosun infra check DIR`: reads an overlay (your copy of
//! `infra/kubernetes/overlays/example`) as its pods will read it and says
//! what would fail before anything is applied.
//!
//! - Every pod's settings (the base's ConfigMap, the overlay's
//!   `config.yaml` over it, and `secrets.env`) load, and every consumer
//!   builds from them: a setting a consumer needs on Azure and the overlay
//!   does not set is named with the consumer.
//! - Nothing is left as the example has it: `set-by-overlay`, the all-zero
//!   image digest or subscription, a `<clientIds...>` client id, the
//!   `PASSWORD` / `POSTGRES_HOST` and `<...>` values of `secrets.env`.
//! - KEDA gets the Service Bus namespace's name: the overlay's
//!   replacement copies what comes before the first `.` of
//!   `BOSUN_SERVICEBUS_NAMESPACE` into every trigger, so a scheme
//!   (`sb://`) or a path would reach KEDA as a wrong name, although bosun
//!   itself accepts those forms.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::kubernetes::{self, EXAMPLE_DIGEST, IDENTITIES_FILE, NAMESPACE_PLACEHOLDER};
use super::{ConsumerInfra, RenderedFile};
use crate::runtime::config::Settings;
use crate::runtime::registry;

/// One thing in the overlay that would fail.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The overlay's file it is in (`config.yaml`).
    pub file: String,
    /// The setting or field (`BOSUN_SERVICEBUS_NAMESPACE`, `images[0].digest`).
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// The overlay could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A file of the overlay is missing or unreadable.
    #[error("cannot read {path}: {source}; is this a copy of infra/kubernetes/overlays/example?")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A YAML file does not parse.
    #[error("{path} is not valid YAML: {message}")]
    Yaml {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
}

/// The overlay's files, by name, as read from its folder.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    files: BTreeMap<String, String>,
}

impl Overlay {
    /// Reads `config.yaml`, `kustomization.yaml`, `secrets.env` and the
    /// identities file from `dir`.
    pub fn read(dir: &Path) -> Result<Self, CheckError> {
        let mut files = BTreeMap::new();
        for name in ["config.yaml", "kustomization.yaml", "secrets.env", IDENTITIES_FILE] {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path).map_err(|source| CheckError::Read {
                path: path.display().to_string(),
                source,
            })?;
            files.insert(name.to_owned(), text);
        }
        Ok(Self { files })
    }

    /// The rendered example overlay (the tests start from it).
    pub fn from_rendered(files: &[RenderedFile]) -> Self {
        let prefix = format!("{}/", kubernetes::OVERLAY_DIR);
        let files = files
            .iter()
            .filter_map(|file| {
                file.path
                    .strip_prefix(&prefix)
                    .map(|name| (name.to_owned(), file.text.clone()))
            })
            .collect();
        Self { files }
    }

    /// Replaces a file's text.
    pub fn set(&mut self, name: &str, text: String) {
        self.files.insert(name.to_owned(), text);
    }

    /// A file's text (empty when absent).
    pub fn text(&self, name: &str) -> &str {
        self.files.get(name).map_or("", String::as_str)
    }

    fn documents(&self, name: &str) -> Result<Vec<Value>, CheckError> {
        super::yaml::parse(self.text(name)).map_err(|message| CheckError::Yaml {
            path: name.to_owned(),
            message,
        })
    }

    /// The settings every pod reads: the base's ConfigMap, the overlay's
    /// `config.yaml` over it, then `secrets.env` (the Secret), as
    /// `envFrom` lists them.
    pub fn pod_settings(&self) -> Result<BTreeMap<String, String>, CheckError> {
        let mut settings: BTreeMap<String, String> = kubernetes::base_settings();
        for document in self.documents("config.yaml")? {
            if let Some(data) = document["data"].as_object() {
                for (name, value) in data {
                    let value = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                    settings.insert(name.clone(), value);
                }
            }
        }
        for line in self.text("secrets.env").lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some((name, value)) = line.split_once('=') {
                settings.insert(name.trim().to_owned(), value.to_owned());
            }
        }
        Ok(settings)
    }
}

/// Everything in `overlay` that would fail, in the order found; empty when
/// the overlay is ready to apply.
pub fn check(overlay: &Overlay, consumers: &[ConsumerInfra]) -> Result<Vec<Problem>, CheckError> {
    let mut problems = Vec::new();
    let mut problem = |file: &str, field: &str, message: String| {
        problems.push(Problem {
            file: file.to_owned(),
            field: field.to_owned(),
            message,
        });
    };
    let settings = overlay.pod_settings()?;
    for (name, value) in &settings {
        let file = if overlay.text("secrets.env").contains(&format!("{name}=")) {
            "secrets.env"
        } else {
            "config.yaml"
        };
        if value.contains(NAMESPACE_PLACEHOLDER) || value.contains("set-by-overlay") {
            problem(file, name, format!("still `{value}`: set it for this environment"));
        } else if value == "00000000-0000-0000-0000-000000000000" {
            problem(
                file,
                name,
                "still the example's all-zero id: set this environment's".to_owned(),
            );
        } else if value.starts_with('<') && value.ends_with('>') {
            problem(
                file,
                name,
                format!("still the example's `{value}`: set it for this environment"),
            );
        } else if name == "BOSUN_DATABASE_URL" && (value.contains("PASSWORD") || value.contains("POSTGRES_HOST")) {
            problem(
                file,
                name,
                "still the example's POSTGRES_HOST: set the postgresHost output of the Bicep deployment".to_owned(),
            );
        }
    }
    if let Some(namespace) = settings.get("BOSUN_SERVICEBUS_NAMESPACE") {
        let keda = namespace.split('.').next().unwrap_or_default();
        if namespace.contains("://") || namespace.contains('/') || keda.is_empty() {
            problem(
                "config.yaml",
                "BOSUN_SERVICEBUS_NAMESPACE",
                format!(
                    "`{namespace}` would reach KEDA's triggers as `{keda}`: give the namespace's name \
                     (contoso-bosun) or host name (contoso-bosun.servicebus.windows.net), without a scheme or path"
                ),
            );
        }
    }
    for document in overlay.documents("kustomization.yaml")? {
        for (i, image) in document["images"].as_array().into_iter().flatten().enumerate() {
            if image["digest"].as_str() == Some(EXAMPLE_DIGEST) {
                problem(
                    "kustomization.yaml",
                    &format!("images[{i}].digest"),
                    "still the example's all-zero digest, which pulls nothing: set the digest of the build you \
                     deploy (az acr repository show -n REGISTRY --image bosun:TAG --query digest -o tsv)"
                        .to_owned(),
                );
            }
        }
    }
    for document in overlay.documents(IDENTITIES_FILE)? {
        let client_id = document["metadata"]["annotations"]["azure.workload.identity/client-id"]
            .as_str()
            .unwrap_or_default();
        if client_id.starts_with('<') || client_id.is_empty() || client_id.contains(NAMESPACE_PLACEHOLDER) {
            let account = document["metadata"]["name"].as_str().unwrap_or("a ServiceAccount");
            problem(
                IDENTITIES_FILE,
                account,
                "no client id: write this file with `bosun infra identities --from-deployment FILE DIR`".to_owned(),
            );
        }
    }
    if let Err(err) = Settings::from_sources(&settings, &BTreeMap::new()) {
        problem("config.yaml", "settings", err.to_string());
        return Ok(problems);
    }
    // Consumers are built as a pod builds them, but with a scratch data
    // directory of this process's instead of the pod's volume, and with
    // `default` for `workload-identity` credentials: the variables the
    // workload identity webhook injects (AZURE_CLIENT_ID, AZURE_TENANT_ID,
    // AZURE_FEDERATED_TOKEN_FILE) exist only in the pod, and `default`
    // takes the same path there.
    let scratch = std::env::temp_dir().join(format!("bosun-infra-check-{}", std::process::id()));
    let mut building = settings;
    building.insert("BOSUN_DATA_DIR".to_owned(), scratch.display().to_string());
    // (The database's credential is not built here: only `serve`, `api`
    // and `migrate` sign in to it.)
    for (name, value) in &mut building {
        if name.ends_with("_AUTH") && name != "BOSUN_DATABASE_AUTH" && value == "workload-identity" {
            "default".clone_into(value);
        }
    }
    match Settings::from_sources(&building, &BTreeMap::new()) {
        Err(err) => problem("config.yaml", "settings", err.to_string()),
        Ok(loaded) => {
            for consumer in consumers {
                if let Err(err) = registry::build_one(&consumer.name, &loaded) {
                    problem("config.yaml", &consumer.name, err.to_string());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(problems)
}
