//! bosun's real ACR Tasks builder (`container_build::acr_tasks::AcrTasks`)
//! against the ACR Tasks double with its buildah backend: the run is built
//! by Debian's buildah (`RUN` run, multi-stage `COPY --from`) and pushed to
//! a real OCI registry (Debian's docker-registry on a loopback port), which
//! the double's login server proxies bosun's reads to after ACR's token
//! check. The base image is Debian's busybox-static, built and pushed by
//! the test (no outside registry). Asserted: the image bosun reports is the
//! one in the registry, read back directly (not through the double), and
//! its layers hold the file the `RUN` of the first stage wrote; the same
//! event again finds the image through the login server, which still
//! answers `401` with ACR's challenge without a token; a `RUN`
//! that exits 3 is a permanent error carrying the log's last lines, and
//! nothing is pushed.
//!
//! Needs buildah, docker-registry and busybox-static
//! (`./scripts/container-tools install` as root; `scripts/test` runs it):
//! run with `--ignored`. A missing tool fails the test saying so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bosun_azure_doubles::acr::{self, AcrConfig, AcrDouble, BuildahConfig, DockerRegistry};
use bosun_azure_doubles::entra::EntraDouble;
use bosun_azure_doubles::{Auth, Faults, Journal, TokenBook};
use bosun_consumers::container_build::acr_tasks::{AcrTasks, acr_build_key, key_tag};
use bosun_consumers::container_build::{ContainerBuild, image_spec};
use bosun_consumers::delivery::archive::tar::TarWriter;
use bosun_consumers::delivery::blob::{BlobStore, FilesystemBlobStore};
use bosun_consumers::{Consumer, HandlerError, Inbound, Outcome, Outgoing};
use bosun_contracts::messages::{ArtifactKind, BuildCompleted, ContainerImageBuilt, PollContainerBuild};
use bosun_contracts::{Envelope, Message, samples};
use serde_json::Value;
use uuid::Uuid;

const SUBSCRIPTION: &str = support::ACR_SUBSCRIPTION;
const REPOSITORY: &str = "contoso/payments-api";
const NEEDS: &str = "needs buildah and docker-registry: scripts/container-tools (scripts/test runs it)";
/// The longest a build may take.
const BUILD_DEADLINE: Duration = Duration::from_secs(300);

struct Fixture {
    _dir: tempfile::TempDir,
    _entra: EntraDouble,
    acr: AcrDouble,
    consumer: ContainerBuild<AcrTasks>,
    event: BuildCompleted,
    registry: DockerRegistry,
    /// `127.0.0.1:<port>/library/busybox:stable`.
    base: String,
}

/// The tools, the registry with the busybox base image, the doubles and
/// bosun's adapter; the event's context has `dockerfile` (with `{base}`
/// replaced by the base image's reference).
async fn fixture(dockerfile: &str) -> Fixture {
    if let Some(missing) = acr::missing_tools() {
        panic!("{NEEDS}: {missing}");
    }
    let registry = DockerRegistry::start()
        .await
        .unwrap_or_else(|err| panic!("{NEEDS}: {err}"));
    let buildah = BuildahConfig::new(registry.host());
    let base = acr::push_busybox_base(&buildah, "library/busybox:stable")
        .await
        .unwrap_or_else(|err| panic!("the busybox base image: {err}"));

    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::default();
    let journal = Journal::default();
    let book = TokenBook::default();
    let entra = EntraDouble::start(faults.clone(), journal.clone(), book.clone())
        .await
        .unwrap();
    let mut config = AcrConfig::new(SUBSCRIPTION, "delivery-rg", "contoso").with_buildah(buildah);
    config.entra = Some(book.clone());
    let acr = AcrDouble::start(faults, journal, Auth::default().entra(book), config)
        .await
        .unwrap();
    let token_file = support::workload_identity(&entra, dir.path());

    let blobs = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let mut writer = TarWriter::new();
    writer
        .file(
            "Dockerfile",
            0o644,
            0,
            0,
            dockerfile.replace("{base}", &base).as_bytes(),
        )
        .unwrap();
    let context = blobs
        .put(
            "artifacts",
            "contoso/payments-api/build-4711/container-context.tar",
            writer.finish().unwrap(),
            "application/x-tar",
        )
        .await
        .unwrap();
    let mut event = samples::build_completed();
    for artifact in &mut event.artifacts {
        if artifact.kind == ArtifactKind::ContainerContext {
            artifact.blob = context.clone();
        }
    }
    let tasks = support::acr_tasks(&entra, &token_file, &acr, blobs);
    // The test polls on its own clock (below); the consumer must not give
    // up before the build is done.
    let consumer = ContainerBuild::new(tasks).with_polling(Duration::from_secs(1), Duration::from_secs(4), 10_000);
    Fixture {
        _dir: dir,
        _entra: entra,
        acr,
        consumer,
        event,
        registry,
        base,
    }
}

