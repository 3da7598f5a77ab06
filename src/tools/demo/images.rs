//! The demo's image builder. With Debian's `buildah`, `docker-registry` and
//! a static `/bin/busybox` on the machine (and the local adapters), the
//! demo starts a registry of its own on a free loopback port, builds a
//! busybox base image with buildah and pushes it there (nothing is pulled
//! from outside), and has container-build build the sample's multi-stage
//! `Dockerfile` on it with buildah. Otherwise, or when any of that fails,
//! the sample names `Dockerfile.scratch` and the built-in builder makes
//! the image into the local OCI layouts; the summary says which ran and why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_consumers::container_build::buildah::{BuildahBuilder, BuildahConfig, BuildahDetectError};
use bosun_consumers::container_build::port::{ContainerBuildError, ImageSpec};
use bosun_consumers::delivery::archive::tar::{TarError, TarWriter};
use bosun_consumers::delivery::blob::{BlobError, BlobStore, FilesystemBlobStore};
use serde_json::{Value, json};

use crate::runtime::config::{AdapterKind, ContainerBuilderChoice, Settings};

/// The static busybox the base image is made of (Debian's busybox-static).
const BUSYBOX: &str = "/bin/busybox";

/// The base image's Dockerfile: busybox, its applets installed by a `RUN`.
const BASE_DOCKERFILE: &str = "FROM scratch\n\
COPY busybox /bin/busybox\n\
SHELL [\"/bin/busybox\", \"sh\", \"-c\"]\n\
RUN /bin/busybox mkdir -p /usr/bin /sbin /usr/sbin && /bin/busybox --install -s\n\
CMD [\"/bin/sh\"]\n";

