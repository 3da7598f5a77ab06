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

use bosun_consumers::iac_provisioning::program::{DEFAULT_PROGRAM_PATH, DEFAULT_PROGRAM_REF};

mod acr;
mod database;
mod message_versions;
mod origin;
mod places;
mod telemetry;
mod types;

pub use database::DatabaseAuth;
pub use message_versions::MessageVersionSettings;
pub use origin::{AllowedOrigin, Origin, OriginError, parse_allowed_origins};
pub use telemetry::{OtlpExport, OtlpMetrics, TelemetrySettings, TraceSampler};
pub use types::*;
use types::{invalid, unparsable};

/// Where raw values come from: a key (`BOSUN_DATA_DIR`) to its text.
pub trait Source {
    /// The raw value of a setting.
    fn get(&self, name: &str) -> Option<String>;

    /// The name of the account this runs as, for when neither
    /// `BOSUN_OPERATOR` nor `USER` (nor `LOGNAME`) says who the operator is.
    fn account_name(&self) -> Option<String> {
        None
    }
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Environment;

impl Source for Environment {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    /// `id -un`: the passwd entry (through NSS) of the process's user id.
    fn account_name(&self) -> Option<String> {
        let output = std::process::Command::new("id")
            .arg("-un")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        let name = String::from_utf8(output.stdout).ok()?.trim().to_owned();
        (output.status.success() && !name.is_empty()).then_some(name)
    }
}

impl Source for BTreeMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        BTreeMap::get(self, name).cloned()
    }
}

/// The settings that are no one consumer's own: the host's, the backends',
/// the servers', and the Azure DevOps connection the `azure` adapters
/// share. Each consumer's own are declared by its registration
/// ([`Registration::settings`](crate::runtime::registry::Registration::settings)).
const GENERIC: &[&str] = &[
    "BOSUN_DATA_DIR",
    "BOSUN_TRANSPORT",
    "BOSUN_DATABASE_URL",
    "BOSUN_DATABASE_AUTH",
    "BOSUN_DATABASE_CLIENT_ID",
    "BOSUN_DATABASE_POOL_SIZE",
    "BOSUN_DATABASE_POOL_MIN",
    "BOSUN_SERVICEBUS_CONNECTION_STRING",
    "BOSUN_SERVICEBUS_NAMESPACE",
    "BOSUN_SERVICEBUS_AUTH",
    "BOSUN_SERVICEBUS_CLIENT_ID",
    "BOSUN_SERVICEBUS_PREFETCH",
    "BOSUN_SERVICEBUS_SEND_TIMEOUT_MS",
    "BOSUN_SERVICEBUS_VERIFY",
    "BOSUN_SERVICEBUS_MANAGEMENT_URL",
    "BOSUN_ALLOW_LOCAL_STORE",
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
    "BOSUN_OPS_ADDR",
    "BOSUN_ADAPTERS",
    "BOSUN_CONSUMERS",
    "BOSUN_CONCURRENCY",
    "BOSUN_LOCK_DURATION_MS",
    "BOSUN_MAX_DELIVERY_COUNT",
    "BOSUN_RETRY_BASE_DELAY_MS",
    "BOSUN_POLL_INTERVAL_MS",
    "BOSUN_SHUTDOWN_GRACE_MS",
    "BOSUN_NEWER_MESSAGE_WAIT",
    "BOSUN_NEWER_MESSAGE_PATIENCE",
    "BOSUN_COMPAT_VERSION",
    "BOSUN_RETENTION_HANDLED_DAYS",
    "BOSUN_RETENTION_OUTBOX_DAYS",
    "BOSUN_RETENTION_TIMELINE_DAYS",
    "BOSUN_RETENTION_COMPLETED_SAGAS_DAYS",
    "BOSUN_RETENTION_SAGA_HISTORY_ENTRIES",
    "BOSUN_RETENTION_INTERVAL_MS",
    "BOSUN_RETENTION_BATCH",
    "BOSUN_KEY_MAX_LIFETIME_DAYS",
    "BOSUN_LOG_FORMAT",
    "BOSUN_FAILPOINT",
    "BOSUN_OPERATOR",
    "BOSUN_AZURE_DEVOPS_ORG_URL",
    "BOSUN_AZURE_DEVOPS_PROJECT",
    "BOSUN_AZURE_DEVOPS_PAT",
    "BOSUN_AZURE_DEVOPS_TOKEN",
    "BOSUN_AZURE_DEVOPS_AUTH",
];

