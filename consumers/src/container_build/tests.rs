//! Handler tests over an in-memory [`ImageBuilder`], tests of the local
//! adapter (real OCI layouts in a temporary folder) and of the Azure
//! adapter (against a scripted local registry).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bosun_contracts::messages::{ArtifactKind, ArtifactRef, BuildCompleted, PipelineResult};
use bosun_contracts::validate::Validate;
use bosun_contracts::{Envelope, Message, samples};
use serde_json::Value;
use time::macros::datetime;
use uuid::Uuid;

use super::azure::{AcrAuth, AzureContainerRegistry, AzureContainerRegistryConfig};
use super::local::{LocalImageBuilder, REF_NAME_ANNOTATION, TENANT_ANNOTATION};
use super::*;
use crate::delivery::archive::tar::TarWriter;
use crate::delivery::azure::test_server::{MockAzure, Reply};
use crate::delivery::blob::{BlobStore, FilesystemBlobStore, sha256_hex};
use crate::delivery::oci::{BuildInput, OciImage, Platform, build_image};

const DOCKERFILE: &str = "FROM scratch\nARG DOTNET_VERSION\nLABEL dotnet=$DOTNET_VERSION\nCOPY app/ /app/\nWORKDIR /app\nEXPOSE 8080\nENTRYPOINT [\"/app/server\"]\n";

fn context_tar(server: &[u8]) -> Vec<u8> {
    let mut writer = TarWriter::new();
    writer.file("Dockerfile", 0o644, 0, 0, DOCKERFILE.as_bytes()).unwrap();
    writer.file("app/server", 0o755, 0, 0, server).unwrap();
    writer.file("app/appsettings.json", 0o644, 0, 0, b"{}").unwrap();
    writer.finish().unwrap()
}

/// The sample build, with its container context stored in `blobs`.
async fn build_event(blobs: &dyn BlobStore, context: Vec<u8>) -> BuildCompleted {
    let mut event = samples::build_completed();
    let blob = blobs
        .put(
            "artifacts",
            "contoso/4711/container-context.tar",
            context,
            "application/x-tar",
        )
        .await
        .unwrap();
    for artifact in &mut event.artifacts {
        if artifact.kind == ArtifactKind::ContainerContext {
            artifact.blob = blob.clone();
        }
    }
    event
}

fn envelope(message: &Message) -> Envelope {
    Envelope::new(message, Uuid::now_v7(), "contoso", "build-ingestion")
}

async fn handle<P: ImageBuilder>(consumer: &ContainerBuild<P>, message: Message) -> Result<Outcome, HandlerError> {
    let envelope = envelope(&message);
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn built(outcome: &Outcome) -> &ContainerImageBuilt {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0].message {
        Message::ContainerImageBuilt(event) => event,
        other => panic!("expected ContainerImageBuilt, got {other:?}"),
    }
}

// ---- Handler over a fake port ----

#[derive(Default)]
struct FakeBuilder {
    calls: Mutex<Vec<ImageSpec>>,
    fail: Mutex<Option<fn() -> ContainerBuildError>>,
}

#[async_trait]
impl ImageBuilder for FakeBuilder {
    async fn build(&self, spec: &ImageSpec) -> Result<BuildProgress, ContainerBuildError> {
        self.calls.lock().unwrap().push(spec.clone());
        if let Some(fail) = *self.fail.lock().unwrap() {
            return Err(fail());
        }
        Ok(BuildProgress::Built(BuiltImage {
            repository: spec.image.clone(),
            digest: format!("sha256:{}", "ab".repeat(32)),
            size_bytes: 4096,
            already_present: self.calls.lock().unwrap().len() > 1,
            pushed_at: datetime!(2026-11-29 10:12:40 UTC),
        }))
    }
}

#[tokio::test]
async fn a_successful_build_with_a_context_is_built_and_reported() {
    let consumer = ContainerBuild::new(FakeBuilder::default());
    let event = samples::build_completed();
    let outcome = handle(&consumer, event.clone().into()).await.unwrap();
    let image = built(&outcome);
    assert_eq!(image.validate(), Ok(()));
    assert_eq!(image.release_id, event.release_id);
    assert_eq!(image.build_id, event.build_id);
    assert_eq!(image.module_id, "payments-api");
    assert_eq!(image.commit_sha, event.commit_sha);
    assert_eq!(image.registry, "contoso.azurecr.io");
    assert_eq!(image.image, "contoso/payments-api");
    assert_eq!(image.tag, "1.4.0");
    assert_eq!(image.platform, "linux/amd64");
    assert!(!image.already_present);

    let calls = consumer.builder().calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tenant, "contoso");
    assert_eq!(calls[0].dockerfile, "Dockerfile");
    assert_eq!(
        calls[0].build_args.get("DOTNET_VERSION").map(String::as_str),
        Some("9.0")
    );
    assert_eq!(
        calls[0].context.key,
        "contoso/payments-api/build-4711/container-context.tar"
    );
    assert_eq!(consumer.name(), "container-build");
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(3));
}

