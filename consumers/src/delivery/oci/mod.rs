//! OCI image building blocks: a build context (a tar) and its
//! Dockerfile in, an OCI image (layers, config, manifest) out, without
//! Docker and without a registry.
//!
//! # The Dockerfile subset
//!
//! | instruction | support |
//! | --- | --- |
//! | `FROM scratch [AS name]` | the only base: the builder has no registry access, so any other base image is a permanent error naming its line. One stage only. |
//! | `ARG name[=default] ...` | before or after `FROM`; values from the module's `buildArgs` win over defaults; not kept in the image |
//! | `ENV k=v ...` / `ENV k v` | kept in `config.Env`, usable in later instructions (over an `ARG` of the same name) |
//! | `COPY` / `ADD [--chown=uid[:gid]] [--chmod=octal] [--link] src... dest` | shell or JSON form; sources are context paths or patterns (`*`, `?`, `[...]`, `**`); a folder copies its content; `ADD` of a plain tar file unpacks it; URLs, compressed archives and `--from` are refused. Each one is a layer. |
//! | `WORKDIR`, `USER`, `LABEL`, `EXPOSE`, `VOLUME`, `STOPSIGNAL`, `MAINTAINER` | kept in the config |
//! | `ENTRYPOINT` / `CMD` | JSON (exec) form as is; shell form becomes `["/bin/sh", "-c", "..."]` |
//! | `RUN`, `SHELL`, `HEALTHCHECK`, `ONBUILD`, anything else | a permanent error naming the line (nothing is executed) |
//!
//! Variables (`$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME:+alt}`) are
//! substituted in every instruction but `ENTRYPOINT`, `CMD` and `RUN`, as
//! Docker does. `.dockerignore` at the root of the context is applied.
//!
//! # Reproducible output
//!
//! Layers are uncompressed tars (`application/vnd.oci.image.layer.v1.tar`)
//! with entries sorted by path, mtime 0, uid/gid 0 unless `--chown` says
//! otherwise, and fixed modes: directories `0755`, files `0755` when the
//! context file is executable and `0644` otherwise, unless `--chmod` says
//! otherwise. Parent folders of copied files are in the layer. The config
//! has no timestamps and no history. So the same context, Dockerfile, build
//! arguments and platform always give the same bytes, and the same manifest
//! digest: the natural idempotency key of container-build.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};

use self::dockerfile::SyntaxError;
use crate::delivery::archive::tar::TarError;
use crate::delivery::blob::sha256_hex;

mod build;
pub mod distribution;
pub mod dockerfile;

pub use build::build_image;

/// Media type of an OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of an OCI image config.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// Media type of an uncompressed layer.
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
/// Media type of an OCI image index (`index.json`).
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInput<'a> {
    /// Path of the Dockerfile inside the context.
    pub dockerfile: &'a str,
    /// `--build-arg` values.
    pub build_args: &'a BTreeMap<String, String>,
    /// The target platform.
    pub platform: &'a Platform,
}

/// A target platform, `os/architecture[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    /// e.g. `linux`.
    pub os: String,
    /// e.g. `amd64`.
    pub architecture: String,
    /// e.g. `v8` for `linux/arm64/v8`.
    pub variant: Option<String>,
}

impl Platform {
    /// Parses `linux/amd64`, `linux/arm64/v8` ...
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split('/').collect();
        let part_ok = |p: &&str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(part_ok) {
            return Err(format!(
                "`{text}` is not a platform (os/architecture[/variant], e.g. linux/amd64)"
            ));
        }
        Ok(Self {
            os: parts[0].to_owned(),
            architecture: parts[1].to_owned(),
            variant: parts.get(2).map(|v| (*v).to_owned()),
        })
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

/// One content-addressed blob of an image.
#[derive(Clone, PartialEq, Eq)]
pub struct OciBlob {
    /// Media type.
    pub media_type: &'static str,
    /// `sha256:<hex>` of `bytes`.
    pub digest: String,
    /// The content.
    pub bytes: Vec<u8>,
}

impl OciBlob {
    /// A blob of these bytes.
    pub fn new(media_type: &'static str, bytes: Vec<u8>) -> Self {
        Self {
            media_type,
            digest: format!("sha256:{}", sha256_hex(&bytes)),
            bytes,
        }
    }

    /// The hex part of the digest.
    pub fn hex(&self) -> &str {
        self.digest.trim_start_matches("sha256:")
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The OCI descriptor of this blob.
    pub fn descriptor(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest, "size": self.size()})
    }
}

impl fmt::Debug for OciBlob {
    /// Shows the digest and size, never the content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OciBlob")
            .field("media_type", &self.media_type)
            .field("digest", &self.digest)
            .field("size", &self.bytes.len())
            .finish()
    }
}

/// A built image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciImage {
    /// Layers, base first.
    pub layers: Vec<OciBlob>,
    /// The config.
    pub config: OciBlob,
    /// The manifest; its digest is the image's digest.
    pub manifest: OciBlob,
    /// The platform built for.
    pub platform: Platform,
}

impl OciImage {
    /// The manifest digest, `sha256:<hex>`.
    pub fn digest(&self) -> &str {
        &self.manifest.digest
    }

    /// Manifest, config and layers together, in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.manifest.size() + self.config.size() + self.layers.iter().map(OciBlob::size).sum::<u64>()
    }

    /// Layers then config: what must be in a registry before the manifest.
    pub fn blobs(&self) -> impl Iterator<Item = &OciBlob> {
        self.layers.iter().chain(std::iter::once(&self.config))
    }

    /// The OCI platform object.
    pub fn platform_json(&self) -> Value {
        let mut platform = json!({"architecture": self.platform.architecture, "os": self.platform.os});
        if let Some(variant) = &self.platform.variant {
            platform["variant"] = json!(variant);
        }
        platform
    }
}

/// Why an image could not be built. Every variant is permanent: the same
/// context and Dockerfile fail the same way again.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// An instruction the builder does not support or cannot carry out.
    #[error("Dockerfile line {line} (`{instruction}`): {reason}")]
    Instruction {
        /// 1-based line number.
        line: usize,
        /// The instruction as written.
        instruction: String,
        /// What is wrong.
        reason: String,
    },
    /// An instruction's files cannot be read or written as a tar: an
    /// archive that `ADD` unpacks is damaged, or the layer's tar writer
    /// refuses an entry.
    #[error("Dockerfile line {line} (`{instruction}`): {context}: {source}")]
    Archive {
        /// 1-based line number.
        line: usize,
        /// The instruction as written.
        instruction: String,
        /// What was being read or written (`` `<source>` ``, `writing the
        /// layer`).
        context: String,
        /// What the tar reader or writer found.
        #[source]
        source: TarError,
    },
    /// The Dockerfile is not UTF-8, or has no `FROM`.
    #[error("{0}")]
    Dockerfile(String),
    /// The Dockerfile cannot be parsed.
    #[error("{0}")]
    Syntax(#[source] SyntaxError),
    /// The build context lacks the Dockerfile, or names it outside itself.
    #[error("build context: {0}")]
    Context(String),
    /// The build context is not a usable tar.
    #[error("build context: {0}")]
    ContextArchive(#[source] TarError),
}

/// Compact JSON. Serializing a `Value` cannot fail.
pub(crate) fn json_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}
