//! The double's image builder: a Dockerfile subset over the uploaded
//! context, giving an OCI image (gzipped tar layers, config, manifest).
//!
//! Every stage starts from an empty root filesystem whatever `FROM` names
//! (the double pulls nothing); only the last stage becomes the image.
//! `COPY`/`ADD` of context paths (files or directories, no wildcards, no
//! `--from`, no URLs) make one layer each; `ARG`, `ENV`, `LABEL`,
//! `WORKDIR`, `USER`, `EXPOSE`, `CMD`, `ENTRYPOINT` fill the config, with
//! `$NAME`/`${NAME}` replaced from `ARG` defaults, the run's `arguments`
//! and `ENV`. `RUN` is logged and skipped, except `RUN exit <n>`, which
//! fails with code n as a failing command would. Anything else fails the
//! run naming the instruction. Layers are written with fixed times and
//! owners, so the same context gives the same digest.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::registry::{Artifact, Image};

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// An image a run pushed, as `outputImages` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltImage {
    /// The login server.
    pub registry: String,
    /// The repository.
    pub repository: String,
    /// The tag.
    pub tag: String,
    /// The manifest digest.
    pub digest: String,
}

/// What a build gave.
#[derive(Debug, Clone, Default)]
pub struct BuildOutcome {
    /// The log lines written.
    pub log: String,
    /// The images pushed (none when it failed or pushing is off).
    pub images: Vec<BuiltImage>,
    /// Why it failed.
    pub error: Option<String>,
    pub(crate) artifacts: Vec<Artifact>,
}

/// A log line with ACR's timestamp prefix.
pub(super) fn log_line(text: &str) -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}/{:02}/{:02} {:02}:{:02}:{:02} {text}\n",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

fn sha256(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256:{hex}")
}

/// Builds the run `request` from the gzipped `context` (`None` when the
/// source was never uploaded).
pub(super) fn build(context: Option<&[u8]>, request: &Value, login_server: &str) -> BuildOutcome {
    let mut outcome = BuildOutcome::default();
    match build_inner(context, request, login_server, &mut outcome) {
        Ok(()) => outcome,
        Err(message) => {
            outcome.log.push_str(&log_line(&format!("Run failed: {message}")));
            outcome.error = Some(message);
            outcome.images.clear();
            outcome.artifacts.clear();
            outcome
        }
    }
}

type Files = BTreeMap<String, (u32, Vec<u8>)>;

/// Blobs by digest.
type Blobs = Vec<(String, Vec<u8>)>;

fn unpack(context: &[u8]) -> Result<Files, String> {
    let mut tar = Vec::new();
    GzDecoder::new(context)
        .read_to_end(&mut tar)
        .map_err(|err| format!("failed to unpack the source: the context is not gzip: {err}"))?;
    let mut archive = tar::Archive::new(tar.as_slice());
    let mut files = Files::new();
    let entries = archive
        .entries()
        .map_err(|err| format!("failed to unpack the source: {err}"))?;
    for entry in entries {
        let mut entry = entry.map_err(|err| format!("failed to unpack the source: {err}"))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry
            .path()
            .map_err(|err| format!("failed to unpack the source: {err}"))?
            .to_string_lossy()
            .trim_start_matches("./")
            .to_owned();
        let mode = entry.header().mode().unwrap_or(0o644);
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .map_err(|err| format!("failed to unpack the source: {err}"))?;
        files.insert(path, (mode, bytes));
    }
    Ok(files)
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        let (keyword, rest) = current.split_once(char::is_whitespace).unwrap_or((&current, ""));
        out.push((keyword.to_ascii_uppercase(), rest.trim().to_owned()));
        current.clear();
    }
    out
}

/// Replaces `$NAME` and `${NAME}` from `vars`.
fn substitute(text: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut name = String::new();
        if chars.peek() == Some(&'{') {
            chars.next();
            for c in chars.by_ref() {
                if c == '}' {
                    break;
                }
                name.push(c);
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    name.push(c);
                    chars.next();
                } else {
                    break;
                }
            }
        }
        if name.is_empty() {
            out.push('$');
        } else {
            out.push_str(vars.get(&name).map(String::as_str).unwrap_or_default());
        }
    }
    out
}

