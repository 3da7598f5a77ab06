//! Handler tests over an in-memory [`PackageFeed`], tests of the local
//! adapter (real folder feeds in a temporary folder) and of the Azure
//! adapter (against a scripted local feed).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use bosun_contracts::messages::{ArtifactKind, ArtifactRef, BuildCompleted, PipelineResult};
use bosun_contracts::validate::Validate;
use bosun_contracts::{Envelope, Message, samples};
use time::macros::datetime;
use uuid::Uuid;

use super::azure::{AzureArtifactsConfig, AzureArtifactsFeed};
use super::local::LocalNugetFeed;
use super::nupkg::{self, sha512_hex};
use super::*;
use crate::delivery::archive::tar::{self, TarWriter};
use crate::delivery::azure::test_server::{MockAzure, Reply};
use crate::delivery::blob::{BlobStore, FilesystemBlobStore};

fn content_tar(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = TarWriter::new();
    for (path, data) in files {
        writer.file(path, 0o644, 0, 0, data).unwrap();
    }
    writer.finish().unwrap()
}

fn default_content() -> Vec<u8> {
    content_tar(&[
        ("lib/net8.0/Contoso.Payments.Client.dll", b"MZ client"),
        ("README.md", b"# Client"),
    ])
}

/// The sample build with a `package-content.tar` artifact stored in `blobs`.
async fn build_event(blobs: &dyn BlobStore, content: Vec<u8>) -> BuildCompleted {
    let mut event = samples::build_completed();
    let blob = blobs
        .put(
            "artifacts",
            "contoso/4711/package-content.tar",
            content,
            "application/x-tar",
        )
        .await
        .unwrap();
    event.artifacts.push(ArtifactRef {
        name: CONTENT_ARTIFACT.into(),
        kind: ArtifactKind::Archive,
        blob,
    });
    event
}

fn envelope(message: &Message) -> Envelope {
    Envelope::new(message, Uuid::now_v7(), "contoso", "build-ingestion")
}

async fn handle<P: PackageFeed>(consumer: &PackagePublishing<P>, message: Message) -> Result<Outcome, HandlerError> {
    let envelope = envelope(&message);
    consumer.handle(Inbound::new(&envelope, &message)).await
}

fn published(outcome: &Outcome) -> &PackagePublished {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0].message {
        Message::PackagePublished(event) => event,
        other => panic!("expected PackagePublished, got {other:?}"),
    }
}

// ---- Handler over a fake port ----

#[derive(Default)]
struct FakeFeed {
    calls: Mutex<Vec<PackageSpec>>,
    fail: Mutex<Option<fn() -> PublishError>>,
}

#[async_trait]
impl PackageFeed for FakeFeed {
    async fn publish(&self, spec: &PackageSpec) -> Result<PublishedPackage, PublishError> {
        self.calls.lock().unwrap().push(spec.clone());
        if let Some(fail) = *self.fail.lock().unwrap() {
            return Err(fail());
        }
        Ok(PublishedPackage {
            sha512: "ab".repeat(64),
            size_bytes: 1234,
            url: Some("file:///feeds/x.nupkg".into()),
            already_published: false,
            published_at: datetime!(2026-11-29 10:11:15 UTC),
        })
    }
}

#[tokio::test]
async fn a_successful_build_with_package_content_is_published() {
    let consumer = PackagePublishing::new(FakeFeed::default());
    let dir = tempfile::tempdir().unwrap();
    let blobs = FilesystemBlobStore::new(dir.path());
    let event = build_event(&blobs, default_content()).await;
    let outcome = handle(&consumer, event.clone().into()).await.unwrap();
    let package = published(&outcome);
    assert_eq!(package.validate(), Ok(()));
    assert_eq!(package.release_id, event.release_id);
    assert_eq!(package.build_id, event.build_id);
    assert_eq!(package.module_id, "payments-api");
    assert_eq!(package.package_id, "Contoso.Payments.Client");
    assert_eq!(package.version, "1.4.0");
    assert_eq!(package.feed, "contoso-internal");
    assert_eq!(package.size_bytes, 1234);

    let calls = consumer.feed().calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].authors, "contoso");
    assert_eq!(calls[0].description, "Payments API");
    assert!(matches!(&calls[0].source, PackageSource::Content(blob) if blob.key.ends_with("package-content.tar")));
    assert_eq!(consumer.name(), "package-publishing");
    assert_eq!(consumer.retry_policy(), RetryPolicy::exponential(5));
}

