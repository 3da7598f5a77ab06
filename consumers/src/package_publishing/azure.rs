//! Azure Artifacts NuGet feeds. The package is packed (or read) by the same
//! code as the local feed ([`super::nupkg`]); this adapter pushes it.
//!
//! # Push
//!
//! `PUT {packaging}/{project}/_packaging/{feed}/nuget/v2/` with the
//! `.nupkg` as the one file of a `multipart/form-data` body (NuGet's push
//! protocol), the PAT as HTTP Basic auth, and an `X-NuGet-ApiKey` header
//! (required by the protocol; Azure Artifacts ignores its value).
//! `200`/`201`/`202` mean published.
//!
//! `409 Conflict` means the version exists (versions are immutable; a
//! deleted version cannot be pushed again either). The adapter then
//! downloads the version from the feed's flat container
//! (`.../nuget/v3/flat2/<id>/<version>/<id>.<version>.nupkg`) and compares
//! SHA-512s: the same package is reported `already_published` (this is
//! what a retry after a lost answer sees); a different one, or one the
//! feed no longer serves, is a permanent [`PublishError::VersionConflict`].
//!
//! # Tenants
//!
//! A feed is the wall between tenants on Azure Artifacts: NuGet package
//! ids and versions are unique per feed, and the feed a version goes to is
//! the one the tenant's module names (`package.feed`), in the configured
//! organization (and project). Tenants are kept apart by configuration —
//! each tenant's modules name the tenant's own feed, which the feed's
//! permissions give to that tenant — not by bosun renaming packages (a
//! package id is what its users restore). When two tenants' modules name
//! one feed, the version is the first publisher's: a later publish of
//! other content by another tenant is refused as
//! [`PublishError::ForeignTenant`], naming both tenants when the version on
//! the feed was packed by bosun (its `<authors>` is the tenant, see
//! [`super::nupkg::packed_tenant`]), else as a
//! [`PublishError::VersionConflict`].
//!
//! Errors follow the one Azure retry policy
//! ([`crate::delivery::azure::retry`]): 408, 409, 429 and 5xx with
//! `Retry-After` → retry after it, without → transient, as are connection
//! failures; 400 (an invalid package), 401, 403 and other 4xx → permanent.
//!
//! # Configuration
//!
//! [`AzureArtifactsConfig`]: the packaging URL of the organization
//! (`https://pkgs.dev.azure.com/<organization>`), the project of
//! project-scoped feeds, and a PAT with *Packaging (read & write)*. The
//! runtime's configuration would read, for example,
//! `BOSUN_ARTIFACTS_URL=https://pkgs.dev.azure.com/contoso`,
//! `BOSUN_ARTIFACTS_PROJECT=Delivery` (omit for organization feeds) and
//! `BOSUN_ARTIFACTS_PAT`. The feed name comes from each module's
//! `package.feed`. The PAT is never logged.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use time::OffsetDateTime;

use super::nupkg::{Nupkg, check_spec, normalized_version, nuspec_of, packed_tenant, prepare, sha512_hex};
use super::port::{PackageFeed, PackageSpec, PublishError, PublishedPackage};
use crate::delivery::azure::http::{self, Redirects, Timeout};
use crate::delivery::azure::retry::{Disposition, retry_after};
use crate::delivery::blob::BlobStore;
use crate::delivery::tenant::ForeignTenant;

/// Default timeout of one HTTP request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The `X-NuGet-ApiKey` sent with pushes; Azure Artifacts authenticates by
/// the PAT and ignores the key's value.
pub const API_KEY_PLACEHOLDER: &str = "AzureDevOps";

/// Where the feeds are and how to reach them.
#[derive(Clone, PartialEq, Eq)]
pub struct AzureArtifactsConfig {
    /// The organization's packaging URL, e.g.
    /// `https://pkgs.dev.azure.com/contoso`.
    pub packaging_url: String,
    /// The project of project-scoped feeds; `None` for organization feeds.
    pub project: Option<String>,
    /// A personal access token with Packaging (read & write).
    pub pat: String,
    /// Timeout of one HTTP request.
    pub request_timeout: Duration,
}