/// A JSON array (`["a", "b"]`) or the shell form.
fn command(text: &str) -> Value {
    match serde_json::from_str::<Vec<String>>(text) {
        Ok(args) => json!(args),
        Err(_) => json!(["/bin/sh", "-c", text]),
    }
}

/// `k=v k2=v2` or `k v`.
fn pairs(text: &str) -> Vec<(String, String)> {
    if !text.split_whitespace().next().unwrap_or_default().contains('=') {
        let (key, value) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
        return vec![(key.to_owned(), value.trim().to_owned())];
    }
    text.split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.trim_matches('"').to_owned()))
        .collect()
}

struct Stage {
    base: String,
    layers: Vec<(Vec<u8>, String)>,
    env: Vec<(String, String)>,
    labels: BTreeMap<String, String>,
    workdir: String,
    user: Option<String>,
    exposed: BTreeMap<String, Value>,
    cmd: Option<Value>,
    entrypoint: Option<Value>,
    history: Vec<Value>,
}

impl Stage {
    fn new(base: &str) -> Self {
        Self {
            base: base.to_owned(),
            layers: Vec::new(),
            env: Vec::new(),
            labels: BTreeMap::new(),
            workdir: "/".to_owned(),
            user: None,
            exposed: BTreeMap::new(),
            cmd: None,
            entrypoint: None,
            history: Vec::new(),
        }
    }
}

/// One layer holding the context `sources` copied to `dest`.
fn copy_layer(files: &Files, sources: &[&str], dest: &str, workdir: &str) -> Result<Vec<u8>, String> {
    let dest = if dest.starts_with('/') {
        dest.to_owned()
    } else {
        format!("{}/{dest}", workdir.trim_end_matches('/'))
    };
    let mut chosen: BTreeMap<String, (u32, Vec<u8>)> = BTreeMap::new();
    for source in sources {
        if source.contains(['*', '?', '[']) || source.contains("://") {
            return Err(format!(
                "COPY {source}: the double's builder copies plain context paths only"
            ));
        }
        let source = source.trim_start_matches("./").trim_end_matches('/');
        let whole = source.is_empty() || source == ".";
        if let Some(file) = files.get(source).filter(|_| !whole) {
            let target = if dest.ends_with('/') || sources.len() > 1 {
                let name = source.rsplit('/').next().unwrap_or(source);
                format!("{}/{name}", dest.trim_end_matches('/'))
            } else {
                dest.clone()
            };
            chosen.insert(target, file.clone());
            continue;
        }
        let prefix = if whole { String::new() } else { format!("{source}/") };
        let mut found = false;
        for (path, file) in files.range(prefix.clone()..) {
            let Some(rest) = path.strip_prefix(&prefix) else {
                break;
            };
            found = true;
            chosen.insert(format!("{}/{rest}", dest.trim_end_matches('/')), file.clone());
        }
        if !found {
            return Err(format!(
                "COPY failed: file not found in build context or excluded by .dockerignore: stat {source}: file does not exist"
            ));
        }
    }
    let mut builder = tar::Builder::new(Vec::new());
    for (path, (mode, bytes)) in &chosen {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(*mode);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        let name = path.trim_start_matches('/');
        builder
            .append_data(&mut header, name, bytes.as_slice())
            .map_err(|err| format!("writing a layer: {err}"))?;
    }
    builder.into_inner().map_err(|err| format!("writing a layer: {err}"))
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder
        .write_all(bytes)
        .map_err(|err| format!("compressing a layer: {err}"))?;
    encoder.finish().map_err(|err| format!("compressing a layer: {err}"))
}