#[tokio::test]
async fn builds_it_should_not_act_on_yield_nothing() {
    let consumer = ContainerBuild::new(FakeBuilder::default());
    let mut failed = samples::build_completed();
    failed.result = PipelineResult::Failed;
    let mut canceled = samples::build_completed();
    canceled.result = PipelineResult::Canceled;
    let mut no_container = samples::build_completed();
    no_container.module.container = None;
    let mut no_context = samples::build_completed();
    no_context
        .artifacts
        .retain(|a| a.kind != ArtifactKind::ContainerContext);
    for event in [failed, canceled, no_container, no_context] {
        let outcome = handle(&consumer, event.into()).await.unwrap();
        assert_eq!(outcome, Outcome::default());
    }
    assert!(consumer.builder().calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_named_context_artifact_is_preferred_and_the_dockerfile_is_found_in_it() {
    let consumer = ContainerBuild::new(FakeBuilder::default());
    let mut event = samples::build_completed();
    let mut other = event.artifacts[1].clone();
    other.name = "other-context.tar".into();
    other.blob.key = "contoso/other.tar".into();
    event.artifacts.insert(0, other);
    event.module.version = "1.4.0+build.7".into();
    if let Some(container) = event.module.container.as_mut() {
        container.context = Some("docker".into());
        container.dockerfile = "docker/Dockerfile.prod".into();
    }
    let outcome = handle(&consumer, event.into()).await.unwrap();
    assert_eq!(built(&outcome).tag, "1.4.0_build.7");
    let calls = consumer.builder().calls.lock().unwrap().clone();
    assert_eq!(
        calls[0].context.key,
        "contoso/payments-api/build-4711/container-context.tar"
    );
    assert_eq!(calls[0].dockerfile, "Dockerfile.prod");
}

#[tokio::test]
async fn port_errors_keep_their_retry_decision() {
    let consumer = ContainerBuild::new(FakeBuilder::default());
    *consumer.builder().fail.lock().unwrap() = Some(|| ContainerBuildError::storage("writing the layout", "disk full"));
    let err = handle(&consumer, samples::build_completed().into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Transient(_)), "{err}");

    *consumer.builder().fail.lock().unwrap() = Some(|| ContainerBuildError::Invalid("bad".into()));
    let err = handle(&consumer, samples::build_completed().into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");

    *consumer.builder().fail.lock().unwrap() = Some(|| {
        let not_a_tar = crate::delivery::archive::tar::read_archive(&[7; 1024]).unwrap_err();
        ContainerBuildError::Build(crate::delivery::oci::BuildError::ContextArchive(not_a_tar))
    });
    let err = handle(&consumer, samples::build_completed().into()).await.unwrap_err();
    assert!(
        matches!(err, HandlerError::Permanent(_)),
        "a context that is no tar fails the same way again: {err}"
    );

    *consumer.builder().fail.lock().unwrap() = Some(|| ContainerBuildError::Throttled {
        after: std::time::Duration::from_secs(9),
        source: "slow down".into(),
    });
    let err = handle(&consumer, samples::build_completed().into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::RetryAfter { .. }), "{err}");
}

#[tokio::test]
async fn a_poll_to_a_builder_without_runs_is_permanent_and_builds_nothing() {
    let consumer = ContainerBuild::new(FakeBuilder::default());
    let err = handle(&consumer, samples::poll_container_build().into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("no run `cab7`"), "{err}");
    assert!(consumer.builder().calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn other_messages_are_a_routing_mistake() {
    let consumer = ContainerBuild::new(FakeBuilder::default());
    let err = handle(&consumer, samples::container_image_built().into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
}

// ---- Local adapter: real OCI layouts ----

struct LocalFixture {
    _dir: tempfile::TempDir,
    blobs: Arc<FilesystemBlobStore>,
    oci: std::path::PathBuf,
    consumer: ContainerBuild<LocalImageBuilder>,
}

fn local_fixture() -> LocalFixture {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let oci = dir.path().join("oci");
    let consumer = ContainerBuild::new(LocalImageBuilder::new(&oci, blobs.clone()));
    LocalFixture {
        _dir: dir,
        blobs,
        oci,
        consumer,
    }
}

/// Every file of a folder with its content, for before/after comparisons.
fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, std::time::SystemTime)> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let modified = entry.metadata().unwrap().modified().unwrap();
                let key = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                files.insert(key, (std::fs::read(&path).unwrap(), modified));
            }
        }
    }
    files
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[tokio::test]
async fn the_local_builder_writes_a_valid_oci_layout() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, context_tar(b"\x7fELF server")).await;
    let outcome = handle(&fixture.consumer, event.into()).await.unwrap();
    let image = built(&outcome).clone();
    assert_eq!(image.validate(), Ok(()));
    assert!(!image.already_present);

    let layout = fixture.oci.join("contoso/contoso.azurecr.io/contoso/payments-api");
    assert_eq!(
        read_json(&layout.join("oci-layout")),
        serde_json::json!({"imageLayoutVersion": "1.0.0"})
    );
    // Every blob's name is the sha256 of its bytes.
    let blob_dir = layout.join("blobs/sha256");
    let mut total = 0u64;
    for entry in std::fs::read_dir(&blob_dir).unwrap() {
        let entry = entry.unwrap();
        let bytes = std::fs::read(entry.path()).unwrap();
        assert_eq!(sha256_hex(&bytes), entry.file_name().to_string_lossy());
        total += bytes.len() as u64;
    }
    assert_eq!(total, image.size_bytes);

    let index = read_json(&layout.join("index.json"));
    assert_eq!(index["schemaVersion"], 2);
    assert_eq!(index["manifests"].as_array().unwrap().len(), 1);
    let entry = &index["manifests"][0];
    assert_eq!(entry["digest"], image.digest);
    assert_eq!(entry["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(entry["annotations"][REF_NAME_ANNOTATION], "1.4.0");
    assert_eq!(entry["annotations"][TENANT_ANNOTATION], "contoso");
    assert_eq!(
        entry["platform"],
        serde_json::json!({"architecture": "amd64", "os": "linux"})
    );

    let manifest = read_json(&blob_dir.join(image.digest.trim_start_matches("sha256:")));
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar"
    );
    let config_digest = manifest["config"]["digest"].as_str().unwrap();
    let config = read_json(&blob_dir.join(config_digest.trim_start_matches("sha256:")));
    assert_eq!(config["config"]["Entrypoint"], serde_json::json!(["/app/server"]));
    assert_eq!(config["config"]["WorkingDir"], "/app");
    assert_eq!(config["config"]["Labels"]["dotnet"], "9.0");
    assert_eq!(config["config"]["ExposedPorts"], serde_json::json!({"8080/tcp": {}}));
    assert_eq!(config["rootfs"]["diff_ids"][0], manifest["layers"][0]["digest"]);
    assert!(config.get("created").is_none());

    // GNU tar reads the layer.
    let layer = blob_dir.join(
        manifest["layers"][0]["digest"]
            .as_str()
            .unwrap()
            .trim_start_matches("sha256:"),
    );
    let output = std::process::Command::new("tar")
        .arg("-tvf")
        .arg(&layer)
        .output()
        .expect("GNU tar is needed to list the layer (scripts/test requires it)");
    let listing = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{listing}");
    assert!(
        listing.contains("-rwxr-xr-x 0/0") && listing.contains("app/server"),
        "{listing}"
    );
    assert!(listing.contains("1970-01-01"), "{listing}");
}

