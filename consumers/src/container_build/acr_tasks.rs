//! ACR Tasks: the registry builds the image, as `az acr build` has it do.
//! Any Dockerfile builds (base images from anywhere the registry can pull,
//! `RUN`, multi-stage), on Azure's agents, and the registry pushes it.
//!
//! # A build
//!
//! All calls go to Azure Resource Manager (api-version
//! [`API_VERSION`]) under the registry's resource,
//! `{arm}/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerRegistry/registries/{name}`,
//! with an Entra ID token for [`ARM_SCOPE`] (workload identity, managed
//! identity: [`crate::delivery::azure::credential`]); the identity needs a
//! role that may schedule runs (e.g. `Contributor` on the registry).
//!
//! 1. Idempotency: the build key ([`acr_build_key`]) is the SHA-256 of the
//!    context digest, the Dockerfile path, the build arguments, the
//!    platform and the image and tag. Every run pushes the image under its
//!    tag *and* under `bosun-<key>` ([`key_tag`]); when the registry
//!    already has `bosun-<key>` (asked over the OCI distribution API,
//!    [`super::azure::AzureContainerRegistry::manifest_summary`]), nothing
//!    is scheduled and the event says `alreadyPresent: true`. The runtime's
//!    own idempotency record (consumer + message id) keeps a redelivered
//!    event that was handled from reaching the adapter at all; a run still
//!    going is followed by its poll message, never started again. ACR runs
//!    carry no field of the caller's that could be searched while they are
//!    still running (their `outputImages` appear once they finished), so
//!    the adapter keeps its own record: right after `scheduleRun` answers,
//!    the run id goes into the blob store under the build key
//!    ([`RUNS_CONTAINER`], `<tenant>/container-build/<key>.json`). An event
//!    handled again after a crash before the runtime's commit finds it, and
//!    follows that run while it is going or succeeded (a failed one is
//!    scheduled again, as a replay wants). The one case left is a
//!    `scheduleRun` whose answer was lost (a timeout, a 5xx) or a crash
//!    between its answer and the record: the build may run twice, pushing
//!    the same tags.
//! 2. The context (the `container-context.tar` artifact) is read from the
//!    blob store, gzipped ([`crate::delivery::archive::gzip`]) and uploaded
//!    where `POST …/listBuildSourceUploadUrl` says (`uploadUrl`, a SAS URL:
//!    `PUT` with `x-ms-blob-type: BlockBlob`, no bearer token).
//! 3. `POST …/scheduleRun` with a `DockerBuildRequest`: `sourceLocation`
//!    (the upload's `relativePath`), `dockerFilePath`, `imageNames`
//!    (`<tenant>/<image>:<tag>` and `<tenant>/<image>:bosun-<key>`),
//!    `arguments` (the build arguments, none secret), `platform` (`os`,
//!    `architecture`, `variant`), `isPushEnabled: true`, `noCache: false`,
//!    `timeout`. The answer's `runId` goes into the consumer's
//!    `PollContainerBuild`; no lock is held while the run goes on.
//! 4. Each poll: `GET …/runs/{runId}`. `Queued`, `Started`, `Running` →
//!    poll again later. Finished: `POST …/runs/{runId}/listLogSasUrl` gives
//!    `logLink`, whose text is stored in the blob store (`build-logs`,
//!    `<tenant>/container-build/<image>/<tag>/<key>.log`, as buildah's).
//!    `Succeeded` → the digest ACR reports in `outputImages` (the entry of
//!    the image's repository and tag), its size read from the registry;
//!    `Failed`, `Canceled`, `Error`, `Timeout` → a permanent
//!    [`ContainerBuildError::BuilderFailed`] with the log's blob and last
//!    lines.
//!
//! `scheduleRun` answers with the `Run` resource (or, as a long-running
//! operation, `202 Accepted` whose `Location` gives the `Run` once it is
//! there); an answer without a
//! usable `runId` is a permanent error naming the operation, so the event
//! is dead-lettered for an operator to look at the registry's runs rather
//! than scheduling the build again.
//!
//! Errors follow the one Azure retry policy
//! ([`crate::delivery::azure::retry`]): 408, 409, 429 and 5xx with
//! `Retry-After` → retry after it, without → transient; other 4xx and
//! answers that break the API → permanent. A 401 from ARM to a token still
//! valid by its expiry (revoked, a signing-key rollover) is first answered
//! by one more try with a new token
//! ([`RefreshingToken::send_with_token`]); refused again, it is permanent
//! and says the new token was refused too.
//!
//! Over 800 lines on purpose: the whole ACR Tasks exchange (context upload,
//! scheduling, polling, log reading, digest) in the order a build runs it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::BlobRef;
use bosun_contracts::validate;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::azure::{AzureContainerRegistry, RegistryError, tenant_repository};
use super::buildah::tail;
use super::port::{BuildProgress, BuildRun, BuiltImage, ContainerBuildError, ImageBuilder, ImageSpec, RunningBuild};
use crate::BoxError;
use crate::delivery::archive::gzip::gzip;
use crate::delivery::azure::credential::RefreshingToken;
use crate::delivery::azure::http::{self, Redirects, Timeout};
use crate::delivery::azure::retry::retry_after;
use crate::delivery::blob::{BlobStore, sha256_hex};
use crate::delivery::oci::Platform;
use crate::delivery::pipeline::LOG_CONTAINER;