#[tokio::test]
async fn a_ready_nupkg_is_used_when_there_is_no_content_tar() {
    let consumer = PackagePublishing::new(FakeFeed::default());
    let mut event = samples::build_completed();
    let mut other = event.artifacts[0].clone();
    other.name = "Other.Tool.1.0.0.nupkg".into();
    other.blob.key = "contoso/other.nupkg".into();
    event.artifacts.insert(0, other);
    handle(&consumer, event.into()).await.unwrap();
    let calls = consumer.feed().calls.lock().unwrap().clone();
    assert!(
        matches!(&calls[0].source, PackageSource::Nupkg(blob) if blob.key.ends_with("Contoso.Payments.Client.1.4.0.nupkg")),
        "{:?}",
        calls[0].source
    );
}

#[tokio::test]
async fn builds_it_should_not_act_on_yield_nothing() {
    let consumer = PackagePublishing::new(FakeFeed::default());
    let mut failed = samples::build_completed();
    failed.result = PipelineResult::Failed;
    let mut no_package = samples::build_completed();
    no_package.module.package = None;
    let mut no_content = samples::build_completed();
    no_content.artifacts.retain(|a| a.kind != ArtifactKind::Package);
    let mut other_archive = no_content.clone();
    let mut archive = samples::build_completed().artifacts[1].clone();
    archive.kind = ArtifactKind::Archive;
    archive.name = "binaries.tar".into();
    other_archive.artifacts.push(archive);
    for event in [failed, no_package, no_content, other_archive] {
        let outcome = handle(&consumer, event.into()).await.unwrap();
        assert_eq!(outcome, Outcome::default());
    }
    assert!(consumer.feed().calls.lock().unwrap().is_empty());
}