/// Every setting a file may set: the generic ones (`GENERIC`) and
/// `consumers`', the names every registered consumer reads (the registry's
/// `setting_names`, passed in by the caller: the registry is built from
/// settings, so settings do not look it up).
pub fn known_settings(consumers: impl IntoIterator<Item = &'static str>) -> Vec<&'static str> {
    GENERIC.iter().copied().chain(consumers).collect()
}

/// Reads a TOML settings file into `BOSUN_*` keys.
pub fn read_file(path: &Path, known: &[&str]) -> Result<BTreeMap<String, String>, ConfigError> {
    let file_error = |reason: String| ConfigError::File {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Unreadable {
        path: path.to_owned(),
        source,
    })?;
    let table: toml::Table = text.parse().map_err(|source| ConfigError::NotToml {
        path: path.to_owned(),
        source,
    })?;
    let mut values = BTreeMap::new();
    for (key, value) in table {
        let name = format!("BOSUN_{}", key.to_ascii_uppercase());
        if !known.contains(&name.as_str()) {
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
    /// given, else `BOSUN_CONFIG`, else `./bosun.toml` when it exists. A
    /// file may set the generic settings and those `known` adds (see
    /// [`known_settings`]).
    pub fn load(config_file: Option<&Path>, known: &[&str]) -> Result<Self, ConfigError> {
        let env = Environment;
        let path = config_file
            .map(Path::to_path_buf)
            .or_else(|| env.get("BOSUN_CONFIG").map(PathBuf::from))
            .or_else(|| Some(PathBuf::from("bosun.toml")).filter(|p| p.exists()));
        let file = match path {
            Some(path) => read_file(&path, known)?,
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

        let (database_url, database_auth) = database::read(&get)?;
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
            use crate::backends::servicebus::connection::ServiceBusEndpoint;
            let endpoint = match (
                get("BOSUN_SERVICEBUS_CONNECTION_STRING"),
                get("BOSUN_SERVICEBUS_NAMESPACE"),
            ) {
                (Some(text), None) => ServiceBusEndpoint::from_connection_string(&text)
                    .map_err(|err| unparsable("BOSUN_SERVICEBUS_CONNECTION_STRING", err))?,
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
            let management_url = match get("BOSUN_SERVICEBUS_MANAGEMENT_URL") {
                None => None,
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    Some(url.trim_end_matches('/').to_owned())
                }
                Some(_) => {
                    return Err(invalid(
                        "BOSUN_SERVICEBUS_MANAGEMENT_URL",
                        "must be an http(s) URL such as http://127.0.0.1:5300",
                    ));
                }
            };
            Some(ServiceBusSettings {
                endpoint,
                management_url,
                prefetch: u32::try_from(number("BOSUN_SERVICEBUS_PREFETCH", 16, 0)?)
                    .map_err(|_| invalid("BOSUN_SERVICEBUS_PREFETCH", "is too large"))?,
                send_timeout: millis("BOSUN_SERVICEBUS_SEND_TIMEOUT_MS", 30_000)?,
                verify_topology,
                allow_local_store: match get("BOSUN_ALLOW_LOCAL_STORE").as_deref() {
                    None | Some("false") => false,
                    Some("true") => true,
                    Some(_) => return Err(invalid("BOSUN_ALLOW_LOCAL_STORE", "must be true or false")),
                },
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
                let entra = get("BOSUN_AZURE_DEVOPS_AUTH")
                    .map(|text| EntraIdentity::parse("BOSUN_AZURE_DEVOPS_AUTH", &text))
                    .transpose()?;
                if pat.is_none() && bearer_token.is_none() && entra.is_none() {
                    return Err(invalid(
                        "BOSUN_AZURE_DEVOPS_PAT",
                        "a PAT, BOSUN_AZURE_DEVOPS_TOKEN or BOSUN_AZURE_DEVOPS_AUTH is required when BOSUN_ADAPTERS=azure",
                    ));
                }
                let acr = match get("BOSUN_ACR_REGISTRY") {
                    None => None,
                    Some(registry) => {
                        let credential = if let Some(text) = get("BOSUN_ACR_AUTH") {
                            AcrCredential::Entra {
                                identity: EntraIdentity::parse("BOSUN_ACR_AUTH", &text)?,
                                tenant: get("BOSUN_ACR_TENANT"),
                            }
                        } else if let Some(token) = get("BOSUN_ACR_ENTRA_TOKEN") {
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
                                         BOSUN_ACR_REFRESH_TOKEN, BOSUN_ACR_ENTRA_TOKEN or BOSUN_ACR_AUTH)",
                                    )
                                })?,
                                password: Secret::new(required("BOSUN_ACR_PASSWORD")?),
                            }
                        };
                        let tasks = if get("BOSUN_CONTAINER_BUILDER").as_deref().map(str::trim) == Some("acr-tasks") {
                            Some(acr::acr_tasks_settings(&get, &registry, &credential, &millis)?)
                        } else {
                            None
                        };
                        let endpoint = acr::endpoint(&get)?;
                        Some(AcrSettings {
                            registry,
                            endpoint,
                            credential,
                            tasks,
                        })
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
                // Empty is unset (infra/'s ConfigMap lists the repository empty).
                let text = |name: &str| get(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
                let pulumi = PulumiSettings {
                    program_dir: get("BOSUN_PULUMI_PROGRAM_DIR").map(PathBuf::from),
                    repository: text("BOSUN_PULUMI_PROGRAM_REPOSITORY"),
                    reference: text("BOSUN_PULUMI_PROGRAM_REF").unwrap_or_else(|| DEFAULT_PROGRAM_REF.to_owned()),
                    path: text("BOSUN_PULUMI_PROGRAM_PATH").unwrap_or_else(|| DEFAULT_PROGRAM_PATH.to_owned()),
                    binary: get("BOSUN_PULUMI_BINARY").map(PathBuf::from),
                };
                AdapterKind::Azure(Box::new(AzureDevOpsSettings {
                    acr,
                    artifacts,
                    argo_cd,
                    pulumi,
                    organization_url: organization_url.trim_end_matches('/').to_owned(),
                    project,
                    pat,
                    bearer_token,
                    entra,
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
        let telemetry = telemetry::read(&get)?;
        let failpoint = match get("BOSUN_FAILPOINT").as_deref() {
            None => None,
            Some("halt-after-state-commit") => Some(Failpoint::HaltAfterStateCommit),
            Some("halt-in-failure-settle") => Some(Failpoint::HaltInFailureSettle),
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
            verify_azure_identity: get("BOSUN_VERIFY_AZURE_AUTH")
                .map(|text| EntraIdentity::parse("BOSUN_VERIFY_AZURE_AUTH", &text))
                .transpose()?,
            verify_arm_endpoint: get("BOSUN_VERIFY_ARM_ENDPOINT")
                .map(|url| url.trim().trim_end_matches('/').to_owned()),
            verify_allowed_hosts: get("BOSUN_VERIFY_ALLOWED_HOSTS")
                .map(|hosts| {
                    hosts
                        .split(',')
                        .map(|host| host.trim().to_owned())
                        .filter(|host| !host.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
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
                    Some(list) => {
                        parse_allowed_origins(&list).map_err(|err| unparsable("BOSUN_HTTP_ALLOWED_ORIGINS", err))?
                    }
                },
            }
        };
        let ops_addr = match get("BOSUN_OPS_ADDR") {
            None => None,
            Some(text) => Some(text.trim().parse::<std::net::SocketAddr>().map_err(|_| {
                invalid(
                    "BOSUN_OPS_ADDR",
                    format!("`{text}` is not an IP address and port, e.g. 0.0.0.0:9090"),
                )
            })?),
        };
        let retention = {
            let defaults = RetentionSettings::default();
            let days = |name: &str, default: Option<Duration>, min: u64| -> Result<Option<Duration>, ConfigError> {
                let default = default.map_or(0, |keep| keep.as_secs() / DAY.as_secs());
                match number(name, default, 0)? {
                    0 => Ok(None),
                    n if n < min => Err(invalid(name, format!("must be 0 (keep forever) or at least {min}"))),
                    n if n > MAX_RETENTION_DAYS => Err(invalid(
                        name,
                        format!("must be at most {MAX_RETENTION_DAYS} (0 keeps forever)"),
                    )),
                    n => u32::try_from(n)
                        .ok()
                        .and_then(|n| DAY.checked_mul(n))
                        .map(Some)
                        .ok_or_else(|| invalid(name, "is too large")),
                }
            };
            RetentionSettings {
                handled: days("BOSUN_RETENTION_HANDLED_DAYS", defaults.handled, 7)?,
                outbox_sent: days("BOSUN_RETENTION_OUTBOX_DAYS", defaults.outbox_sent, 1)?,
                timeline: days("BOSUN_RETENTION_TIMELINE_DAYS", defaults.timeline, 1)?,
                completed_sagas: days("BOSUN_RETENTION_COMPLETED_SAGAS_DAYS", defaults.completed_sagas, 1)?,
                saga_history_entries: Some(number(
                    "BOSUN_RETENTION_SAGA_HISTORY_ENTRIES",
                    defaults.saga_history_entries.unwrap_or(0),
                    0,
                )?)
                .filter(|entries| *entries > 0),
                interval: Some(millis(
                    "BOSUN_RETENTION_INTERVAL_MS",
                    defaults
                        .interval
                        .map_or(0, |i| u64::try_from(i.as_millis()).unwrap_or(u64::MAX)),
                )?)
                .filter(|interval| !interval.is_zero()),
                batch: usize::try_from(number("BOSUN_RETENTION_BATCH", 500, 1)?)
                    .map_err(|_| invalid("BOSUN_RETENTION_BATCH", "is too large"))?,
            }
        };
        let key_max_lifetime = match number("BOSUN_KEY_MAX_LIFETIME_DAYS", 90, 1)? {
            n if n > 3650 => return Err(invalid("BOSUN_KEY_MAX_LIFETIME_DAYS", "must be at most 3650")),
            n => u32::try_from(n)
                .ok()
                .and_then(|n| DAY.checked_mul(n))
                .ok_or_else(|| invalid("BOSUN_KEY_MAX_LIFETIME_DAYS", "is too large"))?,
        };
        let container = {
            let builder = match get("BOSUN_CONTAINER_BUILDER").as_deref().map(str::trim) {
                None | Some("auto") => ContainerBuilderChoice::Auto,
                Some("buildah") => ContainerBuilderChoice::Buildah,
                Some("layout") => ContainerBuilderChoice::Layout,
                Some("acr-tasks") => ContainerBuilderChoice::AcrTasks,
                Some(other) => {
                    return Err(invalid(
                        "BOSUN_CONTAINER_BUILDER",
                        format!("`{other}` is not auto, buildah, layout or acr-tasks"),
                    ));
                }
            };
            let acr_registry = match &adapters {
                AdapterKind::Azure(azure) => azure.acr.is_some(),
                AdapterKind::Local => false,
            };
            if builder == ContainerBuilderChoice::AcrTasks && !acr_registry {
                return Err(invalid(
                    "BOSUN_CONTAINER_BUILDER",
                    "acr-tasks builds in Azure Container Registry: it needs BOSUN_ADAPTERS=azure and BOSUN_ACR_REGISTRY",
                ));
            }
            let host = |name: &str, text: &str| -> Result<String, ConfigError> {
                let text = text.trim();
                bosun_contracts::validate::registry_host(name, text).map_err(|err| invalid(name, err.reason))?;
                Ok(text.to_owned())
            };
            let registry = get("BOSUN_CONTAINER_REGISTRY")
                .map(|text| host("BOSUN_CONTAINER_REGISTRY", &text))
                .transpose()?;
            let insecure_registries = get("BOSUN_CONTAINER_INSECURE_REGISTRIES")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|h| host("BOSUN_CONTAINER_INSECURE_REGISTRIES", h))
                .collect::<Result<Vec<_>, _>>()?;
            let credential = match (
                get("BOSUN_CONTAINER_REGISTRY_USERNAME"),
                get("BOSUN_CONTAINER_REGISTRY_PASSWORD"),
            ) {
                (Some(user), Some(password)) => Some((user, Secret::new(password))),
                (None, None) => None,
                (Some(_), None) => {
                    return Err(invalid(
                        "BOSUN_CONTAINER_REGISTRY_PASSWORD",
                        "is required with a username",
                    ));
                }
                (None, Some(_)) => {
                    return Err(invalid(
                        "BOSUN_CONTAINER_REGISTRY_USERNAME",
                        "is required with a password",
                    ));
                }
            };
            if builder == ContainerBuilderChoice::Buildah && registry.is_none() {
                return Err(invalid(
                    "BOSUN_CONTAINER_REGISTRY",
                    "is required with BOSUN_CONTAINER_BUILDER=buildah (the registry images are pushed to)",
                ));
            }
            ContainerBuilderSettings {
                builder,
                buildah_binary: get("BOSUN_BUILDAH_BINARY").map_or_else(|| PathBuf::from("buildah"), PathBuf::from),
                build_timeout: millis("BOSUN_CONTAINER_BUILD_TIMEOUT_MS", 1_800_000)?,
                registry,
                insecure_registries,
                credential,
            }
        };
        let settings = Self {
            data_dir: get("BOSUN_DATA_DIR").map_or_else(|| PathBuf::from(".bosun"), PathBuf::from),
            transport,
            servicebus,
            database_url,
            database_auth,
            blob,
            claim_check_bytes,
            http_max_body_bytes: usize::try_from(number("BOSUN_HTTP_MAX_BODY_BYTES", 4_194_304, 1024)?)
                .map_err(|_| invalid("BOSUN_HTTP_MAX_BODY_BYTES", "is too large"))?,
            http_limits,
            ops_addr,
            adapters,
            consumers,
            concurrency: usize::try_from(number("BOSUN_CONCURRENCY", 8, 1)?).unwrap_or(usize::MAX),
            lock_duration: millis("BOSUN_LOCK_DURATION_MS", 30_000)?,
            database_pool_size: u32::try_from(number("BOSUN_DATABASE_POOL_SIZE", 10, 2)?)
                .map_err(|_| invalid("BOSUN_DATABASE_POOL_SIZE", "is too large"))?,
            database_pool_min: u32::try_from(number("BOSUN_DATABASE_POOL_MIN", 0, 0)?)
                .map_err(|_| invalid("BOSUN_DATABASE_POOL_MIN", "is too large"))?,
            max_delivery_count: u32::try_from(number("BOSUN_MAX_DELIVERY_COUNT", 10, 1)?)
                .map_err(|_| invalid("BOSUN_MAX_DELIVERY_COUNT", "is too large"))?,
            retry_base_delay: millis("BOSUN_RETRY_BASE_DELAY_MS", 1_000)?,
            poll_interval: millis("BOSUN_POLL_INTERVAL_MS", 250)?,
            shutdown_grace: millis("BOSUN_SHUTDOWN_GRACE_MS", 25_000)?,
            message_versions: MessageVersionSettings::read(&get)?,
            log_format,
            telemetry,
            failpoint,
            operator: get("BOSUN_OPERATOR")
                .or_else(|| env.get("USER"))
                .or_else(|| env.get("LOGNAME"))
                .or_else(|| env.account_name())
                .unwrap_or_else(|| "unknown".to_owned()),
            delivery,
            retention,
            container,
            key_max_lifetime,
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
mod tests;
