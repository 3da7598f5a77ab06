//! The local real builder: full Dockerfiles (any base image, `RUN`,
//! `SHELL`, `HEALTHCHECK`, multi-stage `COPY --from`, `ARG`/`ENV`) built
//! by Debian's `buildah` (daemonless, `--isolation chroot`, the `vfs`
//! storage driver), pushed to the configured registry, and verified there
//! over the OCI distribution API ([`crate::delivery::oci::distribution`]).
//!
//! # What it needs
//!
//! The `buildah` executable (found at start: [`BuildahBuilder::detect`]) and
//! root, or a user allowed to chroot. Everything buildah keeps is under a
//! bosun-owned folder (`<data dir>/buildah`), so no system configuration is
//! read or written:
//!
//! ```text
//! <work dir>/storage/          images and layers (--root, vfs driver)
//! <work dir>/run/              buildah's run state (--runroot)
//! <work dir>/registries-<h>.conf  the insecure (plain HTTP) registries; unqualified
//!                                 names resolve to docker.io
//! <work dir>/policy.json          accept unsigned images (as Debian's default)
//! <work dir>/auth-<h>.json        the registry credential (mode 0600), when one is set
//! <work dir>/contexts/<tmp>/   a build's context, unpacked, removed afterwards
//! ```
//!
//! `<h>` is the start of the SHA-256 of the file's content, so processes
//! with different registries can share one work dir without overwriting
//! each other's configuration (buildah locks its storage itself).
//!
//! # A build
//!
//! 1. The module must name the configured registry (`container.registry`);
//!    the repository is the tenant's, `<tenant>/<image>`
//!    ([`super::azure::tenant_repository`]), as on ACR.
//! 2. Idempotency: the build key is the SHA-256 of the context digest, the
//!    Dockerfile path, the build arguments and the platform. The image
//!    carries it as the label `dev.bosun.build-key`; when the tag already
//!    names an image with this key (read from the registry), nothing is
//!    built or pushed and the event says `alreadyPresent: true`. Builds of
//!    one process run one at a time, and the registry is asked again once
//!    a build may start, so an event delivered twice at once builds once.
//! 3. The context tar is unpacked (no entry may write through a symbolic
//!    link), and `buildah bud --isolation chroot --format docker` builds it
//!    (`docker` format keeps `HEALTHCHECK`, `SHELL` and `ONBUILD`, which
//!    the OCI config has no place for); each step is logged as it starts.
//! 4. `buildah push --digestfile` pushes it to
//!    `<registry>/<tenant>/<image>:<tag>`; the manifest is read back by the
//!    digest pushed, and its bytes must hash to it.
//! 5. The build's whole output is stored in the blob store (`build-logs`,
//!    `<tenant>/container-build/<image>/<tag>/<key>.log`), failed or not.
//!
//! A failed build is a permanent error ([`ContainerBuildError::BuilderFailed`])
//! with the log's blob and its last lines, unless the log says a registry
//! could not be reached or the OCI runtime could not start a step (then it
//! is retried).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use base64::Engine as _;
use bosun_contracts::messages::BlobRef;
use bosun_contracts::validate;
use oci_client::secrets::RegistryAuth;
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::azure::tenant_repository;
use super::port::{BuildProgress, BuiltImage, ContainerBuildError, ImageBuilder, ImageSpec};
use crate::delivery::archive::tar::{EntryKind, read_archive};
use crate::delivery::blob::{BlobStore, sha256_hex};
use crate::delivery::oci::distribution::{Distribution, DistributionError};
use crate::delivery::pipeline::LOG_CONTAINER;

/// The image label holding the build key.
pub const BUILD_KEY_LABEL: &str = "dev.bosun.build-key";

/// The image label naming the tenant that built it.
pub const TENANT_LABEL: &str = "dev.bosun.tenant";

/// The lines of a failed build's log an error carries.
const TAIL_LINES: usize = 15;