#[tokio::test]
async fn port_errors_keep_their_retry_decision() {
    let consumer = PackagePublishing::new(FakeFeed::default());
    type Failure = fn() -> PublishError;
    let cases: [(Failure, &str); 7] = [
        (
            || PublishError::storage("reading /feed/p.nupkg", std::io::Error::other("disk")),
            "transient",
        ),
        (
            || PublishError::ContentArchive(tar::read_archive(&[1; 100]).unwrap_err()),
            "permanent",
        ),
        (
            || PublishError::Nupkg {
                context: "not a .nupkg",
                source: crate::delivery::archive::zip::read_central_directory(b"PK no").unwrap_err(),
            },
            "permanent",
        ),
        (
            || PublishError::ContentUnavailable(crate::delivery::blob::BlobError::Unavailable("disk".into())),
            "transient",
        ),
        (
            || PublishError::VersionConflict {
                package_id: "P".into(),
                version: "1.0.0".into(),
                existing_sha512: "a".into(),
                new_sha512: "b".into(),
            },
            "permanent",
        ),
        (|| PublishError::Content("bad".into()), "permanent"),
        (
            || PublishError::Throttled {
                after: Duration::from_secs(3),
                source: "slow".into(),
            },
            "retry",
        ),
    ];
    for (fail, expected) in cases {
        *consumer.feed().fail.lock().unwrap() = Some(fail);
        let err = handle(&consumer, samples::build_completed().into()).await.unwrap_err();
        let kind = match err {
            HandlerError::Transient(_) => "transient",
            HandlerError::Permanent(_) => "permanent",
            HandlerError::NeedsNewer(_) => "needs-newer",
            HandlerError::RetryAfter { .. } => "retry",
        };
        assert_eq!(kind, expected);
    }
    let err = handle(&consumer, samples::package_published().into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
}

#[test]
fn storage_failures_keep_their_cause() {
    let err = PublishError::storage("reading /feed/p.nupkg", std::io::Error::other("disk on fire"));
    assert_eq!(
        err.to_string(),
        "feed storage failed: reading /feed/p.nupkg: disk on fire"
    );
    let source = std::error::Error::source(&err).expect("the I/O error is kept");
    assert!(source.downcast_ref::<std::io::Error>().is_some());
    assert_eq!(
        crate::error_chain(&err),
        err.to_string(),
        "the chain does not repeat the cause"
    );
}

// ---- Local adapter: real folder feeds ----

struct LocalFixture {
    _dir: tempfile::TempDir,
    blobs: Arc<FilesystemBlobStore>,
    nuget: std::path::PathBuf,
    consumer: PackagePublishing<LocalNugetFeed>,
}

fn local_fixture() -> LocalFixture {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let nuget = dir.path().join("nuget");
    let consumer = PackagePublishing::new(LocalNugetFeed::new(&nuget, blobs.clone()));
    LocalFixture {
        _dir: dir,
        blobs,
        nuget,
        consumer,
    }
}

fn version_dir(root: &Path) -> std::path::PathBuf {
    root.join("contoso/contoso-internal/contoso.payments.client/1.4.0")
}

fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, std::time::SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let modified = entry.metadata().unwrap().modified().unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                (std::fs::read(entry.path()).unwrap(), modified),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_folder_feed_holds_the_package_in_the_v3_layout() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, default_content()).await;
    let outcome = handle(&fixture.consumer, event.into()).await.unwrap();
    let package = published(&outcome).clone();
    assert_eq!(package.validate(), Ok(()));
    assert!(!package.already_published);

    let dir = version_dir(&fixture.nuget);
    let files: Vec<String> = snapshot(&dir).into_keys().collect();
    assert_eq!(
        files,
        vec![
            ".bosun-tenant",
            "contoso.payments.client.1.4.0.nupkg",
            "contoso.payments.client.1.4.0.nupkg.sha512",
            "contoso.payments.client.nuspec"
        ]
    );
    let bytes = std::fs::read(dir.join("contoso.payments.client.1.4.0.nupkg")).unwrap();
    assert_eq!(sha512_hex(&bytes), package.sha512);
    assert_eq!(bytes.len() as u64, package.size_bytes);
    let marker = std::fs::read_to_string(dir.join("contoso.payments.client.1.4.0.nupkg.sha512")).unwrap();
    let decoded = base64::engine::general_purpose::STANDARD.decode(marker.trim()).unwrap();
    let hex: String = decoded.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, package.sha512);
    assert_eq!(std::fs::read_to_string(dir.join(".bosun-tenant")).unwrap(), "contoso\n");
    let nuspec = std::fs::read_to_string(dir.join("contoso.payments.client.nuspec")).unwrap();
    assert!(nuspec.contains("<id>Contoso.Payments.Client</id>"), "{nuspec}");
    let url = package.url.unwrap();
    assert!(
        url.starts_with("file:///") && url.ends_with("/contoso.payments.client.1.4.0.nupkg"),
        "{url}"
    );

    // The package holds the content where NuGet expects it.
    let entries = crate::delivery::archive::zip::read_central_directory(&bytes).unwrap();
    let dll = entries
        .iter()
        .find(|e| e.name == "lib/net8.0/Contoso.Payments.Client.dll")
        .unwrap();
    assert_eq!(
        crate::delivery::archive::zip::extract(&bytes, dll).unwrap(),
        b"MZ client"
    );
}

#[tokio::test]
async fn the_same_event_twice_publishes_one_version() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, default_content()).await;
    let first = handle(&fixture.consumer, event.clone().into()).await.unwrap();
    let before = snapshot(&version_dir(&fixture.nuget));
    let second = handle(&fixture.consumer, event.into()).await.unwrap();
    let after = snapshot(&version_dir(&fixture.nuget));
    let (first, second) = (published(&first), published(&second));
    assert!(second.already_published);
    assert_eq!(first.sha512, second.sha512);
    assert_eq!(first.size_bytes, second.size_bytes);
    assert_eq!(first.url, second.url);
    assert_eq!(before, after, "nothing is written the second time");

    // The same content from another build is the same package.
    let mut again = build_event(&*fixture.blobs, default_content()).await;
    again.build_id = "build-4712".into();
    let third = handle(&fixture.consumer, again.into()).await.unwrap();
    assert!(published(&third).already_published);
}

