//! The buildah backend: a run is built by Debian's `buildah` and pushed to
//! a real OCI registry (Debian's `docker-registry`, see
//! [`super::DockerRegistry`]), which the login server's `/v2/` read side
//! then proxies to.
//!
//! A run, in a background task started when it turns `Running`:
//!
//! 1. the uploaded gzipped tar is unpacked into `<work>/contexts/<runId>`;
//! 2. `buildah bud --isolation chroot --layers=false --tls-verify=false`
//!    builds the request's `dockerFilePath` with its `arguments` as
//!    `--build-arg` and its `platform` as `--platform` (global options
//!    `--root <work>/storage --runroot <work>/run --storage-driver vfs`;
//!    the registries and signature policy are the double's own files, so no
//!    system configuration is read);
//! 3. `buildah push --digestfile` of the image to
//!    `<registry>/<repository>:<tag>` for every name of `imageNames`
//!    (unless `isPushEnabled` is false); `outputImages` carry the digests
//!    pushed;
//! 4. everything buildah prints is the run's log, line by line as it comes;
//!    a build that fails (or outlasts the request's `timeout`) makes the run
//!    `Failed` with a `runErrorMessage`.
//!
//! `<work>` is a temporary folder the double owns (removed when it is
//! dropped); base images pulled by one run stay in its storage for the
//! next.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use super::builder::{BuiltImage, log_line};
use super::{AcrBackend, AcrState, RunStatus, Shared, arm, storage};
use crate::serve::lock;

/// Debian's buildah.
pub const BUILDAH: &str = "/usr/bin/buildah";

/// Where the buildah backend builds and pushes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildahConfig {
    /// The registry the images are pushed to and the login server reads
    /// from: `host:port`, plain HTTP (`127.0.0.1:5000`).
    pub registry: String,
    /// The buildah executable ([`BUILDAH`] by default).
    pub buildah: PathBuf,
}

impl BuildahConfig {
    /// Builds with Debian's buildah and pushes to `registry` (`host:port`,
    /// plain HTTP).
    pub fn new(registry: &str) -> Self {
        Self {
            registry: registry.to_owned(),
            buildah: PathBuf::from(BUILDAH),
        }
    }
}

/// The longest a run may take when its request names no `timeout` (ACR's
/// default, one hour).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// Writes the double's own registries and policy files under `work` (so
/// buildah reads no system configuration): no unqualified search
/// registries, `registry` insecure (plain HTTP), unsigned images accepted.
pub(super) fn prepare(work: &Path, config: &BuildahConfig) -> std::io::Result<()> {
    for dir in ["storage", "run", "tmp", "contexts"] {
        std::fs::create_dir_all(work.join(dir))?;
    }
    std::fs::write(
        work.join("registries.conf"),
        format!(
            "unqualified-search-registries = []\n\n[[registry]]\nlocation = \"{}\"\ninsecure = true\n",
            config.registry
        ),
    )?;
    std::fs::write(
        work.join("policy.json"),
        "{\"default\": [{\"type\": \"insecureAcceptAnything\"}]}\n",
    )
}

/// Runs `buildah` with the global storage options of `work` and `args`,
/// handing each line it prints (stdout and stderr) to `line` as it comes.
/// `Err` when it could not be started.
pub(crate) async fn run_buildah(
    config: &BuildahConfig,
    work: &Path,
    args: &[String],
    mut line: impl FnMut(&str),
) -> Result<ExitStatus, String> {
    let mut child = tokio::process::Command::new(&config.buildah)
        .arg("--root")
        .arg(work.join("storage"))
        .arg("--runroot")
        .arg(work.join("run"))
        .arg("--storage-driver")
        .arg("vfs")
        .args(args)
        .env("CONTAINERS_REGISTRIES_CONF", work.join("registries.conf"))
        .env("BUILDAH_ISOLATION", "chroot")
        .env("TMPDIR", work.join("tmp"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("{} cannot be run: {err}", config.buildah.display()))?;
    let (sender, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    if let Some(out) = child.stdout.take() {
        tokio::spawn(read_lines(out, sender.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(read_lines(err, sender.clone()));
    }
    drop(sender);
    while let Some(text) = lines.recv().await {
        line(&text);
    }
    child
        .wait()
        .await
        .map_err(|err| format!("waiting for {} failed: {err}", config.buildah.display()))
}

async fn read_lines(stream: impl AsyncRead + Unpin, sender: tokio::sync::mpsc::UnboundedSender<String>) {
    let mut reader = BufReader::new(stream);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&buffer);
                if sender.send(text.trim_end_matches(['\n', '\r']).to_owned()).is_err() {
                    return;
                }
            }
        }
    }
}