impl fmt::Debug for AzureArtifactsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureArtifactsConfig")
            .field("packaging_url", &self.packaging_url)
            .field("project", &self.project)
            .field("pat", &"<redacted>")
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl AzureArtifactsConfig {
    /// A configuration with the default timeout.
    pub fn new(packaging_url: impl Into<String>, project: Option<String>, pat: impl Into<String>) -> Self {
        Self {
            packaging_url: packaging_url.into(),
            project,
            pat: pat.into(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// A failed feed call.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The feed answered with an error status.
    #[error("{operation}: HTTP {status}: {message}")]
    Status {
        /// Method and URL path (no query, no credential).
        operation: String,
        /// HTTP status.
        status: u16,
        /// The error message from the body (shortened), or the status text.
        message: String,
        /// The `Retry-After` delay, when given.
        retry_after: Option<Duration>,
    },
    /// No answer (connection refused, timeout ...).
    #[error("{operation}: {source}")]
    Transport {
        /// Method and URL path.
        operation: String,
        /// What the HTTP client said.
        #[source]
        source: reqwest::Error,
    },
}

impl FeedError {
    /// What the runtime should do about this error (the one Azure retry
    /// policy, [`crate::delivery::azure::retry`]).
    pub fn disposition(&self) -> Disposition {
        match self {
            Self::Status {
                status, retry_after, ..
            } => Disposition::of_status(*status, *retry_after),
            Self::Transport { source, .. } => Disposition::of_transport(source),
        }
    }
}

impl From<FeedError> for PublishError {
    fn from(err: FeedError) -> Self {
        match err.disposition() {
            Disposition::RetryAfter(after) => Self::Throttled {
                after,
                source: Box::new(err),
            },
            Disposition::Transient => Self::Unavailable(Box::new(err)),
            Disposition::Permanent => Self::Rejected(Box::new(err)),
        }
    }
}

/// Publishes packages to Azure Artifacts NuGet feeds.
pub struct AzureArtifactsFeed {
    http: reqwest::Client,
    base: Url,
    project: Option<String>,
    blobs: Arc<dyn BlobStore>,
}

impl fmt::Debug for AzureArtifactsFeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureArtifactsFeed")
            .field("base", &self.base.as_str())
            .field("project", &self.project)
            .finish()
    }
}

impl AzureArtifactsFeed {
    /// An adapter for the configured organization, reading package content
    /// from `blobs`. Fails when the URL or the PAT is not usable.
    pub fn new(config: &AzureArtifactsConfig, blobs: Arc<dyn BlobStore>) -> Result<Self, PublishError> {
        let base = Url::parse(config.packaging_url.trim())
            .map_err(|err| PublishError::Invalid(format!("packaging URL: {err}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(PublishError::Invalid(
                "packaging URL must be an http(s) URL such as https://pkgs.dev.azure.com/contoso".to_owned(),
            ));
        }
        if config.pat.trim().is_empty() {
            return Err(PublishError::Invalid("the PAT must not be empty".to_owned()));
        }
        let mut auth = HeaderValue::from_str(&format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!(":{}", config.pat))
        ))
        .map_err(|_| PublishError::Invalid("the PAT contains characters not allowed in a header".to_owned()))?;
        auth.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, auth);
        let http = http::client(Timeout::Total(config.request_timeout), headers, Redirects::Follow)
            .map_err(|err| PublishError::Invalid(format!("HTTP client: {err}")))?;
        Ok(Self {
            http,
            base,
            project: config.project.clone().filter(|p| !p.trim().is_empty()),
            blobs,
        })
    }

    /// `{packaging}/{project}/_packaging/{feed}/nuget/{rest...}`.
    fn feed_url(&self, feed: &str, rest: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty();
            if let Some(project) = &self.project {
                segments.push(project);
            }
            segments.extend(["_packaging", feed, "nuget"]).extend(rest);
        }
        url
    }

    /// The push endpoint (with its trailing `/`).
    pub fn push_url(&self, feed: &str) -> Url {
        self.feed_url(feed, &["v2", ""])
    }

    /// The feed's NuGet v3 service index, the address consumers add.
    pub fn index_url(&self, feed: &str) -> Url {
        self.feed_url(feed, &["v3", "index.json"])
    }

    /// Where the feed serves one version's `.nupkg`.
    pub fn download_url(&self, feed: &str, package_id: &str, version: &str) -> Url {
        let id = package_id.to_ascii_lowercase();
        let version = normalized_version(version);
        let file = format!("{id}.{version}.nupkg");
        self.feed_url(feed, &["v3", "flat2", &id, &version, &file])
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        operation: &str,
    ) -> Result<(StatusCode, Vec<u8>), FeedError> {
        let transport = |source| FeedError::Transport {
            operation: operation.to_owned(),
            source,
        };
        let response = http::send(request).await.map_err(transport)?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = response.bytes().await.map_err(transport)?.to_vec();
        tracing::debug!(%operation, status = status.as_u16(), "azure artifacts call");
        if status.is_success() || status == StatusCode::CONFLICT || status == StatusCode::NOT_FOUND {
            return Ok((status, body));
        }
        Err(FeedError::Status {
            operation: operation.to_owned(),
            status: status.as_u16(),
            message: error_message(status, &body),
            retry_after,
        })
    }

    /// Pushes the package; `true` when the feed took it, `false` on 409.
    async fn push(&self, feed: &str, nupkg: &Nupkg) -> Result<bool, FeedError> {
        let url = self.push_url(feed);
        let operation = format!("PUT {}", url.path());
        let boundary = format!("bosun-{}", &nupkg.sha512[..32]);
        let mut body = Vec::with_capacity(nupkg.bytes.len() + 256);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"package\"; filename=\"package.nupkg\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(&nupkg.bytes);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let request = self
            .http
            .request(Method::PUT, url)
            .header("X-NuGet-ApiKey", API_KEY_PLACEHOLDER)
            .header(CONTENT_TYPE, format!("multipart/form-data; boundary={boundary}"))
            .body(body);
        let (status, body) = self.send(request, &operation).await?;
        match status {
            StatusCode::CONFLICT => Ok(false),
            status if status.is_success() => Ok(true),
            status => Err(FeedError::Status {
                operation,
                status: status.as_u16(),
                message: error_message(status, &body),
                retry_after: None,
            }),
        }
    }

    /// The `.nupkg` the feed serves for a version, if any.
    async fn download(&self, feed: &str, package_id: &str, version: &str) -> Result<Option<Vec<u8>>, FeedError> {
        let url = self.download_url(feed, package_id, version);
        let operation = format!("GET {}", url.path());
        let request = self.http.request(Method::GET, url);
        let (status, body) = self.send(request, &operation).await?;
        match status {
            status if status.is_success() => Ok(Some(body)),
            StatusCode::NOT_FOUND => Ok(None),
            status => Err(FeedError::Status {
                operation,
                status: status.as_u16(),
                message: error_message(status, &body),
                retry_after: None,
            }),
        }
    }
}

