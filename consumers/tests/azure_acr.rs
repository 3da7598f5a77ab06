//! bosun's real ACR Tasks builder (`container_build::acr_tasks::AcrTasks`
//! under the container-build consumer) against the ACR Tasks double, with
//! its Entra tokens from `azure_identity`'s own `WorkloadIdentityCredential`
//! against the Entra double: the federated token file, the token request,
//! the ARM bearer, the registry's `/oauth2/exchange` and `/oauth2/token`,
//! the context upload to the SAS URL, `scheduleRun`, the polls, the log and
//! the image read back over the OCI API. Asserted: a 429 (with
//! `Retry-After`) on `scheduleRun` and a 503 on a poll are retried through
//! to one run and one image under its tag and `bosun-<key>`; the same event
//! again schedules nothing (and, before its commit, follows the run it
//! scheduled); a Dockerfile that fails gives a permanent error; and
//! `azure_identity`'s `ClientSecretCredential` reads the double's tokens
//! and AADSTS errors; and a token revoked before its expiry (ARM's 401,
//! the registry exchange's 401) is replaced once by a new one, while a new
//! token refused too is a permanent error saying so. How the credential
//! reaches the Entra double: `support`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use azure_core::credentials::Secret;
use azure_identity::{ClientSecretCredential, ClientSecretCredentialOptions};
use bosun_azure_doubles::acr::{self, AcrConfig, AcrDouble};
use bosun_azure_doubles::entra::{EntraDouble, GrantKind};
use bosun_azure_doubles::{Auth, Fault, FaultRule, Faults, Journal, TokenBook};
use bosun_consumers::container_build::acr_tasks::{ARM_SCOPE, AcrTasks, acr_build_key, key_tag};
use bosun_consumers::container_build::azure::ACR_SCOPE;
use bosun_consumers::container_build::{ContainerBuild, image_spec};
use bosun_consumers::delivery::archive::tar::TarWriter;
use bosun_consumers::delivery::azure::credential::{FRESH_TOKEN_REFUSED, TokenCredential};
use bosun_consumers::delivery::blob::{BlobStore, FilesystemBlobStore};
use bosun_consumers::{Consumer, HandlerError, Inbound, Outcome, Outgoing};
use bosun_contracts::messages::{ArtifactKind, BuildCompleted, ContainerImageBuilt, PollContainerBuild};
use bosun_contracts::{Envelope, Message, samples};
use support::{CLIENT_ID, TENANT_ID, entra_options};
use uuid::Uuid;

const SUBSCRIPTION: &str = support::ACR_SUBSCRIPTION;
const REPOSITORY: &str = "contoso/payments-api";

struct Fixture {
    _dir: tempfile::TempDir,
    entra: EntraDouble,
    acr: AcrDouble,
    faults: Faults,
    journal: Journal,
    consumer: ContainerBuild<AcrTasks>,
    event: BuildCompleted,
    blobs: Arc<FilesystemBlobStore>,
}