/// What builds: the `builder` of this adapter's errors.
pub const BUILDER: &str = "ACR Tasks";

pub use crate::delivery::azure::{ARM_SCOPE, DEFAULT_ARM_ENDPOINT};

/// How long a `scheduleRun` answered `202` is followed for its `Run`.
pub const LRO_PATIENCE: Duration = Duration::from_secs(120);
/// How often its result is read when the answer gives no `Retry-After`.
const LRO_POLL: Duration = Duration::from_secs(2);

/// The ARM api-version of every call: the one with `scheduleRun`,
/// `runs/{runId}`, `listLogSasUrl` and `listBuildSourceUploadUrl`.
pub const API_VERSION: &str = "2019-06-01-preview";

/// Default timeout of one HTTP request (a context upload can be large).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Default longest run: ACR stops a run after this (its own default).
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(3600);

/// The run timeouts ACR accepts.
const RUN_TIMEOUT_SECONDS: std::ops::RangeInclusive<u64> = 300..=28_800;

/// Longest log text kept when the log cannot be stored.
const MAX_TAIL_CHARS: usize = 4000;

/// The blob container of the runs this adapter scheduled: one small record
/// per build key, `<tenant>/container-build/<key>.json` holding the run id.
pub const RUNS_CONTAINER: &str = "build-runs";

/// What is kept of a scheduled run under its build key.
#[derive(Debug, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunRecord {
    run_id: String,
    #[serde(with = "time::serde::rfc3339")]
    scheduled_at: OffsetDateTime,
}

fn run_record_key(tenant: &str, key: &str) -> String {
    format!("{tenant}/container-build/{key}.json")
}

/// Where the registry is in Azure Resource Manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcrTasksConfig {
    /// The registry's subscription id.
    pub subscription: String,
    /// The registry's resource group.
    pub resource_group: String,
    /// The registry's resource name (`contoso` for `contoso.azurecr.io`).
    pub registry_name: String,
    /// Base URL of Azure Resource Manager; [`DEFAULT_ARM_ENDPOINT`] when
    /// `None` (another cloud, or a test server).
    pub arm_endpoint: Option<String>,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
    /// The longest a run may take before ACR stops it (300 s to 8 h).
    pub run_timeout: Duration,
}

impl AcrTasksConfig {
    /// The registry `registry_name` of `resource_group` in `subscription`,
    /// with the default endpoint and timeouts.
    pub fn new(
        subscription: impl Into<String>,
        resource_group: impl Into<String>,
        registry_name: impl Into<String>,
    ) -> Self {
        Self {
            subscription: subscription.into(),
            resource_group: resource_group.into(),
            registry_name: registry_name.into(),
            arm_endpoint: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            run_timeout: DEFAULT_RUN_TIMEOUT,
        }
    }
}

/// A configuration field that Azure Resource Manager would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ArmNameError {
    /// `subscription`, `resourceGroup`, `registryName`, `armEndpoint` or
    /// `runTimeout`.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// Checks the names of an [`AcrTasksConfig`] against Azure's rules: a
