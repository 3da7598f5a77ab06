//! What the settings are: every value bosun reads, typed, with its
//! variable name and default in its doc comment. [`super`] reads them.

use std::path::PathBuf;
use std::time::Duration;

use super::origin::AllowedOrigin;
use crate::ports::error::BoxError;

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
    /// A value does not parse; the parser's error is the source.
    #[error("setting {name}: {source}")]
    Unparsable {
        /// The environment variable name of the setting.
        name: String,
        /// The parser's error.
        #[source]
        source: BoxError,
    },
    /// The configuration file names something bosun does not read.
    #[error("config file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The configuration file could not be read.
    #[error("config file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The error reading it.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not TOML.
    #[error("config file {path}: {source}")]
    NotToml {
        /// The file.
        path: PathBuf,
        /// The TOML parser's error.
        #[source]
        source: toml::de::Error,
    },
}

/// A value that does not parse, with the parser's error.
pub(super) fn unparsable(name: &str, source: impl Into<BoxError>) -> ConfigError {
    ConfigError::Unparsable {
        name: name.to_owned(),
        source: source.into(),
    }
}

pub(super) fn invalid(name: &str, reason: impl Into<String>) -> ConfigError {
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

/// Where the store keeps sagas, idempotency records, the outbox, dead
/// letters, timelines and keys: PostgreSQL exactly when
/// `BOSUN_DATABASE_URL` is set, else SQLite in the data directory. Read
/// through [`Settings::store_kind`](crate::runtime::config::Settings::store_kind), the one place that decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind<'a> {
    /// `state.db` in the data directory (the default).
    Sqlite(std::path::PathBuf),
    /// The database at `BOSUN_DATABASE_URL`.
    Postgres(&'a Secret),
}

/// `BOSUN_TRANSPORT=servicebus`: where the namespace is and how to use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceBusSettings {
    /// The namespace and credentials (from
    /// `BOSUN_SERVICEBUS_CONNECTION_STRING`, or `BOSUN_SERVICEBUS_NAMESPACE`
    /// with `BOSUN_SERVICEBUS_AUTH` / `BOSUN_SERVICEBUS_CLIENT_ID`).
    pub endpoint: crate::backends::servicebus::connection::ServiceBusEndpoint,
    /// `BOSUN_SERVICEBUS_MANAGEMENT_URL`: where the management API is, when
    /// not at the endpoint's own URL (`https://host`, `http://host` for the
    /// emulator): an emulator's or a test broker's HTTP port
    /// (`http://127.0.0.1:5300`). Unset by default.
    pub management_url: Option<String>,
    /// `BOSUN_SERVICEBUS_PREFETCH`: messages each receiver link is given
    /// credit for ahead of the handlers. Default 16.
    pub prefetch: u32,
    /// `BOSUN_SERVICEBUS_SEND_TIMEOUT_MS`: the longest a send may take
    /// before its link is recreated and the send reported failed. Default 30 000.
    pub send_timeout: Duration,
    /// `BOSUN_SERVICEBUS_VERIFY`: check at start that every entity exists
    /// (`true`, the default) through the management API.
    pub verify_topology: bool,
    /// `BOSUN_ALLOW_LOCAL_STORE`: let `serve` and `api` keep bosun's state
    /// in this process's SQLite file although the transport is shared
    /// (`true`: a single-pod trial). Default `false`: without
    /// `BOSUN_DATABASE_URL` they refuse to start, since processes that
    /// share Service Bus but each keep their own state (on a pod's
    /// emptyDir, lost on restart) handle a delivery apart.
    pub allow_local_store: bool,
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
    /// `BOSUN_ACR_AUTH` (+ `BOSUN_ACR_TENANT`): Entra ID tokens from this
    /// identity, refreshed before they expire.
    Entra {
        /// The identity.
        identity: EntraIdentity,
        /// The Entra tenant.
        tenant: Option<String>,
    },
}

/// Azure Container Registry settings (container-build with `azure` adapters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcrSettings {
    /// `BOSUN_ACR_REGISTRY`: e.g. `contoso.azurecr.io`.
    pub registry: String,
    /// `BOSUN_ACR_ENDPOINT`: the registry's URL; by default
    /// `https://<BOSUN_ACR_REGISTRY>` (another endpoint: a private link's
    /// address, or a test registry).
    pub endpoint: Option<String>,
    /// The credential.
    pub credential: AcrCredential,
    /// ACR Tasks, when `BOSUN_CONTAINER_BUILDER=acr-tasks`: the registry
    /// builds the images.
    pub tasks: Option<AcrTasksSettings>,
}