fn context_tar() -> Vec<u8> {
    let mut writer = TarWriter::new();
    writer
        .file(
            "Dockerfile",
            0o644,
            0,
            0,
            b"FROM mcr.microsoft.com/dotnet/aspnet:9.0\nARG DOTNET_VERSION\nENV DOTNET_VERSION=$DOTNET_VERSION\nRUN dotnet --info\nCOPY app/ /app/\nENTRYPOINT [\"dotnet\", \"/app/server.dll\"]\n",
        )
        .unwrap();
    writer.file("app/server.dll", 0o644, 0, 0, b"server").unwrap();
    writer.finish().unwrap()
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::default();
    let journal = Journal::default();
    let book = TokenBook::default();
    let entra = EntraDouble::start(faults.clone(), journal.clone(), book.clone())
        .await
        .unwrap();
    let mut config = AcrConfig::new(SUBSCRIPTION, "delivery-rg", "contoso");
    config.entra = Some(book.clone());
    let acr = AcrDouble::start(faults.clone(), journal.clone(), Auth::default().entra(book), config)
        .await
        .unwrap();

    let token_file = support::workload_identity(&entra, dir.path());

    let blobs = Arc::new(FilesystemBlobStore::new(dir.path().join("blobs")));
    let context = blobs
        .put(
            "artifacts",
            "contoso/payments-api/build-4711/container-context.tar",
            context_tar(),
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
    let tasks = support::acr_tasks(&entra, &token_file, &acr, blobs.clone());
    let consumer = ContainerBuild::new(tasks).with_polling(Duration::from_secs(1), Duration::from_secs(4), 5);
    Fixture {
        _dir: dir,
        entra,
        acr,
        faults,
        journal,
        consumer,
        event,
        blobs,
    }
}

impl Fixture {
    async fn handle(&self, message: Message) -> Result<Outcome, HandlerError> {
        let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "build-ingestion");
        self.consumer.handle(Inbound::new(&envelope, &message)).await
    }

    /// Handles `message` as the runtime does: again after a retryable
    /// error, at most `tries` times; returns the outcome and the errors.
    async fn handle_retrying(&self, message: Message, tries: usize) -> (Outcome, Vec<HandlerError>) {
        let mut errors = Vec::new();
        for _ in 0..tries {
            match self.handle(message.clone()).await {
                Ok(outcome) => return (outcome, errors),
                Err(err @ (HandlerError::Transient(_) | HandlerError::RetryAfter { .. })) => errors.push(err),
                Err(err) => panic!("a permanent error: {err}"),
            }
        }
        panic!("not handled within {tries} tries: {errors:?}");
    }

    fn key(&self) -> String {
        let spec = image_spec("contoso", &self.event).unwrap().unwrap();
        acr_build_key(&spec, REPOSITORY)
    }
}

/// What a handled message led to: the next poll, or the image.
#[allow(clippy::large_enum_variant)]
enum Step {
    Poll(PollContainerBuild),
    Built(ContainerImageBuilt),
}

impl Step {
    fn poll(self) -> PollContainerBuild {
        match self {
            Self::Poll(poll) => poll,
            Self::Built(built) => panic!("expected a poll, got {built:?}"),
        }
    }

    fn built(self) -> ContainerImageBuilt {
        match self {
            Self::Built(built) => built,
            Self::Poll(poll) => panic!("expected the image, got {poll:?}"),
        }
    }
}