/// subscription id is a GUID; a resource group has 1-90 letters, digits,
/// `_`, `-`, `.`, `(`, `)` and does not end with `.`; a registry name has
/// 5-50 letters and digits; the run timeout is 300 s to 8 h.
pub fn check_config(config: &AcrTasksConfig) -> Result<(), ArmNameError> {
    let error = |field, reason: String| Err(ArmNameError { field, reason });
    let subscription = config.subscription.as_str();
    let groups: Vec<usize> = subscription.split('-').map(str::len).collect();
    if groups != [8, 4, 4, 4, 12] || !subscription.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return error(
            "subscription",
            format!("`{subscription}` is not a subscription id (a GUID)"),
        );
    }
    let group = config.resource_group.as_str();
    if group.is_empty()
        || group.chars().count() > 90
        || group.ends_with('.')
        || !group
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '(' | ')'))
    {
        return error(
            "resourceGroup",
            format!("`{group}` is not a resource group name (1-90 letters, digits, _ - . ( ), not ending with .)"),
        );
    }
    let name = config.registry_name.as_str();
    if !(5..=50).contains(&name.len()) || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
        return error(
            "registryName",
            format!("`{name}` is not a registry name (5-50 letters and digits)"),
        );
    }
    if !RUN_TIMEOUT_SECONDS.contains(&config.run_timeout.as_secs()) {
        return error(
            "runTimeout",
            format!(
                "{} s is outside what ACR accepts ({} to {} s)",
                config.run_timeout.as_secs(),
                RUN_TIMEOUT_SECONDS.start(),
                RUN_TIMEOUT_SECONDS.end()
            ),
        );
    }
    Ok(())
}

/// The build key of `spec` pushed to `repository`: the SHA-256 of the
/// context digest, the Dockerfile path, the build arguments, the platform,
/// the repository and the tag (64 hex digits).
pub fn acr_build_key(spec: &ImageSpec, repository: &str) -> String {
    let inputs = json!({
        "context": spec.context.sha256,
        "dockerfile": spec.dockerfile,
        "buildArgs": spec.build_args,
        "platform": spec.platform,
        "repository": repository,
        "tag": spec.tag,
    });
    sha256_hex(inputs.to_string().as_bytes())
}

/// The second tag every run pushes, `bosun-<key>`: the registry's record
/// that this build ran.
pub fn key_tag(key: &str) -> String {
    format!("bosun-{key}")
}

/// Builds images with ACR Tasks.
pub struct AcrTasks {
    http: reqwest::Client,
    resource: Url,
    tokens: Arc<RefreshingToken>,
    registry: AzureContainerRegistry,
    blobs: Arc<dyn BlobStore>,
    run_timeout: Duration,
}

impl fmt::Debug for AcrTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcrTasks")
            .field("resource", &self.resource.as_str())
            .field("registry", &self.registry)
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

/// An answer of ARM or of a SAS URL.
struct Answer {
    operation: String,
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
    /// ARM refused the token and then a new one (both 401).
    fresh_token_refused: bool,
}

/// `SourceUploadDefinition`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SourceUpload {
    upload_url: Option<String>,
    relative_path: Option<String>,
}

/// The part of a `Run` resource this adapter reads.
#[derive(Debug, Deserialize)]
struct RunResource {
    properties: Option<RunProperties>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunProperties {
    run_id: Option<String>,
    status: Option<String>,
    #[serde(default)]
    output_images: Vec<ImageDescriptor>,
    finish_time: Option<String>,
    run_error_message: Option<String>,
}

/// `ImageDescriptor`.
#[derive(Debug, Deserialize)]
struct ImageDescriptor {
    repository: Option<String>,
    tag: Option<String>,
    digest: Option<String>,
}

/// `RunGetLogResult`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LogLink {
    log_link: Option<String>,
}

/// Where a run is, by its `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunStatus {
    InProgress,
    Succeeded,
    Failed,
}

fn run_status(status: &str) -> RunStatus {
    match status {
        "Succeeded" => RunStatus::Succeeded,
        "Failed" | "Canceled" | "Error" | "Timeout" => RunStatus::Failed,
        // `Queued`, `Started`, `Running`, and any status a later API adds:
        // polled again, within the consumer's limit of polls.
        _ => RunStatus::InProgress,
    }
}

impl AcrTasks {
    /// An adapter scheduling runs on the registry `config` names, with ARM
    /// tokens from `tokens` (scope [`ARM_SCOPE`]), reading images through
    /// `registry` (its login server is the one modules name) and contexts
    /// from `blobs`, where it also stores the runs' logs.
    pub fn new(
        config: &AcrTasksConfig,
        tokens: Arc<RefreshingToken>,
        registry: AzureContainerRegistry,
        blobs: Arc<dyn BlobStore>,
    ) -> Result<Self, ContainerBuildError> {
        check_config(config).map_err(|err| ContainerBuildError::Invalid(err.to_string()))?;
        let endpoint = config.arm_endpoint.as_deref().unwrap_or(DEFAULT_ARM_ENDPOINT).trim();
        let mut resource = Url::parse(endpoint)
            .map_err(|err| ContainerBuildError::Invalid(format!("armEndpoint: `{endpoint}`: {err}")))?;
        if !matches!(resource.scheme(), "http" | "https") || resource.cannot_be_a_base() {
            return Err(ContainerBuildError::Invalid(format!(
                "armEndpoint: `{endpoint}` is not an http(s) URL such as {DEFAULT_ARM_ENDPOINT}"
            )));
        }
        resource.set_path(&format!(
            "{}/subscriptions/{}/resourceGroups/{}/providers/Microsoft.ContainerRegistry/registries/{}",
            resource.path().trim_end_matches('/'),
            config.subscription,
            config.resource_group,
            config.registry_name
        ));
        let http = http::client(
            Timeout::Total(config.request_timeout),
            HeaderMap::new(),
            Redirects::Refuse,
        )
        .map_err(|err| ContainerBuildError::Invalid(format!("HTTP client: {err}")))?;
        Ok(Self {
            http,
            resource,
            tokens,
            registry,
            blobs,
            run_timeout: config.run_timeout,
        })
    }