#[tokio::test]
async fn different_content_for_an_existing_version_is_a_permanent_error() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, default_content()).await;
    handle(&fixture.consumer, event.into()).await.unwrap();
    let before = snapshot(&version_dir(&fixture.nuget));

    let changed = build_event(
        &*fixture.blobs,
        content_tar(&[("lib/net8.0/Contoso.Payments.Client.dll", b"MZ v2")]),
    )
    .await;
    let err = handle(&fixture.consumer, changed.clone().into()).await.unwrap_err();
    let HandlerError::Permanent(source) = &err else {
        panic!("expected a permanent error, got {err}");
    };
    assert!(source.to_string().contains("immutable"), "{source}");
    assert_eq!(before, snapshot(&version_dir(&fixture.nuget)), "the feed is untouched");

    // A new version of the same content is fine.
    let mut bumped = changed;
    bumped.module.version = "1.4.1".into();
    let outcome = handle(&fixture.consumer, bumped.into()).await.unwrap();
    assert_eq!(published(&outcome).version, "1.4.1");
    assert!(
        fixture
            .nuget
            .join("contoso/contoso-internal/contoso.payments.client/1.4.1")
            .is_dir()
    );
}

#[tokio::test]
async fn an_interrupted_publish_is_completed() {
    let fixture = local_fixture();
    let dir = version_dir(&fixture.nuget);
    std::fs::create_dir_all(&dir).unwrap();
    // A half-written version: a package file without its marker.
    std::fs::write(dir.join("contoso.payments.client.1.4.0.nupkg"), b"partial").unwrap();
    let event = build_event(&*fixture.blobs, default_content()).await;
    let outcome = handle(&fixture.consumer, event.into()).await.unwrap();
    let package = published(&outcome);
    assert!(!package.already_published);
    let bytes = std::fs::read(dir.join("contoso.payments.client.1.4.0.nupkg")).unwrap();
    assert_eq!(sha512_hex(&bytes), package.sha512);
    assert!(dir.join("contoso.payments.client.1.4.0.nupkg.sha512").is_file());
}