impl Fixture {
    async fn handle(&self, message: Message) -> Result<Outcome, HandlerError> {
        let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "build-ingestion");
        self.consumer.handle(Inbound::new(&envelope, &message)).await
    }

    /// Handles the event, then its polls every half second until the image
    /// is built (`Ok`) or the adapter gives an error (`Err`).
    async fn build(&self) -> Result<ContainerImageBuilt, HandlerError> {
        let mut poll = match next(&self.handle(self.event.clone().into()).await?) {
            Step::Poll(poll) => poll,
            Step::Built(built) => panic!("built without a run: {built:?}"),
        };
        let deadline = Instant::now() + BUILD_DEADLINE;
        loop {
            assert!(Instant::now() < deadline, "not built within {BUILD_DEADLINE:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            match next(&self.handle(poll.clone().into()).await?) {
                Step::Poll(again) => poll = again,
                Step::Built(built) => return Ok(built),
            }
        }
    }

    fn key(&self) -> String {
        let spec = image_spec("contoso", &self.event).unwrap().unwrap();
        acr_build_key(&spec, REPOSITORY)
    }

    /// GET `path` of the real registry's distribution API (not through the
    /// double).
    async fn registry_get(&self, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}/v2/{path}", self.registry.url()))
            .header(
                "Accept",
                "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
            )
            .send()
            .await
            .unwrap()
    }
}

#[allow(clippy::large_enum_variant)]
enum Step {
    Poll(PollContainerBuild),
    Built(ContainerImageBuilt),
}

fn next(outcome: &Outcome) -> Step {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0] {
        Outgoing {
            message: Message::PollContainerBuild(poll),
            ..
        } => Step::Poll(poll.clone()),
        Outgoing {
            message: Message::ContainerImageBuilt(built),
            ..
        } => Step::Built(built.clone()),
        other => panic!("unexpected {other:?}"),
    }
}

/// The files of a gzipped tar layer: path (without a leading `./` or `/`)
/// → content.
fn layer_files(layer: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(layer));
    let mut files = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let path = path.trim_start_matches("./").trim_start_matches('/').to_owned();
        let mut content = Vec::new();
        entry.read_to_end(&mut content).unwrap();
        files.push((path, content));
    }
    files
}