/// Where ACR Tasks schedules runs (`BOSUN_CONTAINER_BUILDER=acr-tasks` with
/// `azure` adapters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcrTasksSettings {
    /// `BOSUN_ACR_SUBSCRIPTION`: the registry's subscription id.
    pub subscription: String,
    /// `BOSUN_ACR_RESOURCE_GROUP`: the registry's resource group.
    pub resource_group: String,
    /// `BOSUN_ACR_REGISTRY_NAME`: the registry's resource name; by default
    /// the first label of `BOSUN_ACR_REGISTRY` (`contoso` for
    /// `contoso.azurecr.io`).
    pub registry_name: String,
    /// `BOSUN_ACR_ARM_ENDPOINT`: Azure Resource Manager; by default
    /// `https://management.azure.com`.
    pub arm_endpoint: Option<String>,
    /// `BOSUN_ACR_ARM_AUTH`: the identity whose ARM tokens schedule runs;
    /// by default the identity of `BOSUN_ACR_AUTH`, else `default`.
    pub identity: EntraIdentity,
    /// `BOSUN_ACR_RUN_TIMEOUT_MS`: the longest a run may take before ACR
    /// stops it (5 min to 8 h; default 1 h).
    pub run_timeout: Duration,
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

/// Pulumi settings (iac-provisioning with `azure` adapters): where the
/// Pulumi program comes from, first match wins — a folder on this machine
/// (`BOSUN_PULUMI_PROGRAM_DIR`), a configured repository at a ref
/// (`BOSUN_PULUMI_PROGRAM_REPOSITORY`, `BOSUN_PULUMI_PROGRAM_REF`), or the
/// module's own repository at the release's commit (the default) — and
/// the CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulumiSettings {
    /// `BOSUN_PULUMI_PROGRAM_DIR`: a Pulumi program (project) directory on
    /// this machine (baked into the image, a mounted volume), used for
    /// every plan. Unset by default: the program is fetched from Git.
    pub program_dir: Option<PathBuf>,
    /// `BOSUN_PULUMI_PROGRAM_REPOSITORY`: one repository holding the
    /// programs — a repository name in the tenant's Azure DevOps project,
    /// or a Git URL (`{tenant}` is replaced). Unset by default: the
    /// module's own repository, as the release names it.
    pub repository: Option<String>,
    /// `BOSUN_PULUMI_PROGRAM_REF`: the branch, tag or commit of
    /// `BOSUN_PULUMI_PROGRAM_REPOSITORY` fetched (default `main`).
    pub reference: String,
    /// `BOSUN_PULUMI_PROGRAM_PATH`: the program's folder inside the
    /// repository (default `infra`; `.` for the root).
    pub path: String,
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
    pub pulumi: PulumiSettings,
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
    /// ... or an Entra ID bearer token (`BOSUN_AZURE_DEVOPS_TOKEN`) ...
    pub bearer_token: Option<Secret>,
    /// ... or Entra ID tokens from this identity (`BOSUN_AZURE_DEVOPS_AUTH`),
    /// refreshed before they expire; it wins over the PAT and the token.
    pub entra: Option<EntraIdentity>,
}

/// Which Entra ID identity an Azure client gets its tokens from
/// (`workload-identity`, `managed-identity`, `azure-cli`, `default`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntraIdentity {
    /// Workload identity, then the Azure CLI, then the managed identity.
    Default,
    /// AKS workload identity (the webhook's `AZURE_*` environment).
    WorkloadIdentity,
    /// The host's system-assigned managed identity.
    ManagedIdentity,
    /// The developer's `az login`.
    AzureCli,
}

impl EntraIdentity {
    /// Parses the value of `setting`.
    pub fn parse(setting: &str, text: &str) -> Result<Self, ConfigError> {
        match text.trim() {
            "default" => Ok(Self::Default),
            "workload-identity" => Ok(Self::WorkloadIdentity),
            "managed-identity" => Ok(Self::ManagedIdentity),
            "azure-cli" => Ok(Self::AzureCli),
            other => Err(invalid(
                setting,
                format!("`{other}` is not workload-identity, managed-identity, azure-cli or default"),
            )),
        }
    }
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
    /// In the settle of a retry or a dead letter, after the store's writes
    /// and before the settle is finished (before the transaction commits
    /// where the backends share one; before the transport is told where
    /// not), the process stops doing work and waits to be killed.
    HaltInFailureSettle,
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
    pub allowed_origins: Vec<AllowedOrigin>,
}