/// What the log of a build says when the build failed for a cause outside
/// the Dockerfile: a build that failed so is retried.
const TRANSIENT: &[&str] = &[
    // A registry could not be reached.
    "pinging container registry",
    "connection refused",
    "i/o timeout",
    "no such host",
    "TLS handshake timeout",
    "503 Service Unavailable",
    "429 Too Many Requests",
    "toomanyrequests",
    // The OCI runtime could not start a `RUN` step's container (runc's
    // copy of itself sealed while the host was busy): the step never ran.
    "sealing memfd copy",
];

/// Whether a failed build's log says it failed for a cause outside the
/// Dockerfile ([`TRANSIENT`]).
fn failed_transiently(log: &str) -> bool {
    TRANSIENT.iter().any(|needle| log.contains(needle))
}

/// Where buildah keeps its files and where it pushes.
#[derive(Clone, PartialEq, Eq)]
pub struct BuildahConfig {
    /// The `buildah` executable (`buildah` on `PATH` by default).
    pub binary: PathBuf,
    /// The bosun-owned folder of buildah's storage and configuration.
    pub work_dir: PathBuf,
    /// The registry images are pushed to, `host[:port]`; modules must name
    /// it in `container.registry`.
    pub registry: String,
    /// Registries (`host[:port]`) reached over plain HTTP: base images may
    /// come from them, and the push registry may be one.
    pub insecure_registries: Vec<String>,
    /// The push registry's user and password, when it needs one.
    pub credential: Option<(String, String)>,
    /// The longest one buildah command may run: a build or push that hangs
    /// (a lock, a registry that stops answering) is stopped then, and the
    /// build fails transiently (it is retried).
    pub timeout: std::time::Duration,
}

impl std::fmt::Debug for BuildahConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildahConfig")
            .field("binary", &self.binary)
            .field("work_dir", &self.work_dir)
            .field("registry", &self.registry)
            .field("insecure_registries", &self.insecure_registries)
            .field("timeout", &self.timeout)
            .field(
                "credential",
                &self.credential.as_ref().map(|(user, _)| (user, "<redacted>")),
            )
            .finish()
    }
}

/// Counts of what the builder did, since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildahStats {
    /// `buildah bud` runs.
    pub builds: u64,
    /// `buildah push` runs.
    pub pushes: u64,
    /// Builds skipped because the registry already had the image.
    pub already_present: u64,
}

/// Builds images with buildah and pushes them to a registry.
pub struct BuildahBuilder {
    config: BuildahConfig,
    files: ConfigFiles,
    blobs: Arc<dyn BlobStore>,
    registry: Distribution,
    /// One build at a time in this process (also what makes a redelivery
    /// racing its first delivery wait and then find the image).
    build_lock: tokio::sync::Mutex<()>,
    builds: AtomicU64,
    pushes: AtomicU64,
    already_present: AtomicU64,
}

impl std::fmt::Debug for BuildahBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildahBuilder").field("config", &self.config).finish()
    }
}

/// The buildah found by [`BuildahBuilder::detect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildahVersion(pub String);

/// Why [`BuildahBuilder::detect`] found no usable buildah.
#[derive(Debug, thiserror::Error)]
pub enum BuildahDetectError {
    /// The binary could not be started (missing, not executable).
    #[error("{} cannot be run: {source}", binary.display())]
    Run {
        /// The binary.
        binary: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// `buildah --version` ran and failed.
    #[error("{} --version failed ({status})", binary.display())]
    Failed {
        /// The binary.
        binary: PathBuf,
        /// How it exited.
        status: std::process::ExitStatus,
    },
}

impl BuildahBuilder {
    /// Whether `binary` runs, and its version line (`buildah version 1.28.2 ...`).
    /// Blocks for as long as `buildah --version` takes: call it at start.
    pub fn detect(binary: &Path) -> Result<BuildahVersion, BuildahDetectError> {
        let output = std::process::Command::new(binary)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|source| BuildahDetectError::Run {
                binary: binary.to_owned(),
                source,
            })?;
        if !output.status.success() {
            return Err(BuildahDetectError::Failed {
                binary: binary.to_owned(),
                status: output.status,
            });
        }
        Ok(BuildahVersion(
            String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        ))
    }