#[tokio::test]
async fn the_same_event_twice_builds_one_image() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, context_tar(b"server v1")).await;
    let first = handle(&fixture.consumer, event.clone().into()).await.unwrap();
    let before = snapshot(&fixture.oci);
    let second = handle(&fixture.consumer, event.into()).await.unwrap();
    let after = snapshot(&fixture.oci);

    let (first, second) = (built(&first), built(&second));
    assert_eq!(first.digest, second.digest);
    assert!(second.already_present);
    assert_eq!(first.size_bytes, second.size_bytes);
    assert_eq!(before, after, "the layout is untouched the second time");
}

#[tokio::test]
async fn the_same_context_in_another_build_gives_the_same_digest_and_new_content_moves_the_tag() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, context_tar(b"server v1")).await;
    let first = built(&handle(&fixture.consumer, event.into()).await.unwrap()).clone();

    // The same bytes stored again under another build's key.
    let mut again = build_event(&*fixture.blobs, context_tar(b"server v1")).await;
    again.build_id = "build-4712".into();
    assert_eq!(
        built(&handle(&fixture.consumer, again.into()).await.unwrap()).digest,
        first.digest
    );

    let changed = build_event(&*fixture.blobs, context_tar(b"server v2")).await;
    let second = built(&handle(&fixture.consumer, changed.into()).await.unwrap()).clone();
    assert_ne!(second.digest, first.digest);
    assert!(!second.already_present);
    let index = read_json(
        &fixture
            .oci
            .join("contoso/contoso.azurecr.io/contoso/payments-api/index.json"),
    );
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "the tag moved to the new digest");
    assert_eq!(manifests[0]["digest"], second.digest);
}