pub(super) const HTTP_HEADER_TIMEOUT_MS: u64 = 10_000;
pub(super) const HTTP_IDLE_TIMEOUT_MS: u64 = 75_000;
pub(super) const HTTP_MAX_CONNECTIONS: u64 = 4_096;
pub(super) const HTTP_RATE_LIMIT_PER_SECOND: u64 = 20;
pub(super) const HTTP_RATE_LIMIT_BURST: u64 = 100;

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_millis(HTTP_HEADER_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(HTTP_IDLE_TIMEOUT_MS),
            max_connections: HTTP_MAX_CONNECTIONS as usize,
            rate_limit_per_second: HTTP_RATE_LIMIT_PER_SECOND as u32,
            rate_limit_burst: HTTP_RATE_LIMIT_BURST as u32,
            allowed_origins: vec![AllowedOrigin::Loopback],
        }
    }
}

/// How long bosun keeps what it no longer needs, and how often it prunes
/// (`BOSUN_RETENTION_*`). A retention of `0` days keeps that kind forever
/// (`None` here). Dead letters, unsent outbox entries and sagas still in
/// flight are never pruned. [`Default`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionSettings {
    /// `BOSUN_RETENTION_HANDLED_DAYS`: idempotency records (and the attempts
    /// of failed handlings). Default 14: well past every redelivery and
    /// retry horizon (retries back off for minutes, the transports detect
    /// duplicates for 7 days), so a message that comes back is still
    /// recognised. `0` or at least 7.
    pub handled: Option<Duration>,
    /// `BOSUN_RETENTION_OUTBOX_DAYS`: outbox entries, counted from when
    /// they were sent (unsent ones are kept). Default 7: the transports'
    /// duplicate-detection window, within which a re-sent copy is dropped
    /// anyway.
    pub outbox_sent: Option<Duration>,
    /// `BOSUN_RETENTION_TIMELINE_DAYS`: delivery timeline lines, and a
    /// delivery's record once its lines are gone (a delivery with a dead
    /// letter keeps its lines while the dead letter exists). Default 30:
    /// what operators look up is the last weeks.
    pub timeline: Option<Duration>,
    /// `BOSUN_RETENTION_COMPLETED_SAGAS_DAYS`: finished sagas (a release
    /// completed or rejected), with their history, counted from their last
    /// save. Default 30: a late message for a release gone longer than this
    /// would start it afresh. GitOps and probe sagas never finish.
    pub completed_sagas: Option<Duration>,
    /// `BOSUN_RETENTION_SAGA_HISTORY_ENTRIES`: the most history entries a
    /// saga keeps (those of its last this many versions), within the
    /// timeline's retention; its state is never pruned. Default 1000: a
    /// GitOps environment or probe tally that never finishes keeps a
    /// bounded history however busy; `0` keeps every entry.
    pub saga_history_entries: Option<u64>,
    /// `BOSUN_RETENTION_INTERVAL_MS`: how often `serve` prunes (batch after
    /// batch while they come back full). Default 300 000 (5 min); `0`: never
    /// in the background (run `bosun prune` instead).
    pub interval: Option<Duration>,
    /// `BOSUN_RETENTION_BATCH`: most rows deleted per kind per statement.
    /// Default 500.
    pub batch: usize,
}

/// A day.
pub(super) const DAY: Duration = Duration::from_secs(24 * 3600);

/// The longest retention in days (100 years; `0` keeps forever).
pub(super) const MAX_RETENTION_DAYS: u64 = 36_500;

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            handled: Some(DAY * 14),
            outbox_sent: Some(DAY * 7),
            timeline: Some(DAY * 30),
            completed_sagas: Some(DAY * 30),
            saga_history_entries: Some(1000),
            interval: Some(Duration::from_secs(300)),
            batch: 500,
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
    /// `BOSUN_DATABASE_AUTH` (+ `BOSUN_DATABASE_CLIENT_ID`): the URL's
    /// password (`password`, the default) or Entra ID tokens of an identity.
    pub database_auth: super::DatabaseAuth,
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
    /// `BOSUN_OPS_ADDR`: where `serve` and `api` answer `/healthz`,
    /// `/readyz` and `/metrics` alone (the ops port), e.g. `0.0.0.0:9090`;
    /// `--ops-addr` overrides it. Unset: no ops port.
    pub ops_addr: Option<std::net::SocketAddr>,
    /// `BOSUN_ADAPTERS`: `local` (default) or `azure`.
    pub adapters: AdapterKind,
    /// `BOSUN_CONSUMERS`: comma-separated consumers to run; all when unset.
    pub consumers: Option<Vec<String>>,
    /// `BOSUN_CONCURRENCY`: messages handled at once per consumer. Default 8.
    pub concurrency: usize,
    /// `BOSUN_LOCK_DURATION_MS`: peek-lock duration. Default 30 000.
    pub lock_duration: Duration,
    /// `BOSUN_DATABASE_POOL_SIZE`: most PostgreSQL connections this
    /// process opens (store, transport and its LISTEN connection together).
    /// Default 10; at least 2.
    pub database_pool_size: u32,
    /// `BOSUN_DATABASE_POOL_MIN`: PostgreSQL connections opened at start
    /// and kept open, so the first burst of work does not wait for
    /// connections to be set up. Default 0; at most the pool size.
    pub database_pool_min: u32,
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
    /// Messages of other releases during a rolling upgrade
    /// (`BOSUN_NEWER_MESSAGE_WAIT`, `BOSUN_NEWER_MESSAGE_PATIENCE`,
    /// `BOSUN_COMPAT_VERSION`).
    pub message_versions: super::MessageVersionSettings,
    /// `BOSUN_LOG_FORMAT`: `text` (default) or `json`.
    pub log_format: LogFormat,
    /// OpenTelemetry: the standard `OTEL_*` variables (traces over
    /// OTLP/HTTP, off unless an endpoint is named).
    pub telemetry: super::TelemetrySettings,
    /// `BOSUN_FAILPOINT`: test hook (`halt-after-state-commit`).
    pub failpoint: Option<Failpoint>,
    /// `BOSUN_OPERATOR` (else `USER`, else `LOGNAME`, else the account's
    /// name, as `id -un` says): who operator actions are recorded as.
    pub operator: String,
    /// Release policy and timings of the long-running consumers.
    pub delivery: DeliverySettings,
    /// What is pruned when (`BOSUN_RETENTION_*`).
    pub retention: RetentionSettings,
    /// How container-build builds images with the local adapters
    /// (`BOSUN_CONTAINER_*`, `BOSUN_BUILDAH_BINARY`).
    pub container: ContainerBuilderSettings,
    /// `BOSUN_KEY_MAX_LIFETIME_DAYS`: the longest an API key made by
    /// `bosun keys create` or `rotate` lives. Default 90; 1 to 3650.
    pub key_max_lifetime: Duration,
}

