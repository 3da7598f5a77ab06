//! The buildah adapter against a real registry: Debian's `buildah` and
//! `docker-registry` (the CNCF distribution registry), which
//! `scripts/test` installs and starts (`scripts/container-tools run`),
//! naming the registry in `BOSUN_TEST_REGISTRY` (`127.0.0.1:<port>`).
//!
//! The base image is built by the adapter itself from Debian's
//! `busybox-static` (`FROM scratch`, `COPY`, then a `RUN` under a `SHELL`
//! that installs the applets), so no outside registry is needed; then a
//! multi-stage Dockerfile whose stages `RUN` is built on it, pushed, read
//! back by digest over the OCI distribution API, and its layers must hold
//! what the `RUN` steps wrote.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bosun_contracts::messages::{ArtifactKind, BuildCompleted};
use bosun_contracts::{Envelope, Message, samples};
use oci_client::secrets::RegistryAuth;
use uuid::Uuid;

use super::buildah::{BUILD_KEY_LABEL, BuildahBuilder, BuildahConfig, BuildahStats};
use super::*;
use crate::delivery::archive::tar::{EntryKind, TarWriter, read_archive};
use crate::delivery::blob::{BlobStore, FilesystemBlobStore};
use crate::delivery::oci::distribution::Distribution;

const NEEDS: &str = "needs buildah and docker-registry (scripts/test provides them)";

/// The registry scripts/test started.
fn test_registry() -> String {
    std::env::var("BOSUN_TEST_REGISTRY").unwrap_or_else(|_| {
        panic!("BOSUN_TEST_REGISTRY is not set: run this test through `scripts/container-tools run -- cargo test ...` ({NEEDS})")
    })
}

const BASE_DOCKERFILE: &str = "FROM scratch\n\
COPY busybox /bin/busybox\n\
SHELL [\"/bin/busybox\", \"sh\", \"-c\"]\n\
RUN /bin/busybox mkdir -p /usr/bin /sbin /usr/sbin && /bin/busybox --install -s\n\
CMD [\"/bin/sh\"]\n";

/// A multi-stage build: the build stage `RUN`s with a build argument, the
/// runtime stage copies its output (`COPY --from`) and `RUN`s too.
const APP_DOCKERFILE: &str = "ARG BASE\n\
FROM ${BASE} AS build\n\
ARG GREETING=hello\n\
WORKDIR /src\n\
COPY app.txt .\n\
RUN mkdir -p /out && cat app.txt > /out/app.txt && echo \"$GREETING from RUN\" > /out/built.txt\n\
FROM ${BASE}\n\
SHELL [\"/bin/sh\", \"-eu\", \"-c\"]\n\
ENV APP_HOME=/app\n\
COPY --from=build /out/ /app/\n\
RUN echo \"runtime stage of $APP_HOME\" > /app/runtime.txt\n\
HEALTHCHECK CMD [\"/bin/test\", \"-f\", \"/app/built.txt\"]\n\
CMD [\"/bin/cat\", \"/app/built.txt\"]\n";

/// `event` with its container context replaced by `context` and its
/// container settings pointing at `registry`/`image`.
async fn event_for(
    blobs: &dyn BlobStore,
    registry: &str,
    image: &str,
    key: &str,
    context: Vec<u8>,
    build_args: BTreeMap<String, String>,
) -> BuildCompleted {
    let mut event = samples::build_completed();
    let blob = blobs
        .put("artifacts", key, context, "application/x-tar")
        .await
        .expect("storing the context");
    for artifact in &mut event.artifacts {
        if artifact.kind == ArtifactKind::ContainerContext {
            artifact.blob = blob.clone();
        }
    }
    let container = event
        .module
        .container
        .as_mut()
        .expect("the sample has container settings");
    container.registry = registry.to_owned();
    container.image = image.to_owned();
    container.dockerfile = "Dockerfile".to_owned();
    container.context = None;
    container.platform = "linux/amd64".to_owned();
    container.build_args = build_args;
    event
}