#[tokio::test]
async fn a_ready_nupkg_is_published_as_is() {
    let fixture = local_fixture();
    let spec = package_spec("contoso", &build_event(&*fixture.blobs, default_content()).await)
        .unwrap()
        .unwrap();
    let entries = tar::read_archive(&content_tar(&[("lib/netstandard2.0/C.dll", b"MZ")])).unwrap();
    let ready = nupkg::pack(&spec, &entries).unwrap();
    let mut event = samples::build_completed();
    event.artifacts[0].blob = fixture
        .blobs
        .put(
            "artifacts",
            "contoso/4711/Contoso.Payments.Client.1.4.0.nupkg",
            ready.bytes.clone(),
            "application/octet-stream",
        )
        .await
        .unwrap();
    let outcome = handle(&fixture.consumer, event.clone().into()).await.unwrap();
    assert_eq!(published(&outcome).sha512, ready.sha512);

    // A package of another id is refused.
    let mut other_spec = spec.clone();
    other_spec.package_id = "Contoso.Other".into();
    let other = nupkg::pack(&other_spec, &entries).unwrap();
    event.artifacts[0].blob = fixture
        .blobs
        .put(
            "artifacts",
            "contoso/4711/other.nupkg",
            other.bytes,
            "application/octet-stream",
        )
        .await
        .unwrap();
    let err = handle(&fixture.consumer, event.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
}

#[tokio::test]
async fn missing_content_is_permanent() {
    let fixture = local_fixture();
    let err = handle(&fixture.consumer, samples::build_completed().into())
        .await
        .unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
}

// ---- Tenants: walls between them ----

/// The sample build of `tenant`, its content tar stored under the tenant's
/// keys.
async fn tenant_build(blobs: &dyn BlobStore, tenant: &str, content: Vec<u8>) -> BuildCompleted {
    let mut event = samples::build_completed();
    let blob = blobs
        .put(
            "artifacts",
            &format!("{tenant}/4711/package-content.tar"),
            content,
            "application/x-tar",
        )
        .await
        .unwrap();
    event.artifacts.push(ArtifactRef {
        name: CONTENT_ARTIFACT.into(),
        kind: ArtifactKind::Archive,
        blob,
    });
    event
}

async fn handle_as<P: PackageFeed>(
    consumer: &PackagePublishing<P>,
    tenant: &str,
    message: Message,
) -> Result<Outcome, HandlerError> {
    let envelope = Envelope::new(&message, Uuid::now_v7(), tenant, "build-ingestion");
    consumer.handle(Inbound::new(&envelope, &message)).await
}

#[tokio::test]
async fn two_tenants_publish_the_same_id_and_version_each_to_their_own_feed() {
    let fixture = local_fixture();
    let contoso = tenant_build(&*fixture.blobs, "contoso", default_content()).await;
    let fabrikam = tenant_build(
        &*fixture.blobs,
        "fabrikam",
        content_tar(&[("lib/net8.0/Contoso.Payments.Client.dll", b"MZ fabrikam")]),
    )
    .await;
    let first = handle_as(&fixture.consumer, "contoso", contoso.clone().into())
        .await
        .unwrap();
    let contoso_dir = version_dir(&fixture.nuget);
    let before = snapshot(&contoso_dir);

    // Same package id, version and feed name, other content: not a conflict.
    let second = handle_as(&fixture.consumer, "fabrikam", fabrikam.clone().into())
        .await
        .unwrap();
    let (first, second) = (published(&first), published(&second));
    assert!(!first.already_published && !second.already_published);
    assert_ne!(first.sha512, second.sha512);
    assert_ne!(first.url, second.url);
    let fabrikam_dir = fixture
        .nuget
        .join("fabrikam/contoso-internal/contoso.payments.client/1.4.0");
    let bytes = std::fs::read(fabrikam_dir.join("contoso.payments.client.1.4.0.nupkg")).unwrap();
    assert_eq!(sha512_hex(&bytes), second.sha512);
    assert_eq!(
        std::fs::read_to_string(fabrikam_dir.join(".bosun-tenant")).unwrap(),
        "fabrikam\n"
    );
    assert_eq!(before, snapshot(&contoso_dir), "contoso's version is untouched");

    // Each sees its own version again, and only its own.
    let again = handle_as(&fixture.consumer, "contoso", contoso.into()).await.unwrap();
    assert!(published(&again).already_published);
    assert_eq!(published(&again).sha512, first.sha512);
    let feed = fixture.consumer.feed();
    let found = feed
        .find("fabrikam", "contoso-internal", "Contoso.Payments.Client", "1.4.0")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((found.sha512.as_str(), found.legacy), (second.sha512.as_str(), false));
    assert_eq!(
        feed.find("northwind", "contoso-internal", "Contoso.Payments.Client", "1.4.0")
            .await
            .unwrap(),
        None,
        "a third tenant sees nothing"
    );
}

#[tokio::test]
async fn content_of_another_tenant_is_refused_naming_both() {
    let fixture = local_fixture();
    let contoso = tenant_build(&*fixture.blobs, "contoso", default_content()).await;
    let err = handle_as(&fixture.consumer, "fabrikam", contoso.into())
        .await
        .unwrap_err();
    let HandlerError::Permanent(source) = &err else {
        panic!("expected a permanent error, got {err}");
    };
    let text = source.to_string();
    assert!(text.contains("`fabrikam`") && text.contains("`contoso`"), "{text}");
    assert!(!fixture.nuget.join("fabrikam").exists(), "nothing is published");
}

/// Writes a version as the feed wrote it before tenants:
/// `<root>/<feed>/<id>/<version>/` with the package, its marker and its
/// `.nuspec`.
fn write_old_version(root: &Path, feed: &str, package: &nupkg::Nupkg, id: &str, version: &str) {
    let dir = root.join(feed).join(id).join(version);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{id}.nuspec")), &package.nuspec).unwrap();
    std::fs::write(dir.join(format!("{id}.{version}.nupkg")), &package.bytes).unwrap();
    std::fs::write(
        dir.join(format!("{id}.{version}.nupkg.sha512")),
        package.sha512_base64(),
    )
    .unwrap();
}

#[tokio::test]
async fn versions_from_before_tenants_move_to_their_tenant_or_stay_read_only() {
    let fixture = local_fixture();
    // Contoso's package, packed by bosun (the tenant is its author), and a
    // ready package a build made (its authors say nothing of the tenant),
    // both in the old layout.
    let event = tenant_build(&*fixture.blobs, "contoso", default_content()).await;
    let spec = package_spec("contoso", &event).unwrap().unwrap();
    let packed = nupkg::prepare(&*fixture.blobs, &spec).await.unwrap();
    write_old_version(
        &fixture.nuget,
        "contoso-internal",
        &packed,
        "contoso.payments.client",
        "1.4.0",
    );
    let mut ready_spec = spec.clone();
    ready_spec.package_id = "Contoso.Tool".into();
    ready_spec.authors = "Contoso Tools Team".into();
    let ready = nupkg::pack(
        &ready_spec,
        &tar::read_archive(&content_tar(&[("tools/run.sh", b"echo")])).unwrap(),
    )
    .unwrap();
    write_old_version(&fixture.nuget, "contoso-internal", &ready, "contoso.tool", "1.4.0");

    // The in-flight delivery completes after the upgrade: the same event
    // finds its version, now in contoso's feed.
    let outcome = handle_as(&fixture.consumer, "contoso", event.clone().into())
        .await
        .unwrap();
    let package = published(&outcome);
    assert!(package.already_published, "{package:?}");
    assert_eq!(package.sha512, packed.sha512);
    let moved = version_dir(&fixture.nuget);
    assert_eq!(
        std::fs::read(moved.join("contoso.payments.client.1.4.0.nupkg")).unwrap(),
        packed.bytes
    );
    assert_eq!(
        std::fs::read_to_string(moved.join(".bosun-tenant")).unwrap(),
        "contoso\n"
    );
    assert!(fixture.nuget.join(crate::delivery::tenant::LAYOUT_MARKER).is_file());
    assert!(
        !fixture.nuget.join("contoso-internal").exists(),
        "no feed is left in the old place"
    );

    // The ready package's owner cannot be known: it stays, read-only, and
    // its owner still finds it.
    let feed = fixture.consumer.feed();
    let old = feed
        .find("contoso", "contoso-internal", "Contoso.Tool", "1.4.0")
        .await
        .unwrap()
        .unwrap();
    assert!(old.legacy);
    assert_eq!(old.sha512, ready.sha512);
    assert!(old.paths.dir.starts_with(fixture.nuget.join(".legacy")));
    let found = feed
        .find("contoso", "contoso-internal", "Contoso.Payments.Client", "1.4.0")
        .await
        .unwrap()
        .unwrap();
    assert!(!found.legacy);

    // Another tenant publishing the same ids is blocked by neither.
    let fabrikam = tenant_build(&*fixture.blobs, "fabrikam", content_tar(&[("README.md", b"fabrikam")])).await;
    let outcome = handle_as(&fixture.consumer, "fabrikam", fabrikam.into()).await.unwrap();
    assert!(!published(&outcome).already_published);
    assert_eq!(
        feed.find("fabrikam", "contoso-internal", "Contoso.Payments.Client", "1.4.0")
            .await
            .unwrap()
            .map(|found| found.legacy),
        Some(false)
    );

    // Opening the same root again (a restart) changes nothing.
    let restarted = LocalNugetFeed::new(&fixture.nuget, fixture.blobs.clone());
    let before = snapshot(&moved);
    let again = restarted
        .find("contoso", "contoso-internal", "Contoso.Payments.Client", "1.4.0")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.sha512, packed.sha512);
    assert_eq!(before, snapshot(&moved));
    assert!(
        restarted
            .find("contoso", "contoso-internal", "Contoso.Tool", "1.4.0")
            .await
            .unwrap()
            .unwrap()
            .legacy
    );
}

