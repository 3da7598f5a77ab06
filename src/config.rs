//! Settings: the one place bosun reads its configuration.
//!
//! Values come, highest precedence first, from command-line flags (applied
//! by the CLI on top of what this module returns), `BOSUN_*` environment
//! variables, an optional TOML file (`--config`, `BOSUN_CONFIG`, or
//! `./bosun.toml` when present; keys are the variable names without the
//! `BOSUN_` prefix, in lowercase, e.g. `data_dir = "/var/lib/bosun"`), and
//! defaults. Everything is parsed and validated at start; an invalid value
//! is an error naming the setting. Secrets are wrapped in [`Secret`], whose
//! `Debug` and `Display` print `[redacted]`.
//!
//! Tests build [`Settings`] from a map ([`Settings::from_sources`]) instead
//! of touching the process environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A secret value: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A setting that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value does not parse or breaks a rule.
    #[error("setting {name}: {reason}")]
    Invalid {
        /// The environment variable name of the setting.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The configuration file could not be read or parsed.
    #[error("config file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

fn invalid(name: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

/// Which transport carries messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// SQLite under the data directory (the default).
    Embedded,
    /// Queues and the events topic in PostgreSQL (`BOSUN_DATABASE_URL`).
    Postgres,
    /// Azure Service Bus (or its emulator) over AMQP 1.0.
    ServiceBus,
}

/// `BOSUN_TRANSPORT=servicebus`: where the namespace is and how to use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceBusSettings {
    /// The namespace and credentials (from
    /// `BOSUN_SERVICEBUS_CONNECTION_STRING`, or `BOSUN_SERVICEBUS_NAMESPACE`
    /// with `BOSUN_SERVICEBUS_AUTH` / `BOSUN_SERVICEBUS_CLIENT_ID`).
    pub endpoint: crate::transport::servicebus::connection::ServiceBusEndpoint,
    /// `BOSUN_SERVICEBUS_PREFETCH`: messages each receiver link is given
    /// credit for ahead of the handlers. Default 16.
    pub prefetch: u32,
    /// `BOSUN_SERVICEBUS_SEND_TIMEOUT_MS`: the longest a send may take
    /// before its link is recreated and the send reported failed. Default 30 000.
    pub send_timeout: Duration,
    /// `BOSUN_SERVICEBUS_VERIFY`: check at start that every entity exists
    /// (`true`, the default) through the management API.
    pub verify_topology: bool,
}

/// Which adapters the consumers use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterKind {
    /// Do the work on this machine (bare Git repositories under the data dir ...).
    Local,
    /// Talk to Azure DevOps and the other Azure services.
    Azure(Box<AzureDevOpsSettings>),
}

/// How bosun signs in to Azure Container Registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcrCredential {
    /// `BOSUN_ACR_USERNAME` + `BOSUN_ACR_PASSWORD` (admin user or a scoped token).
    Basic {
        /// User or token name.
        username: String,
        /// Password.
        password: Secret,
    },
    /// `BOSUN_ACR_REFRESH_TOKEN`.
    RefreshToken(Secret),
    /// `BOSUN_ACR_ENTRA_TOKEN` (+ `BOSUN_ACR_TENANT`): an Entra ID access token.
    EntraToken {
        /// The token.
        token: Secret,
        /// The Entra tenant.
        tenant: Option<String>,
    },
}

/// Azure Container Registry settings (container-build with `azure` adapters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcrSettings {
    /// `BOSUN_ACR_REGISTRY`: e.g. `contoso.azurecr.io`.
    pub registry: String,
    /// The credential.
    pub credential: AcrCredential,
}

/// Azure Artifacts settings (package-publishing with `azure` adapters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactsSettings {
    /// `BOSUN_ARTIFACTS_URL`: `https://pkgs.dev.azure.com/<org>`.
    pub url: String,
    /// `BOSUN_ARTIFACTS_PROJECT`: the feed's project, for project-scoped feeds.
    pub project: Option<String>,
    /// `BOSUN_ARTIFACTS_PAT` (else the Azure DevOps PAT).
    pub pat: Secret,
}

/// Argo CD settings (gitops-sync with `azure` adapters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgoCdSettings {
    /// `BOSUN_ARGOCD_URL`.
    pub url: String,
    /// `BOSUN_ARGOCD_TOKEN`.
    pub token: Secret,
}

/// Pulumi settings (iac-provisioning with `azure` adapters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulumiSettings {
    /// `BOSUN_PULUMI_PROGRAM_DIR`: the Pulumi program (project) directory.
    pub program_dir: PathBuf,
    /// `BOSUN_PULUMI_BINARY`: the `pulumi` executable (default `pulumi` on PATH).
    pub binary: Option<PathBuf>,
}

/// Azure DevOps connection settings, and the other Azure services the
/// `azure` adapters talk to (each optional until a consumer needs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureDevOpsSettings {
    /// Azure Container Registry, for container-build.
    pub acr: Option<AcrSettings>,
    /// Azure Artifacts, for package-publishing.
    pub artifacts: Option<ArtifactsSettings>,
    /// Argo CD, for gitops-sync.
    pub argo_cd: Option<ArgoCdSettings>,
    /// Pulumi, for iac-provisioning.
    pub pulumi: Option<PulumiSettings>,
    /// `https://dev.azure.com/<organization>`.
    pub organization_url: String,
    /// `BOSUN_AZURE_DEVOPS_PROJECT`: the project the repositories,
    /// pull requests, pipelines and builds live in. A plain name
    /// (`delivery`) is one project shared by every tenant, so two tenants'
    /// repositories of one name are one repository; a template with
    /// `{tenant}` (`delivery-{tenant}`) gives each tenant its own project
    /// (`delivery-contoso`), created by an operator. `{tenant}` is the only
    /// template variable; any other `{...}` is a configuration error.
    pub project: String,
    /// A personal access token (`BOSUN_AZURE_DEVOPS_PAT`) ...
    pub pat: Option<Secret>,
    /// ... or an Entra ID bearer token (`BOSUN_AZURE_DEVOPS_TOKEN`).
    pub bearer_token: Option<Secret>,
}