#[tokio::test]
async fn tags_live_side_by_side_in_one_layout() {
    let fixture = local_fixture();
    let mut event = build_event(&*fixture.blobs, context_tar(b"server")).await;
    if let Some(container) = event.module.container.as_mut() {
        container.registry = "localhost:5000".into();
        container.image = "payments-api".into();
    }
    handle(&fixture.consumer, event.clone().into()).await.unwrap();
    event.module.version = "1.5.0".into();
    handle(&fixture.consumer, event.into()).await.unwrap();
    let index = read_json(&fixture.oci.join("contoso/localhost_5000/payments-api/index.json"));
    let tags: Vec<&str> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["annotations"][REF_NAME_ANNOTATION].as_str().unwrap())
        .collect();
    assert_eq!(tags, vec!["1.4.0", "1.5.0"]);
}

#[tokio::test]
async fn an_unsupported_base_image_is_a_permanent_error_naming_the_line() {
    let fixture = local_fixture();
    let mut writer = TarWriter::new();
    writer
        .file(
            "Dockerfile",
            0o644,
            0,
            0,
            b"ARG DOTNET_VERSION\nFROM mcr.microsoft.com/dotnet/aspnet:${DOTNET_VERSION}\nCOPY . /app\n",
        )
        .unwrap();
    let event = build_event(&*fixture.blobs, writer.finish().unwrap()).await;
    let err = handle(&fixture.consumer, event.into()).await.unwrap_err();
    let HandlerError::Permanent(source) = &err else {
        panic!("expected a permanent error, got {err}");
    };
    let text = source.to_string();
    assert!(text.contains("line 2"), "{text}");
    assert!(text.contains("mcr.microsoft.com/dotnet/aspnet:9.0"), "{text}");
    assert!(text.contains("no registry access"), "{text}");
    assert!(!fixture.oci.join("contoso/contoso.azurecr.io").exists());
}