/// Why the demo cannot build with buildah (it then uses the built-in
/// builder and its summary says why). Each message names its cause, which
/// stays the typed source.
#[derive(Debug, thiserror::Error)]
enum BuildahSetupError {
    /// buildah is not there or does not run.
    #[error(transparent)]
    Buildah(#[from] BuildahDetectError),
    /// A blocking task (the buildah check, taking the registry's locks)
    /// did not finish.
    #[error("{task} did not finish: {source}")]
    Task {
        /// What the task was doing.
        task: &'static str,
        /// Why (a panic).
        #[source]
        source: tokio::task::JoinError,
    },
    /// No static busybox to make the base image of.
    #[error("no static busybox for the base image ({BUSYBOX}: {0}; apt-get install busybox-static)")]
    Busybox(#[source] std::io::Error),
    /// The builder of the base image could not be set up.
    #[error("setting up buildah: {0}")]
    Builder(#[source] ContainerBuildError),
    /// The base image's build context could not be packed.
    #[error("packing the base image's build context: {0}")]
    PackContext(#[source] TarError),
    /// The base image's build context could not be stored.
    #[error("storing the base image's build context: {0}")]
    StoreContext(#[source] BlobError),
    /// The base image did not build or push.
    #[error("building the busybox base image: {0}")]
    BaseImage(#[source] ContainerBuildError),
    /// A file of the demo's registry could not be created, opened or
    /// written.
    #[error("{action} {}: {source}", path.display())]
    File {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A lock file could not be locked.
    #[error("locking {lock}: {source}")]
    Lock {
        /// `start.lock` or `users.lock`.
        lock: &'static str,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// No free loopback port for the registry.
    #[error("finding a free port: {0}")]
    FreePort(#[source] std::io::Error),
    /// `docker-registry` could not be started.
    #[error("docker-registry cannot be run ({0}; apt-get install docker-registry)")]
    RegistryRun(#[source] std::io::Error),
    /// `docker-registry` started and exited.
    #[error("docker-registry exited ({status}); see {}", log.display())]
    RegistryExited {
        /// How it exited.
        status: std::process::ExitStatus,
        /// Its log.
        log: PathBuf,
    },
    /// `docker-registry` did not answer in time.
    #[error("docker-registry did not answer on {host} within 15 s")]
    RegistrySilent {
        /// Where it should have answered.
        host: String,
    },
}

impl BuildahSetupError {
    fn file(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| Self::File { action, path, source }
    }
}

/// How the demo's images are built.
#[derive(Debug)]
pub struct DemoImages {
    /// What the summary says: which builder, and why.
    pub summary: String,
    /// The sample module's `container` settings.
    pub container: Value,
    /// This demo's hold on the data directory's registry: the last demo
    /// to let go stops it.
    _registry: Option<SharedRegistry>,
}

impl DemoImages {
    fn built_in(reason: &str) -> Self {
        Self {
            summary: format!("built-in (FROM scratch, Dockerfile.scratch): {reason}"),
            container: json!({
                "registry": "localhost",
                "image": "contoso/payments-api",
                "dockerfile": "Dockerfile.scratch"
            }),
            _registry: None,
        }
    }
}

/// Decides and prepares the builder; with buildah, points `settings` at the
/// demo's registry.
pub async fn prepare(settings: &mut Settings, tenant: &str) -> DemoImages {
    if !matches!(settings.adapters, AdapterKind::Local) {
        return DemoImages::built_in("the azure adapters build on Azure");
    }
    if settings.container.builder == ContainerBuilderChoice::Layout {
        return DemoImages::built_in("BOSUN_CONTAINER_BUILDER=layout");
    }
    match with_buildah(settings, tenant).await {
        Ok(images) => images,
        Err(err) => {
            let reason = bosun_consumers::error_chain(&err);
            tracing::warn!(%reason, "the demo builds its image with the built-in builder");
            DemoImages::built_in(&reason)
        }
    }
}

async fn with_buildah(settings: &mut Settings, tenant: &str) -> Result<DemoImages, BuildahSetupError> {
    // A demo waits minutes, not the production half hour, for a build
    // that hangs before it is stopped and retried.
    settings.container.build_timeout = settings.container.build_timeout.min(Duration::from_secs(120));
    let binary = settings.container.buildah_binary.clone();
    let version = {
        let binary = binary.clone();
        tokio::task::spawn_blocking(move || BuildahBuilder::detect(&binary))
            .await
            .map_err(|source| BuildahSetupError::Task {
                task: "the buildah check",
                source,
            })??
    };
    let busybox = std::fs::read(BUSYBOX).map_err(BuildahSetupError::Busybox)?;
    let dir = settings.data_dir.join("demo-registry");
    let shared = SharedRegistry::join(&dir).await?;
    let registry = shared.host.clone();

    let blobs: Arc<dyn BlobStore> = Arc::new(FilesystemBlobStore::new(dir.join(format!("base-context-{tenant}"))));
    let base = BuildahBuilder::new(
        BuildahConfig {
            binary: binary.clone(),
            work_dir: settings.data_dir.join("buildah"),
            registry: registry.clone(),
            insecure_registries: vec![registry.clone()],
            credential: None,
            timeout: settings.container.build_timeout,
        },
        Arc::clone(&blobs),
    )
    .map_err(BuildahSetupError::Builder)?;
    let mut writer = TarWriter::new();
    let context = writer
        .file("Dockerfile", 0o644, 0, 0, BASE_DOCKERFILE.as_bytes())
        .and_then(|()| writer.file("busybox", 0o755, 0, 0, &busybox))
        .and_then(|()| writer.finish())
        .map_err(BuildahSetupError::PackContext)?;
    let context = blobs
        .put(
            "artifacts",
            &format!("{tenant}/demo-base/container-context.tar"),
            context,
            "application/x-tar",
        )
        .await
        .map_err(BuildahSetupError::StoreContext)?;
    let spec = ImageSpec {
        tenant: tenant.to_owned(),
        registry: registry.clone(),
        image: "busybox".to_owned(),
        tag: "1".to_owned(),
        platform: "linux/amd64".to_owned(),
        dockerfile: "Dockerfile".to_owned(),
        build_args: BTreeMap::new(),
        context,
    };
    let built = base.build_image(&spec).await.map_err(BuildahSetupError::BaseImage)?;
    let base_image = format!("{registry}/{}:{}", built.repository, spec.tag);

    settings.container.builder = ContainerBuilderChoice::Buildah;
    settings.container.registry = Some(registry.clone());
    settings.container.insecure_registries = vec![registry.clone()];
    settings.container.credential = None;
    Ok(DemoImages {
        summary: format!(
            "{version} (Dockerfile, multi-stage on {base_image}), pushed to the demo's registry",
            version = version.0
        ),
        container: json!({
            "registry": registry,
            "image": "contoso/payments-api",
            "dockerfile": "Dockerfile",
            "buildArgs": { "BASE": base_image }
        }),
        _registry: Some(shared),
    })
}

/// The data directory's registry, shared by the demos running on it: the
/// consumers of every process on one data directory handle every demo's
/// events, so they must all push to one registry. Two lock files keep it
/// right: `start.lock` (held while one demo starts, joins or stops the
/// registry) and `users.lock` (held shared by every demo using it; the
/// demo that can lock it exclusively when it ends is the last, and stops
/// the registry). `registry.json` says where it is.
#[derive(Debug)]
struct SharedRegistry {
    /// `127.0.0.1:<port>`.
    host: String,
    dir: std::path::PathBuf,
    users: std::fs::File,
}

impl SharedRegistry {
    async fn join(dir: &Path) -> Result<Self, BuildahSetupError> {
        std::fs::create_dir_all(dir).map_err(BuildahSetupError::file("creating", dir))?;
        let dir = dir.to_owned();
        let locks = dir.clone();
        let (start, users, recorded) = tokio::task::spawn_blocking(move || {
            let start = open_lock(&locks.join("start.lock"))?;
            start.lock().map_err(|source| BuildahSetupError::Lock {
                lock: "start.lock",
                source,
            })?;
            let users = open_lock(&locks.join("users.lock"))?;
            users.lock_shared().map_err(|source| BuildahSetupError::Lock {
                lock: "users.lock",
                source,
            })?;
            Ok::<_, BuildahSetupError>((start, users, recorded_host(&locks)))
        })
        .await
        .map_err(|source| BuildahSetupError::Task {
            task: "taking the registry's locks",
            source,
        })??;
        let result = match recorded {
            Some(host) if answers(&host).await => Ok(host),
            _ => start_registry(&dir).await,
        };
        let _ = start.unlock();
        match result {
            Ok(host) => Ok(Self { host, dir, users }),
            Err(reason) => {
                let _ = users.unlock();
                Err(reason)
            }
        }
    }
}

fn open_lock(path: &Path) -> Result<std::fs::File, BuildahSetupError> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(BuildahSetupError::file("opening", path))
}

fn recorded(dir: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(dir.join("registry.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn recorded_host(dir: &Path) -> Option<String> {
    recorded(dir)?["host"].as_str().map(str::to_owned)
}

impl Drop for SharedRegistry {
    fn drop(&mut self) {
        let Ok(start) = open_lock(&self.dir.join("start.lock")) else {
            return;
        };
        if start.lock().is_err() {
            return;
        }
        let _ = self.users.unlock();
        if self.users.try_lock().is_ok() {
            // No other demo uses it.
            // Only the registry this data directory recorded (a pid may be reused).
            if let Some(pid) = recorded(&self.dir).and_then(|info| info["pid"].as_u64())
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("docker-registry"))
            {
                let _ = std::process::Command::new("kill").arg(pid.to_string()).status();
            }
            let _ = std::fs::remove_file(self.dir.join("registry.json"));
            let _ = std::fs::remove_dir_all(self.dir.join("storage"));
            let _ = self.users.unlock();
        }
        let _ = start.unlock();
    }
}

async fn answers(host: &str) -> bool {
    reqwest::Client::new()
        .get(format!("http://{host}/v2/"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .is_ok()
}

/// Starts Debian's docker-registry on a free loopback port with its own
/// configuration and storage under `dir`, records it in `registry.json`,
/// and returns its `host:port` once it answers. It outlives this demo when
/// another demo on the data directory still uses it.
async fn start_registry(dir: &Path) -> Result<String, BuildahSetupError> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(BuildahSetupError::FreePort)?
        .port();
    let config = dir.join("config.yml");
    let text = format!(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
        dir.join("storage").display()
    );
    std::fs::write(&config, text).map_err(BuildahSetupError::file("writing", &config))?;
    let log_path = dir.join("registry.log");
    let log = std::fs::File::create(&log_path).map_err(BuildahSetupError::file("creating", &log_path))?;
    let errors = log
        .try_clone()
        .map_err(BuildahSetupError::file("opening a second handle on", &log_path))?;
    let mut child = std::process::Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(errors)
        .spawn()
        .map_err(BuildahSetupError::RegistryRun)?;
    let host = format!("127.0.0.1:{port}");
    let info = json!({ "host": host, "pid": child.id() });
    let info_path = dir.join("registry.json");
    std::fs::write(&info_path, info.to_string()).map_err(BuildahSetupError::file("writing", &info_path))?;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(15) {
        if answers(&host).await {
            return Ok(host);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(BuildahSetupError::RegistryExited { status, log: log_path });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(BuildahSetupError::RegistrySilent { host })
}