#[async_trait]
impl PackageFeed for AzureArtifactsFeed {
    async fn publish(&self, spec: &PackageSpec) -> Result<PublishedPackage, PublishError> {
        check_spec(spec)?;
        let nupkg = prepare(&*self.blobs, spec).await?;
        let url = Some(self.index_url(&spec.feed).to_string());
        if self.push(&spec.feed, &nupkg).await? {
            tracing::debug!(feed = %spec.feed, package_id = %spec.package_id, version = %spec.version, "package pushed");
            return Ok(PublishedPackage {
                sha512: nupkg.sha512.clone(),
                size_bytes: nupkg.size(),
                url,
                already_published: false,
                published_at: OffsetDateTime::now_utc(),
            });
        }
        let existing = self.download(&spec.feed, &spec.package_id, &spec.version).await?;
        let conflict = |existing_sha512: String| PublishError::VersionConflict {
            package_id: spec.package_id.clone(),
            version: spec.version.clone(),
            existing_sha512,
            new_sha512: nupkg.sha512.clone(),
        };
        let Some(existing) = existing else {
            return Err(conflict(
                "unknown (the feed refuses the version but does not serve it: was it deleted?)".to_owned(),
            ));
        };
        let existing_sha512 = sha512_hex(&existing);
        if existing_sha512 != nupkg.sha512 {
            if let Some(owner) = nuspec_of(&existing).as_deref().and_then(packed_tenant)
                && owner != spec.tenant
            {
                return Err(ForeignTenant::new(
                    format!("{} {} on feed `{}`", spec.package_id, spec.version, spec.feed),
                    Some(&owner),
                    &spec.tenant,
                )
                .into());
            }
            return Err(conflict(existing_sha512));
        }
        tracing::debug!(feed = %spec.feed, package_id = %spec.package_id, version = %spec.version, "package already on the feed");
        Ok(PublishedPackage {
            sha512: existing_sha512,
            size_bytes: existing.len() as u64,
            url,
            already_published: true,
            published_at: OffsetDateTime::now_utc(),
        })
    }
}

/// The `message` of a JSON error body, or the status text (never the body
/// itself).
fn error_message(status: StatusCode, body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .map(|m| m.chars().take(300).collect())
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned())
}