    /// The URL of `suffix` under the registry's resource, with the
    /// api-version.
    fn arm_url(&self, suffix: &str) -> Url {
        let mut url = self.resource.clone();
        url.set_path(&format!("{}/{suffix}", url.path()));
        url.query_pairs_mut().append_pair("api-version", API_VERSION);
        url
    }

    /// Sends a request; the ARM token goes only to ARM (`arm: true`), never
    /// to a SAS URL. ARM's 401 to a token still valid by its expiry is
    /// answered by sending once more with a new token
    /// ([`RefreshingToken::send_with_token`]); the answer then says whether
    /// that one was refused too.
    async fn send(
        &self,
        method: Method,
        url: Url,
        arm: bool,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Answer, RegistryError> {
        // The path only: a SAS URL's query is its signature.
        let operation = format!("{method} {}", url.path());
        let attempt =
            |token: Option<String>| self.attempt(method.clone(), url.clone(), &operation, token, headers, body.clone());
        if !arm {
            return attempt(None).await;
        }
        let answered = self
            .tokens
            .send_with_token(
                |token| attempt(Some(token)),
                |answer: &Answer| answer.status == StatusCode::UNAUTHORIZED,
            )
            .await?;
        Ok(Answer {
            fresh_token_refused: answered.fresh_token_refused,
            ..answered.answer
        })
    }

    /// Sends one request, with `token` as its bearer when given, and reads
    /// its whole answer.
    async fn attempt(
        &self,
        method: Method,
        url: Url,
        operation: &str,
        token: Option<String>,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Answer, RegistryError> {
        let mut request = self.http.request(method, url);
        if let Some(token) = token {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| RegistryError::UnexpectedResponse {
                    operation: operation.to_owned(),
                    reason: "the ARM token cannot be sent in a header".to_owned(),
                })?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        // Without the URL: a SAS URL's signature must not reach a log or a
        // dead letter through the error's text.
        let transport = |source: reqwest::Error| RegistryError::Transport {
            operation: operation.to_owned(),
            source: source.without_url(),
        };
        let response = http::send(request).await.map_err(transport)?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(transport)?.to_vec();
        tracing::debug!(%operation, status = status.as_u16(), "ACR Tasks call");
        Ok(Answer {
            operation: operation.to_owned(),
            status,
            headers,
            body,
            fresh_token_refused: false,
        })
    }

    /// An ARM call whose answer must be a success with a JSON body of `T`.
    async fn arm_json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        suffix: &str,
        body: Option<serde_json::Value>,
    ) -> Result<T, RegistryError> {
        let (headers, body): (&[(&str, &str)], _) = match body {
            Some(body) => (
                &[("content-type", "application/json")],
                Some(body.to_string().into_bytes()),
            ),
            None => (&[], Some(Vec::new())),
        };
        let body = if method == Method::GET { None } else { body };
        let answer = self.send(method, self.arm_url(suffix), true, headers, body).await?;
        arm_body(answer)
    }

    /// `POST scheduleRun`, a long-running operation in ARM's sense: the
    /// `Run` comes in the answer (`200`), or the answer is `202 Accepted`
    /// and the `Run` is the result at its `Location`, read again (after
    /// `Retry-After`, within [`LRO_PATIENCE`]) while it answers `202`. A
    /// `Location` off the ARM endpoint is refused (the ARM token goes to
    /// ARM only).
    async fn schedule_run(&self, request: serde_json::Value) -> Result<RunResource, RegistryError> {
        let url = self.arm_url("scheduleRun");
        let body = Some(request.to_string().into_bytes());
        let answer = self
            .send(Method::POST, url, true, &[("content-type", "application/json")], body)
            .await?;
        if answer.status != StatusCode::ACCEPTED {
            return arm_body(answer);
        }
        let unexpected = |reason: String| RegistryError::UnexpectedResponse {
            operation: "POST scheduleRun".to_owned(),
            reason,
        };
        let location = answer
            .headers
            .get(reqwest::header::LOCATION)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| {
                unexpected("202 Accepted without a Location (look for the run among the registry's runs)".to_owned())
            })?;
        let location = self
            .resource
            .join(location)
            .map_err(|err| unexpected(format!("the Location is not a URL: {err}")))?;
        if location.origin() != self.resource.origin() {
            return Err(unexpected(format!(
                "the Location is not on the ARM endpoint {} (look for the run among the registry's runs)",
                self.resource.origin().ascii_serialization()
            )));
        }
        let deadline = tokio::time::Instant::now() + LRO_PATIENCE;
        let mut wait = retry_after(&answer.headers).unwrap_or(LRO_POLL);
        loop {
            tokio::time::sleep(wait.min(LRO_PATIENCE)).await;
            let answer = self.send(Method::GET, location.clone(), true, &[], None).await?;
            if answer.status != StatusCode::ACCEPTED {
                return arm_body(answer);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(unexpected(format!(
                    "the run was accepted but not scheduled within {LRO_PATIENCE:?} (look for the run among the \
                     registry's runs)"
                )));
            }
            wait = retry_after(&answer.headers).unwrap_or(LRO_POLL);
        }
    }