    /// A builder over `config`, reading contexts from and writing logs to
    /// `blobs`. Writes buildah's configuration files under the work dir.
    pub fn new(config: BuildahConfig, blobs: Arc<dyn BlobStore>) -> Result<Self, ContainerBuildError> {
        validate::registry_host("registry", &config.registry)
            .map_err(|err| ContainerBuildError::Invalid(format!("registry: {}", err.reason)))?;
        for host in &config.insecure_registries {
            validate::registry_host("insecure registry", host)
                .map_err(|err| ContainerBuildError::Invalid(format!("insecure registry `{host}`: {}", err.reason)))?;
        }
        let files = write_configuration(&config)?;
        let auth = match &config.credential {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        };
        let registry = Distribution::new(&config.insecure_registries, auth);
        Ok(Self {
            config,
            files,
            blobs,
            registry,
            build_lock: tokio::sync::Mutex::new(()),
            builds: AtomicU64::new(0),
            pushes: AtomicU64::new(0),
            already_present: AtomicU64::new(0),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BuildahConfig {
        &self.config
    }

    /// What the builder did so far.
    pub fn stats(&self) -> BuildahStats {
        BuildahStats {
            builds: self.builds.load(Ordering::Relaxed),
            pushes: self.pushes.load(Ordering::Relaxed),
            already_present: self.already_present.load(Ordering::Relaxed),
        }
    }

    /// The image the registry already holds under the tag with this build
    /// key, if any.
    async fn present(&self, target: &str, key: &str) -> Result<Option<BuiltImage>, ContainerBuildError> {
        let Some(manifest) = self.registry.manifest(target).await.map_err(registry_error)? else {
            return Ok(None);
        };
        let repository = target.rsplit_once(':').map_or(target, |(repository, _)| repository);
        let config = self
            .registry
            .config(repository, &manifest)
            .await
            .map_err(registry_error)?;
        if config["config"]["Labels"][BUILD_KEY_LABEL].as_str() != Some(key) {
            return Ok(None);
        }
        let pushed_at = config["created"]
            .as_str()
            .and_then(|created| OffsetDateTime::parse(created, &Rfc3339).ok())
            .unwrap_or_else(OffsetDateTime::now_utc);
        Ok(Some(BuiltImage {
            repository: String::new(),
            digest: manifest.digest.clone(),
            size_bytes: manifest.size_bytes(),
            already_present: true,
            pushed_at,
        }))
    }

    /// Runs buildah with the global storage options and `args`, appending
    /// its output to `log`; the exit status says whether it succeeded.
    async fn buildah(&self, args: &[String], log: &mut Vec<u8>) -> Result<bool, ContainerBuildError> {
        let work = &self.config.work_dir;
        let mut command = tokio::process::Command::new(&self.config.binary);
        command
            .arg("--root")
            .arg(work.join("storage"))
            .arg("--runroot")
            .arg(work.join("run"))
            .arg("--storage-driver")
            .arg("vfs")
            .args(args)
            .env("CONTAINERS_REGISTRIES_CONF", &self.files.registries)
            .env("BUILDAH_ISOLATION", "chroot")
            .env("TMPDIR", work.join("tmp"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(auth) = &self.files.auth {
            command.env("REGISTRY_AUTH_FILE", auth);
        }
        let mut child = command.spawn().map_err(|err| {
            ContainerBuildError::storage(format!("{} cannot be run", self.config.binary.display()), err)
        })?;
        let (sender, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
        let readers = [
            child.stdout.take().map(|out| read_lines(out, sender.clone())),
            child.stderr.take().map(|err| read_lines(err, sender.clone())),
        ];
        drop(sender);
        let readers: Vec<_> = readers.into_iter().flatten().collect();
        let command = args.first().map_or("", String::as_str);
        let output = async {
            while let Some(line) = lines.recv().await {
                if line.contains("STEP ") || line.starts_with("COMMIT") || line.starts_with("Writing manifest") {
                    tracing::info!(step = %line, "container build");
                }
                log.extend_from_slice(line.as_bytes());
                log.push(b'\n');
            }
        };
        // One deadline for the output and the exit: a buildah that closed
        // its pipes but never exits is stopped as one that hangs writing.
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let finished = match tokio::time::timeout_at(deadline, output).await {
            Ok(()) => tokio::time::timeout_at(deadline, child.wait()).await.ok(),
            Err(_) => None,
        };
        let Some(status) = finished else {
            let _ = child.kill().await;
            for reader in &readers {
                reader.abort();
            }
            log.extend_from_slice(
                format!(
                    "[bosun] buildah {command} did not finish within {} s: stopped\n",
                    self.config.timeout.as_secs()
                )
                .as_bytes(),
            );
            return Err(ContainerBuildError::TimedOut {
                builder: format!("buildah {command}"),
                limit: self.config.timeout,
                setting: "BOSUN_CONTAINER_BUILD_TIMEOUT_MS",
            });
        };
        for reader in readers {
            // The readers ended with the pipes; a reader that panicked lost lines only.
            let _ = reader.await;
        }
        let status = status.map_err(|err| ContainerBuildError::storage("waiting for buildah", err))?;
        log.extend_from_slice(format!("[bosun] buildah {command} exited: {status}\n").as_bytes());
        Ok(status.success())
    }

    /// Stores the build's log.
    async fn store_log(&self, spec: &ImageSpec, key: &str, log: Vec<u8>) -> Result<BlobRef, ContainerBuildError> {
        let blob_key = format!(
            "{}/container-build/{}/{}/{}.log",
            spec.tenant,
            spec.image,
            spec.tag,
            &key[..16]
        );
        self.blobs
            .put(LOG_CONTAINER, &blob_key, log, "text/plain; charset=utf-8")
            .await
            .map_err(|err| {
                ContainerBuildError::storage(format!("storing the build log {LOG_CONTAINER}/{blob_key}"), err)
            })
    }
}

fn read_lines<R>(stream: R, sender: tokio::sync::mpsc::UnboundedSender<String>) -> tokio::task::JoinHandle<()>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        // Bytes, not `lines()`: a `RUN` may print anything, and the pipe
        // must be drained to the end or buildah blocks writing to it.
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).await.is_ok_and(|read| read > 0) {
            let text = String::from_utf8_lossy(&line).trim_end_matches(['\n', '\r']).to_owned();
            line.clear();
            if sender.send(text).is_err() {
                break;
            }
        }
    })
}

fn registry_error(err: DistributionError) -> ContainerBuildError {
    if err.is_transient() {
        ContainerBuildError::Unavailable(Box::new(err))
    } else {
        ContainerBuildError::Rejected(Box::new(err))
    }
}

/// The build key: what the image is made of (context digest, Dockerfile,
/// build arguments, platform), hashed.
pub fn build_key(spec: &ImageSpec) -> String {
    let inputs = json!({
        "context": spec.context.sha256,
        "dockerfile": spec.dockerfile,
        "buildArgs": spec.build_args,
        "platform": spec.platform,
    });
    sha256_hex(inputs.to_string().as_bytes())
}

/// The configuration files buildah is pointed at.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConfigFiles {
    registries: PathBuf,
    auth: Option<PathBuf>,
}

/// Writes registries.conf, policy.json and auth.json under the work dir.
fn write_configuration(config: &BuildahConfig) -> Result<ConfigFiles, ContainerBuildError> {
    let work = &config.work_dir;
    for dir in ["storage", "run", "tmp", "contexts"] {
        std::fs::create_dir_all(work.join(dir)).map_err(|err| storage("creating", &work.join(dir), err))?;
    }
    let mut registries = String::from(
        "# Written by bosun: the registries buildah reaches over plain HTTP.\n\
         unqualified-search-registries = [\"docker.io\"]\n",
    );
    for host in &config.insecure_registries {
        registries.push_str(&format!("\n[[registry]]\nlocation = \"{host}\"\ninsecure = true\n"));
    }
    let named = |stem: &str, extension: &str, content: &[u8]| {
        work.join(format!("{stem}-{}.{extension}", &sha256_hex(content)[..12]))
    };
    let registries_path = named("registries", "conf", registries.as_bytes());
    write_file(&registries_path, registries.as_bytes(), 0o644)?;
    write_file(
        &work.join("policy.json"),
        br#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
        0o644,
    )?;
    if let Some((user, password)) = &config.credential {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let file = json!({ "auths": { config.registry.clone(): { "auth": auth } } });
        let bytes = file.to_string().into_bytes();
        let auth_path = named("auth", "json", &bytes);
        write_file(&auth_path, &bytes, 0o600)?;
        return Ok(ConfigFiles {
            registries: registries_path,
            auth: Some(auth_path),
        });
    }
    Ok(ConfigFiles {
        registries: registries_path,
        auth: None,
    })
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ContainerBuildError> {
    use std::os::unix::fs::PermissionsExt as _;
    super::local::write_atomically(path, bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|err| storage("chmod", path, err))
}

fn storage(context: &str, path: &Path, err: std::io::Error) -> ContainerBuildError {
    ContainerBuildError::storage(format!("{context} {}", path.display()), err)
}

/// Unpacks a context tar into `dir`; no entry may write through a symbolic
/// link the archive made.
pub(crate) fn unpack(context: &[u8], dir: &Path) -> Result<(), ContainerBuildError> {
    use std::os::unix::fs::PermissionsExt as _;
    let entries = read_archive(context).map_err(|err| ContainerBuildError::Invalid(format!("context: {err}")))?;
    for entry in entries {
        let path = dir.join(&entry.path);
        let mut ancestor = PathBuf::from(dir);
        let parts: Vec<&str> = entry.path.split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            ancestor.push(part);
            if std::fs::symlink_metadata(&ancestor).is_ok_and(|meta| meta.file_type().is_symlink()) {
                return Err(ContainerBuildError::Invalid(format!(
                    "context: entry `{}` lies under the symbolic link `{}`",
                    entry.path,
                    ancestor.strip_prefix(dir).unwrap_or(&ancestor).display()
                )));
            }
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|err| storage("creating", parent, err))?;
        }
        match &entry.kind {
            EntryKind::Directory => {
                std::fs::create_dir_all(&path).map_err(|err| storage("creating", &path, err))?;
            }
            EntryKind::File => {
                std::fs::write(&path, &entry.data).map_err(|err| storage("writing", &path, err))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(entry.mode & 0o7777))
                    .map_err(|err| storage("chmod", &path, err))?;
            }
            EntryKind::Symlink(target) => {
                if std::fs::symlink_metadata(&path).is_ok() {
                    std::fs::remove_file(&path).map_err(|err| storage("replacing", &path, err))?;
                }
                std::os::unix::fs::symlink(target, &path).map_err(|err| storage("linking", &path, err))?;
            }
        }
    }
    Ok(())
}

