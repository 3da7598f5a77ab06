//! bosun's Azure Artifacts adapter ([`AzureArtifactsFeed`]) under the
//! package-publishing consumer, against the Azure Artifacts double with
//! state (`bosun_azure_doubles::artifacts`): a `BuildCompleted` delivered,
//! failed deliveries retried as the runtime retries them (after
//! `Retry-After` for a throttle, again for a transient error), and the
//! same event delivered twice, ending in exactly one package version on
//! the feed with the bytes bosun packed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use bosun_azure_doubles::artifacts::{ArtifactsDouble, SERVICE};
use bosun_azure_doubles::{Auth, Fault, FaultRule, Faults, Journal};
use bosun_consumers::delivery::archive::tar::TarWriter;
use bosun_consumers::delivery::blob::{BlobStore, FilesystemBlobStore};
use bosun_consumers::package_publishing::azure::{AzureArtifactsConfig, AzureArtifactsFeed};
use bosun_consumers::package_publishing::nupkg::sha512_hex;
use bosun_consumers::package_publishing::{CONTENT_ARTIFACT, PackagePublishing};
use bosun_consumers::{Consumer, HandlerError, Inbound, Outcome};
use bosun_contracts::messages::{ArtifactKind, ArtifactRef, BuildCompleted, PackagePublished};
use bosun_contracts::{Envelope, Message, samples};
use uuid::Uuid;

const PAT: &str = "feed-pat";
const PROJECT: &str = "Delivery";
/// The sample build's module: `package.feed`, `package.packageId`, version.
const FEED: &str = "contoso-internal";
const PACKAGE_ID: &str = "Contoso.Payments.Client";
const VERSION: &str = "1.4.0";

struct Fixture {
    _dir: tempfile::TempDir,
    blobs: Arc<FilesystemBlobStore>,
    double: ArtifactsDouble,
    consumer: PackagePublishing<AzureArtifactsFeed>,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path()));
    let double = ArtifactsDouble::start(
        Faults::default(),
        Journal::default(),
        Auth::default().basic_password(PAT),
        "contoso",
    )
    .await
    .unwrap();
    double.create_feed(Some(PROJECT), FEED);
    let config = AzureArtifactsConfig::new(double.base_url(), Some(PROJECT.to_owned()), PAT);
    let consumer = PackagePublishing::new(AzureArtifactsFeed::new(&config, blobs.clone()).unwrap());
    Fixture {
        _dir: dir,
        blobs,
        double,
        consumer,
    }
}

/// The sample build with a `package-content.tar` holding `files`, stored
/// under the build's own key.
async fn build(blobs: &dyn BlobStore, build_id: u32, files: &[(&str, &[u8])]) -> Message {
    let mut writer = TarWriter::new();
    for (path, data) in files {
        writer.file(path, 0o644, 0, 0, data).unwrap();
    }
    let content = writer.finish().unwrap();
    let mut event: BuildCompleted = samples::build_completed();
    let blob = blobs
        .put(
            "artifacts",
            &format!("contoso/{build_id}/package-content.tar"),
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
    Message::BuildCompleted(event)
}

/// One delivery as the runtime makes it, retried while the handler says a
/// retry can help (after the `Retry-After` it asks for); the outcome and
/// the errors met on the way.
async fn deliver(
    consumer: &PackagePublishing<AzureArtifactsFeed>,
    message: &Message,
) -> (Result<Outcome, HandlerError>, Vec<String>) {
    let envelope = Envelope::new(message, Uuid::now_v7(), "contoso", "build-ingestion");
    let mut errors = Vec::new();
    for _ in 0..5 {
        match consumer.handle(Inbound::new(&envelope, message)).await {
            Err(HandlerError::RetryAfter { after, source }) => {
                errors.push(format!("retry after {after:?}: {source}"));
                tokio::time::sleep(after.min(Duration::from_secs(2))).await;
            }
            Err(HandlerError::Transient(source)) => errors.push(format!("transient: {source}")),
            other => return (other, errors),
        }
    }
    panic!("still failing after 5 attempts: {errors:#?}");
}

fn published(outcome: &Outcome) -> PackagePublished {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0].message {
        Message::PackagePublished(event) => event.clone(),
        other => panic!("expected PackagePublished, got {other:?}"),
    }
}