    /// Uploads the context and returns its `relativePath`.
    async fn upload_context(&self, spec: &ImageSpec) -> Result<String, ContainerBuildError> {
        let context = self.blobs.get(&spec.context).await?;
        let compressed = tokio::task::spawn_blocking(move || gzip(&context))
            .await
            .map_err(|err| ContainerBuildError::storage("the compression task failed", err))?
            .map_err(|err| ContainerBuildError::storage("compressing the context failed", err))?;
        let upload: SourceUpload = self.arm_json(Method::POST, "listBuildSourceUploadUrl", None).await?;
        let operation = "POST listBuildSourceUploadUrl";
        let (Some(upload_url), Some(relative_path)) = (upload.upload_url, upload.relative_path) else {
            return Err(RegistryError::UnexpectedResponse {
                operation: operation.to_owned(),
                reason: "the answer has no uploadUrl or relativePath".to_owned(),
            }
            .into());
        };
        let url = Url::parse(&upload_url).map_err(|err| RegistryError::UnexpectedResponse {
            operation: operation.to_owned(),
            reason: format!("uploadUrl is not a URL: {err}"),
        })?;
        let size = compressed.len();
        let answer = self
            .send(
                Method::PUT,
                url,
                false,
                &[
                    ("x-ms-blob-type", "BlockBlob"),
                    (CONTENT_TYPE.as_str(), "application/octet-stream"),
                ],
                Some(compressed),
            )
            .await?;
        if !answer.status.is_success() {
            return Err(arm_failure(&answer).into());
        }
        tracing::debug!(%relative_path, bytes = size, "build context uploaded");
        Ok(relative_path)
    }

