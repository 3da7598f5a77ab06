//! The builder: a Dockerfile's instructions applied to a build context,
//! assembled into reproducible layers, config and manifest (see the module
//! documentation of [`super`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::dockerfile::{self, DockerIgnore, Instruction, Pattern};
use super::{
    BuildError, BuildInput, CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, OciBlob, OciImage, Platform,
    json_bytes,
};
use crate::delivery::archive::tar::{self, EntryKind, TarEntry, TarWriter};

/// Builds the image described by the Dockerfile inside the `context` tar.
pub fn build_image(context: &[u8], input: &BuildInput<'_>) -> Result<OciImage, BuildError> {
    let context = Context::read(context, input.dockerfile)?;
    let source = context
        .dockerfile
        .as_deref()
        .ok_or_else(|| BuildError::Context(format!("the Dockerfile `{}` is not in the context", input.dockerfile)))?;
    let text = std::str::from_utf8(source)
        .map_err(|_| BuildError::Dockerfile(format!("`{}` is not UTF-8 text", input.dockerfile)))?;
    let parsed = dockerfile::parse(text).map_err(BuildError::Syntax)?;
    let mut state = BuildState::new(input.build_args, parsed.escape);
    for instruction in &parsed.instructions {
        state.apply(instruction, &context).map_err(|failure| match failure {
            StepError::Reason(reason) => BuildError::Instruction {
                line: instruction.line,
                instruction: instruction.text(),
                reason,
            },
            StepError::Archive { context, source } => BuildError::Archive {
                line: instruction.line,
                instruction: instruction.text(),
                context,
                source,
            },
        })?;
    }
    if !state.from_seen {
        return Err(BuildError::Dockerfile(
            "the Dockerfile has no FROM instruction".to_owned(),
        ));
    }
    Ok(state.assemble(input.platform.clone()))
}

/// Why an instruction failed: a reason of the builder's own, or a tar the
/// instruction reads or writes (kept, for [`BuildError::Archive`]).
enum StepError {
    /// What is wrong with the instruction.
    Reason(String),
    /// A tar could not be read or written.
    Archive {
        /// What was being read or written.
        context: String,
        /// What the tar reader or writer found.
        source: tar::TarError,
    },
}

impl From<String> for StepError {
    fn from(reason: String) -> Self {
        Self::Reason(reason)
    }
}

/// The files of the build context, `.dockerignore` applied.
struct Context {
    entries: BTreeMap<String, TarEntry>,
    /// Every folder: folder entries and the parents of all entries.
    dirs: BTreeSet<String>,
    /// The Dockerfile's content (read before `.dockerignore` applies, as
    /// Docker does).
    dockerfile: Option<Vec<u8>>,
}

impl Context {
    fn read(bytes: &[u8], dockerfile: &str) -> Result<Self, BuildError> {
        let all = tar::read_archive(bytes).map_err(BuildError::ContextArchive)?;
        let mut entries: BTreeMap<String, TarEntry> = all.into_iter().map(|e| (e.path.clone(), e)).collect();
        let dockerfile_path = clean_relative(dockerfile)
            .filter(|path| !path.is_empty())
            .ok_or_else(|| BuildError::Context(format!("`{dockerfile}` is not a path inside the context")))?;
        // A context tarred with its folder as the top entry (`ctx/...`):
        // when the Dockerfile is only found under the single top folder,
        // that folder is the context root.
        if !entries.contains_key(&dockerfile_path) {
            let tops: BTreeSet<String> = entries
                .keys()
                .map(|p| p.split('/').next().unwrap_or(p).to_owned())
                .collect();
            let single_top = (tops.len() == 1).then(|| tops.into_iter().next()).flatten();
            if let Some(top) = single_top
                && entries.contains_key(&format!("{top}/{dockerfile_path}"))
            {
                let prefix = format!("{top}/");
                entries = entries
                    .into_values()
                    .filter_map(|mut entry| {
                        let rest = entry.path.strip_prefix(&prefix)?.to_owned();
                        entry.path = rest.clone();
                        Some((rest, entry))
                    })
                    .collect();
            }
        }
        let dockerfile = entries
            .get(&dockerfile_path)
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.data.clone());
        if let Some(ignore) = entries.get(".dockerignore") {
            let rules = DockerIgnore::parse(&String::from_utf8_lossy(&ignore.data));
            entries.retain(|path, _| !rules.excludes(path));
        }
        let mut dirs = BTreeSet::new();
        for (path, entry) in &entries {
            if entry.kind == EntryKind::Directory {
                dirs.insert(path.clone());
            }
            let mut parent = path.as_str();
            while let Some(at) = parent.rfind('/') {
                parent = &path[..at];
                dirs.insert(parent.to_owned());
            }
        }
        Ok(Self {
            entries,
            dirs,
            dockerfile,
        })
    }

    /// Whether `path` is a folder of the context (the root included).
    fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || self.dirs.contains(path)
    }

    /// Every path of the context with whether it is a folder.
    fn paths(&self) -> impl Iterator<Item = (&str, bool)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.kind != EntryKind::Directory)
            .map(|(p, _)| (p.as_str(), false))
            .chain(self.dirs.iter().map(|p| (p.as_str(), true)))
    }

    /// Entries under folder `path` (all entries for the root).
    fn under<'a>(&'a self, path: &'a str) -> impl Iterator<Item = (&'a str, &'a TarEntry)> + 'a {
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        self.entries
            .iter()
            .filter_map(move |(p, e)| p.strip_prefix(prefix.as_str()).map(|rest| (rest, e)))
    }
}

