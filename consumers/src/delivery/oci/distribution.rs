//! Registries through the OCI distribution API, with the maintained
//! `oci-client` crate (on the workspace's reqwest and native TLS): read a
//! manifest by tag or digest, read a blob, and verify a push by reading
//! the manifest back by its digest.
//!
//! A registry listed as insecure (a loopback test registry, a registry on
//! a private network without TLS) is reached over plain HTTP; every other
//! one over HTTPS. Credentials are `oci-client`'s [`RegistryAuth`]
//! (anonymous, Basic, or a bearer token), exchanged for a registry token
//! by the Docker token flow when the registry asks for one.

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::Value;

use crate::delivery::blob::sha256_hex;

/// The manifest media types asked for.
pub const MANIFEST_MEDIA_TYPES: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// A failed registry call, saying whether a retry can help.
#[derive(Debug, thiserror::Error)]
pub enum DistributionError {
    /// The reference does not parse (`host[:port]/repository[:tag|@digest]`).
    /// Permanent.
    #[error("invalid image reference `{reference}`: {reason}")]
    InvalidReference {
        /// The reference.
        reference: String,
        /// Why.
        reason: String,
    },
    /// The registry could not be reached, throttled, or failed (5xx).
    /// Transient: the work is retried.
    #[error("registry unavailable for {reference}: {source}; retrying")]
    Unavailable {
        /// What was asked for.
        reference: String,
        /// The cause.
        #[source]
        source: OciDistributionError,
    },
    /// The registry refused the request (authentication, permissions, a
    /// request it does not accept). Permanent.
    #[error("registry refused {reference}: {source}")]
    Refused {
        /// What was asked for.
        reference: String,
        /// The cause.
        #[source]
        source: OciDistributionError,
    },
    /// The registry answered something the protocol does not allow (a
    /// manifest whose bytes do not hash to the digest asked for, one that
    /// is not JSON). Permanent.
    #[error("registry answered {reference} wrongly: {reason}")]
    Unexpected {
        /// What was asked for.
        reference: String,
        /// What was wrong.
        reason: String,
    },
}

impl DistributionError {
    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

/// A manifest as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryManifest {
    /// `sha256:<hex>` of the bytes.
    pub digest: String,
    /// The manifest bytes, as served.
    pub bytes: Vec<u8>,
    /// The config descriptor (image manifests; `None` for an index).
    pub config: Option<BlobDescriptor>,
    /// The layer descriptors, in order.
    pub layers: Vec<BlobDescriptor>,
}

impl RegistryManifest {
    /// Manifest, config and layers together, in bytes.
    pub fn size_bytes(&self) -> u64 {
        let blobs: u64 = self.config.iter().chain(&self.layers).map(|blob| blob.size).sum();
        self.bytes.len() as u64 + blobs
    }
}

/// A blob a manifest names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobDescriptor {
    /// Media type, e.g. `application/vnd.oci.image.layer.v1.tar+gzip`.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
}

/// A client of OCI registries.
pub struct Distribution {
    client: Client,
    auth: RegistryAuth,
}

impl std::fmt::Debug for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // RegistryAuth's Debug redacts the password.
        f.debug_struct("Distribution").field("auth", &self.auth).finish()
    }
}