/// Where large content (logs, reports, artifacts, claim-checked payloads)
/// is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobBackend {
    /// Files under `<data dir>/blobs` (the default).
    Filesystem,
    /// `BOSUN_BLOB_CONNECTION_STRING`: an Azure Storage connection string
    /// (`UseDevelopmentStorage=true` for Azurite).
    AzureConnectionString(Secret),
    /// `BOSUN_BLOB_URL`: an Azure Storage account URL, with `auth`.
    Azure {
        /// `https://<account>.blob.core.windows.net`.
        url: String,
        /// How to sign in.
        auth: BlobAuth,
    },
}

/// How bosun signs in to Azure Blob Storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobAuth {
    /// `BOSUN_BLOB_ACCOUNT_KEY` (+ `BOSUN_BLOB_ACCOUNT_NAME`): shared key.
    SharedKey {
        /// The account; read from the URL when absent.
        account: Option<String>,
        /// The key.
        key: Secret,
    },
    /// `BOSUN_BLOB_SAS`: a SAS token.
    Sas(Secret),
    /// `BOSUN_BLOB_AUTH=default` (the default): workload identity, then the
    /// Azure CLI, then the managed identity.
    EntraDefault,
    /// `BOSUN_BLOB_AUTH=workload-identity` (AKS).
    WorkloadIdentity,
    /// `BOSUN_BLOB_AUTH=managed-identity` (+ `BOSUN_BLOB_CLIENT_ID`).
    ManagedIdentity {
        /// A user-assigned identity's client id.
        client_id: Option<String>,
    },
    /// `BOSUN_BLOB_AUTH=azure-cli`: the developer's `az login`.
    AzureCli,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A test hook that stops the process at a chosen point so crash tests can
/// kill it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// After the first message's state (idempotency record + outbox) is
    /// committed and before its outbox is dispatched or the message is
    /// completed, the process stops doing work and waits to be killed.
    HaltAfterStateCommit,
}

/// How the HTTP front door holds under abuse: how long a connection may
/// take to send a request head or sit idle, how many connections are open
/// at once, each key's request budget and which browser origins may call
/// `/mcp`. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// `BOSUN_HTTP_HEADER_TIMEOUT_MS`: the longest a client may take to send
    /// a request head (from its connection's accept, or from the first byte
    /// of a later request on a kept-alive connection). Default 10 000.
    pub header_timeout: Duration,
    /// `BOSUN_HTTP_IDLE_TIMEOUT_MS`: how long a kept-alive connection may
    /// wait for its next request. Default 75 000, longer than the 60 s
    /// upstream keep-alive of common proxies so that they close first.
    pub idle_timeout: Duration,
    /// `BOSUN_HTTP_MAX_CONNECTIONS`: connections open at once; never more
    /// than half the process's open-file soft limit. Default 4 096.
    pub max_connections: usize,
    /// `BOSUN_HTTP_RATE_LIMIT_PER_SECOND`: requests per second each API key
    /// may make, sustained; 0 turns the limit off. Default 20.
    pub rate_limit_per_second: u32,
    /// `BOSUN_HTTP_RATE_LIMIT_BURST`: requests a key may make at once before
    /// the sustained rate applies. Default 100.
    pub rate_limit_burst: u32,
    /// `BOSUN_HTTP_ALLOWED_ORIGINS`: the browser origins that may call
    /// `/mcp` (besides the server's own address): a comma list of
    /// `scheme://host[:port]` and `loopback` (any port on `localhost`,
    /// `127.0.0.0/8` or `[::1]`), or `none`. Default `loopback`.
    pub allowed_origins: Vec<crate::api::origin::AllowedOrigin>,
}

const HTTP_HEADER_TIMEOUT_MS: u64 = 10_000;
const HTTP_IDLE_TIMEOUT_MS: u64 = 75_000;
const HTTP_MAX_CONNECTIONS: u64 = 4_096;
const HTTP_RATE_LIMIT_PER_SECOND: u64 = 20;
const HTTP_RATE_LIMIT_BURST: u64 = 100;

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_millis(HTTP_HEADER_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(HTTP_IDLE_TIMEOUT_MS),
            max_connections: HTTP_MAX_CONNECTIONS as usize,
            rate_limit_per_second: HTTP_RATE_LIMIT_PER_SECOND as u32,
            rate_limit_burst: HTTP_RATE_LIMIT_BURST as u32,
            allowed_origins: vec![crate::api::origin::AllowedOrigin::Loopback],
        }
    }
}

/// Every setting bosun has.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `BOSUN_DATA_DIR`: where the embedded transport, stores and local
    /// adapters keep their files. Default `./.bosun`.
    pub data_dir: PathBuf,
    /// `BOSUN_TRANSPORT`: `embedded` (default) or `postgres`.
    pub transport: TransportKind,
    /// The Service Bus namespace, with `BOSUN_TRANSPORT=servicebus`.
    pub servicebus: Option<ServiceBusSettings>,
    /// `BOSUN_DATABASE_URL`: `postgres://...`; when set, the stores live in
    /// PostgreSQL instead of SQLite. A secret: it may hold a password.
    pub database_url: Option<Secret>,
    /// The blob store.
    pub blob: BlobBackend,
    /// `BOSUN_CLAIM_CHECK_BYTES`: envelopes larger than this have their
    /// payload moved to the blob store. Default 196 608 (192 KiB).
    pub claim_check_bytes: usize,
    /// `BOSUN_HTTP_MAX_BODY_BYTES`: the largest request body the HTTP API
    /// takes (larger: 413). Default 4 194 304 (4 MiB); payloads over the
    /// claim-check threshold travel through the blob store.
    pub http_max_body_bytes: usize,
    /// The HTTP front door's timeouts, connection cap, per-key request
    /// budget and allowed browser origins (`BOSUN_HTTP_*`).
    pub http_limits: HttpLimits,
    /// `BOSUN_ADAPTERS`: `local` (default) or `azure`.
    pub adapters: AdapterKind,
    /// `BOSUN_CONSUMERS`: comma-separated consumers to run; all when unset.
    pub consumers: Option<Vec<String>>,
    /// `BOSUN_CONCURRENCY`: messages handled at once per consumer. Default 8.
    pub concurrency: usize,
    /// `BOSUN_LOCK_DURATION_MS`: peek-lock duration. Default 30 000.
    pub lock_duration: Duration,
    /// `BOSUN_MAX_DELIVERY_COUNT`: deliveries before the transport
    /// dead-letters a message by itself. Default 10.
    pub max_delivery_count: u32,
    /// `BOSUN_RETRY_BASE_DELAY_MS`: the first retry's delay ceiling; every
    /// consumer's retry delays scale with it. Default 1 000.
    pub retry_base_delay: Duration,
    /// `BOSUN_POLL_INTERVAL_MS`: how often an idle receiver looks for
    /// messages sent by other processes. Default 250.
    pub poll_interval: Duration,
    /// `BOSUN_SHUTDOWN_GRACE_MS`: how long in-flight work may finish after
    /// SIGTERM. Default 25 000.
    pub shutdown_grace: Duration,
    /// `BOSUN_LOG_FORMAT`: `text` (default) or `json`.
    pub log_format: LogFormat,
    /// `BOSUN_FAILPOINT`: test hook (`halt-after-state-commit`).
    pub failpoint: Option<Failpoint>,
    /// `BOSUN_OPERATOR` (else `USER`): who operator actions are recorded as.
    pub operator: String,
    /// Release policy and timings of the long-running consumers.
    pub delivery: DeliverySettings,
}

