//! A real OCI registry for the buildah backend: Debian's `docker-registry`
//! (the CNCF distribution registry) on a loopback port, with its storage
//! and a generated configuration in a temporary folder, stopped when
//! dropped; and the base image tests build from, made locally from
//! Debian's `busybox-static` (tests cannot pull from Docker Hub).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::buildah::{self, BuildahConfig};

/// Debian's docker-registry.
pub const DOCKER_REGISTRY: &str = "/usr/bin/docker-registry";

/// Debian's busybox-static.
pub const BUSYBOX: &str = "/bin/busybox";

/// How long the registry has to answer once started.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A tool the buildah backend needs failed; the test cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// A file or folder could not be written or read.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The registry did not start; its log says why.
    #[error(
        "docker-registry did not answer on {addr} within {secs} s (install it with scripts/container-tools): {log}"
    )]
    RegistryDown {
        /// Where it was to listen.
        addr: String,
        /// How long it was given.
        secs: u64,
        /// The end of its output.
        log: String,
    },
    /// buildah failed; its output says why.
    #[error("buildah {command} failed ({status}): {output}")]
    Buildah {
        /// The subcommand.
        command: String,
        /// How it ended.
        status: String,
        /// The end of its output.
        output: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ToolError {
    let what = what.into();
    move |source| ToolError::Io { what, source }
}

/// Debian's docker-registry serving `http://127.0.0.1:<port>`; dropping it
/// kills the process and removes its storage.
#[derive(Debug)]
pub struct DockerRegistry {
    child: Child,
    host: String,
    _dir: tempfile::TempDir,
}

impl DockerRegistry {
    /// Starts [`DOCKER_REGISTRY`] on a free loopback port with its storage
    /// in a new temporary folder, and waits until `/v2/` answers.
    pub async fn start() -> Result<Self, ToolError> {
        Self::start_with(Path::new(DOCKER_REGISTRY)).await
    }

    /// As [`Self::start`], with the registry executable `binary`.
    pub async fn start_with(binary: &Path) -> Result<Self, ToolError> {
        let dir = tempfile::Builder::new()
            .prefix("bosun-acr-registry.")
            .tempdir()
            .map_err(io("creating the registry's temporary folder"))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(io("finding a free loopback port"))?
            .port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
                dir.path().join("storage").display()
            ),
        )
        .map_err(io(format!("writing {}", config.display())))?;
        let log_path = dir.path().join("registry.log");
        let log = std::fs::File::create(&log_path).map_err(io(format!("creating {}", log_path.display())))?;
        let log_err = log.try_clone().map_err(io("duplicating the registry's log file"))?;
        let child = Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(io(format!(
                "starting {} (install it with scripts/container-tools)",
                binary.display()
            )))?;
        let mut registry = Self { child, host, _dir: dir };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let answered = client
                .get(format!("{}/v2/", registry.url()))
                .timeout(Duration::from_secs(1))
                .send()
                .await
                .is_ok_and(|response| response.status().is_success());
            if answered {
                return Ok(registry);
            }
            let exited = registry.child.try_wait().ok().flatten().is_some();
            if exited || Instant::now() > deadline {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(ToolError::RegistryDown {
                    addr: registry.host.clone(),
                    secs: READY_TIMEOUT.as_secs(),
                    log: tail(&log),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `127.0.0.1:<port>`: what image names start with, and
    /// [`BuildahConfig::registry`].
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `http://127.0.0.1:<port>`, the distribution API's base.
    pub fn url(&self) -> String {
        format!("http://{}", self.host)
    }
}

impl Drop for DockerRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last 20 lines of `text`.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Builds a base image from Debian's busybox-static ([`BUSYBOX`] at
/// `/bin/busybox`, its applets linked into `/bin`, so `/bin/sh` runs
/// `RUN`) and pushes it to `config`'s registry as `name`
/// (`library/busybox:stable`); returns the full reference
/// (`127.0.0.1:<port>/library/busybox:stable`) a Dockerfile's `FROM`
/// names. About a second; buildah works in a temporary folder removed
/// afterwards.
pub async fn push_busybox_base(config: &BuildahConfig, name: &str) -> Result<String, ToolError> {
    let work = tempfile::Builder::new()
        .prefix("bosun-acr-base.")
        .tempdir()
        .map_err(io("creating buildah's temporary folder"))?;
    buildah::prepare(work.path(), config).map_err(io("writing buildah's configuration"))?;
    let context = work.path().join("contexts").join("busybox");
    std::fs::create_dir_all(&context).map_err(io(format!("creating {}", context.display())))?;
    std::fs::copy(BUSYBOX, context.join("busybox")).map_err(io(format!(
        "copying {BUSYBOX} (install busybox-static with scripts/container-tools)"
    )))?;
    std::fs::write(
        context.join("Dockerfile"),
        "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox mkdir -p /usr/bin /sbin /usr/sbin /tmp && /bin/busybox --install -s\"]\n",
    )
    .map_err(io("writing the base image's Dockerfile"))?;
    let reference = format!("{}/{name}", config.registry);
    let policy = work.path().join("policy.json").display().to_string();
    let steps: [Vec<String>; 2] = [
        vec![
            "bud".into(),
            "--isolation".into(),
            "chroot".into(),
            "--layers=false".into(),
            "--signature-policy".into(),
            policy.clone(),
            "-t".into(),
            reference.clone(),
            context.display().to_string(),
        ],
        vec![
            "push".into(),
            "--tls-verify=false".into(),
            "--signature-policy".into(),
            policy,
            reference.clone(),
            format!("docker://{reference}"),
        ],
    ];
    for args in steps {
        let mut output = String::new();
        let status = buildah::run_buildah(config, work.path(), &args, |line| {
            output.push_str(line);
            output.push('\n');
        })
        .await
        .map_err(|message| ToolError::Buildah {
            command: args[0].clone(),
            status: "not started".to_owned(),
            output: message,
        })?;
        if !status.success() {
            return Err(ToolError::Buildah {
                command: args[0].clone(),
                status: status.to_string(),
                output: tail(&output),
            });
        }
    }
    Ok(reference)
}

/// Whether the buildah backend's tools are installed: `None`, or what is
/// missing (for a test to fail saying so).
pub fn missing_tools() -> Option<String> {
    let missing: Vec<&str> = [buildah::BUILDAH, DOCKER_REGISTRY, BUSYBOX]
        .into_iter()
        .filter(|path| !PathBuf::from(path).is_file())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "{} missing: install Debian's buildah, docker-registry and busybox-static (as root: ./scripts/container-tools install)",
            missing.join(", ")
        )
    })
}