impl Distribution {
    /// A client reaching `insecure` registries (`host[:port]`) over plain
    /// HTTP and every other one over HTTPS, with `auth`.
    pub fn new(insecure: &[String], auth: RegistryAuth) -> Self {
        let protocol = if insecure.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(insecure.to_vec())
        };
        // A registry that stops answering fails the call (transiently)
        // instead of holding the build forever: bosun's connect timeout,
        // and a minute between reads (blobs stream for longer in total).
        let client = Client::new(ClientConfig {
            protocol,
            connect_timeout: Some(crate::delivery::azure::http::MAX_CONNECT_TIMEOUT),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            user_agent: crate::delivery::azure::http::USER_AGENT,
            ..ClientConfig::default()
        });
        Self { client, auth }
    }

    /// Parses `host[:port]/repository[:tag|@digest]`.
    pub fn reference(text: &str) -> Result<Reference, DistributionError> {
        text.parse()
            .map_err(|err: oci_client::ParseError| DistributionError::InvalidReference {
                reference: text.to_owned(),
                reason: err.to_string(),
            })
    }

    /// The manifest `reference` names, or `None` when the registry has no
    /// such tag, digest or repository.
    pub async fn manifest(&self, reference: &str) -> Result<Option<RegistryManifest>, DistributionError> {
        let parsed = Self::reference(reference)?;
        match self
            .client
            .pull_manifest_raw(&parsed, &self.auth, MANIFEST_MEDIA_TYPES)
            .await
        {
            Ok((bytes, digest)) => parse_manifest(reference, bytes.to_vec(), digest).map(Some),
            Err(err) if is_not_found(&err) => Ok(None),
            Err(err) => Err(classify(reference, err)),
        }
    }

    /// Reads the manifest `repository@digest` (`repository` is
    /// `host[:port]/name`) and checks that its bytes hash to `digest`: the
    /// proof that a push stored what it said.
    pub async fn verify(&self, repository: &str, digest: &str) -> Result<RegistryManifest, DistributionError> {
        let reference = format!("{repository}@{digest}");
        let manifest = self
            .manifest(&reference)
            .await?
            .ok_or_else(|| DistributionError::Unexpected {
                reference: reference.clone(),
                reason: "the registry has no manifest of the digest just pushed".to_owned(),
            })?;
        let actual = format!("sha256:{}", sha256_hex(&manifest.bytes));
        if actual != digest {
            return Err(DistributionError::Unexpected {
                reference,
                reason: format!("the manifest served hashes to {actual}"),
            });
        }
        Ok(manifest)
    }

    /// The bytes of a blob of `repository` (`host[:port]/name`), checked
    /// against its digest.
    pub async fn blob(&self, repository: &str, blob: &BlobDescriptor) -> Result<Vec<u8>, DistributionError> {
        let reference = format!("{repository}@{}", blob.digest);
        let parsed = Self::reference(&reference)?;
        // Authenticates for a pull when the registry asks (a no-op when anonymous).
        self.client
            .store_auth_if_needed(parsed.resolve_registry(), &self.auth)
            .await;
        let descriptor = OciDescriptor {
            media_type: blob.media_type.clone(),
            digest: blob.digest.clone(),
            size: i64::try_from(blob.size).unwrap_or(i64::MAX),
            ..OciDescriptor::default()
        };
        let mut bytes = Vec::new();
        self.client
            .pull_blob(&parsed, &descriptor, &mut bytes)
            .await
            .map_err(|err| classify(&reference, err))?;
        Ok(bytes)
    }

    /// The image config (JSON) of a manifest.
    pub async fn config(&self, repository: &str, manifest: &RegistryManifest) -> Result<Value, DistributionError> {
        let Some(config) = &manifest.config else {
            return Ok(Value::Null);
        };
        let bytes = self.blob(repository, config).await?;
        serde_json::from_slice(&bytes).map_err(|err| DistributionError::Unexpected {
            reference: format!("{repository}@{}", config.digest),
            reason: format!("the image config is not JSON: {err}"),
        })
    }
}

fn parse_manifest(reference: &str, bytes: Vec<u8>, digest: String) -> Result<RegistryManifest, DistributionError> {
    let unexpected = |reason: String| DistributionError::Unexpected {
        reference: reference.to_owned(),
        reason,
    };
    let json: Value =
        serde_json::from_slice(&bytes).map_err(|err| unexpected(format!("the manifest is not JSON: {err}")))?;
    let descriptor = |value: &Value| -> Result<BlobDescriptor, DistributionError> {
        Ok(BlobDescriptor {
            media_type: value["mediaType"].as_str().unwrap_or_default().to_owned(),
            digest: value["digest"]
                .as_str()
                .ok_or_else(|| unexpected("a descriptor has no digest".to_owned()))?
                .to_owned(),
            size: value["size"]
                .as_u64()
                .ok_or_else(|| unexpected("a descriptor has no size".to_owned()))?,
        })
    };
    let config = match json.get("config") {
        Some(value) => Some(descriptor(value)?),
        None => None,
    };
    let layers = json["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(descriptor)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RegistryManifest {
        digest,
        bytes,
        config,
        layers,
    })
}

/// Whether the registry said the thing does not exist.
fn is_not_found(err: &OciDistributionError) -> bool {
    match err {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|error| {
            matches!(
                error.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown | OciErrorCode::NotFound
            )
        }),
        _ => false,
    }
}

/// Transient (no answer, throttled, 5xx) or permanent.
fn classify(reference: &str, source: OciDistributionError) -> DistributionError {
    let transient = match &source {
        OciDistributionError::RequestError(_) | OciDistributionError::IoError(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 408 || *code == 429 || *code >= 500,
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|error| matches!(error.code, OciErrorCode::Toomanyrequests)),
        _ => false,
    };
    let reference = reference.to_owned();
    if transient {
        DistributionError::Unavailable { reference, source }
    } else {
        DistributionError::Refused { reference, source }
    }
}