/// One entry of a layer being built.
#[derive(Debug, Clone)]
struct LayerEntry {
    kind: EntryKind,
    mode: u32,
    uid: u32,
    gid: u32,
    data: Vec<u8>,
}

/// What the Dockerfile has set up so far.
struct BuildState<'a> {
    build_args: &'a BTreeMap<String, String>,
    escape: char,
    from_seen: bool,
    /// `ARG`s declared before `FROM` (usable in `FROM` and as defaults).
    meta_args: BTreeMap<String, String>,
    /// `ARG`s declared in the stage.
    args: BTreeMap<String, String>,
    env: Vec<(String, String)>,
    workdir: String,
    user: Option<String>,
    labels: BTreeMap<String, String>,
    exposed: BTreeSet<String>,
    volumes: BTreeSet<String>,
    stop_signal: Option<String>,
    author: Option<String>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    layers: Vec<Vec<u8>>,
    /// Folders the image has so far (to tell whether a COPY destination
    /// is a folder).
    image_dirs: BTreeSet<String>,
}

impl<'a> BuildState<'a> {
    fn new(build_args: &'a BTreeMap<String, String>, escape: char) -> Self {
        Self {
            build_args,
            escape,
            from_seen: false,
            meta_args: BTreeMap::new(),
            args: BTreeMap::new(),
            env: Vec::new(),
            workdir: "/".to_owned(),
            user: None,
            labels: BTreeMap::new(),
            exposed: BTreeSet::new(),
            volumes: BTreeSet::new(),
            stop_signal: None,
            author: None,
            entrypoint: None,
            cmd: None,
            layers: Vec::new(),
            image_dirs: BTreeSet::new(),
        }
    }

    /// Variables visible to substitution: args, then env over them.
    fn vars(&self) -> BTreeMap<String, String> {
        let mut vars = if self.from_seen {
            self.args.clone()
        } else {
            self.meta_args.clone()
        };
        for (key, value) in &self.env {
            vars.insert(key.clone(), value.clone());
        }
        vars
    }

    fn words(&self, text: &str) -> Result<Vec<String>, String> {
        dockerfile::shell_words(text, &self.vars(), self.escape)
    }