    /// Schedules the run of `spec` and returns its id and status.
    async fn schedule(
        &self,
        spec: &ImageSpec,
        repository: &str,
        key: &str,
        platform: &Platform,
    ) -> Result<RunningBuild, ContainerBuildError> {
        let source_location = self.upload_context(spec).await?;
        let arguments: Vec<_> = spec
            .build_args
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value, "isSecret": false}))
            .collect();
        let mut platform_json = json!({
            "os": acr_os(&platform.os),
            "architecture": platform.architecture,
        });
        if let Some(variant) = &platform.variant {
            platform_json["variant"] = json!(variant);
        }
        let request = json!({
            "type": "DockerBuildRequest",
            "sourceLocation": source_location,
            "dockerFilePath": spec.dockerfile,
            "imageNames": [
                format!("{repository}:{}", spec.tag),
                format!("{repository}:{}", key_tag(key)),
            ],
            "isPushEnabled": true,
            "noCache": false,
            "arguments": arguments,
            "platform": platform_json,
            "timeout": self.run_timeout.as_secs(),
            "isArchiveEnabled": false,
        });
        let run: RunResource = self.schedule_run(request).await?;
        let properties = run.properties.ok_or_else(|| RegistryError::UnexpectedResponse {
            operation: "POST scheduleRun".to_owned(),
            reason: "the answer has no run properties (look for the run among the registry's runs)".to_owned(),
        })?;
        let run_id = properties
            .run_id
            .filter(|id| validate::identifier("runId", id).is_ok())
            .ok_or_else(|| RegistryError::UnexpectedResponse {
                operation: "POST scheduleRun".to_owned(),
                reason: "the answer has no usable runId (look for the run among the registry's runs)".to_owned(),
            })?;
        Ok(RunningBuild {
            builder: BUILDER,
            run_id,
            build_key: key.to_owned(),
            status: properties.status.unwrap_or_else(|| "Queued".to_owned()),
        })
    }

    /// The run an earlier handling of the same build scheduled, when it is
    /// still going or succeeded: the event is handled again after a crash
    /// between `scheduleRun` and the runtime's commit, and follows that run
    /// instead of starting a second. A run that failed (or that the
    /// registry no longer has) is not followed: the build is scheduled
    /// again, as an operator replaying the event wants.
    async fn recorded_run(&self, spec: &ImageSpec, key: &str) -> Result<Option<RunningBuild>, ContainerBuildError> {
        let record_key = run_record_key(&spec.tenant, key);
        let Some(bytes) = self.blobs.read(RUNS_CONTAINER, &record_key).await.map_err(|err| {
            ContainerBuildError::storage(format!("reading the run record {RUNS_CONTAINER}/{record_key}"), err)
        })?
        else {
            return Ok(None);
        };
        let Some(record) = serde_json::from_slice::<RunRecord>(&bytes)
            .ok()
            .filter(|record| validate::identifier("runId", &record.run_id).is_ok())
        else {
            tracing::warn!(record = %record_key, "unreadable run record; scheduling the build");
            return Ok(None);
        };
        let resource: RunResource = match self
            .arm_json(Method::GET, &format!("runs/{}", record.run_id), None)
            .await
        {
            Ok(resource) => resource,
            Err(err @ RegistryError::Status { status: 404, .. }) => {
                tracing::warn!(run = %record.run_id, error = %err, "the recorded run is not found; scheduling the build");
                return Ok(None);
            }
            Err(err) => return Err(err.into()),
        };
        let status = resource
            .properties
            .and_then(|properties| properties.status)
            .unwrap_or_else(|| "Queued".to_owned());
        match run_status(&status) {
            RunStatus::InProgress | RunStatus::Succeeded => Ok(Some(RunningBuild {
                builder: BUILDER,
                run_id: record.run_id,
                build_key: key.to_owned(),
                status,
            })),
            RunStatus::Failed => {
                tracing::info!(run = %record.run_id, %status, "the recorded run of this build ended without an image; scheduling it again");
                Ok(None)
            }
        }
    }

    /// Keeps the run id under the build key. A record that cannot be
    /// written is logged, not an error: the run goes on, and only a crash
    /// before the commit would then schedule the build twice.
    async fn record_run(&self, spec: &ImageSpec, key: &str, run_id: &str) {
        let record = RunRecord {
            run_id: run_id.to_owned(),
            scheduled_at: OffsetDateTime::now_utc(),
        };
        let record_key = run_record_key(&spec.tenant, key);
        let stored: Result<(), BoxError> = async {
            let bytes = serde_json::to_vec(&record)?;
            self.blobs
                .put(RUNS_CONTAINER, &record_key, bytes, "application/json")
                .await?;
            Ok(())
        }
        .await;
        if let Err(error) = stored {
            tracing::warn!(run = %run_id, record = %record_key, %error, "could not record the scheduled run");
        }
    }

    /// Fetches the run's log (`listLogSasUrl`, then its `logLink`) and
    /// stores it in the blob store.
    async fn store_log(&self, run: &BuildRun) -> Result<(BlobRef, Vec<u8>), ContainerBuildError> {
        let link: LogLink = self
            .arm_json(Method::POST, &format!("runs/{}/listLogSasUrl", run.run_id), None)
            .await?;
        let operation = format!("POST runs/{}/listLogSasUrl", run.run_id);
        let url = link
            .log_link
            .as_deref()
            .map(Url::parse)
            .ok_or_else(|| RegistryError::UnexpectedResponse {
                operation: operation.clone(),
                reason: "the answer has no logLink".to_owned(),
            })?
            .map_err(|err| RegistryError::UnexpectedResponse {
                operation,
                reason: format!("logLink is not a URL: {err}"),
            })?;
        let answer = self.send(Method::GET, url, false, &[], None).await?;
        if !answer.status.is_success() {
            return Err(arm_failure(&answer).into());
        }
        let blob_key = format!(
            "{}/container-build/{}/{}/{}.log",
            run.tenant,
            run.image,
            run.tag,
            &run.build_key[..16]
        );
        let log = answer.body;
        let blob = self
            .blobs
            .put(LOG_CONTAINER, &blob_key, log.clone(), "text/plain; charset=utf-8")
            .await
            .map_err(|err| {
                ContainerBuildError::storage(format!("storing the build log {LOG_CONTAINER}/{blob_key}"), err)
            })?;
        Ok((blob, log))
    }

    /// The finished run's log, stored; `None` when the registry no longer
    /// has it (a run older than its retention: the run's end is reported
    /// without it). Errors worth a retry (an unreachable registry, a blob
    /// store that failed) are returned.
    async fn finished_log(&self, run: &BuildRun) -> Result<Option<(BlobRef, Vec<u8>)>, ContainerBuildError> {
        match self.store_log(run).await {
            Ok(stored) => Ok(Some(stored)),
            Err(ContainerBuildError::Rejected(err)) => {
                tracing::warn!(run = %run.run_id, error = %err, "the run's log could not be read; reported without it");
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// The image a succeeded run pushed.
    async fn succeeded(
        &self,
        run: &BuildRun,
        repository: &str,
        properties: &RunProperties,
    ) -> Result<BuiltImage, ContainerBuildError> {
        let operation = format!("GET runs/{}", run.run_id);
        let digest = properties
            .output_images
            .iter()
            .find(|image| image.repository.as_deref() == Some(repository) && image.tag.as_deref() == Some(&run.tag))
            .or_else(|| {
                properties
                    .output_images
                    .iter()
                    .find(|image| image.repository.as_deref() == Some(repository))
            })
            .and_then(|image| image.digest.clone())
            .filter(|digest| validate::oci_digest("digest", digest).is_ok())
            .ok_or_else(|| RegistryError::UnexpectedResponse {
                operation: operation.clone(),
                reason: format!(
                    "the run succeeded but its outputImages have no digest for {repository}:{}",
                    run.tag
                ),
            })?;
        let summary = self
            .registry
            .manifest_summary(repository, &digest)
            .await?
            .ok_or_else(|| RegistryError::UnexpectedResponse {
                operation: format!("GET /v2/{repository}/manifests/{digest}"),
                reason: "the registry does not have the image the run reports".to_owned(),
            })?;
        let pushed_at = properties
            .finish_time
            .as_deref()
            .and_then(|time| OffsetDateTime::parse(time, &Rfc3339).ok())
            .unwrap_or_else(OffsetDateTime::now_utc);
        Ok(BuiltImage {
            repository: repository.to_owned(),
            digest,
            size_bytes: summary.size_bytes,
            already_present: false,
            pushed_at,
        })
    }
}

/// ACR's name of an OCI `os` (`Linux`, `Windows`).
fn acr_os(os: &str) -> String {
    match os {
        "linux" => "Linux".to_owned(),
        "windows" => "Windows".to_owned(),
        other => other.to_owned(),
    }
}

/// The error of a non-success answer, with ARM's `error.code` and
/// `error.message` when the body has them (never the body itself).
/// The JSON body of a successful ARM answer, or the failure it says.
fn arm_body<T: serde::de::DeserializeOwned>(answer: Answer) -> Result<T, RegistryError> {
    if !answer.status.is_success() {
        return Err(arm_failure(&answer));
    }
    serde_json::from_slice(&answer.body).map_err(|err| RegistryError::UnexpectedResponse {
        operation: answer.operation.clone(),
        reason: format!("the answer is not the documented JSON: {err}"),
    })
}

fn arm_failure(answer: &Answer) -> RegistryError {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(&answer.body).ok();
    let message = match parsed.as_ref().map(|value| &value["error"]) {
        Some(error) if error.is_object() => {
            let code = error["code"].as_str().unwrap_or("Error");
            let text: String = error["message"]
                .as_str()
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            format!("{code}: {text}")
        }
        _ => answer.status.canonical_reason().unwrap_or("error").to_owned(),
    };
    let failure = RegistryError::Status {
        operation: answer.operation.clone(),
        status: answer.status.as_u16(),
        message,
        retry_after: retry_after(&answer.headers),
    };
    if answer.fresh_token_refused {
        failure.fresh_token_refused()
    } else {
        failure
    }
}

/// Checks what a spec or a run names and returns the tenant's repository.
fn repository_of(
    tenant: &str,
    registry: &str,
    image: &str,
    tag: &str,
    ours: &str,
) -> Result<String, ContainerBuildError> {
    let invalid = |err: validate::FieldError| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason));
    validate::tenant_id("tenant", tenant).map_err(invalid)?;
    validate::oci_repository("image", image).map_err(invalid)?;
    let repository = tenant_repository(tenant, image);
    validate::oci_repository("image", &repository).map_err(invalid)?;
    validate::oci_tag("tag", tag).map_err(invalid)?;
    if registry != ours {
        return Err(ContainerBuildError::Invalid(format!(
            "container.registry: the module names registry `{registry}`, but ACR Tasks builds in `{ours}`"
        )));
    }
    Ok(repository)
}