/// `BOSUN_CONTAINER_BUILDER`: which builder container-build uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerBuilderChoice {
    /// `auto` (the default): buildah when it runs and a push registry is
    /// set (`BOSUN_CONTAINER_REGISTRY`), else the built-in builder into
    /// the local OCI layouts.
    Auto,
    /// `buildah`: always buildah; bosun does not start without it.
    Buildah,
    /// `layout`: the built-in reproducible builder (`FROM scratch`, no
    /// `RUN`) into the local OCI layouts.
    Layout,
    /// `acr-tasks`: with `azure` adapters, the registry builds the image
    /// (ACR Tasks); bosun follows the run without holding a lock.
    AcrTasks,
}

/// The local container builder's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerBuilderSettings {
    /// `BOSUN_CONTAINER_BUILDER`: `auto` (default), `buildah`, `layout` or
    /// `acr-tasks`.
    pub builder: ContainerBuilderChoice,
    /// `BOSUN_BUILDAH_BINARY`: the `buildah` executable (default `buildah`
    /// on `PATH`).
    pub buildah_binary: PathBuf,
    /// `BOSUN_CONTAINER_BUILD_TIMEOUT_MS`: the longest one buildah command
    /// (a build, a push) may run before it is stopped and the build retried
    /// (default 30 minutes).
    pub build_timeout: std::time::Duration,
    /// `BOSUN_CONTAINER_REGISTRY`: the registry buildah pushes to,
    /// `host[:port]` (modules name it in `container.registry`). Unset by
    /// default.
    pub registry: Option<String>,
    /// `BOSUN_CONTAINER_INSECURE_REGISTRIES`: comma-separated `host[:port]`
    /// reached over plain HTTP (base images and pushes), e.g. a loopback
    /// registry. Empty by default.
    pub insecure_registries: Vec<String>,
    /// `BOSUN_CONTAINER_REGISTRY_USERNAME` + `BOSUN_CONTAINER_REGISTRY_PASSWORD`:
    /// the push registry's credential, when it needs one.
    pub credential: Option<(String, Secret)>,
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
    /// `BOSUN_VERIFY_AZURE_AUTH`: the Entra identity whose Azure Resource
    /// Manager tokens read Azure Monitor alerts for verification checks
    /// (`workload-identity`, `managed-identity`, `azure-cli`, `default`);
    /// unset, an `azureMonitor` check fails saying bosun has no identity.
    pub verify_azure_identity: Option<EntraIdentity>,
    /// `BOSUN_VERIFY_ARM_ENDPOINT`: Azure Resource Manager for those reads;
    /// by default `https://management.azure.com`.
    pub verify_arm_endpoint: Option<String>,
    /// `BOSUN_VERIFY_ALLOWED_HOSTS`: the hosts verification checks may
    /// reach (`payments.contoso.net`, `*.contoso.net`), comma-separated;
    /// empty (the default): any host but a link-local one.
    pub verify_allowed_hosts: Vec<String>,
}