    fn apply(&mut self, instruction: &Instruction, context: &Context) -> Result<(), StepError> {
        let keyword = instruction.keyword.as_str();
        if !self.from_seen && !matches!(keyword, "FROM" | "ARG") {
            return Err("only ARG may come before FROM".to_owned().into());
        }
        let args = instruction.args.as_str();
        match keyword {
            "FROM" => Ok(self.from(args)?),
            "ARG" => Ok(self.arg(args)?),
            "ENV" => Ok(self.env(args)?),
            "LABEL" => Ok(self.label(args)?),
            "WORKDIR" => {
                let dir = dockerfile::shell_word(args, &self.vars(), self.escape)?;
                if dir.is_empty() {
                    return Err("WORKDIR needs a path".to_owned().into());
                }
                self.workdir = join_path(&self.workdir, &dir);
                Ok(())
            }
            "USER" => {
                let user = dockerfile::shell_word(args, &self.vars(), self.escape)?;
                if user.is_empty() {
                    return Err("USER needs a user".to_owned().into());
                }
                self.user = Some(user);
                Ok(())
            }
            "EXPOSE" => Ok(self.expose(args)?),
            "VOLUME" => {
                let volumes = match dockerfile::json_array(args) {
                    Some(volumes) => volumes,
                    None => self.words(args)?,
                };
                for volume in volumes {
                    self.volumes.insert(join_path(&self.workdir, &volume));
                }
                Ok(())
            }
            "STOPSIGNAL" => {
                self.stop_signal = Some(dockerfile::shell_word(args, &self.vars(), self.escape)?);
                Ok(())
            }
            "MAINTAINER" => {
                self.author = Some(args.to_owned());
                Ok(())
            }
            "ENTRYPOINT" => {
                self.entrypoint = Some(command_form(args));
                Ok(())
            }
            "CMD" => {
                self.cmd = Some(command_form(args));
                Ok(())
            }
            "COPY" | "ADD" => self.copy(keyword, args, context),
            "RUN" => Err(
                "RUN is not supported: the builder executes nothing (a `FROM scratch` image has no shell either); \
                 build in the pipeline and COPY the output"
                    .to_owned()
                    .into(),
            ),
            other => Err(format!("`{other}` is not supported by the local image builder").into()),
        }
    }

    fn from(&mut self, args: &str) -> Result<(), String> {
        if self.from_seen {
            return Err("multi-stage builds are not supported: one FROM per Dockerfile".to_owned());
        }
        let words = self.words(args)?;
        let words: Vec<&String> = words.iter().filter(|w| !w.starts_with("--platform=")).collect();
        let (image, rest) = words.split_first().ok_or("FROM needs an image")?;
        let alias_ok = match rest {
            [] => true,
            [as_word, name] => as_word.eq_ignore_ascii_case("as") && !name.is_empty(),
            _ => false,
        };
        if !alias_ok {
            return Err("expected `FROM image [AS name]`".to_owned());
        }
        if *image != "scratch" {
            return Err(format!(
                "base image `{image}` is not supported: this builder has no registry access and builds only \
                 `FROM scratch` images (copy a self-contained build output into the image instead)"
            ));
        }
        self.from_seen = true;
        Ok(())
    }

    fn arg(&mut self, args: &str) -> Result<(), String> {
        let words = self.words(args)?;
        if words.is_empty() {
            return Err("ARG needs a name".to_owned());
        }
        for word in words {
            let (name, default) = match word.split_once('=') {
                Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
                None => (word.clone(), None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("`{name}` is not an ARG name"));
            }
            let inherited = self.meta_args.get(&name).cloned();
            let value = self
                .build_args
                .get(&name)
                .cloned()
                .or(default)
                .or(if self.from_seen { inherited } else { None })
                .unwrap_or_default();
            if self.from_seen {
                self.args.insert(name, value);
            } else {
                self.meta_args.insert(name, value);
            }
        }
        Ok(())
    }

    /// `k=v ...` pairs, or the legacy `key value with spaces` form.
    fn pairs(&self, keyword: &str, args: &str) -> Result<Vec<(String, String)>, String> {
        let words = self.words(args)?;
        let Some(first) = words.first() else {
            return Err(format!("{keyword} needs key=value pairs"));
        };
        if !first.contains('=') {
            let rest: Vec<&str> = words[1..].iter().map(String::as_str).collect();
            if rest.is_empty() {
                return Err(format!("{keyword} `{first}` needs a value"));
            }
            return Ok(vec![(first.clone(), rest.join(" "))]);
        }
        words
            .iter()
            .map(|word| match word.split_once('=') {
                Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
                _ => Err(format!("`{word}` is not key=value")),
            })
            .collect()
    }

    fn env(&mut self, args: &str) -> Result<(), String> {
        for (key, value) in self.pairs("ENV", args)? {
            match self.env.iter_mut().find(|(k, _)| *k == key) {
                Some(existing) => existing.1 = value,
                None => self.env.push((key, value)),
            }
        }
        Ok(())
    }

    fn label(&mut self, args: &str) -> Result<(), String> {
        for (key, value) in self.pairs("LABEL", args)? {
            self.labels.insert(key, value);
        }
        Ok(())
    }