#[tokio::test]
async fn a_missing_or_broken_context_is_permanent() {
    let fixture = local_fixture();
    let mut event = samples::build_completed();
    event.artifacts[1].blob.container = "artifacts".into();
    let err = handle(&fixture.consumer, event.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");

    let event = build_event(&*fixture.blobs, b"not a tar archive at all".repeat(40)).await;
    let err = handle(&fixture.consumer, event.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
}

// ---- Tenants: walls between them ----

/// The sample build of `tenant`, its context stored under the tenant's keys.
async fn tenant_build(blobs: &dyn BlobStore, tenant: &str, context: Vec<u8>) -> BuildCompleted {
    let mut event = samples::build_completed();
    let blob = blobs
        .put(
            "artifacts",
            &format!("{tenant}/4711/container-context.tar"),
            context,
            "application/x-tar",
        )
        .await
        .unwrap();
    for artifact in &mut event.artifacts {
        if artifact.kind == ArtifactKind::ContainerContext {
            artifact.blob = blob.clone();
        }
    }
    event
}

async fn handle_as<P: ImageBuilder>(
    consumer: &ContainerBuild<P>,
    tenant: &str,
    message: Message,
) -> Result<Outcome, HandlerError> {
    let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "build-ingestion");
    consumer.handle(Inbound::new(&envelope, &message)).await
}

#[tokio::test]
async fn two_tenants_build_the_same_image_and_tag_each_into_their_own_layout() {
    let fixture = local_fixture();
    let contoso = tenant_build(&*fixture.blobs, "contoso", context_tar(b"contoso server")).await;
    let fabrikam = tenant_build(&*fixture.blobs, "fabrikam", context_tar(b"fabrikam server")).await;
    let first = built(
        &handle_as(&fixture.consumer, "contoso", contoso.clone().into())
            .await
            .unwrap(),
    )
    .clone();
    let contoso_layout = fixture.oci.join("contoso/contoso.azurecr.io/contoso/payments-api");
    let before = snapshot(&contoso_layout);

    // Same registry, image name and tag; other content.
    let second = built(
        &handle_as(&fixture.consumer, "fabrikam", fabrikam.clone().into())
            .await
            .unwrap(),
    )
    .clone();
    assert_ne!(first.digest, second.digest);
    assert!(!second.already_present, "fabrikam does not see contoso's tag");
    assert_eq!(
        (first.image.as_str(), second.image.as_str()),
        ("contoso/payments-api", "contoso/payments-api")
    );
    assert_eq!(before, snapshot(&contoso_layout), "contoso's tag did not move");
    let index = read_json(
        &fixture
            .oci
            .join("fabrikam/contoso.azurecr.io/contoso/payments-api/index.json"),
    );
    assert_eq!(index["manifests"][0]["digest"], second.digest);
    assert_eq!(index["manifests"][0]["annotations"][TENANT_ANNOTATION], "fabrikam");

    // Each finds its own tag, and again builds to `already_present`.
    let builder = fixture.consumer.builder();
    for (tenant, digest) in [("contoso", &first.digest), ("fabrikam", &second.digest)] {
        let found = builder
            .find(tenant, "contoso.azurecr.io", "contoso/payments-api", "1.4.0")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((&found.digest, found.legacy), (digest, false));
    }
    assert_eq!(
        builder
            .find("northwind", "contoso.azurecr.io", "contoso/payments-api", "1.4.0")
            .await
            .unwrap(),
        None
    );
    let again = built(&handle_as(&fixture.consumer, "contoso", contoso.into()).await.unwrap()).clone();
    assert!(again.already_present);
    assert_eq!(again.digest, first.digest);
}

#[tokio::test]
async fn a_context_of_another_tenant_is_refused_naming_both() {
    let fixture = local_fixture();
    let contoso = tenant_build(&*fixture.blobs, "contoso", context_tar(b"server")).await;
    let err = handle_as(&fixture.consumer, "fabrikam", contoso.into())
        .await
        .unwrap_err();
    let HandlerError::Permanent(source) = &err else {
        panic!("expected a permanent error, got {err}");
    };
    let text = source.to_string();
    assert!(text.contains("`fabrikam`") && text.contains("`contoso`"), "{text}");
    assert!(!fixture.oci.join("fabrikam").exists());
}

/// Writes `image` tagged `tag` as the registry wrote layouts before
/// tenants: `<root>/<registry>/<image>/`, the index naming the tag only.
fn write_old_layout(root: &Path, registry: &str, name: &str, image: &OciImage, tag: &str) -> std::path::PathBuf {
    let dir = root.join(registry).join(name);
    let blob_dir = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blob_dir).unwrap();
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    for blob in image.blobs().chain(std::iter::once(&image.manifest)) {
        std::fs::write(blob_dir.join(blob.hex()), &blob.bytes).unwrap();
    }
    let mut entry = image.manifest.descriptor();
    entry["platform"] = image.platform_json();
    entry["annotations"] = serde_json::json!({ REF_NAME_ANNOTATION: tag });
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [entry],
    });
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    dir
}