#[tokio::test]
#[ignore = "needs buildah and docker-registry: scripts/container-tools (scripts/test runs it)"]
async fn buildah_builds_a_multi_stage_run_whose_image_lands_in_the_registry() {
    let fixture =
        fixture("FROM {base} AS build\nRUN echo built > /out.txt\nFROM {base}\nCOPY --from=build /out.txt /\n").await;
    let built = fixture
        .build()
        .await
        .unwrap_or_else(|err| panic!("the build failed: {err}"));
    assert_eq!(built.image, REPOSITORY);
    assert!(!built.already_present);

    let runs = fixture.acr.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, acr::RunStatus::Succeeded);
    assert!(
        runs[0].log.contains("STEP"),
        "buildah's output is the log: {}",
        runs[0].log
    );
    assert!(
        runs[0]
            .log
            .contains("Successfully pushed image: contoso.azurecr.io/contoso/payments-api:1.4.0"),
        "{}",
        runs[0].log
    );
    assert_eq!(fixture.acr.manifests(), 0, "nothing in the double's own store");

    // The registry itself has the image under its tag and its key tag.
    let tags: Value = fixture
        .registry_get(&format!("{REPOSITORY}/tags/list"))
        .await
        .json()
        .await
        .unwrap();
    let mut tags: Vec<&str> = tags["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    tags.sort_unstable();
    let key_tag = key_tag(&fixture.key());
    let mut expected = vec!["1.4.0", key_tag.as_str()];
    expected.sort_unstable();
    assert_eq!(tags, expected);

    let manifest = fixture.registry_get(&format!("{REPOSITORY}/manifests/1.4.0")).await;
    assert!(manifest.status().is_success(), "{}", manifest.status());
    let digest = manifest.headers()["docker-content-digest"].to_str().unwrap().to_owned();
    assert_eq!(digest, built.digest, "bosun reports the digest buildah pushed");
    let manifest: Value = manifest.json().await.unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 2, "busybox, then the COPY: {manifest}");
    let mut found = None;
    for layer in layers {
        let blob = fixture
            .registry_get(&format!("{REPOSITORY}/blobs/{}", layer["digest"].as_str().unwrap()))
            .await;
        assert!(blob.status().is_success(), "{}", blob.status());
        let files = layer_files(&blob.bytes().await.unwrap());
        if let Some((_, content)) = files.into_iter().find(|(path, _)| path == "out.txt") {
            found = Some(content);
        }
    }
    assert_eq!(
        found.as_deref(),
        Some(b"built\n".as_slice()),
        "the RUN of the first stage wrote /out.txt"
    );

    // The base image is the one the test pushed.
    assert!(fixture.base.ends_with("/library/busybox:stable"));

    // The login server still asks for ACR's token before it reads the
    // registry.
    let anonymous = reqwest::get(format!(
        "{}/v2/{REPOSITORY}/manifests/1.4.0",
        fixture.acr.registry_url()
    ))
    .await
    .unwrap();
    assert_eq!(anonymous.status(), reqwest::StatusCode::UNAUTHORIZED);
    assert!(
        anonymous.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains(&format!("scope=\"repository:{REPOSITORY}:pull\"")),
        "{:?}",
        anonymous.headers()
    );

    // The same event again: bosun finds the key tag through the login
    // server's proxy, and nothing is scheduled.
    let again = fixture.handle(fixture.event.clone().into()).await.unwrap();
    let Step::Built(present) = next(&again) else {
        panic!("the image is present: {again:?}");
    };
    assert!(present.already_present);
    assert_eq!(present.digest, built.digest);
    assert_eq!(fixture.acr.runs().len(), 1, "still one run");
}

#[tokio::test]
#[ignore = "needs buildah and docker-registry: scripts/container-tools (scripts/test runs it)"]
async fn buildah_fails_a_run_whose_run_step_exits_3_with_its_log() {
    let fixture = fixture("FROM {base}\nRUN echo about to fail && exit 3\n").await;
    let err = fixture.build().await.expect_err("the build must fail");
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(text.contains("about to fail"), "the log's last lines: {text}");
    assert!(text.contains("exit status 3"), "{text}");

    let runs = fixture.acr.runs();
    assert_eq!((runs.len(), runs[0].status), (1, acr::RunStatus::Failed));
    assert_eq!(
        runs[0].error_message.as_deref(),
        Some("failed during run, err: exit status 3")
    );
    let tags = fixture.registry_get(&format!("{REPOSITORY}/tags/list")).await;
    assert_eq!(tags.status(), reqwest::StatusCode::NOT_FOUND, "nothing pushed");
}