async fn handle(consumer: &ContainerBuild<BuildahBuilder>, event: &BuildCompleted) -> ContainerImageBuilt {
    let message = Message::from(event.clone());
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "build-ingestion");
    let outcome = consumer
        .handle(Inbound::new(&envelope, &message))
        .await
        .unwrap_or_else(|err| panic!("the build failed: {err}"));
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0].message {
        Message::ContainerImageBuilt(image) => image.clone(),
        other => panic!("expected ContainerImageBuilt, got {other:?}"),
    }
}

/// Decompresses a gzip stream (a layer buildah pushed).
fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Read as _;
    assert_eq!(&bytes[..3], &[0x1f, 0x8b, 8], "not a gzip stream");
    let mut inflated = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .read_to_end(&mut inflated)
        .expect("inflating a layer");
    inflated
}

/// Every file of the image's layers, later layers over earlier ones.
async fn image_files(registry: &Distribution, repository: &str, digest: &str) -> BTreeMap<String, Vec<u8>> {
    let manifest = registry
        .verify(repository, digest)
        .await
        .expect("reading the manifest by digest");
    let mut files = BTreeMap::new();
    for layer in &manifest.layers {
        let bytes = registry.blob(repository, layer).await.expect("reading a layer");
        let tar = if layer.media_type.ends_with("gzip") {
            gunzip(&bytes)
        } else {
            bytes
        };
        for entry in read_archive(&tar).expect("a layer is a tar") {
            if entry.kind == EntryKind::File {
                files.insert(entry.path, entry.data);
            }
        }
    }
    files
}

/// A builder with its storage under `dir`, pushing to the test registry
/// (reached over plain HTTP).
fn registry_builder(dir: &Path, registry: &str, blobs: &Arc<dyn BlobStore>) -> BuildahBuilder {
    BuildahBuilder::new(
        BuildahConfig {
            binary: "buildah".into(),
            work_dir: dir.join("buildah"),
            registry: registry.to_owned(),
            insecure_registries: vec![registry.to_owned()],
            credential: None,
            timeout: std::time::Duration::from_secs(600),
        },
        Arc::clone(blobs),
    )
    .expect("the builder")
}