/// The last lines of a log.
pub(super) fn tail(log: &[u8]) -> String {
    let text = String::from_utf8_lossy(log);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

impl BuildahBuilder {
    /// Builds `spec`'s image and stores it under its tag, before it
    /// returns (the port's [`ImageBuilder::build`], which never leaves a
    /// run going).
    pub async fn build_image(&self, spec: &ImageSpec) -> Result<BuiltImage, ContainerBuildError> {
        let invalid =
            |err: validate::FieldError| ContainerBuildError::Invalid(format!("{}: {}", err.field, err.reason));
        validate::tenant_id("tenant", &spec.tenant).map_err(invalid)?;
        validate::oci_repository("image", &spec.image).map_err(invalid)?;
        validate::oci_tag("tag", &spec.tag).map_err(invalid)?;
        crate::delivery::oci::Platform::parse(&spec.platform)
            .map_err(|err| ContainerBuildError::Invalid(format!("platform: {err}")))?;
        if spec.registry != self.config.registry {
            return Err(ContainerBuildError::Invalid(format!(
                "container.registry: the module names registry `{}`, but this builder pushes to `{}`",
                spec.registry, self.config.registry
            )));
        }
        let repository = tenant_repository(&spec.tenant, &spec.image);
        validate::oci_repository("image", &repository).map_err(invalid)?;
        let target = format!("{}/{repository}:{}", self.config.registry, spec.tag);
        let key = build_key(spec);

        let _one_build = self.build_lock.lock().await;
        if let Some(mut present) = self.present(&target, &key).await? {
            tracing::debug!(%target, digest = %present.digest, "image already in the registry");
            self.already_present.fetch_add(1, Ordering::Relaxed);
            present.repository = repository;
            return Ok(present);
        }

        let context = self.blobs.get(&spec.context).await?;
        let contexts = self.config.work_dir.join("contexts");
        let dir = tempfile::tempdir_in(&contexts).map_err(|err| storage("creating a folder in", &contexts, err))?;
        let context_dir = dir.path().to_owned();
        tokio::task::spawn_blocking(move || unpack(&context, &context_dir))
            .await
            .map_err(|err| ContainerBuildError::storage("the unpacking task failed", err))??;
        let dockerfile = dir.path().join(&spec.dockerfile);
        if !dockerfile.is_file() {
            return Err(ContainerBuildError::Invalid(format!(
                "container.dockerfile: `{}` is not in the build context",
                spec.dockerfile
            )));
        }

        let mut args: Vec<String> = [
            "bud",
            "--isolation",
            "chroot",
            "--format",
            "docker",
            "--layers=false",
            "--signature-policy",
        ]
        .map(str::to_owned)
        .to_vec();
        args.push(self.config.work_dir.join("policy.json").display().to_string());
        args.extend(["--platform".to_owned(), spec.platform.clone()]);
        for (name, value) in &spec.build_args {
            args.extend(["--build-arg".to_owned(), format!("{name}={value}")]);
        }
        args.extend([
            "--label".to_owned(),
            format!("{BUILD_KEY_LABEL}={key}"),
            "--label".to_owned(),
            format!("{TENANT_LABEL}={}", spec.tenant),
            "-f".to_owned(),
            dockerfile.display().to_string(),
            "-t".to_owned(),
            target.clone(),
            dir.path().display().to_string(),
        ]);
        tracing::info!(tenant = %spec.tenant, %target, build_key = %key, "container build started (buildah)");
        let mut log = Vec::new();
        self.builds.fetch_add(1, Ordering::Relaxed);
        let built = self.buildah(&args, &mut log).await?;
        drop(dir);
        if !built {
            let transient = failed_transiently(&String::from_utf8_lossy(&log));
            let tail = tail(&log);
            let log = self.store_log(spec, &key, log).await.ok().map(Box::new);
            return Err(ContainerBuildError::BuilderFailed {
                builder: "buildah",
                log,
                tail,
                transient,
            });
        }

        let digest_file = tempfile::NamedTempFile::new_in(self.config.work_dir.join("tmp"))
            .map_err(|err| storage("creating a file in", &self.config.work_dir.join("tmp"), err))?;
        let mut push = vec![
            "push".to_owned(),
            "--signature-policy".to_owned(),
            self.config.work_dir.join("policy.json").display().to_string(),
            "--digestfile".to_owned(),
            digest_file.path().display().to_string(),
        ];
        push.extend([target.clone(), format!("docker://{target}")]);
        self.pushes.fetch_add(1, Ordering::Relaxed);
        let pushed = self.buildah(&push, &mut log).await?;
        // The image is in the registry now (or the push is retried from a
        // new build); the local copy only takes room. Base images stay.
        let mut scratch = Vec::new();
        if !self.buildah(&["rmi".to_owned(), target.clone()], &mut scratch).await? {
            tracing::warn!(%target, output = %tail(&scratch), "could not remove the built image from buildah's storage");
        }
        if !pushed {
            let tail = tail(&log);
            let log_ref = self.store_log(spec, &key, log).await.ok().map(Box::new);
            return Err(ContainerBuildError::BuilderFailed {
                builder: "buildah push",
                log: log_ref,
                tail,
                transient: true,
            });
        }
        let digest = std::fs::read_to_string(digest_file.path())
            .map_err(|err| storage("reading", digest_file.path(), err))?
            .trim()
            .to_owned();
        let manifest = self
            .registry
            .verify(&format!("{}/{repository}", self.config.registry), &digest)
            .await
            .map_err(registry_error)?;
        let log_ref = self.store_log(spec, &key, log).await?;
        tracing::info!(
            tenant = %spec.tenant,
            %target,
            %digest,
            log = %log_ref.key,
            "container image built with buildah, pushed and verified by digest"
        );
        Ok(BuiltImage {
            repository,
            digest,
            size_bytes: manifest.size_bytes(),
            already_present: false,
            pushed_at: OffsetDateTime::now_utc(),
        })
    }
}

#[async_trait]
impl ImageBuilder for BuildahBuilder {
    async fn build(&self, spec: &ImageSpec) -> Result<BuildProgress, ContainerBuildError> {
        self.build_image(spec).await.map(BuildProgress::Built)
    }
}

#[cfg(test)]
mod transient_tests {
    use super::failed_transiently;

    /// A registry out of reach or a runtime that could not start a step is
    /// retried; a step that ran and failed is the Dockerfile's.
    #[test]
    fn only_causes_outside_the_dockerfile_are_transient() {
        let runtime = "[1/2] STEP 5/5: RUN sh build.sh && sh test.sh\n\
                       Close_Fd sealing memfd copy: Device or resource busy\n\
                       subprocess exited with status 1\n\
                       Error: building at STEP \"RUN sh build.sh && sh test.sh\": exit status 1\n";
        assert!(failed_transiently(runtime));
        assert!(failed_transiently(
            "Error: creating build container: pinging container registry 127.0.0.1:5000: connection refused"
        ));
        let failing_test = "[1/2] STEP 5/5: RUN sh build.sh && sh test.sh\n\
                            FAIL: refunds\n\
                            Error: building at STEP \"RUN sh build.sh && sh test.sh\": exit status 1\n";
        assert!(!failed_transiently(failing_test));
    }
}

#[cfg(test)]
mod deadline_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::delivery::blob::FilesystemBlobStore;

    /// A `buildah` that closes its output and then never exits is stopped
    /// at the deadline like one that hangs while writing: the handler
    /// gets `TimedOut` (a retry), not a wait without end.
    #[tokio::test]
    async fn a_buildah_that_closes_its_pipes_and_hangs_is_stopped_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("buildah");
        std::fs::write(
            &binary,
            "#!/bin/sh\necho 'STEP 1/1: FROM scratch'\nexec >/dev/null 2>&1\nexec sleep 60\n",
        )
        .unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let blobs: Arc<dyn BlobStore> = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
        let builder = BuildahBuilder::new(
            BuildahConfig {
                binary,
                work_dir: dir.path().join("work"),
                registry: "127.0.0.1:5000".to_owned(),
                insecure_registries: Vec::new(),
                credential: None,
                timeout: Duration::from_millis(500),
            },
            blobs,
        )
        .unwrap();
        let started = Instant::now();
        let mut log = Vec::new();
        let err = builder.buildah(&["bud".to_owned()], &mut log).await.unwrap_err();
        assert!(matches!(err, ContainerBuildError::TimedOut { .. }), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
        let log = String::from_utf8_lossy(&log);
        assert!(log.contains("STEP 1/1") && log.contains("did not finish"), "{log}");
    }
}