#[async_trait]
impl ImageBuilder for AcrTasks {
    async fn build(&self, spec: &ImageSpec) -> Result<BuildProgress, ContainerBuildError> {
        let repository = repository_of(
            &spec.tenant,
            &spec.registry,
            &spec.image,
            &spec.tag,
            self.registry.registry(),
        )?;
        let platform =
            Platform::parse(&spec.platform).map_err(|err| ContainerBuildError::Invalid(format!("platform: {err}")))?;
        let key = acr_build_key(spec, &repository);
        if let Some(present) = self.registry.manifest_summary(&repository, &key_tag(&key)).await? {
            tracing::debug!(%repository, tag = %spec.tag, digest = %present.digest, "this build already ran; nothing scheduled");
            return Ok(BuildProgress::Built(BuiltImage {
                repository,
                digest: present.digest,
                size_bytes: present.size_bytes,
                already_present: true,
                pushed_at: OffsetDateTime::now_utc(),
            }));
        }
        if let Some(running) = self.recorded_run(spec, &key).await? {
            tracing::info!(%repository, tag = %spec.tag, run = %running.run_id, status = %running.status, "this build's run is already scheduled; following it");
            return Ok(BuildProgress::Running(running));
        }
        let running = self.schedule(spec, &repository, &key, &platform).await?;
        tracing::info!(%repository, tag = %spec.tag, run = %running.run_id, status = %running.status, "ACR Tasks run scheduled");
        self.record_run(spec, &key, &running.run_id).await;
        Ok(BuildProgress::Running(running))
    }