/// Appends `text` (one line) to run `number`'s log.
fn append(shared: &Shared, number: u64, text: &str) {
    if let Some(run) = lock(shared).runs.get_mut(&number) {
        run.log.push_str(text);
        run.log.push('\n');
    }
}

/// Starts building run `number` in the background when `state`'s backend
/// is buildah (nothing otherwise): the run is `Running` and the task makes
/// it `Succeeded` or `Failed`. `state` is `shared`, locked by the caller.
pub(super) fn start(shared: &Shared, state: &AcrState, number: u64) {
    let (AcrBackend::Buildah(config), Some(work)) = (&state.config.backend, &state.buildah_work) else {
        return;
    };
    let Some(run) = state.runs.get(&number) else {
        return;
    };
    let source = run.request["sourceLocation"].as_str().unwrap_or_default();
    let path = format!("/{}/{source}", storage::SOURCE_CONTAINER);
    let context = state.blobs.get(&path).cloned();
    let request = run.request.clone();
    let run_id = run.run_id.clone();
    let login_server = state.config.login_server.clone();
    let config = config.clone();
    // The task keeps the folder until buildah is done, even if the double
    // is dropped first.
    let work = work.clone();
    let shared = shared.clone();
    tokio::spawn(async move {
        let timeout = request["timeout"].as_u64().map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        let run = Build {
            shared: &shared,
            number,
            work: work.path(),
            config: &config,
            request: &request,
            run_id: &run_id,
            login_server: &login_server,
        };
        let outcome = match tokio::time::timeout(timeout, run.build(context)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("run timed out after {} seconds", timeout.as_secs())),
        };
        let mut state = lock(&shared);
        let Some(run) = state.runs.get_mut(&number) else {
            return;
        };
        run.finish_time = Some(arm::now_rfc3339());
        match outcome {
            Ok(images) => {
                run.status = RunStatus::Succeeded;
                run.output_images = images;
                run.log.push_str(&log_line("Run succeeded"));
            }
            Err(message) => {
                run.status = RunStatus::Failed;
                run.log.push_str(&log_line(&format!("Run failed: {message}")));
                run.error_message = Some(message);
            }
        }
    });
}

/// One run being built.
struct Build<'a> {
    shared: &'a Shared,
    number: u64,
    work: &'a Path,
    config: &'a BuildahConfig,
    request: &'a Value,
    run_id: &'a str,
    login_server: &'a str,
}