fn next(outcome: &Outcome) -> Step {
    assert_eq!(outcome.messages.len(), 1, "{outcome:?}");
    match &outcome.messages[0] {
        Outgoing {
            message: Message::PollContainerBuild(poll),
            delay: Some(_),
        } => Step::Poll(poll.clone()),
        Outgoing {
            message: Message::ContainerImageBuilt(built),
            delay: None,
        } => Step::Built(built.clone()),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_build_runs_once_through_a_429_and_a_5xx_and_its_image_is_in_the_registry() {
    let fixture = fixture().await;
    let key = fixture.key();
    fixture
        .faults
        .add(FaultRule::new(acr::SERVICE, "/scheduleRun", Fault::Throttle { retry_after_secs: 3 }, 1).method("POST"));
    fixture
        .faults
        .add(FaultRule::new(acr::SERVICE, "/runs/", Fault::Status(503), 1).method("GET"));

    let (first, errors) = fixture.handle_retrying(fixture.event.clone().into(), 3).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        matches!(&errors[0], HandlerError::RetryAfter { after, .. } if *after == Duration::from_secs(3)),
        "{}",
        errors[0]
    );
    let mut poll = next(&first).poll();
    assert_eq!(fixture.acr.runs().len(), 1, "one run scheduled");
    assert_eq!(poll.run_id, fixture.acr.runs()[0].run_id);

    let mut polled_errors = Vec::new();
    let built = loop {
        let (outcome, errors) = fixture.handle_retrying(poll.clone().into(), 3).await;
        polled_errors.extend(errors);
        match next(&outcome) {
            Step::Poll(again) => poll = again,
            Step::Built(built) => break built,
        }
    };
    assert_eq!(polled_errors.len(), 1, "the 503 was retried through: {polled_errors:?}");
    assert!(
        matches!(polled_errors[0], HandlerError::Transient(_)),
        "{}",
        polled_errors[0]
    );
    assert!(fixture.faults.pending().is_empty(), "both faults fired");

    // Exactly one run, one image under its tag and its key tag.
    let runs = fixture.acr.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, acr::RunStatus::Succeeded);
    let image = fixture
        .acr
        .image(REPOSITORY, "1.4.0")
        .expect("the image is in the registry");
    assert_eq!(built.digest, image.digest);
    assert_eq!(built.image, REPOSITORY);
    assert!(!built.already_present);
    let mut expected_tags = vec!["1.4.0".to_owned(), key_tag(&key)];
    expected_tags.sort();
    assert_eq!(fixture.acr.tags(REPOSITORY), expected_tags);
    assert_eq!(fixture.acr.manifests(), 1);
    assert_eq!(
        fixture.acr.uploads(),
        2,
        "the throttled attempt had uploaded its context too"
    );
    assert!(
        runs[0]
            .log
            .contains("Successfully pushed image: contoso.azurecr.io/contoso/payments-api:1.4.0")
    );

    // The same event again: the key tag is there, nothing is scheduled.
    let (again, _) = fixture.handle_retrying(fixture.event.clone().into(), 1).await;
    let present = next(&again).built();
    assert!(present.already_present);
    assert_eq!(present.digest, image.digest);
    assert_eq!(fixture.acr.runs().len(), 1, "still one run");

    // The tokens came from the Entra double through the federated token:
    // one for ARM, one for the registry, each cached afterwards.
    let grants = fixture.entra.grants();
    assert!(grants.iter().all(|grant| grant.kind == GrantKind::FederatedAssertion));
    let mut scopes: Vec<&str> = grants.iter().map(|grant| grant.scope.as_str()).collect();
    scopes.sort_unstable();
    assert_eq!(scopes, [ACR_SCOPE, ARM_SCOPE]);
    assert_eq!(fixture.journal.succeeded(acr::SERVICE, "POST", "/scheduleRun"), 1);
    assert!(
        fixture
            .journal
            .succeeded(acr::REGISTRY_SERVICE, "POST", "/oauth2/exchange")
            >= 1
    );
    assert_eq!(
        fixture.journal.succeeded(acr::BLOB_SERVICE, "GET", "/rawtext.log"),
        1,
        "the log was read once, at the end"
    );
}

#[tokio::test]
async fn a_run_whose_dockerfile_fails_is_a_permanent_error_with_its_log() {
    let mut fixture = fixture().await;
    // A context whose Dockerfile copies a file the context lacks.
    let mut writer = TarWriter::new();
    writer
        .file("Dockerfile", 0o644, 0, 0, b"FROM scratch\nCOPY missing.txt /\n")
        .unwrap();
    let context = fixture
        .blobs
        .put(
            "artifacts",
            "contoso/payments-api/build-4711/container-context.tar",
            writer.finish().unwrap(),
            "application/x-tar",
        )
        .await
        .unwrap();
    for artifact in &mut fixture.event.artifacts {
        if artifact.kind == ArtifactKind::ContainerContext {
            artifact.blob = context.clone();
        }
    }
    let (first, _) = fixture.handle_retrying(fixture.event.clone().into(), 1).await;
    let mut poll = next(&first).poll();
    let err = loop {
        match fixture.handle(poll.clone().into()).await {
            Ok(outcome) => poll = next(&outcome).poll(),
            Err(err) => break err,
        }
    };
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(text.contains("COPY failed"), "{text}");
    let runs = fixture.acr.runs();
    assert_eq!((runs.len(), runs[0].status), (1, acr::RunStatus::Failed));
    assert_eq!(fixture.acr.manifests(), 0, "nothing pushed");
}