    async fn poll(&self, run: &BuildRun) -> Result<BuildProgress, ContainerBuildError> {
        let repository = repository_of(
            &run.tenant,
            &run.registry,
            &run.image,
            &run.tag,
            self.registry.registry(),
        )?;
        validate::identifier("runId", &run.run_id)
            .and_then(|()| validate::sha256_hex("buildKey", &run.build_key))
            .map_err(|err| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason)))?;
        let resource: RunResource = self
            .arm_json(Method::GET, &format!("runs/{}", run.run_id), None)
            .await?;
        let properties = resource.properties.ok_or_else(|| RegistryError::UnexpectedResponse {
            operation: format!("GET runs/{}", run.run_id),
            reason: "the answer has no run properties".to_owned(),
        })?;
        let status = properties.status.clone().unwrap_or_else(|| "Queued".to_owned());
        match run_status(&status) {
            RunStatus::InProgress => Ok(BuildProgress::Running(RunningBuild {
                builder: BUILDER,
                run_id: run.run_id.clone(),
                build_key: run.build_key.clone(),
                status,
            })),
            RunStatus::Succeeded => {
                if let Some((log, _)) = self.finished_log(run).await? {
                    tracing::debug!(run = %run.run_id, log = %log.key, "ACR Tasks run log stored");
                }
                self.succeeded(run, &repository, &properties)
                    .await
                    .map(BuildProgress::Built)
            }
            RunStatus::Failed => {
                let (log, text) = match self.finished_log(run).await? {
                    Some((blob, text)) => (Some(Box::new(blob)), text),
                    None => (None, Vec::new()),
                };
                let mut tail = tail(&text);
                let message = properties
                    .run_error_message
                    .as_deref()
                    .map(str::trim)
                    .filter(|message| !message.is_empty());
                tail.push_str(&match message {
                    Some(message) => format!("\n[ACR] run {} {status}: {message}", run.run_id),
                    None => format!("\n[ACR] run {} {status}", run.run_id),
                });
                let tail = tail.trim_start();
                let skip = tail.chars().count().saturating_sub(MAX_TAIL_CHARS);
                let tail: String = tail.chars().skip(skip).collect();
                tracing::warn!(run = %run.run_id, %status, "ACR Tasks run failed");
                Err(ContainerBuildError::BuilderFailed {
                    builder: BUILDER,
                    log,
                    tail,
                    transient: false,
                })
            }
        }
    }
}