fn build_inner(
    context: Option<&[u8]>,
    request: &Value,
    login_server: &str,
    outcome: &mut BuildOutcome,
) -> Result<(), String> {
    let context = context
        .ok_or_else(|| "failed to download the source: the sourceLocation names no uploaded context".to_owned())?;
    let files = unpack(context)?;
    let dockerfile_path = request["dockerFilePath"].as_str().unwrap_or("Dockerfile");
    let dockerfile = files.get(dockerfile_path.trim_start_matches("./")).ok_or_else(|| {
        format!("unable to prepare context: unable to evaluate symlinks in Dockerfile path: lstat /workspace/{dockerfile_path}: no such file or directory")
    })?;
    let text = String::from_utf8_lossy(&dockerfile.1).into_owned();
    let mut arguments: HashMap<String, String> = HashMap::new();
    for argument in request["arguments"].as_array().into_iter().flatten() {
        if let (Some(name), Some(value)) = (argument["name"].as_str(), argument["value"].as_str()) {
            arguments.insert(name.to_owned(), value.to_owned());
        }
    }
    let steps = instructions(&text);
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut stage: Option<Stage> = None;
    for (index, (keyword, rest)) in steps.iter().enumerate() {
        outcome
            .log
            .push_str(&format!("Step {}/{} : {keyword} {rest}\n", index + 1, steps.len()));
        let value = substitute(rest, &vars);
        if keyword == "FROM" {
            let base = value.split_whitespace().next().unwrap_or("scratch");
            stage = Some(Stage::new(base));
            outcome
                .log
                .push_str(&format!(" ---> {base} (an empty root filesystem in the double)\n"));
            continue;
        }
        if keyword == "ARG" {
            let (name, default) = value
                .split_once('=')
                .map_or((value.as_str(), None), |(n, d)| (n, Some(d)));
            if let Some(given) = arguments.get(name).cloned().or_else(|| default.map(str::to_owned)) {
                vars.insert(name.to_owned(), given);
            }
            continue;
        }
        let stage = stage
            .as_mut()
            .ok_or_else(|| format!("{keyword}: no build stage in context (a Dockerfile starts with FROM)"))?;
        stage.history.push(json!({"created_by": format!("{keyword} {rest}"), "empty_layer": !matches!(keyword.as_str(), "COPY" | "ADD")}));
        match keyword.as_str() {
            "ENV" => {
                for (key, val) in pairs(&value) {
                    vars.insert(key.clone(), val.clone());
                    stage.env.retain(|(existing, _)| existing != &key);
                    stage.env.push((key, val));
                }
            }
            "LABEL" => stage.labels.extend(pairs(&value)),
            "WORKDIR" => {
                stage.workdir = if value.starts_with('/') {
                    value.clone()
                } else {
                    format!("{}/{value}", stage.workdir.trim_end_matches('/'))
                };
            }
            "USER" => stage.user = Some(value.clone()),
            "EXPOSE" => {
                for port in value.split_whitespace() {
                    let port = if port.contains('/') {
                        port.to_owned()
                    } else {
                        format!("{port}/tcp")
                    };
                    stage.exposed.insert(port, json!({}));
                }
            }
            "CMD" => stage.cmd = Some(command(&value)),
            "ENTRYPOINT" => stage.entrypoint = Some(command(&value)),
            "COPY" | "ADD" => {
                let words: Vec<&str> = value
                    .split_whitespace()
                    .filter(|word| !word.starts_with("--chown") && !word.starts_with("--chmod"))
                    .collect();
                if words.iter().any(|word| word.starts_with("--")) {
                    return Err(format!(
                        "{keyword} {rest}: the double's builder does not take {keyword} options such as --from"
                    ));
                }
                let Some((dest, sources)) = words.split_last().filter(|(_, sources)| !sources.is_empty()) else {
                    return Err(format!("{keyword} requires at least two arguments"));
                };
                let layer = copy_layer(&files, sources, dest, &stage.workdir)?;
                let diff_id = sha256(&layer);
                stage.layers.push((gzip(&layer)?, diff_id));
            }
            "RUN" => {
                let code = value
                    .strip_prefix("exit ")
                    .and_then(|code| code.trim().parse::<i32>().ok())
                    .unwrap_or(0);
                if code != 0 {
                    outcome.log.push_str(&format!(
                        "The command '/bin/sh -c {value}' returned a non-zero code: {code}\n"
                    ));
                    return Err(format!("failed during run, err: exit status {code}"));
                }
                outcome
                    .log
                    .push_str(" ---> the double does not run commands; step skipped\n");
            }
            other => return Err(format!("unknown instruction: {other}")),
        }
    }
    let stage = stage.ok_or_else(|| "the Dockerfile has no FROM".to_owned())?;
    let artifact_parts = image_of(&stage, request)?;
    let push = request["isPushEnabled"].as_bool().unwrap_or(true);
    let names: Vec<&str> = request["imageNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut by_repository: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in names.iter().filter(|_| push) {
        let name = name.strip_prefix(&format!("{login_server}/")).unwrap_or(name);
        let (repository, tag) = match name.rsplit_once(':').filter(|(_, tag)| !tag.contains('/')) {
            Some((repository, tag)) => (repository, tag),
            None => (name, "latest"),
        };
        by_repository
            .entry(repository.to_owned())
            .or_default()
            .push(tag.to_owned());
    }
    for (repository, tags) in by_repository {
        for tag in &tags {
            outcome.log.push_str(&log_line(&format!(
                "Successfully pushed image: {login_server}/{repository}:{tag}"
            )));
            outcome.images.push(BuiltImage {
                registry: login_server.to_owned(),
                repository: repository.clone(),
                tag: tag.clone(),
                digest: artifact_parts.0.digest.clone(),
            });
        }
        outcome.artifacts.push(Artifact {
            repository,
            tags,
            image: artifact_parts.0.clone(),
            blobs: artifact_parts.1.clone(),
        });
    }
    Ok(())
}

