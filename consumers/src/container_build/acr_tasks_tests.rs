//! ACR Tasks against a scripted server holding the request and response
//! shapes of the ACR REST API documentation (`listBuildSourceUploadUrl`,
//! `scheduleRun`, `runs/{runId}`, `runs/{runId}/listLogSasUrl`, api-version
//! 2019-06-01-preview) and of the OCI distribution API the registry serves:
//! the run is scheduled once and followed by the consumer's own scheduled
//! polls to success; a failed run is a permanent error with its log
//! attached; a 429 is retried after its `Retry-After`; a build that already
//! ran is not scheduled again.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bosun_contracts::messages::{BuildCompleted, PollContainerBuild};
use bosun_contracts::validate::Validate;
use bosun_contracts::{Envelope, Message, samples};
use serde_json::json;
use uuid::Uuid;

use super::acr_tasks::{API_VERSION, ARM_SCOPE, AcrTasks, AcrTasksConfig, acr_build_key, check_config, key_tag};
use super::azure::{AcrAuth, AzureContainerRegistry, AzureContainerRegistryConfig};
use super::*;
use crate::delivery::archive::tar::TarWriter;
use crate::delivery::azure::credential::{AccessToken, RefreshingToken, TokenCredential, TokenRequestOptions};
use crate::delivery::azure::test_server::{MockAzure, Recorded, Reply};
use crate::delivery::blob::{BlobStore, FilesystemBlobStore, sha256_hex};
use crate::delivery::pipeline::LOG_CONTAINER;

const REGISTRY: &str = "contoso.azurecr.io";
const SUBSCRIPTION: &str = "4385cf00-2d3a-425a-832f-f4285b1c9dce";
const ARM: &str = "/subscriptions/4385cf00-2d3a-425a-832f-f4285b1c9dce/resourceGroups/delivery-rg/providers/Microsoft.ContainerRegistry/registries/contoso";
const RUN_ID: &str = "cab7";
const REPOSITORY: &str = "contoso/payments-api";

/// ARM tokens for [`ARM_SCOPE`] only.
#[derive(Debug)]
struct ArmTokens;

#[async_trait]
impl TokenCredential for ArmTokens {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        assert_eq!(scopes, [ARM_SCOPE]);
        Ok(AccessToken::new(
            "arm-token",
            time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        ))
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    blobs: Arc<FilesystemBlobStore>,
    server: MockAzure,
    consumer: ContainerBuild<AcrTasks>,
    event: BuildCompleted,
    context: Vec<u8>,
}

fn context_tar() -> Vec<u8> {
    let mut writer = TarWriter::new();
    writer
        .file(
            "Dockerfile",
            0o644,
            0,
            0,
            b"FROM mcr.microsoft.com/dotnet/aspnet:9.0\nARG DOTNET_VERSION\nRUN dotnet --info\nCOPY app/ /app/\n",
        )
        .unwrap();
    writer.file("app/server.dll", 0o644, 0, 0, b"server").unwrap();
    writer.finish().unwrap()
}

/// A scripted server standing in for ARM, the registry and the SAS URLs,
/// and the consumer over ACR Tasks pointed at it (polls after 1 s, 2 s,
/// then 4 s; at most 3 polls).
async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let blobs = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let context = context_tar();
    let mut event = samples::build_completed();
    let blob = blobs
        .put(
            "artifacts",
            "contoso/payments-api/build-4711/container-context.tar",
            context.clone(),
            "application/x-tar",
        )
        .await
        .unwrap();
    for artifact in &mut event.artifacts {
        if artifact.kind == bosun_contracts::messages::ArtifactKind::ContainerContext {
            artifact.blob = blob.clone();
        }
    }
    let server = MockAzure::start(Vec::new()).await;
    let mut registry_config = AzureContainerRegistryConfig::new(
        REGISTRY,
        AcrAuth::Basic {
            username: "contoso".into(),
            password: "admin-secret".into(),
        },
    );
    registry_config.endpoint = Some(server.url(""));
    let registry = AzureContainerRegistry::new(&registry_config, blobs.clone()).unwrap();
    let mut config = AcrTasksConfig::new(SUBSCRIPTION, "delivery-rg", "contoso");
    config.arm_endpoint = Some(server.url(""));
    let tokens = Arc::new(RefreshingToken::new(Arc::new(ArmTokens), ARM_SCOPE));
    let tasks = AcrTasks::new(&config, tokens, registry, blobs.clone()).unwrap();
    let consumer = ContainerBuild::new(tasks).with_polling(Duration::from_secs(1), Duration::from_secs(4), 3);
    Fixture {
        _dir: dir,
        blobs,
        server,
        consumer,
        event,
        context,
    }
}