    fn expose(&mut self, args: &str) -> Result<(), String> {
        for word in self.words(args)? {
            let (ports, protocol) = match word.split_once('/') {
                Some((ports, protocol)) => (ports.to_owned(), protocol.to_ascii_lowercase()),
                None => (word.clone(), "tcp".to_owned()),
            };
            if !matches!(protocol.as_str(), "tcp" | "udp" | "sctp") {
                return Err(format!("`{word}`: protocol must be tcp, udp or sctp"));
            }
            let parse = |p: &str| p.parse::<u16>().ok().filter(|p| *p > 0);
            let (low, high) = match ports.split_once('-') {
                Some((low, high)) => (parse(low), parse(high)),
                None => (parse(&ports), parse(&ports)),
            };
            let (Some(low), Some(high)) = (low, high) else {
                return Err(format!("`{word}` is not a port"));
            };
            if high < low || high - low > 1024 {
                return Err(format!("`{word}` is not a port range (at most 1025 ports)"));
            }
            for port in low..=high {
                self.exposed.insert(format!("{port}/{protocol}"));
            }
        }
        Ok(())
    }

    fn copy(&mut self, keyword: &str, args: &str, context: &Context) -> Result<(), StepError> {
        // Flags come first, in either form.
        let mut rest = args.trim_start();
        let mut chown: Option<(u32, u32)> = None;
        let mut chmod: Option<u32> = None;
        while rest.starts_with("--") {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let flag = &rest[..end];
            rest = rest[end..].trim_start();
            let flag_words = self.words(flag)?;
            let flag = flag_words.first().map(String::as_str).unwrap_or_default();
            let (name, value) = flag.split_once('=').unwrap_or((flag, ""));
            match name {
                "--chown" => chown = Some(parse_chown(value)?),
                "--chmod" => {
                    chmod = Some(
                        u32::from_str_radix(value, 8)
                            .ok()
                            .filter(|m| *m <= 0o7777)
                            .ok_or_else(|| format!("`--chmod={value}` is not an octal mode"))?,
                    );
                }
                "--link" => {}
                "--from" => {
                    return Err("`--from` is not supported: multi-stage builds are not supported"
                        .to_owned()
                        .into());
                }
                other => return Err(format!("`{other}` is not supported").into()),
            }
        }
        let words = match dockerfile::json_array(rest) {
            Some(words) => {
                let vars = self.vars();
                words
                    .iter()
                    .map(|w| dockerfile::shell_word(w, &vars, self.escape))
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => self.words(rest)?,
        };
        let Some((dest, sources)) = words.split_last().filter(|(_, sources)| !sources.is_empty()) else {
            return Err(format!("{keyword} needs at least one source and a destination").into());
        };

        // Resolve sources: (context path, is folder).
        let mut resolved: Vec<(String, bool)> = Vec::new();
        for source in sources {
            if source.contains("://") {
                return Err(format!("`{source}`: remote sources are not supported (no network access)").into());
            }
            let clean = clean_relative(source).ok_or_else(|| format!("source `{source}` is outside the context"))?;
            if Pattern::has_wildcards(&clean) {
                let pattern = Pattern::new(&clean);
                let mut matches: Vec<(String, bool)> = context
                    .paths()
                    .filter(|(path, _)| pattern.matches(path))
                    .map(|(path, is_dir)| (path.to_owned(), is_dir))
                    .collect();
                matches.sort();
                if matches.is_empty() {
                    return Err(format!("no file in the context matches `{source}`").into());
                }
                resolved.extend(matches);
            } else if context
                .entries
                .get(&clean)
                .is_some_and(|e| e.kind != EntryKind::Directory)
            {
                resolved.push((clean, false));
            } else if context.is_dir(&clean) {
                resolved.push((clean, true));
            } else {
                return Err(format!("source `{source}` is not in the build context").into());
            }
        }
        // A folder inside another matched folder is copied with it.
        let folders: Vec<String> = resolved.iter().filter(|(_, d)| *d).map(|(p, _)| p.clone()).collect();
        resolved.retain(|(path, _)| {
            !folders
                .iter()
                .any(|folder| path != folder && (folder.is_empty() || path.starts_with(&format!("{folder}/"))))
        });

        let dest_abs = join_path(&self.workdir, dest);
        let dest_rel = dest_abs.trim_start_matches('/').to_owned();
        let dest_is_dir = dest.ends_with('/')
            || resolved.len() > 1
            || resolved.iter().any(|(_, is_dir)| *is_dir)
            || self.image_dirs.contains(&dest_rel)
            || dest_rel.is_empty();
        let (uid, gid) = chown.unwrap_or((0, 0));
        let file_mode = |entry: &TarEntry| chmod.unwrap_or(if entry.is_executable() { 0o755 } else { 0o644 });
        let dir_mode = chmod.unwrap_or(0o755);

        let mut layer: BTreeMap<String, LayerEntry> = BTreeMap::new();
        let add_dir = |layer: &mut BTreeMap<String, LayerEntry>, path: &str, mode: u32, owned: bool| {
            if path.is_empty() {
                return;
            }
            layer.entry(path.to_owned()).or_insert(LayerEntry {
                kind: EntryKind::Directory,
                mode,
                uid: if owned { uid } else { 0 },
                gid: if owned { gid } else { 0 },
                data: Vec::new(),
            });
        };
        if dest_is_dir {
            add_dir(&mut layer, &dest_rel, 0o755, true);
        }
        for (source, is_dir) in &resolved {
            let entry_paths: Vec<(String, &TarEntry)> = if *is_dir {
                context
                    .under(source)
                    .map(|(rel, entry)| (join_rel(&dest_rel, rel), entry))
                    .collect()
            } else {
                let entry = context
                    .entries
                    .get(source)
                    .ok_or_else(|| format!("source `{source}` is not in the build context"))?;
                if keyword == "ADD"
                    && entry.kind == EntryKind::File
                    && let Some(archive) = unpack_add(source, &entry.data)?
                {
                    for unpacked in archive {
                        let path = join_rel(&dest_rel, &unpacked.path);
                        push_entry(&mut layer, path, &unpacked, unpacked.mode, uid, gid);
                    }
                    continue;
                }
                let target = if dest_is_dir {
                    join_rel(&dest_rel, source.rsplit('/').next().unwrap_or(source))
                } else {
                    dest_rel.clone()
                };
                vec![(target, entry)]
            };
            for (path, entry) in entry_paths {
                let mode = match entry.kind {
                    EntryKind::Directory => dir_mode,
                    _ => file_mode(entry),
                };
                push_entry(&mut layer, path, entry, mode, uid, gid);
            }
        }
        if layer.is_empty() {
            return Err("nothing to copy".to_owned().into());
        }
        // Parent folders of everything in the layer.
        let paths: Vec<String> = layer.keys().cloned().collect();
        for path in paths {
            let mut parent = path.as_str();
            while let Some(at) = parent.rfind('/') {
                parent = &path[..at];
                let owned = parent == dest_rel || parent.starts_with(&format!("{dest_rel}/"));
                add_dir(&mut layer, parent, 0o755, owned && !dest_rel.is_empty());
            }
        }
        for (path, entry) in &layer {
            if entry.kind == EntryKind::Directory {
                self.image_dirs.insert(path.clone());
            }
        }
        let layer = write_layer(&layer).map_err(|source| StepError::Archive {
            context: "writing the layer".to_owned(),
            source,
        })?;
        self.layers.push(layer);
        Ok(())
    }

    fn assemble(self, platform: Platform) -> OciImage {
        let layers: Vec<OciBlob> = self
            .layers
            .into_iter()
            .map(|bytes| OciBlob::new(LAYER_MEDIA_TYPE, bytes))
            .collect();
        let mut config = serde_json::Map::new();
        if let Some(user) = &self.user {
            config.insert("User".into(), json!(user));
        }
        if !self.exposed.is_empty() {
            let ports: serde_json::Map<String, Value> = self.exposed.iter().map(|p| (p.clone(), json!({}))).collect();
            config.insert("ExposedPorts".into(), Value::Object(ports));
        }
        if !self.env.is_empty() {
            let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            config.insert("Env".into(), json!(env));
        }
        if let Some(entrypoint) = &self.entrypoint {
            config.insert("Entrypoint".into(), json!(entrypoint));
        }
        if let Some(cmd) = &self.cmd {
            config.insert("Cmd".into(), json!(cmd));
        }
        if !self.volumes.is_empty() {
            let volumes: serde_json::Map<String, Value> = self.volumes.iter().map(|v| (v.clone(), json!({}))).collect();
            config.insert("Volumes".into(), Value::Object(volumes));
        }
        if self.workdir != "/" {
            config.insert("WorkingDir".into(), json!(self.workdir));
        }
        if !self.labels.is_empty() {
            config.insert("Labels".into(), json!(self.labels));
        }
        if let Some(signal) = &self.stop_signal {
            config.insert("StopSignal".into(), json!(signal));
        }
        let mut document = serde_json::Map::new();
        document.insert("architecture".into(), json!(platform.architecture));
        document.insert("os".into(), json!(platform.os));
        if let Some(variant) = &platform.variant {
            document.insert("variant".into(), json!(variant));
        }
        if let Some(author) = &self.author {
            document.insert("author".into(), json!(author));
        }
        document.insert("config".into(), Value::Object(config));
        let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
        document.insert("rootfs".into(), json!({"type": "layers", "diff_ids": diff_ids}));
        let config = OciBlob::new(CONFIG_MEDIA_TYPE, json_bytes(&Value::Object(document)));
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": config.descriptor(),
            "layers": layers.iter().map(OciBlob::descriptor).collect::<Vec<_>>(),
        });
        let manifest = OciBlob::new(MANIFEST_MEDIA_TYPE, json_bytes(&manifest));
        OciImage {
            layers,
            config,
            manifest,
            platform,
        }
    }
}