#[tokio::test]
async fn a_migration_interrupted_after_recording_the_tenant_is_finished() {
    let fixture = local_fixture();
    let event = tenant_build(&*fixture.blobs, "contoso", default_content()).await;
    let spec = package_spec("contoso", &event).unwrap().unwrap();
    let packed = nupkg::prepare(&*fixture.blobs, &spec).await.unwrap();
    // As a crash would leave it: the feed parked, the marker written, the
    // version's tenant recorded but the version not moved yet.
    let parked = fixture.nuget.join(".legacy");
    write_old_version(&parked, "contoso-internal", &packed, "contoso.payments.client", "1.4.0");
    std::fs::write(
        parked.join("contoso-internal/contoso.payments.client/1.4.0/.bosun-tenant"),
        "contoso\n",
    )
    .unwrap();
    std::fs::write(
        fixture.nuget.join(crate::delivery::tenant::LAYOUT_MARKER),
        "tenant-scoped 1\n",
    )
    .unwrap();

    let outcome = handle_as(&fixture.consumer, "contoso", event.into()).await.unwrap();
    assert!(published(&outcome).already_published);
    assert!(
        version_dir(&fixture.nuget)
            .join("contoso.payments.client.1.4.0.nupkg")
            .is_file()
    );
    assert!(!parked.exists(), "the emptied legacy folders are gone");
}