impl Fixture {
    fn key(&self) -> String {
        let spec = image_spec("contoso", &self.event).unwrap().unwrap();
        acr_build_key(&spec, REPOSITORY)
    }

    async fn handle(&self, message: Message) -> Result<Outcome, HandlerError> {
        let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "build-ingestion");
        self.consumer.handle(Inbound::new(&envelope, &message)).await
    }
}

fn arm(rest: &str) -> String {
    format!("{ARM}/{rest}")
}

fn v2(rest: &str) -> String {
    format!("/v2/{REPOSITORY}/{rest}")
}

fn token() -> Reply {
    Reply::json("GET", "/oauth2/token", 200, r#"{"access_token":"acr-access"}"#)
}

/// A manifest the registry serves (config 100 bytes, layers 1000 + 2000),
/// its digest and the image's size.
fn manifest() -> (Vec<u8>, String, u64) {
    let body = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 100, "digest": format!("sha256:{}", "c".repeat(64))},
        "layers": [
            {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 1000, "digest": format!("sha256:{}", "d".repeat(64))},
            {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 2000, "digest": format!("sha256:{}", "e".repeat(64))}
        ]
    })
    .to_string()
    .into_bytes();
    let digest = format!("sha256:{}", sha256_hex(&body));
    let size = body.len() as u64 + 3100;
    (body, digest, size)
}

/// A `Run` resource as `scheduleRun` and `runs/{runId}` answer it.
fn run(status: &str, extra: serde_json::Value) -> String {
    let mut properties = json!({
        "runId": RUN_ID,
        "status": status,
        "runType": "QuickBuild",
        "createTime": "2026-12-02T03:00:00+00:00",
        "platform": {"os": "linux", "architecture": "amd64"},
        "agentConfiguration": {"cpu": 2},
        "provisioningState": "Succeeded",
        "isArchiveEnabled": false
    });
    for (name, value) in extra.as_object().into_iter().flatten() {
        properties[name] = value.clone();
    }
    json!({
        "type": "Microsoft.ContainerRegistry/registries/runs",
        "id": format!("{ARM}/runs/{RUN_ID}"),
        "name": RUN_ID,
        "properties": properties
    })
    .to_string()
}

/// What a build that is not in the registry yet asks: the key tag, the
/// upload URL, the upload, then `scheduleRun` (answered `schedule`).
fn scheduling(server: &MockAzure, key: &str, schedule: Reply) -> Vec<Reply> {
    let upload = server.url("/sas/source/202612020300/upload.tar.gz?sv=2019-12-12&sr=b&sig=secret-signature");
    vec![
        token(),
        Reply::bytes("GET", &v2(&format!("manifests/{}", key_tag(key))), 404, b""),
        Reply::json(
            "POST",
            &arm("listBuildSourceUploadUrl"),
            200,
            &json!({"uploadUrl": upload, "relativePath": "source/202612020300/upload.tar.gz"}).to_string(),
        ),
        Reply::bytes("PUT", "/sas/source/202612020300/upload.tar.gz", 201, b""),
        schedule,
    ]
}

/// What a finished run's poll asks after `runs/{runId}`: the log link and
/// the log.
fn log_replies(server: &MockAzure, log: &str) -> Vec<Reply> {
    vec![
        Reply::json(
            "POST",
            &arm(&format!("runs/{RUN_ID}/listLogSasUrl")),
            200,
            &json!({"logLink": server.url(&format!("/logs/{RUN_ID}/rawtext.log?sv=2019-12-12&sig=log-signature")), "logArtifactLink": null}).to_string(),
        ),
        Reply::bytes("GET", &format!("/logs/{RUN_ID}/rawtext.log"), 200, log.as_bytes()),
    ]
}