fn push_entry(layer: &mut BTreeMap<String, LayerEntry>, path: String, entry: &TarEntry, mode: u32, uid: u32, gid: u32) {
    if path.is_empty() {
        return;
    }
    layer.insert(
        path,
        LayerEntry {
            kind: entry.kind.clone(),
            mode,
            uid,
            gid,
            data: entry.data.clone(),
        },
    );
}

/// `ADD` of a local archive: a plain tar is unpacked; a compressed one is
/// refused; anything else is copied (`None`).
fn unpack_add(source: &str, data: &[u8]) -> Result<Option<Vec<TarEntry>>, StepError> {
    let compressed = [
        (&[0x1f, 0x8b][..], "gzip"),
        (&[0x42, 0x5a, 0x68][..], "bzip2"),
        (&[0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00][..], "xz"),
        (&[0x28, 0xb5, 0x2f, 0xfd][..], "zstd"),
    ];
    if let Some((_, kind)) = compressed.iter().find(|(magic, _)| data.starts_with(magic)) {
        return Err(format!("`{source}` is a {kind} archive: ADD unpacks only uncompressed tar files here").into());
    }
    if data.len() >= 263 && &data[257..262] == b"ustar" {
        return tar::read_archive(data).map(Some).map_err(|err| StepError::Archive {
            context: format!("`{source}`"),
            source: err,
        });
    }
    Ok(None)
}