#[tokio::test]
async fn layouts_from_before_tenants_stay_read_only_and_block_no_tenant() {
    let fixture = local_fixture();
    let event = tenant_build(&*fixture.blobs, "contoso", context_tar(b"server v1")).await;
    let image = expected_image(&*fixture.blobs, &event).await;
    let old = write_old_layout(
        &fixture.oci,
        "contoso.azurecr.io",
        "contoso/payments-api",
        &image,
        "1.4.0",
    );
    let old_files = snapshot(&old);

    // The old layout records no tenant: it moves aside, intact, and its
    // owner still finds the tag.
    let builder = fixture.consumer.builder();
    let found = builder
        .find("contoso", "contoso.azurecr.io", "contoso/payments-api", "1.4.0")
        .await
        .unwrap()
        .unwrap();
    assert!(found.legacy);
    assert_eq!(found.digest, image.digest());
    let parked = fixture.oci.join(".legacy/contoso.azurecr.io/contoso/payments-api");
    assert_eq!(found.layout, parked);
    assert!(!old.exists());
    assert_eq!(old_files, snapshot(&parked), "moved, not rewritten");
    assert!(fixture.oci.join(crate::delivery::tenant::LAYOUT_MARKER).is_file());

    // The owner's in-flight build completes into its own layout; another
    // tenant's build of the same name and tag is blocked by neither.
    let rebuilt = built(&handle_as(&fixture.consumer, "contoso", event.into()).await.unwrap()).clone();
    assert_eq!(rebuilt.digest, image.digest());
    let fabrikam = tenant_build(&*fixture.blobs, "fabrikam", context_tar(b"server v2")).await;
    let theirs = built(&handle_as(&fixture.consumer, "fabrikam", fabrikam.into()).await.unwrap()).clone();
    assert_ne!(theirs.digest, image.digest());
    for tenant in ["contoso", "fabrikam"] {
        let found = builder
            .find(tenant, "contoso.azurecr.io", "contoso/payments-api", "1.4.0")
            .await
            .unwrap()
            .unwrap();
        assert!(!found.legacy, "{tenant} finds its own layout first");
    }
    assert_eq!(old_files, snapshot(&parked), "the old layout is read-only");

    // A restart migrates nothing more.
    let restarted = LocalImageBuilder::new(&fixture.oci, fixture.blobs.clone());
    let again = restarted
        .find("northwind", "contoso.azurecr.io", "contoso/payments-api", "1.4.0")
        .await
        .unwrap()
        .unwrap();
    assert!(again.legacy);
    assert_eq!(old_files, snapshot(&parked));
}

#[tokio::test]
async fn an_old_layout_whose_tags_record_a_tenant_moves_to_that_tenant() {
    let fixture = local_fixture();
    let event = tenant_build(&*fixture.blobs, "contoso", context_tar(b"server")).await;
    let image = expected_image(&*fixture.blobs, &event).await;
    let old = write_old_layout(&fixture.oci, "localhost", "payments-api", &image, "1.4.0");
    let mut index = read_json(&old.join("index.json"));
    index["manifests"][0]["annotations"][TENANT_ANNOTATION] = "contoso".into();
    std::fs::write(old.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();

    let found = fixture
        .consumer
        .builder()
        .find("contoso", "localhost", "payments-api", "1.4.0")
        .await
        .unwrap()
        .unwrap();
    assert!(!found.legacy);
    assert_eq!(found.layout, fixture.oci.join("contoso/localhost/payments-api"));
    assert_eq!(
        fixture
            .consumer
            .builder()
            .find("fabrikam", "localhost", "payments-api", "1.4.0")
            .await
            .unwrap(),
        None,
        "another tenant does not see it"
    );
}

// ---- Azure adapter against a scripted registry ----

const REGISTRY: &str = "contoso.azurecr.io";

async fn expected_image(blobs: &dyn BlobStore, event: &BuildCompleted) -> OciImage {
    let artifact: &ArtifactRef = event.artifacts_of(ArtifactKind::ContainerContext).next().unwrap();
    let context = blobs.get(&artifact.blob).await.unwrap();
    let args = BTreeMap::from([("DOTNET_VERSION".to_owned(), "9.0".to_owned())]);
    build_image(
        &context,
        &BuildInput {
            dockerfile: "Dockerfile",
            build_args: &args,
            platform: &Platform::parse("linux/amd64").unwrap(),
        },
    )
    .unwrap()
}

fn acr(server: &MockAzure, blobs: Arc<FilesystemBlobStore>, auth: AcrAuth) -> ContainerBuild<AzureContainerRegistry> {
    let mut config = AzureContainerRegistryConfig::new(REGISTRY, auth);
    config.endpoint = Some(server.url(""));
    ContainerBuild::new(AzureContainerRegistry::new(&config, blobs).unwrap())
}

fn basic() -> AcrAuth {
    AcrAuth::Basic {
        username: "contoso".into(),
        password: "admin-secret".into(),
    }
}

fn v2(rest: &str) -> String {
    format!("/v2/contoso/payments-api/{rest}")
}

#[tokio::test]
async fn acr_push_uploads_missing_blobs_then_the_manifest() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, context_tar(b"server")).await;
    let image = expected_image(&*fixture.blobs, &event).await;
    let layer = &image.layers[0];
    let server = MockAzure::start(vec![
        Reply::json("GET", "/oauth2/token", 200, r#"{"access_token":"acr-access"}"#),
        Reply::bytes("HEAD", &v2("manifests/1.4.0"), 404, b""),
        // The layer is new: upload it.
        Reply::bytes("HEAD", &v2(&format!("blobs/{}", layer.digest)), 404, b""),
        Reply::bytes("POST", &v2("blobs/uploads/"), 202, b"").header("Location", &v2("blobs/uploads/u-1?_state=abc")),
        Reply::bytes("PUT", &v2("blobs/uploads/u-1"), 201, b"").header("Docker-Content-Digest", &layer.digest),
        // The config is there already.
        Reply::bytes("HEAD", &v2(&format!("blobs/{}", image.config.digest)), 200, b""),
        Reply::bytes("PUT", &v2("manifests/1.4.0"), 201, b"").header("Docker-Content-Digest", image.digest()),
    ])
    .await;
    let consumer = acr(&server, fixture.blobs.clone(), basic());
    let outcome = handle(&consumer, event.into()).await;
    let requests = server.finish().await;
    let outcome = outcome.unwrap();
    let pushed = built(&outcome);
    assert_eq!(pushed.digest, image.digest());
    assert!(!pushed.already_present);

    let token = &requests[0];
    assert_eq!(token.query("service"), Some(REGISTRY));
    assert_eq!(token.query("scope"), Some("repository:contoso/payments-api:pull,push"));
    let basic = format!(
        "Basic {}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "contoso:admin-secret")
    );
    assert_eq!(token.header("authorization"), Some(basic.as_str()));
    for request in &requests[1..] {
        assert_eq!(request.header("authorization"), Some("Bearer acr-access"));
    }
    let upload = &requests[4];
    assert_eq!(upload.query("_state"), Some("abc"));
    assert_eq!(upload.query("digest"), Some(layer.digest.as_str()));
    assert_eq!(upload.body, layer.bytes);
    let manifest = &requests[6];
    assert_eq!(
        manifest.header("content-type"),
        Some("application/vnd.oci.image.manifest.v1+json")
    );
    assert_eq!(manifest.body, image.manifest.bytes);
}