#[tokio::test]
async fn the_event_handled_again_before_its_commit_follows_the_run_it_scheduled() {
    let fixture = fixture().await;
    let (first, _) = fixture.handle_retrying(fixture.event.clone().into(), 1).await;
    let poll = next(&first).poll();
    // The process died before the runtime committed: the same event again
    // finds the run recorded under the build key and follows it.
    let (again, _) = fixture.handle_retrying(fixture.event.clone().into(), 1).await;
    assert_eq!(next(&again).poll().run_id, poll.run_id, "the same run is followed");
    assert_eq!(fixture.acr.runs().len(), 1, "one run for one build");
    assert_eq!(fixture.acr.uploads(), 1, "one context uploaded");
    let mut poll = poll;
    let built = loop {
        let (outcome, _) = fixture.handle_retrying(poll.clone().into(), 1).await;
        match next(&outcome) {
            Step::Poll(again) => poll = again,
            Step::Built(built) => break built,
        }
    };
    assert_eq!(built.digest, fixture.acr.image(REPOSITORY, "1.4.0").unwrap().digest);
    assert_eq!(fixture.acr.manifests(), 1);
}

/// `scheduleRun` is a long-running operation in ARM's API (`200` or `202`):
/// answered `202 Accepted`, the run is read from its `Location` once it is
/// there, and followed like any other; one run, one image.
#[tokio::test]
async fn a_schedule_answered_202_accepted_is_followed_to_its_run() {
    let fixture = fixture().await;
    fixture.acr.answer_schedule_accepted(true);
    let (first, errors) = fixture.handle_retrying(fixture.event.clone().into(), 3).await;
    assert!(errors.is_empty(), "{errors:?}");
    let mut poll = next(&first).poll();
    assert_eq!(poll.run_id, fixture.acr.runs()[0].run_id);
    assert!(
        fixture.journal.succeeded("acr", "GET", "/operationResults/") >= 1,
        "the operation's result was read"
    );
    let built = loop {
        let (outcome, _) = fixture.handle_retrying(poll.clone().into(), 1).await;
        match next(&outcome) {
            Step::Poll(again) => poll = again,
            Step::Built(built) => break built,
        }
    };
    assert_eq!(built.digest, fixture.acr.image(REPOSITORY, "1.4.0").unwrap().digest);
    assert_eq!(fixture.acr.runs().len(), 1, "one run for one build");
}

#[tokio::test]
async fn azure_identity_reads_the_entra_doubles_tokens_and_errors() {
    let fixture = fixture().await;
    fixture.entra.add_client_secret(TENANT_ID, CLIENT_ID, "s3cret");
    let credential = |secret: &'static str| {
        ClientSecretCredential::new(
            TENANT_ID,
            CLIENT_ID.into(),
            Secret::new(secret),
            Some(ClientSecretCredentialOptions {
                client_options: entra_options(&fixture.entra),
            }),
        )
        .unwrap()
    };
    let token = credential("s3cret").get_token(&[ARM_SCOPE], None).await.unwrap();
    assert!(fixture.entra.tokens().check(token.token.secret()).is_ok());
    let lifetime = token.expires_on - time::OffsetDateTime::now_utc();
    assert!(lifetime > time::Duration::minutes(55), "{lifetime}");

    let err = credential("wrong").get_token(&[ARM_SCOPE], None).await.unwrap_err();
    let text = format!("{err:?}");
    assert!(text.contains("7000215"), "the AADSTS code reaches the error: {text}");
    assert!(text.contains("Invalid client secret"), "{text}");
}

#[tokio::test]
async fn tokens_that_expire_between_polls_are_fetched_again_through_the_federated_token() {
    let fixture = fixture().await;
    // Tokens live 2 s: every poll finds the last one expired.
    fixture.entra.set_token_lifetime(Duration::from_secs(2));
    let (first, _) = fixture.handle_retrying(fixture.event.clone().into(), 1).await;
    let mut poll = next(&first).poll();
    let built = loop {
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let (outcome, errors) = fixture.handle_retrying(poll.clone().into(), 1).await;
        assert!(errors.is_empty(), "{errors:?}");
        match next(&outcome) {
            Step::Poll(again) => poll = again,
            Step::Built(built) => break built,
        }
    };
    assert_eq!(built.digest, fixture.acr.image(REPOSITORY, "1.4.0").unwrap().digest);
    let arm_grants = fixture
        .entra
        .grants()
        .iter()
        .filter(|grant| grant.scope == ARM_SCOPE)
        .count();
    assert!(
        arm_grants >= 3,
        "a new ARM token for the build and each poll: {arm_grants}"
    );
    assert!(
        fixture.journal.entries().iter().all(|entry| entry.status != 401),
        "no request went with an expired token"
    );
}