/// How releases are promoted and how long-running work is followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliverySettings {
    /// `BOSUN_RELEASE_ENVIRONMENTS`: environments a release is promoted
    /// through, in order. Default `dev`.
    pub environments: Vec<String>,
    /// `BOSUN_AUTO_APPROVE`: environments approved by policy, without a
    /// person. Default `dev`; empty (`BOSUN_AUTO_APPROVE=none`) for none.
    pub auto_approve: Vec<String>,
    /// `BOSUN_APPROVAL_TIMEOUT_MS`: how long a release waits for an approval
    /// before it is rejected. Default 24 h.
    pub approval_timeout: Duration,
    /// `BOSUN_PIPELINE_POLL_MS`: first delay between polls of a pipeline
    /// run; doubles per poll. Default 2 000.
    pub pipeline_poll: Duration,
    /// `BOSUN_PIPELINE_POLL_MAX_MS`: longest delay between polls. Default 30 000.
    pub pipeline_poll_max: Duration,
    /// `BOSUN_PIPELINE_MAX_POLLS`: polls before a run is given up on. Default 1 000.
    pub pipeline_max_polls: u32,
    /// `BOSUN_RECONCILE_MS`: first delay before an environment that has not
    /// reached its desired commit is reconciled again. Default 2 000.
    pub reconcile: Duration,
    /// `BOSUN_RECONCILE_MAX_MS`: longest reconcile delay. Default 60 000.
    pub reconcile_max: Duration,
}