impl Build<'_> {
    fn log(&self, text: &str) {
        append(self.shared, self.number, text);
    }

    async fn buildah(&self, args: &[String]) -> Result<ExitStatus, String> {
        run_buildah(self.config, self.work, args, |text| self.log(text)).await
    }

    /// Builds and pushes; the images pushed, or why the run failed.
    async fn build(&self, context: Option<Vec<u8>>) -> Result<Vec<BuiltImage>, String> {
        let context = context
            .ok_or_else(|| "failed to download the source: the sourceLocation names no uploaded context".to_owned())?;
        let run_id = self.run_id;
        let dir = self.work.join("contexts").join(run_id);
        let unpack_dir = dir.clone();
        tokio::task::spawn_blocking(move || unpack(&context, &unpack_dir))
            .await
            .map_err(|err| format!("failed to download the source: the unpacking task failed: {err}"))??;
        self.log(&log_line("Successfully obtained source code"));
        let dockerfile_path = self.request["dockerFilePath"].as_str().unwrap_or("Dockerfile");
        let dockerfile = dir.join(dockerfile_path.trim_start_matches("./"));
        if !dockerfile.is_file() {
            return Err(format!(
                "unable to prepare context: unable to evaluate symlinks in Dockerfile path: lstat /workspace/{dockerfile_path}: no such file or directory"
            ));
        }
        let local = format!("localhost/acr-run-{run_id}:latest");
        let policy = self.work.join("policy.json").display().to_string();
        let mut args: Vec<String> = ["bud", "--isolation", "chroot", "--layers=false", "--tls-verify=false"]
            .map(str::to_owned)
            .to_vec();
        args.extend(["--signature-policy".to_owned(), policy.clone()]);
        args.extend(["--platform".to_owned(), platform(self.request)]);
        for argument in self.request["arguments"].as_array().into_iter().flatten() {
            if let (Some(name), Some(value)) = (argument["name"].as_str(), argument["value"].as_str()) {
                args.extend(["--build-arg".to_owned(), format!("{name}={value}")]);
            }
        }
        args.extend([
            "-f".to_owned(),
            dockerfile.display().to_string(),
            "-t".to_owned(),
            local.clone(),
            dir.display().to_string(),
        ]);
        self.log(&log_line(&format!("Building {dockerfile_path} with buildah")));
        let status = self.buildah(&args).await?;
        let _ = std::fs::remove_dir_all(&dir);
        if !status.success() {
            return Err(match status.code() {
                Some(code) => format!("failed during run, err: exit status {code}"),
                None => format!("failed during run, err: {status}"),
            });
        }
        let mut images = Vec::new();
        if !self.request["isPushEnabled"].as_bool().unwrap_or(true) {
            return Ok(images);
        }
        for name in self.request["imageNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            let name = name.strip_prefix(&format!("{}/", self.login_server)).unwrap_or(name);
            let (repository, tag) = match name.rsplit_once(':').filter(|(_, tag)| !tag.contains('/')) {
                Some((repository, tag)) => (repository, tag),
                None => (name, "latest"),
            };
            let digest_file = self.work.join("tmp").join(format!("{run_id}-{}.digest", images.len()));
            let target = format!("docker://{}/{repository}:{tag}", self.config.registry);
            let push = [
                "push".to_owned(),
                "--tls-verify=false".to_owned(),
                "--signature-policy".to_owned(),
                policy.clone(),
                "--digestfile".to_owned(),
                digest_file.display().to_string(),
                local.clone(),
                target,
            ];
            let status = self.buildah(&push).await?;
            if !status.success() {
                return Err(format!(
                    "failed to push image {}/{repository}:{tag}: buildah push {status}",
                    self.login_server
                ));
            }
            let digest = std::fs::read_to_string(&digest_file)
                .map_err(|err| format!("failed to push image: reading the digest buildah wrote: {err}"))?
                .trim()
                .to_owned();
            let _ = std::fs::remove_file(&digest_file);
            self.log(&log_line(&format!(
                "Successfully pushed image: {}/{repository}:{tag}",
                self.login_server
            )));
            images.push(BuiltImage {
                registry: self.login_server.to_owned(),
                repository: repository.to_owned(),
                tag: tag.to_owned(),
                digest,
            });
        }
        // The local image only takes room now; base images stay for the
        // next run.
        let _ = run_buildah(self.config, self.work, &["rmi".to_owned(), local], |_| {}).await;
        Ok(images)
    }
}

/// `os/architecture[/variant]` of the request's `platform` (`linux/amd64`
/// by default).
fn platform(request: &Value) -> String {
    let platform = &request["platform"];
    let os = platform["os"].as_str().unwrap_or("Linux").to_ascii_lowercase();
    let architecture = platform["architecture"]
        .as_str()
        .unwrap_or("amd64")
        .to_ascii_lowercase();
    match platform["variant"].as_str() {
        Some(variant) => format!("{os}/{architecture}/{variant}"),
        None => format!("{os}/{architecture}"),
    }
}

/// Unpacks the gzipped tar `context` into `dir` (the tar crate refuses
/// entries outside it).
fn unpack(context: &[u8], dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|err| format!("failed to download the source: {err}"))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(context));
    archive.set_preserve_permissions(true);
    archive
        .unpack(dir)
        .map_err(|err| format!("failed to download the source: the context is not a gzipped tar: {err}"))
}