#[tokio::test]
async fn acr_skips_an_image_the_tag_already_names() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, context_tar(b"server")).await;
    let image = expected_image(&*fixture.blobs, &event).await;
    let server = MockAzure::start(vec![
        Reply::json("POST", "/oauth2/token", 200, r#"{"access_token":"acr-access"}"#),
        Reply::bytes("HEAD", &v2("manifests/1.4.0"), 200, b"").header("Docker-Content-Digest", image.digest()),
    ])
    .await;
    let consumer = acr(
        &server,
        fixture.blobs.clone(),
        AcrAuth::RefreshToken("acr-refresh".into()),
    );
    let outcome = handle(&consumer, event.into()).await;
    let requests = server.finish().await;
    let pushed = built(outcome.as_ref().unwrap());
    assert!(pushed.already_present);
    assert_eq!(pushed.digest, image.digest());
    let form = String::from_utf8(requests[0].body.clone()).unwrap();
    assert_eq!(
        form,
        "grant_type=refresh_token&service=contoso.azurecr.io&scope=repository%3Acontoso%2Fpayments-api%3Apull%2Cpush&refresh_token=acr-refresh"
    );
}

#[tokio::test]
async fn acr_exchanges_an_entra_token() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, context_tar(b"server")).await;
    let image = expected_image(&*fixture.blobs, &event).await;
    let server = MockAzure::start(vec![
        Reply::json("POST", "/oauth2/exchange", 200, r#"{"refresh_token":"from-entra"}"#),
        Reply::json("POST", "/oauth2/token", 200, r#"{"access_token":"acr-access"}"#),
        Reply::bytes("HEAD", &v2("manifests/1.4.0"), 200, b"").header("Docker-Content-Digest", image.digest()),
    ])
    .await;
    let auth = AcrAuth::EntraToken {
        token: "entra-jwt".into(),
        tenant: Some("tenant-1".into()),
    };
    let consumer = acr(&server, fixture.blobs.clone(), auth);
    let outcome = handle(&consumer, event.into()).await;
    let requests = server.finish().await;
    outcome.unwrap();
    let exchange = String::from_utf8(requests[0].body.clone()).unwrap();
    assert_eq!(
        exchange,
        "grant_type=access_token&service=contoso.azurecr.io&access_token=entra-jwt&tenant=tenant-1"
    );
    assert_eq!(
        requests[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert!(String::from_utf8_lossy(&requests[1].body).contains("refresh_token=from-entra"));
}

#[tokio::test]
async fn acr_failures_map_to_retry_decisions() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, context_tar(b"server")).await;
    let image = expected_image(&*fixture.blobs, &event).await;

    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/oauth2/token",
        401,
        r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
    )])
    .await;
    let err = handle(&acr(&server, fixture.blobs.clone(), basic()), event.clone().into())
        .await
        .unwrap_err();
    server.finish().await;
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("UNAUTHORIZED"), "{err}");
    assert!(!err.to_string().contains("admin-secret"));

    let server = MockAzure::start(vec![
        Reply::json("GET", "/oauth2/token", 200, r#"{"token":"acr-access"}"#),
        Reply::json("HEAD", &v2("manifests/1.4.0"), 429, "").header("Retry-After", "17"),
    ])
    .await;
    let err = handle(&acr(&server, fixture.blobs.clone(), basic()), event.clone().into())
        .await
        .unwrap_err();
    server.finish().await;
    assert!(
        matches!(err, HandlerError::RetryAfter { after, .. } if after == std::time::Duration::from_secs(17)),
        "{err}"
    );

    // A registry that stores another digest breaks the protocol.
    let server = MockAzure::start(vec![
        Reply::json("GET", "/oauth2/token", 200, r#"{"access_token":"a"}"#),
        Reply::bytes("HEAD", &v2("manifests/1.4.0"), 404, b""),
        Reply::bytes("HEAD", &v2(&format!("blobs/{}", image.layers[0].digest)), 200, b""),
        Reply::bytes("HEAD", &v2(&format!("blobs/{}", image.config.digest)), 200, b""),
        Reply::bytes("PUT", &v2("manifests/1.4.0"), 201, b"")
            .header("Docker-Content-Digest", &format!("sha256:{}", "0".repeat(64))),
    ])
    .await;
    let err = handle(&acr(&server, fixture.blobs.clone(), basic()), event.clone().into())
        .await
        .unwrap_err();
    server.finish().await;
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");

    // 503 without Retry-After is transient.
    let server = MockAzure::start(vec![Reply::json("GET", "/oauth2/token", 503, "{}")]).await;
    let err = handle(&acr(&server, fixture.blobs.clone(), basic()), event.clone().into())
        .await
        .unwrap_err();
    server.finish().await;
    assert!(matches!(err, HandlerError::Transient(_)), "{err}");
}

#[tokio::test]
async fn acr_refuses_another_registry_and_hides_secrets() {
    let fixture = local_fixture();
    let mut event = build_event(&*fixture.blobs, context_tar(b"server")).await;
    if let Some(container) = event.module.container.as_mut() {
        container.registry = "fabrikam.azurecr.io".into();
    }
    let server = MockAzure::start(vec![]).await;
    let consumer = acr(&server, fixture.blobs.clone(), basic());
    let shown = format!("{:?}", consumer.builder());
    assert!(!shown.contains("admin-secret"), "{shown}");
    let err = handle(&consumer, event.into()).await.unwrap_err();
    server.finish().await;
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("fabrikam.azurecr.io"), "{err}");
}