// ---- Azure adapter against a scripted feed ----

const PUSH: &str = "/contoso/Delivery/_packaging/contoso-internal/nuget/v2/";
const DOWNLOAD: &str = "/contoso/Delivery/_packaging/contoso-internal/nuget/v3/flat2/contoso.payments.client/1.4.0/contoso.payments.client.1.4.0.nupkg";

fn azure_consumer(server: &MockAzure, blobs: Arc<FilesystemBlobStore>) -> PackagePublishing<AzureArtifactsFeed> {
    let config = AzureArtifactsConfig::new(server.url("/contoso"), Some("Delivery".into()), "feed-pat");
    PackagePublishing::new(AzureArtifactsFeed::new(&config, blobs).unwrap())
}

async fn expected_package(blobs: &dyn BlobStore, event: &BuildCompleted) -> nupkg::Nupkg {
    let spec = package_spec("contoso", event).unwrap().unwrap();
    nupkg::prepare(blobs, &spec).await.unwrap()
}

#[tokio::test]
async fn azure_push_sends_the_package_as_multipart() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, default_content()).await;
    let expected = expected_package(&*fixture.blobs, &event).await;
    let server = MockAzure::start(vec![Reply::bytes("PUT", PUSH, 202, b"")]).await;
    let consumer = azure_consumer(&server, fixture.blobs.clone());
    let index = server.url("/contoso/Delivery/_packaging/contoso-internal/nuget/v3/index.json");
    let outcome = handle(&consumer, event.into()).await;
    let requests = server.finish().await;
    let package = published(outcome.as_ref().unwrap()).clone();
    assert!(!package.already_published);
    assert_eq!(package.sha512, expected.sha512);
    assert_eq!(package.validate(), Ok(()));
    assert_eq!(package.url.as_deref(), Some(index.as_str()));

    let push = &requests[0];
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(":feed-pat")
    );
    assert_eq!(push.header("authorization"), Some(basic.as_str()));
    assert_eq!(push.header("x-nuget-apikey"), Some("AzureDevOps"));
    let content_type = push.header("content-type").unwrap();
    let boundary = content_type.strip_prefix("multipart/form-data; boundary=").unwrap();
    let body = &push.body;
    let head = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"package\"; filename=\"package.nupkg\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    );
    assert!(body.starts_with(head.as_bytes()));
    let tail = format!("\r\n--{boundary}--\r\n");
    assert!(body.ends_with(tail.as_bytes()));
    assert_eq!(&body[head.len()..body.len() - tail.len()], expected.bytes.as_slice());
}