fn scheduled_poll(outcome: &Outcome) -> (PollContainerBuild, Duration) {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0] {
        Outgoing {
            message: Message::PollContainerBuild(poll),
            delay: Some(delay),
        } => (poll.clone(), *delay),
        other => panic!("expected a scheduled PollContainerBuild, got {other:?}"),
    }
}

fn image_built(outcome: &Outcome) -> &ContainerImageBuilt {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0] {
        Outgoing {
            message: Message::ContainerImageBuilt(event),
            delay: None,
        } => event,
        other => panic!("expected ContainerImageBuilt, got {other:?}"),
    }
}

fn arm_requests(requests: &[Recorded]) -> Vec<&Recorded> {
    requests
        .iter()
        .filter(|r| r.path.starts_with("/subscriptions/"))
        .collect()
}

#[tokio::test]
async fn a_build_is_scheduled_once_and_followed_by_polls_to_the_digest_acr_reports() {
    let fixture = fixture().await;
    let key = fixture.key();
    let (manifest, digest, size) = manifest();
    fixture.server.script(scheduling(
        &fixture.server,
        &key,
        Reply::json("POST", &arm("scheduleRun"), 200, &run("Queued", json!({}))),
    ));
    // Poll 1: still running.
    fixture.server.script(vec![Reply::json(
        "GET",
        &arm(&format!("runs/{RUN_ID}")),
        200,
        &run("Running", json!({"startTime": "2026-12-02T03:00:05+00:00"})),
    )]);
    // Poll 2: succeeded; the log, then the image's size from the registry.
    let succeeded = run(
        "Succeeded",
        json!({
            "startTime": "2026-12-02T03:00:05+00:00",
            "finishTime": "2026-12-02T03:02:30+00:00",
            "outputImages": [
                {"registry": REGISTRY, "repository": REPOSITORY, "tag": "1.4.0", "digest": digest},
                {"registry": REGISTRY, "repository": REPOSITORY, "tag": key_tag(&key), "digest": digest}
            ]
        }),
    );
    fixture.server.script(vec![Reply::json(
        "GET",
        &arm(&format!("runs/{RUN_ID}")),
        200,
        &succeeded,
    )]);
    fixture.server.script(log_replies(
        &fixture.server,
        "2026/12/02 03:00:05 Downloading source code...\nStep 1/4 : FROM mcr.microsoft.com/dotnet/aspnet:9.0\nSuccessfully pushed image: contoso.azurecr.io/contoso/payments-api:1.4.0\n",
    ));
    fixture.server.script(vec![
        token(),
        Reply::bytes("GET", &v2(&format!("manifests/{digest}")), 200, &manifest)
            .header("Docker-Content-Digest", &digest),
    ]);

    let first = fixture.handle(fixture.event.clone().into()).await.unwrap();
    let (poll, delay) = scheduled_poll(&first);
    assert_eq!(delay, Duration::from_secs(1));
    assert_eq!(poll.validate(), Ok(()));
    assert_eq!((poll.run_id.as_str(), poll.poll), (RUN_ID, 1));
    assert_eq!(poll.build_key, key);
    assert_eq!((poll.image.as_str(), poll.tag.as_str()), (REPOSITORY, "1.4.0"));

    let second = fixture.handle(poll.into()).await.unwrap();
    let (poll, delay) = scheduled_poll(&second);
    assert_eq!((poll.poll, delay), (2, Duration::from_secs(2)));

    let third = fixture.handle(poll.into()).await.unwrap();
    let requests = fixture.server.finish().await;
    let image = image_built(&third);
    assert_eq!(image.validate(), Ok(()));
    assert_eq!(image.digest, digest, "the digest ACR reports");
    assert_eq!(image.image, REPOSITORY);
    assert_eq!((image.registry.as_str(), image.tag.as_str()), (REGISTRY, "1.4.0"));
    assert_eq!(image.size_bytes, size);
    assert!(!image.already_present);
    assert_eq!(image.pushed_at, time::macros::datetime!(2026-12-02 03:02:30 UTC));
    assert_eq!(image.build_id, fixture.event.build_id);

    // Every ARM call carries the ARM token and the api-version.
    let arm_calls = arm_requests(&requests);
    assert_eq!(arm_calls.len(), 5, "upload URL, scheduleRun, two polls, log link");
    for request in &arm_calls {
        assert_eq!(
            request.header("authorization"),
            Some("Bearer arm-token"),
            "{}",
            request.path
        );
        assert_eq!(request.query("api-version"), Some(API_VERSION));
    }
    // The context went to the SAS URL as a block blob, gzipped, without the token.
    let upload = requests.iter().find(|r| r.method == "PUT").unwrap();
    assert_eq!(upload.header("x-ms-blob-type"), Some("BlockBlob"));
    assert_eq!(upload.header("authorization"), None);
    assert_eq!(upload.query("sig"), Some("secret-signature"));
    assert_eq!(&upload.body[..2], &[0x1f, 0x8b], "a gzip stream");
    let mut inflated = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(upload.body.as_slice()), &mut inflated).unwrap();
    assert_eq!(inflated, fixture.context);
    // The run request is a DockerBuildRequest of the module's build.
    let schedules: Vec<_> = requests.iter().filter(|r| r.path.ends_with("/scheduleRun")).collect();
    assert_eq!(schedules.len(), 1, "scheduled once");
    assert_eq!(
        schedules[0].json(),
        json!({
            "type": "DockerBuildRequest",
            "sourceLocation": "source/202612020300/upload.tar.gz",
            "dockerFilePath": "Dockerfile",
            "imageNames": [format!("{REPOSITORY}:1.4.0"), format!("{REPOSITORY}:{}", key_tag(&key))],
            "isPushEnabled": true,
            "noCache": false,
            "arguments": [{"name": "DOTNET_VERSION", "value": "9.0", "isSecret": false}],
            "platform": {"os": "Linux", "architecture": "amd64"},
            "timeout": 3600,
            "isArchiveEnabled": false
        })
    );
    // The log link's signature stays off the ARM calls; the log is stored.
    let log_get = requests.iter().find(|r| r.path.starts_with("/logs/")).unwrap();
    assert_eq!(log_get.header("authorization"), None);
    let log_key = format!("contoso/container-build/{REPOSITORY}/1.4.0/{}.log", &key[..16]);
    assert!(fixture.blobs.exists(LOG_CONTAINER, &log_key).await.unwrap());
}