#[tokio::test]
#[ignore = "needs buildah and docker-registry (scripts/test provides them)"]
async fn buildah_builds_a_multi_stage_dockerfile_with_run_pushes_it_and_builds_it_once() {
    let registry = test_registry();
    let dir = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let builder = registry_builder(dir.path(), &registry, &blobs);
    let consumer = ContainerBuild::new(builder);

    // 1. The base image, from Debian's busybox-static, through the adapter.
    let busybox = std::fs::read("/bin/busybox").unwrap_or_else(|err| panic!("/bin/busybox ({NEEDS}): {err}"));
    let mut base = TarWriter::new();
    base.file("Dockerfile", 0o644, 0, 0, BASE_DOCKERFILE.as_bytes())
        .unwrap();
    base.file("busybox", 0o755, 0, 0, &busybox).unwrap();
    let base_event = event_for(
        &*blobs,
        &registry,
        "busybox",
        "contoso/busybox/container-context.tar",
        base.finish().unwrap(),
        BTreeMap::new(),
    )
    .await;
    let base_image = handle(&consumer, &base_event).await;
    assert_eq!(base_image.image, "contoso/busybox");
    assert!(!base_image.already_present);

    // 2. The multi-stage service image on that base.
    let mut app = TarWriter::new();
    app.file("Dockerfile", 0o644, 0, 0, APP_DOCKERFILE.as_bytes()).unwrap();
    app.file("app.txt", 0o644, 0, 0, b"the module's source\n").unwrap();
    let build_args = BTreeMap::from([
        (
            "BASE".to_owned(),
            format!("{registry}/contoso/busybox:{}", base_image.tag),
        ),
        ("GREETING".to_owned(), "bonjour".to_owned()),
    ]);
    let app_event = event_for(
        &*blobs,
        &registry,
        "payments-api",
        "contoso/payments-api/container-context.tar",
        app.finish().unwrap(),
        build_args,
    )
    .await;
    let first = handle(&consumer, &app_event).await;
    assert_eq!(first.registry, registry);
    assert_eq!(first.image, "contoso/payments-api");
    assert!(!first.already_present);
    assert_eq!(
        consumer.builder().stats(),
        BuildahStats {
            builds: 2,
            pushes: 2,
            already_present: 0
        }
    );

    // 3. Pulled back by digest: the layers hold what RUN wrote, in both stages.
    let client = Distribution::new(std::slice::from_ref(&registry), RegistryAuth::Anonymous);
    let repository = format!("{registry}/contoso/payments-api");
    let files = image_files(&client, &repository, &first.digest).await;
    assert_eq!(
        files.get("app/built.txt").map(Vec::as_slice),
        Some(&b"bonjour from RUN\n"[..]),
        "{:?}",
        files.keys().collect::<Vec<_>>()
    );
    assert_eq!(
        files.get("app/app.txt").map(Vec::as_slice),
        Some(&b"the module's source\n"[..])
    );
    assert_eq!(
        files.get("app/runtime.txt").map(Vec::as_slice),
        Some(&b"runtime stage of /app\n"[..])
    );
    assert!(
        !files.contains_key("src/app.txt") && !files.contains_key("out/built.txt"),
        "the build stage's files must not be in the runtime image"
    );
    let manifest = client.verify(&repository, &first.digest).await.unwrap();
    let config = client.config(&repository, &manifest).await.unwrap();
    assert!(
        config["config"]["Env"]
            .as_array()
            .is_some_and(|env| env.iter().any(|v| v == "APP_HOME=/app")),
        "{config}"
    );
    assert_eq!(config["config"]["Healthcheck"]["Test"][0], "CMD", "{config}");
    assert_eq!(
        config["config"]["Labels"][BUILD_KEY_LABEL].as_str().map(str::len),
        Some(64)
    );
    assert_eq!(first.size_bytes, manifest.size_bytes());

    // 4. The same event again: no build, no push, the same digest.
    let again = handle(&consumer, &app_event).await;
    assert!(again.already_present);
    assert_eq!(again.digest, first.digest);
    assert_eq!(
        consumer.builder().stats(),
        BuildahStats {
            builds: 2,
            pushes: 2,
            already_present: 1
        }
    );

    // 5. The build's log is in the blob store.
    let log_key = format!(
        "contoso/container-build/payments-api/{}/{}.log",
        first.tag,
        &super::buildah::build_key(&image_spec("contoso", &app_event).unwrap().unwrap())[..16]
    );
    assert!(blobs.exists("build-logs", &log_key).await.unwrap(), "{log_key}");
}