#[tokio::test]
async fn azure_conflict_with_the_same_package_is_already_published() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, default_content()).await;
    let expected = expected_package(&*fixture.blobs, &event).await;
    let server = MockAzure::start(vec![
        Reply::json(
            "PUT",
            PUSH,
            409,
            r#"{"message":"The feed already contains 'Contoso.Payments.Client 1.4.0'."}"#,
        ),
        Reply::bytes("GET", DOWNLOAD, 200, &expected.bytes),
    ])
    .await;
    let outcome = handle(&azure_consumer(&server, fixture.blobs.clone()), event.into()).await;
    server.finish().await;
    let package = published(outcome.as_ref().unwrap());
    assert!(package.already_published);
    assert_eq!(package.sha512, expected.sha512);
}

#[tokio::test]
async fn azure_conflict_with_other_content_or_a_deleted_version_is_permanent() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, default_content()).await;
    for download in [
        Reply::bytes("GET", DOWNLOAD, 200, b"another package"),
        Reply::json("GET", DOWNLOAD, 404, r#"{"message":"not found"}"#),
    ] {
        let server = MockAzure::start(vec![Reply::json("PUT", PUSH, 409, "{}"), download]).await;
        let err = handle(&azure_consumer(&server, fixture.blobs.clone()), event.clone().into())
            .await
            .unwrap_err();
        server.finish().await;
        assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
        assert!(err.to_string().contains("immutable"), "{err}");
    }
}

#[tokio::test]
async fn azure_failures_map_to_retry_decisions() {
    let fixture = local_fixture();
    let event = build_event(&*fixture.blobs, default_content()).await;
    let cases = [
        (
            Reply::json("PUT", PUSH, 401, r#"{"message":"TF400813: not authorized"}"#),
            "permanent",
        ),
        (
            Reply::json("PUT", PUSH, 400, r#"{"message":"invalid package"}"#),
            "permanent",
        ),
        (Reply::json("PUT", PUSH, 503, "{}").header("Retry-After", "30"), "retry"),
        (Reply::json("PUT", PUSH, 500, "{}"), "transient"),
    ];
    for (reply, expected) in cases {
        let server = MockAzure::start(vec![reply]).await;
        let err = handle(&azure_consumer(&server, fixture.blobs.clone()), event.clone().into())
            .await
            .unwrap_err();
        server.finish().await;
        let kind = match &err {
            HandlerError::Transient(_) => "transient",
            HandlerError::Permanent(_) => "permanent",
            HandlerError::NeedsNewer(_) => "needs-newer",
            HandlerError::RetryAfter { after, .. } => {
                assert_eq!(*after, Duration::from_secs(30));
                "retry"
            }
        };
        assert_eq!(kind, expected, "{err}");
        assert!(!err.to_string().contains("feed-pat"));
    }
    let config = AzureArtifactsConfig::new("https://pkgs.dev.azure.com/contoso", None, "secret-pat");
    assert!(!format!("{config:?}").contains("secret-pat"));
    let feed = AzureArtifactsFeed::new(&config, fixture.blobs.clone()).unwrap();
    assert_eq!(
        feed.push_url("internal").as_str(),
        "https://pkgs.dev.azure.com/contoso/_packaging/internal/nuget/v2/"
    );
}

#[tokio::test]
async fn azure_conflict_with_another_tenants_package_names_both_tenants() {
    let fixture = local_fixture();
    let contoso = tenant_build(&*fixture.blobs, "contoso", default_content()).await;
    let theirs = expected_package(&*fixture.blobs, &contoso).await;
    let fabrikam = tenant_build(&*fixture.blobs, "fabrikam", default_content()).await;
    let server = MockAzure::start(vec![
        Reply::json("PUT", PUSH, 409, "{}"),
        Reply::bytes("GET", DOWNLOAD, 200, &theirs.bytes),
    ])
    .await;
    let err = handle_as(
        &azure_consumer(&server, fixture.blobs.clone()),
        "fabrikam",
        fabrikam.into(),
    )
    .await
    .unwrap_err();
    server.finish().await;
    let HandlerError::Permanent(source) = &err else {
        panic!("expected a permanent error, got {err}");
    };
    let text = source.to_string();
    assert!(text.contains("`fabrikam`") && text.contains("`contoso`"), "{text}");
}