#[tokio::test]
async fn the_same_event_again_after_its_run_finished_schedules_nothing() {
    let fixture = fixture().await;
    let key = fixture.key();
    let (manifest, digest, size) = manifest();
    fixture.server.script(scheduling(
        &fixture.server,
        &key,
        Reply::json("POST", &arm("scheduleRun"), 200, &run("Queued", json!({}))),
    ));
    // The redelivered event finds the run's key tag in the registry.
    fixture.server.script(vec![
        token(),
        Reply::bytes("GET", &v2(&format!("manifests/{}", key_tag(&key))), 200, &manifest)
            .header("Docker-Content-Digest", &digest),
    ]);
    let first = fixture.handle(fixture.event.clone().into()).await.unwrap();
    scheduled_poll(&first);
    let again = fixture.handle(fixture.event.clone().into()).await.unwrap();
    let requests = fixture.server.finish().await;
    let image = image_built(&again);
    assert!(image.already_present);
    assert_eq!((image.digest.as_str(), image.size_bytes), (digest.as_str(), size));
    let schedules = requests.iter().filter(|r| r.path.ends_with("/scheduleRun")).count();
    assert_eq!(schedules, 1, "one run for one build");
}

#[tokio::test]
async fn a_failed_run_is_a_permanent_error_with_its_log_attached() {
    let fixture = fixture().await;
    let key = fixture.key();
    fixture.server.script(vec![Reply::json(
        "GET",
        &arm(&format!("runs/{RUN_ID}")),
        200,
        &run(
            "Failed",
            json!({"finishTime": "2026-12-02T03:01:00+00:00", "runErrorMessage": "failed during run, err: exit status 1"}),
        ),
    )]);
    fixture.server.script(log_replies(
        &fixture.server,
        "Step 3/4 : RUN dotnet --info\n/bin/sh: dotnet: not found\nThe command '/bin/sh -c dotnet --info' returned a non-zero code: 127\n",
    ));
    let poll = PollContainerBuild {
        build_key: key.clone(),
        ..samples::poll_container_build()
    };
    let run = BuildRun {
        tenant: "contoso".into(),
        run_id: poll.run_id.clone(),
        build_key: key.clone(),
        registry: poll.registry.clone(),
        image: poll.image.clone(),
        tag: poll.tag.clone(),
        platform: poll.platform.clone(),
    };
    let err = fixture.consumer.builder().poll(&run).await.unwrap_err();
    fixture.server.finish().await;
    match &err {
        ContainerBuildError::BuilderFailed {
            builder,
            log,
            tail,
            transient,
        } => {
            assert_eq!(*builder, "ACR Tasks");
            assert!(!transient);
            assert!(tail.contains("dotnet: not found"), "{tail}");
            assert!(tail.contains("exit status 1"), "{tail}");
            let log = log.as_deref().expect("the log is attached");
            assert_eq!(log.container, LOG_CONTAINER);
            let text = fixture.blobs.get(log).await.unwrap();
            assert!(String::from_utf8_lossy(&text).contains("returned a non-zero code: 127"));
        }
        other => panic!("expected BuilderFailed, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(matches!(HandlerError::from(err), HandlerError::Permanent(_)));
}

#[tokio::test]
async fn a_429_is_retried_after_its_retry_after_and_then_the_run_is_scheduled() {
    let fixture = fixture().await;
    let key = fixture.key();
    fixture.server.script(scheduling(
        &fixture.server,
        &key,
        Reply::json(
            "POST",
            &arm("scheduleRun"),
            429,
            r#"{"error":{"code":"TooManyRequests","message":"The request is being throttled."}}"#,
        )
        .header("Retry-After", "7"),
    ));
    let err = fixture.handle(fixture.event.clone().into()).await.unwrap_err();
    match &err {
        HandlerError::RetryAfter { after, source } => {
            assert_eq!(*after, Duration::from_secs(7));
            assert!(source.to_string().contains("TooManyRequests"), "{source}");
        }
        other => panic!("expected RetryAfter, got {other}"),
    }
    // The retry schedules the run.
    fixture.server.script(scheduling(
        &fixture.server,
        &key,
        Reply::json("POST", &arm("scheduleRun"), 200, &run("Queued", json!({}))),
    ));
    let outcome = fixture.handle(fixture.event.clone().into()).await.unwrap();
    fixture.server.finish().await;
    assert_eq!(scheduled_poll(&outcome).0.run_id, RUN_ID);
}

#[tokio::test]
async fn a_run_that_never_finishes_gives_up_after_the_last_poll() {
    let fixture = fixture().await;
    fixture.server.script(vec![Reply::json(
        "GET",
        &arm(&format!("runs/{RUN_ID}")),
        200,
        &run("Running", json!({})),
    )]);
    let poll = PollContainerBuild {
        build_key: fixture.key(),
        poll: 3,
        ..samples::poll_container_build()
    };
    let err = fixture.handle(poll.into()).await.unwrap_err();
    fixture.server.finish().await;
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("after 3 polls"), "{err}");
}

#[tokio::test]
async fn a_poll_for_another_registry_or_a_bad_run_id_is_refused_before_any_call() {
    let fixture = fixture().await;
    let other = PollContainerBuild {
        registry: "fabrikam.azurecr.io".into(),
        build_key: fixture.key(),
        ..samples::poll_container_build()
    };
    let err = fixture.handle(other.into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    assert!(err.to_string().contains("fabrikam.azurecr.io"), "{err}");
    let bad = PollContainerBuild {
        run_id: "../runs".into(),
        ..samples::poll_container_build()
    };
    let err = fixture.handle(bad.into()).await.unwrap_err();
    assert!(err.to_string().contains("payload.runId"), "{err}");
    assert!(fixture.server.finish().await.is_empty());
}

#[test]
fn the_configuration_is_checked_naming_the_field() {
    let good = AcrTasksConfig::new(SUBSCRIPTION, "delivery-rg", "contoso");
    assert_eq!(check_config(&good), Ok(()));
    let cases = [
        (
            AcrTasksConfig::new("my-subscription", "delivery-rg", "contoso"),
            "subscription",
        ),
        (
            AcrTasksConfig::new(SUBSCRIPTION, "bad/group", "contoso"),
            "resourceGroup",
        ),
        (
            AcrTasksConfig::new(SUBSCRIPTION, "delivery-rg", "contoso.azurecr.io"),
            "registryName",
        ),
        (
            AcrTasksConfig {
                run_timeout: Duration::from_secs(60),
                ..good.clone()
            },
            "runTimeout",
        ),
    ];
    for (config, field) in cases {
        assert_eq!(check_config(&config).unwrap_err().field, field, "{config:?}");
    }
}

#[tokio::test]
async fn an_unreachable_upload_url_is_transient_and_its_signature_is_never_shown() {
    let fixture = fixture().await;
    let key = fixture.key();
    fixture.server.script(vec![
        token(),
        Reply::bytes("GET", &v2(&format!("manifests/{}", key_tag(&key))), 404, b""),
        Reply::json(
            "POST",
            &arm("listBuildSourceUploadUrl"),
            200,
            &json!({
                // Nothing listens on port 1 of the loopback address.
                "uploadUrl": "http://127.0.0.1:1/source/upload.tar.gz?sv=2019-12-12&sig=secret-signature",
                "relativePath": "source/upload.tar.gz"
            })
            .to_string(),
        ),
    ]);
    let err = fixture.handle(fixture.event.clone().into()).await.unwrap_err();
    let requests = fixture.server.finish().await;
    assert!(matches!(err, HandlerError::Transient(_)), "{err}");
    let text = crate::delivery::azure::error_chain(&err);
    assert!(!text.contains("secret-signature"), "{text}");
    assert!(text.contains("PUT /source/upload.tar.gz"), "{text}");
    assert!(!requests.iter().any(|r| r.path.ends_with("/scheduleRun")));
}

#[tokio::test]
async fn an_event_handled_again_before_its_commit_follows_the_run_it_scheduled() {
    let fixture = fixture().await;
    let key = fixture.key();
    fixture.server.script(scheduling(
        &fixture.server,
        &key,
        Reply::json("POST", &arm("scheduleRun"), 200, &run("Queued", json!({}))),
    ));
    // The process died before the runtime committed: the same event comes
    // again. The run recorded under the build key is still going.
    fixture.server.script(vec![
        token(),
        Reply::bytes("GET", &v2(&format!("manifests/{}", key_tag(&key))), 404, b""),
        Reply::json("GET", &arm(&format!("runs/{RUN_ID}")), 200, &run("Running", json!({}))),
    ]);
    let first = fixture.handle(fixture.event.clone().into()).await.unwrap();
    let (poll, _) = scheduled_poll(&first);
    assert_eq!(poll.run_id, RUN_ID);
    let record = fixture
        .blobs
        .read(
            super::acr_tasks::RUNS_CONTAINER,
            &format!("contoso/container-build/{key}.json"),
        )
        .await
        .unwrap()
        .expect("the scheduled run is recorded under the build key");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&record).unwrap()["runId"],
        RUN_ID
    );

    let again = fixture.handle(fixture.event.clone().into()).await.unwrap();
    let (poll, _) = scheduled_poll(&again);
    assert_eq!(poll.run_id, RUN_ID, "the same run is followed");
    let requests = fixture.server.finish().await;
    let schedules = requests.iter().filter(|r| r.path.ends_with("/scheduleRun")).count();
    assert_eq!(schedules, 1, "one run for one build");
}

#[tokio::test]
async fn a_recorded_run_that_failed_is_scheduled_again_when_the_event_is_replayed() {
    let fixture = fixture().await;
    let key = fixture.key();
    fixture.server.script(scheduling(
        &fixture.server,
        &key,
        Reply::json("POST", &arm("scheduleRun"), 200, &run("Queued", json!({}))),
    ));
    let first = fixture.handle(fixture.event.clone().into()).await.unwrap();
    scheduled_poll(&first);
    // The run failed (a base image registry was down); an operator replays
    // the event: the build is scheduled again, not the failed run followed.
    let mut replies = scheduling(
        &fixture.server,
        &key,
        Reply::json("POST", &arm("scheduleRun"), 200, &run("Queued", json!({}))),
    );
    replies.insert(
        2,
        Reply::json("GET", &arm(&format!("runs/{RUN_ID}")), 200, &run("Failed", json!({}))),
    );
    fixture.server.script(replies);
    let replayed = fixture.handle(fixture.event.clone().into()).await.unwrap();
    scheduled_poll(&replayed);
    let requests = fixture.server.finish().await;
    let schedules = requests.iter().filter(|r| r.path.ends_with("/scheduleRun")).count();
    assert_eq!(schedules, 2);
}