#[tokio::test]
#[ignore = "needs buildah and docker-registry (scripts/test provides them)"]
async fn buildah_a_failing_run_is_a_permanent_error_with_its_log() {
    let registry = test_registry();
    let dir = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let builder = registry_builder(dir.path(), &registry, &blobs);
    let busybox = std::fs::read("/bin/busybox").unwrap_or_else(|err| panic!("/bin/busybox ({NEEDS}): {err}"));
    let mut context = TarWriter::new();
    context
        .file(
            "Dockerfile",
            0o644,
            0,
            0,
            b"FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sh\", \"-c\", \"printf 'binary \\\\377\\\\376 out%s\\\\n' put; echo tests: $((1 + 2)) failed; exit 3\"]\n",
        )
        .unwrap();
    context.file("busybox", 0o755, 0, 0, &busybox).unwrap();
    let event = event_for(
        &*blobs,
        &registry,
        "broken",
        "contoso/broken/container-context.tar",
        context.finish().unwrap(),
        BTreeMap::new(),
    )
    .await;
    let spec = image_spec("contoso", &event).unwrap().unwrap();
    let err = builder.build(&spec).await.unwrap_err();
    match &err {
        ContainerBuildError::BuilderFailed {
            builder: "buildah",
            log: Some(log),
            tail,
            transient: false,
        } => {
            // What the RUN printed (not its command line, which the error repeats).
            assert!(tail.contains("tests: 3 failed"), "{tail}");
            assert!(tail.contains(" output"), "output that is not UTF-8 is kept: {tail}");
            let text = String::from_utf8(blobs.get(log).await.unwrap()).unwrap();
            assert!(text.contains("STEP"), "{text}");
        }
        other => panic!("expected a permanent BuilderFailed with its log, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(builder.stats().pushes, 0);
}

// ---- Without buildah: the parts that run before and around it ----

fn spec_for(event: &BuildCompleted) -> ImageSpec {
    image_spec("contoso", event).unwrap().unwrap()
}

#[test]
fn the_build_key_changes_with_what_the_image_is_made_of_only() {
    let spec = spec_for(&samples::build_completed());
    let key = super::buildah::build_key(&spec);
    assert_eq!(key.len(), 64);
    assert_eq!(super::buildah::build_key(&spec.clone()), key, "stable");
    let mut retagged = spec.clone();
    retagged.tag = "9.9.9".to_owned();
    assert_eq!(super::buildah::build_key(&retagged), key, "the tag is not an input");
    let changes: [fn(&mut ImageSpec); 4] = [
        |s| s.context.sha256 = "0".repeat(64),
        |s| s.dockerfile = "build/Dockerfile".to_owned(),
        |s| {
            s.build_args.insert("EXTRA".to_owned(), "1".to_owned());
        },
        |s| s.platform = "linux/arm64".to_owned(),
    ];
    for change in changes {
        let mut changed = spec.clone();
        change(&mut changed);
        assert_ne!(super::buildah::build_key(&changed), key, "{changed:?}");
    }
}

#[test]
fn unpacking_a_context_refuses_to_write_through_a_symbolic_link() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let mut context = TarWriter::new();
    context
        .symlink("escape", &outside.path().display().to_string(), 0, 0)
        .unwrap();
    context.file("escape/owned.txt", 0o644, 0, 0, b"x").unwrap();
    let err = super::buildah::unpack(&context.finish().unwrap(), dir.path()).unwrap_err();
    assert!(err.to_string().contains("escape/owned.txt"), "{err}");
    assert!(!outside.path().join("owned.txt").exists());

    let mut good = TarWriter::new();
    good.file("Dockerfile", 0o644, 0, 0, b"FROM scratch\n").unwrap();
    good.file("bin/run", 0o755, 0, 0, b"#!/bin/sh\n").unwrap();
    good.symlink("bin/start", "run", 0, 0).unwrap();
    super::buildah::unpack(&good.finish().unwrap(), dir.path()).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.path().join("bin/run"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(
        std::fs::read_link(dir.path().join("bin/start")).unwrap(),
        std::path::Path::new("run")
    );
}

#[tokio::test]
async fn a_module_naming_another_registry_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let blobs: Arc<dyn BlobStore> = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let builder = BuildahBuilder::new(
        BuildahConfig {
            // Never run: the request is refused first.
            binary: dir.path().join("no-buildah"),
            work_dir: dir.path().join("buildah"),
            registry: "127.0.0.1:5000".to_owned(),
            insecure_registries: vec!["127.0.0.1:5000".to_owned()],
            credential: Some(("ci".to_owned(), "s3cret".to_owned())),
            timeout: std::time::Duration::from_secs(600),
        },
        blobs,
    )
    .unwrap();
    assert!(!format!("{builder:?}").contains("s3cret"));
    let written = |prefix: &str| {
        let found: Vec<_> = std::fs::read_dir(dir.path().join("buildah"))
            .unwrap()
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with(prefix))
            })
            .collect();
        assert_eq!(found.len(), 1, "{prefix}: {found:?}");
        found[0].clone()
    };
    let registries = std::fs::read_to_string(written("registries-")).unwrap();
    assert!(
        registries.contains("location = \"127.0.0.1:5000\"\ninsecure = true"),
        "{registries}"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let auth = std::fs::metadata(written("auth-")).unwrap();
    assert_eq!(
        auth.permissions().mode() & 0o777,
        0o600,
        "the credential file is the owner's only"
    );

    let spec = spec_for(&samples::build_completed());
    let err = builder.build(&spec).await.unwrap_err();
    assert!(matches!(err, ContainerBuildError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("contoso.azurecr.io"), "{err}");
    assert!(!err.is_retryable());
    assert_eq!(builder.stats(), BuildahStats::default());
    let missing = BuildahBuilder::detect(&dir.path().join("no-buildah")).unwrap_err();
    assert!(
        matches!(missing, super::buildah::BuildahDetectError::Run { .. }),
        "a missing executable is detected: {missing}"
    );
    assert!(missing.to_string().contains("no-buildah cannot be run: "), "{missing}");
}