/// A push throttled (429, `Retry-After`) then failing (503) is retried
/// through to one published version; the same build delivered again (as
/// after a lost acknowledgement) meets 409, its flat-container download
/// fails once (500) and is retried, and it reports the version already
/// published with the same SHA-512. The feed holds one version, with the
/// bytes bosun packed, and took exactly one push.
#[tokio::test]
async fn the_same_build_published_twice_through_faults_is_one_package_version() {
    let fixture = fixture().await;
    let message = build(
        &*fixture.blobs,
        4711,
        &[
            ("lib/net8.0/Contoso.Payments.Client.dll", b"MZ client"),
            ("README.md", b"# Client"),
        ],
    )
    .await;
    let faults = fixture.double.running().faults();
    faults.add(FaultRule::new(SERVICE, "/nuget/v2/", Fault::Throttle { retry_after_secs: 1 }, 1).method("PUT"));
    faults.add(
        FaultRule::new(SERVICE, "/nuget/v2/", Fault::Status(503), 1)
            .method("PUT")
            .after(1),
    );

    let (outcome, errors) = deliver(&fixture.consumer, &message).await;
    let first = published(&outcome.unwrap());
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].starts_with("retry after 1s"), "{}", errors[0]);
    assert!(errors[1].starts_with("transient"), "{}", errors[1]);
    assert!(!first.already_published);
    assert_eq!(
        first.url.as_deref(),
        Some(fixture.double.index_url(Some(PROJECT), FEED).as_str())
    );

    faults.add(FaultRule::new(SERVICE, "/v3/flat2/", Fault::Status(500), 1).method("GET"));
    let (outcome, errors) = deliver(&fixture.consumer, &message).await;
    let second = published(&outcome.unwrap());
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(second.already_published);
    assert_eq!(second.sha512, first.sha512);
    assert!(faults.pending().is_empty());

    assert_eq!(
        fixture.double.versions(Some(PROJECT), FEED, PACKAGE_ID),
        vec![VERSION.to_owned()]
    );
    assert_eq!(
        fixture.double.packages(Some(PROJECT), FEED),
        vec![(PACKAGE_ID.to_owned(), VERSION.to_owned())]
    );
    let stored = fixture
        .double
        .package(Some(PROJECT), FEED, PACKAGE_ID, VERSION)
        .unwrap();
    assert_eq!(
        sha512_hex(&stored.nupkg),
        first.sha512,
        "the feed holds the bytes bosun packed"
    );
    assert_eq!(stored.nupkg.len() as u64, first.size_bytes);
    let journal = fixture.double.running().journal();
    assert_eq!(journal.succeeded(SERVICE, "PUT", "/nuget/v2/"), 1, "one push taken");
    assert_eq!(
        journal.succeeded(SERVICE, "GET", "/v3/flat2/"),
        1,
        "one download to compare"
    );
}

/// Other content for a version on the feed is refused for good (versions
/// are immutable); so is a push the feed cannot take (a deleted version,
/// as Azure Artifacts keeps its number). Nothing on the feed changes.
#[tokio::test]
async fn other_content_for_a_published_version_is_a_permanent_conflict() {
    let fixture = fixture().await;
    let one = build(&*fixture.blobs, 4711, &[("README.md", b"# one")]).await;
    let (outcome, _) = deliver(&fixture.consumer, &one).await;
    let first = published(&outcome.unwrap());
    let other = build(&*fixture.blobs, 4712, &[("README.md", b"# two")]).await;
    let (outcome, errors) = deliver(&fixture.consumer, &other).await;
    let Err(HandlerError::Permanent(err)) = outcome else {
        panic!("expected a permanent error, got {outcome:?}");
    };
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(err.to_string().contains("versions are immutable"), "{err}");
    let stored = fixture
        .double
        .package(Some(PROJECT), FEED, PACKAGE_ID, VERSION)
        .unwrap();
    assert_eq!(sha512_hex(&stored.nupkg), first.sha512);

    assert!(fixture.double.delete_version(Some(PROJECT), FEED, PACKAGE_ID, VERSION));
    let (outcome, _) = deliver(&fixture.consumer, &one).await;
    let Err(HandlerError::Permanent(err)) = outcome else {
        panic!("a deleted version cannot be published again, got {outcome:?}");
    };
    assert!(err.to_string().contains("deleted"), "{err}");
    assert!(fixture.double.versions(Some(PROJECT), FEED, PACKAGE_ID).is_empty());
    assert_eq!(fixture.double.packages(Some(PROJECT), FEED).len(), 1);
}