#[tokio::test]
async fn acr_pushes_into_the_tenants_repository() {
    assert_eq!(
        super::azure::tenant_repository("contoso", "contoso/payments-api"),
        "contoso/payments-api"
    );
    assert_eq!(
        super::azure::tenant_repository("contoso", "payments-api"),
        "contoso/payments-api"
    );
    assert_eq!(
        super::azure::tenant_repository("contoso", "contosox/api"),
        "contoso/contosox/api"
    );

    // Fabrikam building the same image name pushes under fabrikam/.
    let fixture = local_fixture();
    let event = tenant_build(&*fixture.blobs, "fabrikam", context_tar(b"server")).await;
    let image = expected_image(&*fixture.blobs, &event).await;
    let repository = "/v2/fabrikam/contoso/payments-api";
    let server = MockAzure::start(vec![
        Reply::json("GET", "/oauth2/token", 200, r#"{"access_token":"acr-access"}"#),
        Reply::bytes("HEAD", &format!("{repository}/manifests/1.4.0"), 200, b"")
            .header("Docker-Content-Digest", image.digest()),
    ])
    .await;
    let outcome = handle_as(&acr(&server, fixture.blobs.clone(), basic()), "fabrikam", event.into()).await;
    let requests = server.finish().await;
    let pushed = built(outcome.as_ref().unwrap());
    assert_eq!(pushed.image, "fabrikam/contoso/payments-api");
    assert_eq!(pushed.validate(), Ok(()));
    assert_eq!(
        requests[0].query("scope"),
        Some("repository:fabrikam/contoso/payments-api:pull,push")
    );
}