/// The manifest and the blobs (config, layers) of a stage.
fn image_of(stage: &Stage, request: &Value) -> Result<(Image, Blobs), String> {
    let platform = &request["platform"];
    let mut config_section = json!({
        "Env": stage.env.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>(),
        "WorkingDir": stage.workdir,
        "Labels": stage.labels,
    });
    if !stage.exposed.is_empty() {
        config_section["ExposedPorts"] = json!(stage.exposed);
    }
    if let Some(user) = &stage.user {
        config_section["User"] = json!(user);
    }
    if let Some(cmd) = &stage.cmd {
        config_section["Cmd"] = cmd.clone();
    }
    if let Some(entrypoint) = &stage.entrypoint {
        config_section["Entrypoint"] = entrypoint.clone();
    }
    let mut config = json!({
        "architecture": platform["architecture"].as_str().unwrap_or("amd64"),
        "os": platform["os"].as_str().unwrap_or("linux").to_ascii_lowercase(),
        "config": config_section,
        "rootfs": {"type": "layers", "diff_ids": stage.layers.iter().map(|(_, diff)| diff.clone()).collect::<Vec<_>>()},
        "history": stage.history,
    });
    if let Some(variant) = platform["variant"].as_str() {
        config["variant"] = json!(variant);
    }
    config["config"]["Labels"]["org.opencontainers.image.base.name"] = json!(stage.base);
    let config_bytes = serde_json::to_vec(&config).map_err(|err| err.to_string())?;
    let config_digest = sha256(&config_bytes);
    let mut blobs = vec![(config_digest.clone(), config_bytes.clone())];
    let mut layers = Vec::new();
    for (layer, _) in &stage.layers {
        let digest = sha256(layer);
        layers.push(json!({"mediaType": LAYER_TYPE, "size": layer.len(), "digest": digest}));
        blobs.push((digest, layer.clone()));
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "size": config_bytes.len(), "digest": config_digest},
        "layers": layers,
    });
    let manifest = serde_json::to_vec(&manifest).map_err(|err| err.to_string())?;
    let image = Image {
        digest: sha256(&manifest),
        media_type: MANIFEST_TYPE.to_owned(),
        manifest,
    };
    Ok((image, blobs))
}