/// Where raw values come from: a key (`BOSUN_DATA_DIR`) to its text.
pub trait Source {
    /// The raw value of a setting.
    fn get(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Environment;

impl Source for Environment {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Source for BTreeMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        BTreeMap::get(self, name).cloned()
    }
}

const KNOWN: &[&str] = &[
    "BOSUN_DATA_DIR",
    "BOSUN_TRANSPORT",
    "BOSUN_DATABASE_URL",
    "BOSUN_SERVICEBUS_CONNECTION_STRING",
    "BOSUN_SERVICEBUS_NAMESPACE",
    "BOSUN_SERVICEBUS_AUTH",
    "BOSUN_SERVICEBUS_CLIENT_ID",
    "BOSUN_SERVICEBUS_PREFETCH",
    "BOSUN_SERVICEBUS_SEND_TIMEOUT_MS",
    "BOSUN_SERVICEBUS_VERIFY",
    "BOSUN_BLOB_CONNECTION_STRING",
    "BOSUN_BLOB_URL",
    "BOSUN_BLOB_ACCOUNT_NAME",
    "BOSUN_BLOB_ACCOUNT_KEY",
    "BOSUN_BLOB_SAS",
    "BOSUN_BLOB_AUTH",
    "BOSUN_BLOB_CLIENT_ID",
    "BOSUN_CLAIM_CHECK_BYTES",
    "BOSUN_HTTP_MAX_BODY_BYTES",
    "BOSUN_HTTP_HEADER_TIMEOUT_MS",
    "BOSUN_HTTP_IDLE_TIMEOUT_MS",
    "BOSUN_HTTP_MAX_CONNECTIONS",
    "BOSUN_HTTP_RATE_LIMIT_PER_SECOND",
    "BOSUN_HTTP_RATE_LIMIT_BURST",
    "BOSUN_HTTP_ALLOWED_ORIGINS",
    "BOSUN_ADAPTERS",
    "BOSUN_CONSUMERS",
    "BOSUN_CONCURRENCY",
    "BOSUN_LOCK_DURATION_MS",
    "BOSUN_MAX_DELIVERY_COUNT",
    "BOSUN_RETRY_BASE_DELAY_MS",
    "BOSUN_POLL_INTERVAL_MS",
    "BOSUN_SHUTDOWN_GRACE_MS",
    "BOSUN_LOG_FORMAT",
    "BOSUN_FAILPOINT",
    "BOSUN_OPERATOR",
    "BOSUN_RELEASE_ENVIRONMENTS",
    "BOSUN_AUTO_APPROVE",
    "BOSUN_APPROVAL_TIMEOUT_MS",
    "BOSUN_PIPELINE_POLL_MS",
    "BOSUN_PIPELINE_POLL_MAX_MS",
    "BOSUN_PIPELINE_MAX_POLLS",
    "BOSUN_RECONCILE_MS",
    "BOSUN_RECONCILE_MAX_MS",
    "BOSUN_AZURE_DEVOPS_ORG_URL",
    "BOSUN_AZURE_DEVOPS_PROJECT",
    "BOSUN_AZURE_DEVOPS_PAT",
    "BOSUN_AZURE_DEVOPS_TOKEN",
    "BOSUN_ACR_REGISTRY",
    "BOSUN_ACR_USERNAME",
    "BOSUN_ACR_PASSWORD",
    "BOSUN_ACR_REFRESH_TOKEN",
    "BOSUN_ACR_ENTRA_TOKEN",
    "BOSUN_ACR_TENANT",
    "BOSUN_ARTIFACTS_URL",
    "BOSUN_ARTIFACTS_PROJECT",
    "BOSUN_ARTIFACTS_PAT",
    "BOSUN_ARGOCD_URL",
    "BOSUN_ARGOCD_TOKEN",
    "BOSUN_PULUMI_PROGRAM_DIR",
    "BOSUN_PULUMI_BINARY",
];

/// Reads a TOML settings file into `BOSUN_*` keys.
pub fn read_file(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let file_error = |reason: String| ConfigError::File {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|err| file_error(err.to_string()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|err: toml::de::Error| file_error(err.to_string()))?;
    let mut values = BTreeMap::new();
    for (key, value) in table {
        let name = format!("BOSUN_{}", key.to_ascii_uppercase());
        if !KNOWN.contains(&name.as_str()) {
            return Err(file_error(format!("unknown setting `{key}`")));
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .iter()
                .map(|item| item.as_str().map(str::to_owned).unwrap_or_else(|| item.to_string()))
                .collect::<Vec<_>>()
                .join(","),
            other => return Err(file_error(format!("setting `{key}` has unsupported value {other}"))),
        };
        values.insert(name, text);
    }
    Ok(values)
}

impl Settings {
    /// Loads settings from the environment and the optional file: the path
    /// given, else `BOSUN_CONFIG`, else `./bosun.toml` when it exists.
    pub fn load(config_file: Option<&Path>) -> Result<Self, ConfigError> {
        let env = Environment;
        let path = config_file
            .map(Path::to_path_buf)
            .or_else(|| env.get("BOSUN_CONFIG").map(PathBuf::from))
            .or_else(|| Some(PathBuf::from("bosun.toml")).filter(|p| p.exists()));
        let file = match path {
            Some(path) => read_file(&path)?,
            None => BTreeMap::new(),
        };
        Self::from_sources(&env, &file)
    }

    /// Builds settings from an environment-like source over a file's values.
    pub fn from_sources(env: &dyn Source, file: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let get = |name: &str| env.get(name).or_else(|| file.get(name).cloned());
        let millis = |name: &str, default: u64| -> Result<Duration, ConfigError> {
            match get(name) {
                None => Ok(Duration::from_millis(default)),
                Some(text) => text
                    .trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| invalid(name, format!("`{text}` is not a number of milliseconds"))),
            }
        };
        let number = |name: &str, default: u64, min: u64| -> Result<u64, ConfigError> {
            let value = match get(name) {
                None => default,
                Some(text) => text
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| invalid(name, format!("`{text}` is not a whole number")))?,
            };
            if value < min {
                return Err(invalid(name, format!("must be at least {min}")));
            }
            Ok(value)
        };

        let database_url = get("BOSUN_DATABASE_URL").map(Secret::new);
        if database_url
            .as_ref()
            .is_some_and(|url| !url.expose().starts_with("postgres://") && !url.expose().starts_with("postgresql://"))
        {
            return Err(invalid("BOSUN_DATABASE_URL", "must be a postgres:// URL"));
        }
        let blob = match (get("BOSUN_BLOB_CONNECTION_STRING"), get("BOSUN_BLOB_URL")) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "BOSUN_BLOB_URL",
                    "set either BOSUN_BLOB_URL or BOSUN_BLOB_CONNECTION_STRING, not both",
                ));
            }
            (Some(connection), None) => BlobBackend::AzureConnectionString(Secret::new(connection)),
            (None, Some(url)) => {
                let auth = match (get("BOSUN_BLOB_ACCOUNT_KEY"), get("BOSUN_BLOB_SAS")) {
                    (Some(_), Some(_)) => {
                        return Err(invalid(
                            "BOSUN_BLOB_SAS",
                            "set either an account key or a SAS, not both",
                        ));
                    }
                    (Some(key), None) => BlobAuth::SharedKey {
                        account: get("BOSUN_BLOB_ACCOUNT_NAME"),
                        key: Secret::new(key),
                    },
                    (None, Some(sas)) => BlobAuth::Sas(Secret::new(sas)),
                    (None, None) => match get("BOSUN_BLOB_AUTH").as_deref() {
                        None | Some("default") => BlobAuth::EntraDefault,
                        Some("workload-identity") => BlobAuth::WorkloadIdentity,
                        Some("managed-identity") => BlobAuth::ManagedIdentity {
                            client_id: get("BOSUN_BLOB_CLIENT_ID"),
                        },
                        Some("azure-cli") => BlobAuth::AzureCli,
                        Some(other) => {
                            return Err(invalid(
                                "BOSUN_BLOB_AUTH",
                                format!("`{other}` is not default, workload-identity, managed-identity or azure-cli"),
                            ));
                        }
                    },
                };
                BlobBackend::Azure {
                    url: url.trim_end_matches('/').to_owned(),
                    auth,
                }
            }
            (None, None) => BlobBackend::Filesystem,
        };
        let claim_check_bytes = usize::try_from(number("BOSUN_CLAIM_CHECK_BYTES", 196_608, 1024)?)
            .map_err(|_| invalid("BOSUN_CLAIM_CHECK_BYTES", "is too large"))?;
        if claim_check_bytes >= bosun_contracts::MAX_MESSAGE_BYTES {
            return Err(invalid(
                "BOSUN_CLAIM_CHECK_BYTES",
                format!(
                    "must be under the message limit of {} bytes",
                    bosun_contracts::MAX_MESSAGE_BYTES
                ),
            ));
        }
        let transport = match get("BOSUN_TRANSPORT").as_deref() {
            None | Some("embedded") => TransportKind::Embedded,
            Some("postgres") if database_url.is_some() => TransportKind::Postgres,
            Some("postgres") => {
                return Err(invalid("BOSUN_TRANSPORT", "`postgres` needs BOSUN_DATABASE_URL"));
            }
            Some("servicebus") => TransportKind::ServiceBus,
            Some(other) => {
                return Err(invalid(
                    "BOSUN_TRANSPORT",
                    format!("`{other}` is not a transport (embedded, postgres, servicebus)"),
                ));
            }
        };
        let servicebus = if transport == TransportKind::ServiceBus {
            use crate::transport::servicebus::connection::ServiceBusEndpoint;
            let endpoint = match (
                get("BOSUN_SERVICEBUS_CONNECTION_STRING"),
                get("BOSUN_SERVICEBUS_NAMESPACE"),
            ) {
                (Some(text), None) => ServiceBusEndpoint::from_connection_string(&text)
                    .map_err(|err| invalid("BOSUN_SERVICEBUS_CONNECTION_STRING", err.to_string()))?,
                (None, Some(namespace)) => ServiceBusEndpoint::from_namespace(
                    &namespace,
                    get("BOSUN_SERVICEBUS_AUTH").as_deref().unwrap_or("default"),
                    get("BOSUN_SERVICEBUS_CLIENT_ID"),
                )
                .map_err(|err| invalid(&err.field.clone(), err.reason))?,
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        "BOSUN_SERVICEBUS_NAMESPACE",
                        "set either BOSUN_SERVICEBUS_CONNECTION_STRING or BOSUN_SERVICEBUS_NAMESPACE, not both",
                    ));
                }
                (None, None) => {
                    return Err(invalid(
                        "BOSUN_TRANSPORT",
                        "`servicebus` needs BOSUN_SERVICEBUS_CONNECTION_STRING (SAS or the emulator) or \
                         BOSUN_SERVICEBUS_NAMESPACE (Entra ID)",
                    ));
                }
            };
            let verify_topology = match get("BOSUN_SERVICEBUS_VERIFY").as_deref() {
                None | Some("true") => true,
                Some("false") => false,
                Some(_) => return Err(invalid("BOSUN_SERVICEBUS_VERIFY", "must be true or false")),
            };
            Some(ServiceBusSettings {
                endpoint,
                prefetch: u32::try_from(number("BOSUN_SERVICEBUS_PREFETCH", 16, 0)?)
                    .map_err(|_| invalid("BOSUN_SERVICEBUS_PREFETCH", "is too large"))?,
                send_timeout: millis("BOSUN_SERVICEBUS_SEND_TIMEOUT_MS", 30_000)?,
                verify_topology,
            })
        } else {
            None
        };
        let adapters = match get("BOSUN_ADAPTERS").as_deref() {
            None | Some("local") => AdapterKind::Local,
            Some("azure") => {
                let required =
                    |name: &str| get(name).ok_or_else(|| invalid(name, "is required when BOSUN_ADAPTERS=azure"));
                let organization_url = required("BOSUN_AZURE_DEVOPS_ORG_URL")?;
                if !organization_url.starts_with("https://") && !organization_url.starts_with("http://") {
                    return Err(invalid("BOSUN_AZURE_DEVOPS_ORG_URL", "must be an http(s) URL"));
                }
                let project = required("BOSUN_AZURE_DEVOPS_PROJECT")?;
                bosun_consumers::delivery::azure::devops::check_project_template(&project)
                    .map_err(|err| invalid("BOSUN_AZURE_DEVOPS_PROJECT", format!("`{project}`: {err}")))?;
                let pat = get("BOSUN_AZURE_DEVOPS_PAT").map(Secret::new);
                let bearer_token = get("BOSUN_AZURE_DEVOPS_TOKEN").map(Secret::new);
                if pat.is_none() && bearer_token.is_none() {
                    return Err(invalid(
                        "BOSUN_AZURE_DEVOPS_PAT",
                        "a PAT or BOSUN_AZURE_DEVOPS_TOKEN is required when BOSUN_ADAPTERS=azure",
                    ));
                }
                let acr = match get("BOSUN_ACR_REGISTRY") {
                    None => None,
                    Some(registry) => {
                        let credential = if let Some(token) = get("BOSUN_ACR_ENTRA_TOKEN") {
                            AcrCredential::EntraToken {
                                token: Secret::new(token),
                                tenant: get("BOSUN_ACR_TENANT"),
                            }
                        } else if let Some(token) = get("BOSUN_ACR_REFRESH_TOKEN") {
                            AcrCredential::RefreshToken(Secret::new(token))
                        } else {
                            AcrCredential::Basic {
                                username: get("BOSUN_ACR_USERNAME").ok_or_else(|| {
                                    invalid(
                                        "BOSUN_ACR_USERNAME",
                                        "a credential is required with BOSUN_ACR_REGISTRY (username + password, \
                                         BOSUN_ACR_REFRESH_TOKEN or BOSUN_ACR_ENTRA_TOKEN)",
                                    )
                                })?,
                                password: Secret::new(required("BOSUN_ACR_PASSWORD")?),
                            }
                        };
                        Some(AcrSettings { registry, credential })
                    }
                };
                let artifacts = match get("BOSUN_ARTIFACTS_URL") {
                    None => None,
                    Some(url) => Some(ArtifactsSettings {
                        url: url.trim_end_matches('/').to_owned(),
                        project: get("BOSUN_ARTIFACTS_PROJECT"),
                        pat: get("BOSUN_ARTIFACTS_PAT")
                            .or_else(|| get("BOSUN_AZURE_DEVOPS_PAT"))
                            .map(Secret::new)
                            .ok_or_else(|| invalid("BOSUN_ARTIFACTS_PAT", "is required with BOSUN_ARTIFACTS_URL"))?,
                    }),
                };
                let argo_cd = match get("BOSUN_ARGOCD_URL") {
                    None => None,
                    Some(url) => Some(ArgoCdSettings {
                        url: url.trim_end_matches('/').to_owned(),
                        token: Secret::new(required("BOSUN_ARGOCD_TOKEN")?),
                    }),
                };
                let pulumi = get("BOSUN_PULUMI_PROGRAM_DIR").map(|dir| PulumiSettings {
                    program_dir: PathBuf::from(dir),
                    binary: get("BOSUN_PULUMI_BINARY").map(PathBuf::from),
                });
                AdapterKind::Azure(Box::new(AzureDevOpsSettings {
                    acr,
                    artifacts,
                    argo_cd,
                    pulumi,
                    organization_url: organization_url.trim_end_matches('/').to_owned(),
                    project,
                    pat,
                    bearer_token,
                }))
            }
            Some(other) => return Err(invalid("BOSUN_ADAPTERS", format!("`{other}` is not local or azure"))),
        };
        let consumers = get("BOSUN_CONSUMERS")
            .map(|list| parse_consumer_list(&list))
            .transpose()?;
        let log_format = match get("BOSUN_LOG_FORMAT").as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => return Err(invalid("BOSUN_LOG_FORMAT", format!("`{other}` is not text or json"))),
        };
        let failpoint = match get("BOSUN_FAILPOINT").as_deref() {
            None => None,
            Some("halt-after-state-commit") => Some(Failpoint::HaltAfterStateCommit),
            Some(other) => return Err(invalid("BOSUN_FAILPOINT", format!("unknown failpoint `{other}`"))),
        };
        let environment_list = |name: &str, default: &str| -> Result<Vec<String>, ConfigError> {
            let text = get(name).unwrap_or_else(|| default.to_owned());
            if text.trim() == "none" {
                return Ok(Vec::new());
            }
            let names: Vec<String> = text
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect();
            for env_name in &names {
                bosun_contracts::validate::environment_name(name, env_name).map_err(|err| invalid(name, err.reason))?;
            }
            Ok(names)
        };
        let delivery = DeliverySettings {
            environments: environment_list("BOSUN_RELEASE_ENVIRONMENTS", "dev")?,
            auto_approve: environment_list("BOSUN_AUTO_APPROVE", "dev")?,
            approval_timeout: millis("BOSUN_APPROVAL_TIMEOUT_MS", 24 * 3600 * 1000)?,
            pipeline_poll: millis("BOSUN_PIPELINE_POLL_MS", 2_000)?,
            pipeline_poll_max: millis("BOSUN_PIPELINE_POLL_MAX_MS", 30_000)?,
            pipeline_max_polls: u32::try_from(number("BOSUN_PIPELINE_MAX_POLLS", 1_000, 1)?)
                .map_err(|_| invalid("BOSUN_PIPELINE_MAX_POLLS", "is too large"))?,
            reconcile: millis("BOSUN_RECONCILE_MS", 2_000)?,
            reconcile_max: millis("BOSUN_RECONCILE_MAX_MS", 60_000)?,
        };
        if delivery.environments.is_empty() {
            return Err(invalid("BOSUN_RELEASE_ENVIRONMENTS", "names no environment"));
        }
        let http_limits = {
            let at_least = |name: &str, default: u64, min: u64| -> Result<Duration, ConfigError> {
                let value = millis(name, default)?;
                if value < Duration::from_millis(min) {
                    return Err(invalid(name, format!("must be at least {min}")));
                }
                Ok(value)
            };
            let small = |name: &str, value: u64| u32::try_from(value).map_err(|_| invalid(name, "is too large"));
            HttpLimits {
                header_timeout: at_least("BOSUN_HTTP_HEADER_TIMEOUT_MS", HTTP_HEADER_TIMEOUT_MS, 100)?,
                idle_timeout: at_least("BOSUN_HTTP_IDLE_TIMEOUT_MS", HTTP_IDLE_TIMEOUT_MS, 100)?,
                max_connections: usize::try_from(number("BOSUN_HTTP_MAX_CONNECTIONS", HTTP_MAX_CONNECTIONS, 2)?)
                    .map_err(|_| invalid("BOSUN_HTTP_MAX_CONNECTIONS", "is too large"))?,
                rate_limit_per_second: small(
                    "BOSUN_HTTP_RATE_LIMIT_PER_SECOND",
                    number("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", HTTP_RATE_LIMIT_PER_SECOND, 0)?,
                )?,
                rate_limit_burst: small(
                    "BOSUN_HTTP_RATE_LIMIT_BURST",
                    number("BOSUN_HTTP_RATE_LIMIT_BURST", HTTP_RATE_LIMIT_BURST, 1)?,
                )?,
                allowed_origins: match get("BOSUN_HTTP_ALLOWED_ORIGINS") {
                    None => HttpLimits::default().allowed_origins,
                    Some(list) => crate::api::origin::parse_allowed_origins(&list)
                        .map_err(|err| invalid("BOSUN_HTTP_ALLOWED_ORIGINS", err.to_string()))?,
                },
            }
        };
        let settings = Self {
            data_dir: get("BOSUN_DATA_DIR").map_or_else(|| PathBuf::from(".bosun"), PathBuf::from),
            transport,
            servicebus,
            database_url,
            blob,
            claim_check_bytes,
            http_max_body_bytes: usize::try_from(number("BOSUN_HTTP_MAX_BODY_BYTES", 4_194_304, 1024)?)
                .map_err(|_| invalid("BOSUN_HTTP_MAX_BODY_BYTES", "is too large"))?,
            http_limits,
            adapters,
            consumers,
            concurrency: usize::try_from(number("BOSUN_CONCURRENCY", 8, 1)?).unwrap_or(usize::MAX),
            lock_duration: millis("BOSUN_LOCK_DURATION_MS", 30_000)?,
            max_delivery_count: u32::try_from(number("BOSUN_MAX_DELIVERY_COUNT", 10, 1)?)
                .map_err(|_| invalid("BOSUN_MAX_DELIVERY_COUNT", "is too large"))?,
            retry_base_delay: millis("BOSUN_RETRY_BASE_DELAY_MS", 1_000)?,
            poll_interval: millis("BOSUN_POLL_INTERVAL_MS", 250)?,
            shutdown_grace: millis("BOSUN_SHUTDOWN_GRACE_MS", 25_000)?,
            log_format,
            failpoint,
            operator: get("BOSUN_OPERATOR")
                .or_else(|| env.get("USER"))
                .unwrap_or_else(|| "unknown".to_owned()),
            delivery,
        };
        if settings.lock_duration < Duration::from_millis(500) {
            return Err(invalid("BOSUN_LOCK_DURATION_MS", "must be at least 500"));
        }
        if settings.poll_interval.is_zero() {
            return Err(invalid("BOSUN_POLL_INTERVAL_MS", "must be more than 0"));
        }
        Ok(settings)
    }

    /// Defaults with the data directory set (tests, `bosun demo`).
    pub fn with_data_dir(data_dir: impl Into<PathBuf>) -> Self {
        let mut settings = Self::from_sources(&BTreeMap::new(), &BTreeMap::new()).unwrap_or_else(|_| unreachable!());
        settings.data_dir = data_dir.into();
        settings
    }

    /// The embedded transport's database file.
    pub fn transport_path(&self) -> PathBuf {
        self.data_dir.join("transport.db")
    }

    /// The SQLite store's database file.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("state.db")
    }

    /// Root of the local Git host's bare repositories.
    pub fn git_root(&self) -> PathBuf {
        self.data_dir.join("git")
    }

    /// Root of the filesystem blob store.
    pub fn blob_root(&self) -> PathBuf {
        self.data_dir.join("blobs")
    }
}