fn write_layer(layer: &BTreeMap<String, LayerEntry>) -> Result<Vec<u8>, tar::TarError> {
    let mut writer = TarWriter::new();
    for (path, entry) in layer {
        match &entry.kind {
            EntryKind::Directory => writer.directory(path, entry.mode, entry.uid, entry.gid)?,
            EntryKind::File => writer.file(path, entry.mode, entry.uid, entry.gid, &entry.data)?,
            EntryKind::Symlink(target) => writer.symlink(path, target, entry.uid, entry.gid)?,
        }
    }
    writer.finish()
}

/// `ENTRYPOINT`/`CMD`: the exec form as is, the shell form through
/// `/bin/sh -c`.
fn command_form(args: &str) -> Vec<String> {
    match dockerfile::json_array(args) {
        Some(words) => words,
        None if args.trim().is_empty() => Vec::new(),
        None => vec!["/bin/sh".to_owned(), "-c".to_owned(), args.trim().to_owned()],
    }
}

fn parse_chown(value: &str) -> Result<(u32, u32), String> {
    let id = |text: &str| match text {
        "root" => Some(0),
        text => text.parse::<u32>().ok().filter(|id| *id <= 0o777_7777),
    };
    let (user, group) = value.split_once(':').unwrap_or((value, value));
    match (id(user), id(group)) {
        (Some(uid), Some(gid)) => Ok((uid, gid)),
        _ => Err(format!(
            "`--chown={value}`: only numeric ids (or root) are supported, a scratch image has no user database"
        )),
    }
}

/// An absolute image path for `path` relative to `base`, `.` and `..`
/// resolved (never above `/`).
fn join_path(base: &str, path: &str) -> String {
    let mut parts: Vec<&str> = if path.starts_with('/') {
        Vec::new()
    } else {
        base.split('/').filter(|p| !p.is_empty()).collect()
    };
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

fn join_rel(base: &str, rest: &str) -> String {
    match (base.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_owned(),
        (false, true) => base.to_owned(),
        (false, false) => format!("{base}/{rest}"),
    }
}

/// A context path from a `COPY` source: leading `/` and `./` dropped, `..`
/// resolved; `None` when it climbs out of the context.
fn clean_relative(source: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in source.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests;