/// The error's text with all its causes.
fn error_chain(err: &HandlerError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// How many tokens the Entra double issued for `scope`.
fn grants_for(fixture: &Fixture, scope: &str) -> usize {
    fixture
        .entra
        .grants()
        .iter()
        .filter(|grant| grant.scope == scope)
        .count()
}

/// The requests to `service` answered 401.
fn refusals(fixture: &Fixture, service: &str) -> usize {
    fixture
        .journal
        .entries()
        .iter()
        .filter(|entry| entry.service == service && entry.status == 401)
        .count()
}

#[tokio::test]
async fn tokens_revoked_before_their_expiry_are_replaced_once_for_arm_and_the_registry() {
    let fixture = fixture().await;
    // The build is scheduled: one ARM token and one registry token, cached
    // for the hour they were issued for.
    let (first, _) = fixture.handle_retrying(fixture.event.clone().into(), 1).await;
    let mut poll = next(&first).poll();
    assert_eq!(
        (grants_for(&fixture, ARM_SCOPE), grants_for(&fixture, ACR_SCOPE)),
        (1, 1)
    );

    // Entra revokes both (a signing-key rollover): the services answer 401
    // to tokens bosun still holds as valid. Every poll must go through
    // without an error, the runtime never seeing the refusals.
    fixture.entra.tokens().expire_all();
    let built = loop {
        let (outcome, errors) = fixture.handle_retrying(poll.clone().into(), 1).await;
        assert!(errors.is_empty(), "{errors:?}");
        match next(&outcome) {
            Step::Poll(again) => poll = again,
            Step::Built(built) => break built,
        }
    };
    assert_eq!(built.digest, fixture.acr.image(REPOSITORY, "1.4.0").unwrap().digest);
    assert_eq!(
        (grants_for(&fixture, ARM_SCOPE), grants_for(&fixture, ACR_SCOPE)),
        (2, 2),
        "one new token each, fetched past azure_identity's own cache"
    );
    assert_eq!(
        refusals(&fixture, acr::SERVICE),
        1,
        "ARM refused the revoked token once"
    );
    assert_eq!(
        refusals(&fixture, acr::REGISTRY_SERVICE),
        1,
        "the exchange refused the revoked token once"
    );
}

#[tokio::test]
async fn arm_refusing_the_new_token_too_is_a_permanent_error_saying_so() {
    let fixture = fixture().await;
    fixture
        .faults
        .add(FaultRule::new(acr::SERVICE, "/listBuildSourceUploadUrl", Fault::TokenExpired, 2).method("POST"));
    let err = fixture.handle(fixture.event.clone().into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    let text = error_chain(&err);
    assert!(text.contains("HTTP 401"), "{text}");
    assert!(text.contains(FRESH_TOKEN_REFUSED), "{text}");
    assert_eq!(grants_for(&fixture, ARM_SCOPE), 2, "one new token, not more");
    assert_eq!(refusals(&fixture, acr::SERVICE), 2, "sent twice, never a third time");
    assert!(fixture.faults.pending().is_empty());
    assert!(fixture.acr.runs().is_empty(), "nothing scheduled");
}

#[tokio::test]
async fn the_registry_refusing_the_new_token_too_is_a_permanent_error_saying_so() {
    let fixture = fixture().await;
    fixture
        .faults
        .add(FaultRule::new(acr::REGISTRY_SERVICE, "/oauth2/exchange", Fault::TokenExpired, 2).method("POST"));
    let err = fixture.handle(fixture.event.clone().into()).await.unwrap_err();
    assert!(matches!(err, HandlerError::Permanent(_)), "{err}");
    let text = error_chain(&err);
    assert!(text.contains("POST /oauth2/exchange: HTTP 401"), "{text}");
    assert!(text.contains(FRESH_TOKEN_REFUSED), "{text}");
    assert_eq!(grants_for(&fixture, ACR_SCOPE), 2, "one new token, not more");
    assert_eq!(refusals(&fixture, acr::REGISTRY_SERVICE), 2);
    assert!(fixture.faults.pending().is_empty());
}