/// Parses `a,b , c` into consumer names, checking each against the routing table.
pub fn parse_consumer_list(list: &str) -> Result<Vec<String>, ConfigError> {
    let names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    if names.is_empty() {
        return Err(invalid("BOSUN_CONSUMERS", "names no consumer"));
    }
    for name in &names {
        if bosun_contracts::routing::consumer(name).is_none() {
            let known: Vec<_> = bosun_contracts::CONSUMERS.iter().map(|c| c.name).collect();
            return Err(invalid(
                "BOSUN_CONSUMERS",
                format!("`{name}` is not a consumer (known: {})", known.join(", ")),
            ));
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn defaults() {
        let settings = Settings::from_sources(&map(&[]), &map(&[])).unwrap();
        assert_eq!(settings.data_dir, PathBuf::from(".bosun"));
        assert_eq!(settings.retry_base_delay, Duration::from_secs(1));
        assert_eq!(settings.adapters, AdapterKind::Local);
        assert_eq!(settings.consumers, None);
    }

    #[test]
    fn service_bus_settings() {
        let emulator = "Endpoint=sb://127.0.0.1:5673;SharedAccessKeyName=RootManageSharedAccessKey;\
                        SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true";
        let settings = Settings::from_sources(
            &map(&[
                ("BOSUN_TRANSPORT", "servicebus"),
                ("BOSUN_SERVICEBUS_CONNECTION_STRING", emulator),
                ("BOSUN_SERVICEBUS_PREFETCH", "4"),
            ]),
            &map(&[]),
        )
        .unwrap();
        assert_eq!(settings.transport, TransportKind::ServiceBus);
        let servicebus = settings.servicebus.unwrap();
        assert_eq!(servicebus.endpoint.amqp_url(), "amqp://127.0.0.1:5673");
        assert_eq!(servicebus.prefetch, 4);
        assert!(servicebus.verify_topology);
        let entra = Settings::from_sources(
            &map(&[
                ("BOSUN_TRANSPORT", "servicebus"),
                ("BOSUN_SERVICEBUS_NAMESPACE", "contoso"),
                ("BOSUN_SERVICEBUS_AUTH", "workload-identity"),
            ]),
            &map(&[]),
        )
        .unwrap();
        assert_eq!(
            entra.servicebus.unwrap().endpoint.host,
            "contoso.servicebus.windows.net"
        );
        for (env, named) in [
            (vec![("BOSUN_TRANSPORT", "servicebus")], "BOSUN_TRANSPORT"),
            (
                vec![
                    ("BOSUN_TRANSPORT", "servicebus"),
                    (
                        "BOSUN_SERVICEBUS_CONNECTION_STRING",
                        "Endpoint=sb://x/;SharedAccessKey=secret",
                    ),
                ],
                "SharedAccessKeyName",
            ),
            (
                vec![
                    ("BOSUN_TRANSPORT", "servicebus"),
                    ("BOSUN_SERVICEBUS_NAMESPACE", "contoso"),
                    ("BOSUN_SERVICEBUS_AUTH", "password"),
                ],
                "BOSUN_SERVICEBUS_AUTH",
            ),
        ] {
            let err = Settings::from_sources(&map(&env), &map(&[])).unwrap_err().to_string();
            assert!(err.contains(named), "{err}");
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[test]
    fn environment_overrides_file() {
        let env = map(&[("BOSUN_DATA_DIR", "/env"), ("BOSUN_RETRY_BASE_DELAY_MS", "10")]);
        let file = map(&[("BOSUN_DATA_DIR", "/file"), ("BOSUN_CONCURRENCY", "3")]);
        let settings = Settings::from_sources(&env, &file).unwrap();
        assert_eq!(settings.data_dir, PathBuf::from("/env"));
        assert_eq!(settings.retry_base_delay, Duration::from_millis(10));
        assert_eq!(settings.concurrency, 3);
    }

    #[test]
    fn bad_values_name_the_setting() {
        let err = Settings::from_sources(&map(&[("BOSUN_RETRY_BASE_DELAY_MS", "soon")]), &map(&[])).unwrap_err();
        assert!(err.to_string().contains("BOSUN_RETRY_BASE_DELAY_MS"), "{err}");
        let err = Settings::from_sources(&map(&[("BOSUN_CONSUMERS", "commit,billing")]), &map(&[])).unwrap_err();
        assert!(err.to_string().contains("billing"), "{err}");
        let err = Settings::from_sources(&map(&[("BOSUN_ADAPTERS", "azure")]), &map(&[])).unwrap_err();
        assert!(err.to_string().contains("BOSUN_AZURE_DEVOPS_ORG_URL"), "{err}");
    }

    #[test]
    fn azure_devops_project_may_name_a_project_per_tenant() {
        let env = |project: &str| {
            map(&[
                ("BOSUN_ADAPTERS", "azure"),
                ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso"),
                ("BOSUN_AZURE_DEVOPS_PROJECT", project),
                ("BOSUN_AZURE_DEVOPS_PAT", "pat"),
            ])
        };
        for project in ["delivery", "delivery-{tenant}", "{tenant}"] {
            let settings = Settings::from_sources(&env(project), &map(&[])).unwrap();
            let AdapterKind::Azure(azure) = settings.adapters else {
                panic!("azure adapters expected");
            };
            assert_eq!(azure.project, project);
        }
        for project in ["delivery-{team}", "delivery-{tenant", "delivery}"] {
            let err = Settings::from_sources(&env(project), &map(&[])).unwrap_err();
            assert!(err.to_string().contains("BOSUN_AZURE_DEVOPS_PROJECT"), "{err}");
        }
        let err = Settings::from_sources(&env("delivery-{team}"), &map(&[])).unwrap_err();
        assert!(
            err.to_string().contains("`{team}` is not a known template variable"),
            "{err}"
        );
    }

    #[test]
    fn http_limits_have_documented_defaults_and_parse() {
        use crate::api::origin::{AllowedOrigin, Origin};
        let defaults = Settings::from_sources(&map(&[]), &map(&[])).unwrap().http_limits;
        assert_eq!(defaults, HttpLimits::default());
        assert_eq!(defaults.header_timeout, Duration::from_secs(10));
        assert_eq!(defaults.idle_timeout, Duration::from_secs(75));
        assert_eq!(defaults.max_connections, 4096);
        assert_eq!((defaults.rate_limit_per_second, defaults.rate_limit_burst), (20, 100));
        assert_eq!(defaults.allowed_origins, vec![AllowedOrigin::Loopback]);

        let env = map(&[
            ("BOSUN_HTTP_HEADER_TIMEOUT_MS", "2500"),
            ("BOSUN_HTTP_IDLE_TIMEOUT_MS", " 30000 "),
            ("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", "0"),
            ("BOSUN_HTTP_ALLOWED_ORIGINS", "https://Console.Example.com, loopback"),
        ]);
        let file = map(&[
            ("BOSUN_HTTP_MAX_CONNECTIONS", "300"),
            ("BOSUN_HTTP_RATE_LIMIT_BURST", "7"),
        ]);
        let limits = Settings::from_sources(&env, &file).unwrap().http_limits;
        assert_eq!(limits.header_timeout, Duration::from_millis(2500));
        assert_eq!(limits.idle_timeout, Duration::from_secs(30));
        assert_eq!(limits.max_connections, 300);
        assert_eq!((limits.rate_limit_per_second, limits.rate_limit_burst), (0, 7));
        assert_eq!(
            limits.allowed_origins,
            vec![
                AllowedOrigin::Exact(Origin::parse("https://console.example.com:443").unwrap()),
                AllowedOrigin::Loopback
            ]
        );
        let none = Settings::from_sources(&map(&[("BOSUN_HTTP_ALLOWED_ORIGINS", "none")]), &map(&[])).unwrap();
        assert!(none.http_limits.allowed_origins.is_empty());

        for (name, value, says) in [
            ("BOSUN_HTTP_HEADER_TIMEOUT_MS", "50", "at least 100"),
            ("BOSUN_HTTP_IDLE_TIMEOUT_MS", "soon", "milliseconds"),
            ("BOSUN_HTTP_MAX_CONNECTIONS", "1", "at least 2"),
            ("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", "-1", "whole number"),
            ("BOSUN_HTTP_RATE_LIMIT_PER_SECOND", "99999999999", "too large"),
            ("BOSUN_HTTP_RATE_LIMIT_BURST", "0", "at least 1"),
            ("BOSUN_HTTP_ALLOWED_ORIGINS", "console.example.com", "scheme://host"),
            ("BOSUN_HTTP_ALLOWED_ORIGINS", "https://example.com/path", "no path"),
            ("BOSUN_HTTP_ALLOWED_ORIGINS", " , ", "names no origin"),
        ] {
            let err = Settings::from_sources(&map(&[(name, value)]), &map(&[]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(name) && err.contains(says), "{name}={value}: {err}");
        }
        // A TOML list is a comma list.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bosun.toml");
        std::fs::write(
            &path,
            "http_allowed_origins = [\"http://10.0.0.5:8080\"]\nhttp_max_connections = 64\n",
        )
        .unwrap();
        let limits = Settings::from_sources(&map(&[]), &read_file(&path).unwrap())
            .unwrap()
            .http_limits;
        assert_eq!(limits.max_connections, 64);
        assert_eq!(
            limits.allowed_origins,
            vec![AllowedOrigin::Exact(Origin::parse("http://10.0.0.5:8080").unwrap())]
        );
    }

    #[test]
    fn secrets_are_not_printed() {
        let env = map(&[
            ("BOSUN_ADAPTERS", "azure"),
            ("BOSUN_AZURE_DEVOPS_ORG_URL", "https://dev.azure.com/contoso/"),
            ("BOSUN_AZURE_DEVOPS_PROJECT", "delivery"),
            ("BOSUN_AZURE_DEVOPS_PAT", "super-secret-pat"),
        ]);
        let settings = Settings::from_sources(&env, &map(&[])).unwrap();
        let printed = format!("{settings:?}");
        assert!(!printed.contains("super-secret-pat"), "{printed}");
        assert!(printed.contains("[redacted]"));
    }

    #[test]
    fn toml_file_is_read_and_unknown_keys_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bosun.toml");
        std::fs::write(
            &path,
            "data_dir = \"/srv/bosun\"\nconsumers = [\"commit\", \"repository-provisioning\"]\nconcurrency = 4\n",
        )
        .unwrap();
        let file = read_file(&path).unwrap();
        let settings = Settings::from_sources(&map(&[]), &file).unwrap();
        assert_eq!(settings.data_dir, PathBuf::from("/srv/bosun"));
        assert_eq!(
            settings.consumers,
            Some(vec!["commit".to_owned(), "repository-provisioning".to_owned()])
        );
        std::fs::write(&path, "dta_dir = \"/x\"\n").unwrap();
        let err = read_file(&path).unwrap_err();
        assert!(err.to_string().contains("dta_dir"), "{err}");
    }
}
