//! One realistic, valid sample of every catalogued message, for tests here
//! and in other crates (handlers, sagas, the runtime, schema checks).
//!
//! The samples tell one delivery: tenant `contoso` ships module
//! `payments-api` 1.4.0 as release [`RELEASE_ID`] through `dev`, `staging`
//! and `prod`. [`samples`] lists one message per [`CATALOGUE`] entry, in
//! catalogue order; the typed functions return each payload on its own so a
//! test can change one field.
//!
//! [`CATALOGUE`]: crate::CATALOGUE

use std::collections::BTreeMap;

use serde_json::json;
use time::OffsetDateTime;
use time::macros::datetime;

use crate::messages::*;

/// The tenant of the samples.
pub const TENANT_ID: &str = "contoso";
/// The application repository of the samples.
pub const REPOSITORY: &str = "payments-api";
/// The release of the samples.
pub const RELEASE_ID: &str = "payments-api-1.4.0-7f3c2a1";
/// The commit built and released.
pub const COMMIT_SHA: &str = "7f3c2a1e9b8d4c6f0a5e3b2d1c9f8e7a6b5c4d3e";
/// The pipeline run of the samples.
pub const PIPELINE_RUN_ID: &str = "4711";
/// The build record of the samples.
pub const BUILD_ID: &str = "build-4711";
/// The image digest of the samples.
pub const IMAGE_DIGEST: &str = "sha256:9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d";
/// The commit of the environment repository holding the promoted state.
pub const ENVIRONMENT_COMMIT_SHA: &str = "b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0";

const MERGE_COMMIT_SHA: &str = "3e4d5c6b7a8f9e1c2d3b4e5a6f0c4d8b9e1a2c3f";
const PARENT_SHA: &str = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d";
const TREE_SHA: &str = "a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0";
const PIPELINE_ID: &str = "42";
const MODULE_ID: &str = "payments-api";
const VERSION: &str = "1.4.0";
const FEATURE_BRANCH: &str = "feature/payments-retry";
const ENVIRONMENT_REPOSITORY: &str = "contoso-environments";
const RUN_STARTED: OffsetDateTime = datetime!(2026-11-29 10:02:00 UTC);
const RUN_FINISHED: OffsetDateTime = datetime!(2026-11-29 10:09:30 UTC);

/// One sample of every catalogued message, in catalogue order.
pub fn samples() -> Vec<Message> {
    vec![
        provision_repository().into(),
        repository_provisioned().into(),
        create_commit().into(),
        commit_created().into(),
        open_pull_request().into(),
        pull_request_opened().into(),
        generate_pipeline().into(),
        pipeline_generated().into(),
        pipeline_run_started().into(),
        poll_pipeline_run().into(),
        pipeline_run_completed().into(),
        build_completed().into(),
        poll_container_build().into(),
        container_image_built().into(),
        package_published().into(),
        release_planned().into(),
        approve_release().into(),
        reject_release().into(),
        release_approval_timeout().into(),
        release_approved().into(),
        release_rejected().into(),
        release_blocked().into(),
        provision_infrastructure().into(),
        infrastructure_provisioned().into(),
        infrastructure_drift_detected().into(),
        deployment_promoted().into(),
        reconcile_environment().into(),
        gitops_synced().into(),
        probe().into(),
        probe_echoed().into(),
        release_window_check().into(),
        override_release_window().into(),
        release_decision_recorded().into(),
        release_verification_check().into(),
        release_verified().into(),
        rollback_environment().into(),
    ]
}

/// `Probe`.
pub fn probe() -> Probe {
    Probe {
        group: "canary".to_owned(),
        sequence: 7,
        echo: true,
        work_ms: 0,
        relays: 0,
    }
}

/// `ProbeEchoed`.
pub fn probe_echoed() -> ProbeEchoed {
    ProbeEchoed {
        group: "canary".to_owned(),
        sequence: 7,
    }
}

/// The sample of one message type, if the catalogue has it.
pub fn sample(message_type: &str) -> Option<Message> {
    samples()
        .into_iter()
        .find(|message| message.message_type() == message_type)
}

/// The module of the samples: a .NET service with a NuGet client package
/// and a container image.
pub fn module() -> ModuleMetadata {
    ModuleMetadata {
        module_id: MODULE_ID.to_owned(),
        name: "Payments API".to_owned(),
        language: ModuleLanguage::Dotnet,
        version: VERSION.to_owned(),
        path: Some("src/Payments.Api".to_owned()),
        build_command: "dotnet build -c Release".to_owned(),
        test_command: Some("dotnet test -c Release --logger junit".to_owned()),
        test_results: Some("TestResults/*.xml".to_owned()),
        package: Some(PackageSettings {
            package_id: "Contoso.Payments.Client".to_owned(),
            feed: "contoso-internal".to_owned(),
            project: Some("Payments.Client/Payments.Client.csproj".to_owned()),
        }),
        container: Some(ContainerSettings {
            registry: "contoso.azurecr.io".to_owned(),
            image: "contoso/payments-api".to_owned(),
            dockerfile: "Dockerfile".to_owned(),
            context: None,
            platform: "linux/amd64".to_owned(),
            build_args: BTreeMap::from([("DOTNET_VERSION".to_owned(), "9.0".to_owned())]),
        }),
    }
}

fn blob(container: &str, key: &str, size_bytes: u64, sha256: &str, content_type: &str) -> BlobRef {
    BlobRef {
        container: container.to_owned(),
        key: key.to_owned(),
        size_bytes,
        sha256: sha256.to_owned(),
        content_type: content_type.to_owned(),
    }
}

fn run_log() -> BlobRef {
    blob(
        "build-logs",
        "contoso/payments-api/4711/log.txt",
        184_322,
        "836ff184e7b41b1e13cb5fd89fa1de98dbbab99e9d2918913ff43b86a5c7c213",
        "text/plain; charset=utf-8",
    )
}

fn image() -> ImageArtifact {
    ImageArtifact {
        registry: "contoso.azurecr.io".to_owned(),
        image: "contoso/payments-api".to_owned(),
        tag: VERSION.to_owned(),
        digest: IMAGE_DIGEST.to_owned(),
    }
}

fn package() -> PackageArtifact {
    PackageArtifact {
        package_id: "Contoso.Payments.Client".to_owned(),
        version: VERSION.to_owned(),
        feed: "contoso-internal".to_owned(),
    }
}

/// `ProvisionRepository`.
pub fn provision_repository() -> ProvisionRepository {
    ProvisionRepository {
        name: REPOSITORY.to_owned(),
        project: Some("payments".to_owned()),
        default_branch: "main".to_owned(),
        description: Some("Payments API service".to_owned()),
        minimum_reviewers: 1,
    }
}

/// `RepositoryProvisioned`.
pub fn repository_provisioned() -> RepositoryProvisioned {
    RepositoryProvisioned {
        repository: RepositoryRef {
            id: "5b0f3c1e-7d2a-4e8b-9c6f-1a2b3c4d5e6f".to_owned(),
            name: REPOSITORY.to_owned(),
            project: "payments".to_owned(),
            url: "https://dev.azure.com/contoso/payments/_git/payments-api".to_owned(),
            default_branch: "main".to_owned(),
        },
        created: true,
    }
}

/// `CreateCommit`.
pub fn create_commit() -> CreateCommit {
    CreateCommit {
        repository: REPOSITORY.to_owned(),
        branch: FEATURE_BRANCH.to_owned(),
        base_branch: Some("main".to_owned()),
        message: "Retry card payments on gateway timeouts".to_owned(),
        author: Some(GitIdentity {
            name: "Payments Agent".to_owned(),
            email: "payments-agent@contoso.com".to_owned(),
        }),
        files: vec![BundleFile {
            path: "src/Payments.Api/RetryPolicy.cs".to_owned(),
            content: "namespace Payments.Api;\n\npublic static class RetryPolicy { }\n".to_owned(),
            encoding: ContentEncoding::Utf8,
            executable: false,
        }],
        delete: Vec::new(),
        pull_request_target: Some("main".to_owned()),
    }
}

/// `CommitCreated`.
pub fn commit_created() -> CommitCreated {
    CommitCreated {
        repository: REPOSITORY.to_owned(),
        repository_id: "5b0f3c1e-7d2a-4e8b-9c6f-1a2b3c4d5e6f".to_owned(),
        branch: FEATURE_BRANCH.to_owned(),
        commit_sha: COMMIT_SHA.to_owned(),
        tree_sha: TREE_SHA.to_owned(),
        parent_sha: Some(PARENT_SHA.to_owned()),
        files_changed: 1,
        no_op: false,
        pull_request_target: Some("main".to_owned()),
    }
}

/// `OpenPullRequest`.
pub fn open_pull_request() -> OpenPullRequest {
    OpenPullRequest {
        repository: REPOSITORY.to_owned(),
        source_branch: FEATURE_BRANCH.to_owned(),
        target_branch: "main".to_owned(),
        title: "Retry card payments on gateway timeouts".to_owned(),
        description: Some("Adds a bounded retry with jitter around the card gateway call.".to_owned()),
        required_checks: vec!["payments-api-ci".to_owned()],
        auto_complete: true,
        module: Some(module()),
    }
}

/// `PullRequestOpened`.
pub fn pull_request_opened() -> PullRequestOpened {
    PullRequestOpened {
        repository: REPOSITORY.to_owned(),
        pull_request_id: 42,
        source_branch: FEATURE_BRANCH.to_owned(),
        target_branch: "main".to_owned(),
        title: "Retry card payments on gateway timeouts".to_owned(),
        commit_sha: COMMIT_SHA.to_owned(),
        status: PullRequestStatus::Active,
        url: "https://dev.azure.com/contoso/payments/_git/payments-api/pullrequest/42".to_owned(),
        created: true,
        required_checks: vec!["payments-api-ci".to_owned()],
        auto_complete: true,
        merge_commit_sha: None,
        module: Some(module()),
    }
}

/// `GeneratePipeline`.
pub fn generate_pipeline() -> GeneratePipeline {
    GeneratePipeline {
        repository: REPOSITORY.to_owned(),
        branch: "main".to_owned(),
        module: module(),
        template_version: "2026.11.1".to_owned(),
        pipeline_path: Some("pipelines/payments-api.yml".to_owned()),
    }
}

/// `PipelineGenerated`.
pub fn pipeline_generated() -> PipelineGenerated {
    PipelineGenerated {
        repository: REPOSITORY.to_owned(),
        branch: "main".to_owned(),
        pipeline_path: "pipelines/payments-api.yml".to_owned(),
        module_id: MODULE_ID.to_owned(),
        template_version: "2026.11.1".to_owned(),
        commit_sha: MERGE_COMMIT_SHA.to_owned(),
        pipeline_id: PIPELINE_ID.to_owned(),
        no_op: false,
    }
}

/// `PipelineRunStarted`.
pub fn pipeline_run_started() -> PipelineRunStarted {
    PipelineRunStarted {
        pipeline_run_id: PIPELINE_RUN_ID.to_owned(),
        pipeline_id: PIPELINE_ID.to_owned(),
        repository: REPOSITORY.to_owned(),
        branch: "main".to_owned(),
        commit_sha: COMMIT_SHA.to_owned(),
        release_id: RELEASE_ID.to_owned(),
        module: module(),
        started_at: RUN_STARTED,
        url: Some("https://dev.azure.com/contoso/payments/_build/results?buildId=4711".to_owned()),
    }
}

/// `PollPipelineRun` (the third poll).
pub fn poll_pipeline_run() -> PollPipelineRun {
    PollPipelineRun::first(&pipeline_run_started()).next().next()
}

/// `PipelineRunCompleted`.
pub fn pipeline_run_completed() -> PipelineRunCompleted {
    let started = pipeline_run_started();
    PipelineRunCompleted {
        pipeline_run_id: started.pipeline_run_id,
        pipeline_id: started.pipeline_id,
        repository: started.repository,
        branch: started.branch,
        commit_sha: started.commit_sha,
        release_id: started.release_id,
        module: started.module,
        result: PipelineResult::Succeeded,
        started_at: RUN_STARTED,
        finished_at: RUN_FINISHED,
        queued_ms: 12_000,
        duration_ms: 450_000,
        failed_step: None,
        log: Some(run_log()),
        test_results: vec![blob(
            "build-logs",
            "contoso/payments-api/4711/TestResults/Payments.Api.Tests.xml",
            48_211,
            "018bb207e5cea3036e36872e61a3a9d432d23b4a199661e7494f0f0607e57951",
            "application/xml",
        )],
        artifacts: build_completed().artifacts,
        url: started.url,
    }
}

/// `BuildCompleted`.
pub fn build_completed() -> BuildCompleted {
    BuildCompleted {
        build_id: BUILD_ID.to_owned(),
        pipeline_run_id: PIPELINE_RUN_ID.to_owned(),
        release_id: RELEASE_ID.to_owned(),
        repository: REPOSITORY.to_owned(),
        branch: "main".to_owned(),
        commit_sha: COMMIT_SHA.to_owned(),
        result: PipelineResult::Succeeded,
        test_summary: TestSummary {
            total: 214,
            passed: 211,
            failed: 0,
            skipped: 3,
        },
        failed_tests: Vec::new(),
        log: run_log(),
        test_report: Some(blob(
            "build-reports",
            "contoso/payments-api/build-4711/tests.json",
            9_876,
            "845e91831319e89c4d656bdb80c278ac09a7230d61e5dfd2e1b1fbb436ac8917",
            "application/json",
        )),
        artifacts: vec![
            ArtifactRef {
                name: "Contoso.Payments.Client.1.4.0.nupkg".to_owned(),
                kind: ArtifactKind::Package,
                blob: blob(
                    "build-artifacts",
                    "contoso/payments-api/build-4711/Contoso.Payments.Client.1.4.0.nupkg",
                    65_432,
                    "5fe23c5c1db1132a49a45e2fa68141fe47af8bd1bf73eb20606e98b561543706",
                    "application/octet-stream",
                ),
            },
            ArtifactRef {
                name: "container-context.tar".to_owned(),
                kind: ArtifactKind::ContainerContext,
                blob: blob(
                    "build-artifacts",
                    "contoso/payments-api/build-4711/container-context.tar",
                    31_457_280,
                    "ea7792a26f405e2ae9c6f49ca93bbe6076ceac0a1fc53d83426c7d7f2d9377e4",
                    "application/x-tar",
                ),
            },
        ],
        module: module(),
        completed_at: datetime!(2026-11-29 10:10:05 UTC),
    }
}

/// `PollContainerBuild` (the second poll of an ACR Tasks run).
pub fn poll_container_build() -> PollContainerBuild {
    PollContainerBuild {
        run_id: "cab7".to_owned(),
        build_key: "5d41402abc4b2a76b9719d911017c592".repeat(2),
        release_id: RELEASE_ID.to_owned(),
        build_id: BUILD_ID.to_owned(),
        module_id: MODULE_ID.to_owned(),
        repository: REPOSITORY.to_owned(),
        commit_sha: COMMIT_SHA.to_owned(),
        registry: "contoso.azurecr.io".to_owned(),
        image: MODULE_ID.to_owned(),
        tag: VERSION.to_owned(),
        platform: "linux/amd64".to_owned(),
        poll: 2,
    }
}

/// `ContainerImageBuilt`.
pub fn container_image_built() -> ContainerImageBuilt {
    let image = image();
    ContainerImageBuilt {
        release_id: RELEASE_ID.to_owned(),
        build_id: BUILD_ID.to_owned(),
        module_id: MODULE_ID.to_owned(),
        repository: REPOSITORY.to_owned(),
        commit_sha: COMMIT_SHA.to_owned(),
        registry: image.registry,
        image: image.image,
        tag: image.tag,
        digest: image.digest,
        platform: "linux/amd64".to_owned(),
        size_bytes: 98_566_144,
        already_present: false,
        pushed_at: datetime!(2026-11-29 10:12:40 UTC),
    }
}

/// `PackagePublished`.
pub fn package_published() -> PackagePublished {
    let package = package();
    PackagePublished {
        release_id: RELEASE_ID.to_owned(),
        build_id: BUILD_ID.to_owned(),
        module_id: MODULE_ID.to_owned(),
        package_id: package.package_id,
        version: package.version,
        feed: package.feed,
        sha512: "fa29cf61fbff6c47d667b5ec9f77bb7b5ca28cde5cec86f9a384d2a72d124f05\
                 c833ddd17c621eb04d0709c6ff7230afdd020744d92cf2de7786f3de77e148c7"
            .to_owned(),
        size_bytes: 65_432,
        url: Some("https://pkgs.dev.azure.com/contoso/_packaging/contoso-internal/nuget/v3/index.json".to_owned()),
        already_published: false,
        published_at: datetime!(2026-11-29 10:11:15 UTC),
    }
}

/// `ReleasePlanned`.
pub fn release_planned() -> ReleasePlanned {
    ReleasePlanned {
        release_id: RELEASE_ID.to_owned(),
        module_id: MODULE_ID.to_owned(),
        version: VERSION.to_owned(),
        environments: vec![
            PlannedEnvironment {
                environment: "dev".to_owned(),
                requires_approval: false,
            },
            PlannedEnvironment {
                environment: "staging".to_owned(),
                requires_approval: false,
            },
            PlannedEnvironment {
                environment: "prod".to_owned(),
                requires_approval: true,
            },
        ],
        artifacts: ReleaseArtifacts {
            build: BuildArtifact {
                build_id: BUILD_ID.to_owned(),
                pipeline_run_id: PIPELINE_RUN_ID.to_owned(),
                repository: REPOSITORY.to_owned(),
                commit_sha: COMMIT_SHA.to_owned(),
            },
            image: Some(image()),
            package: Some(package()),
        },
        planned_at: datetime!(2026-11-29 10:12:41 UTC),
    }
}

/// `ApproveRelease`.
pub fn approve_release() -> ApproveRelease {
    ApproveRelease {
        release_id: RELEASE_ID.to_owned(),
        environment: "prod".to_owned(),
        on_behalf_of: Some("alice@contoso.com".to_owned()),
        comment: Some("Change CHG-1234 approved by CAB.".to_owned()),
        approved_by: Some("key:0123456789ab (release board)".to_owned()),
        approver_identities: vec!["key:0123456789ab".to_owned(), "cli:alice".to_owned()],
    }
}

/// `RejectRelease`.
pub fn reject_release() -> RejectRelease {
    RejectRelease {
        release_id: RELEASE_ID.to_owned(),
        environment: Some("prod".to_owned()),
        on_behalf_of: Some("bob@contoso.com".to_owned()),
        reason: "Payment freeze until the end of the quarter.".to_owned(),
        rejected_by: Some("cli:bob".to_owned()),
    }
}

/// `ReleaseApprovalTimeout`.
pub fn release_approval_timeout() -> ReleaseApprovalTimeout {
    ReleaseApprovalTimeout {
        release_id: RELEASE_ID.to_owned(),
        environment: "prod".to_owned(),
        deadline: datetime!(2026-12-01 10:30:00 UTC),
    }
}

/// `ReleaseWindowCheck`.
pub fn release_window_check() -> ReleaseWindowCheck {
    ReleaseWindowCheck {
        release_id: RELEASE_ID.to_owned(),
        environment: "prod".to_owned(),
        check_at: datetime!(2026-12-07 07:00:00 UTC),
    }
}

/// `OverrideReleaseWindow`.
pub fn override_release_window() -> OverrideReleaseWindow {
    OverrideReleaseWindow {
        release_id: RELEASE_ID.to_owned(),
        environment: "prod".to_owned(),
        reason: "CHG-1234: hotfix for INC-42 during the weekend freeze".to_owned(),
        on_behalf_of: None,
        overridden_by: Some("cli:carol".to_owned()),
        overrider_identities: vec!["cli:carol".to_owned()],
    }
}

/// `ReleaseDecisionRecorded`.
pub fn release_decision_recorded() -> ReleaseDecisionRecorded {
    ReleaseDecisionRecorded {
        release_id: RELEASE_ID.to_owned(),
        door: Some("api:0a0a0a0a0a0a".to_owned()),
        decisions: vec![DecisionEntry {
            decision: ReleaseDecision::ApprovalRefused,
            environment: Some("prod".to_owned()),
            by: Some("key:0a0a0a0a0a0a (release agent)".to_owned()),
            identities: vec!["key:0a0a0a0a0a0a".to_owned(), "cli:dana".to_owned()],
            reason: Some(
                "key:0a0a0a0a0a0a requested this release (or sponsors the key that did) and cannot approve it"
                    .to_owned(),
            ),
            rule: Some("requester-cannot-approve".to_owned()),
            policy_version: Some(3),
            until: None,
            decided_at: datetime!(2026-12-01 10:31:00 UTC),
        }],
    }
}

/// `ReleaseVerificationCheck`.
pub fn release_verification_check() -> ReleaseVerificationCheck {
    ReleaseVerificationCheck {
        release_id: RELEASE_ID.to_owned(),
        environment: "prod".to_owned(),
        attempt: 3,
        check_at: datetime!(2026-11-29 14:12:00 UTC),
    }
}

/// `ReleaseVerified`.
pub fn release_verified() -> ReleaseVerified {
    ReleaseVerified {
        release_id: RELEASE_ID.to_owned(),
        environment: "prod".to_owned(),
        promotion: deployment_promoted(),
        summary: "soak 600s; checks health (http), error-rate (prometheus), payments-5xx (azureMonitor): 20 samples"
            .to_owned(),
        verified_at: datetime!(2026-11-29 14:20:00 UTC),
    }
}

/// `RollbackEnvironment`.
pub fn rollback_environment() -> RollbackEnvironment {
    RollbackEnvironment {
        environment: "prod".to_owned(),
        module_id: MODULE_ID.to_owned(),
        to_release_id: None,
        failed_release_id: None,
        reason: "INC-42: error rate up since the last release".to_owned(),
        override_reason: None,
        on_behalf_of: None,
        requested_by: Some("cli:carol".to_owned()),
        requester_identities: vec!["cli:carol".to_owned()],
        requested_at: datetime!(2026-11-29 15:00:00 UTC),
    }
}

/// `ReleaseApproved`.
pub fn release_approved() -> ReleaseApproved {
    ReleaseApproved {
        release_id: RELEASE_ID.to_owned(),
        module_id: MODULE_ID.to_owned(),
        environment: "prod".to_owned(),
        approver: "key:0123456789ab (release board)".to_owned(),
        approved_at: datetime!(2026-11-29 14:05:00 UTC),
        auto: false,
        comment: Some("Change CHG-1234 approved by CAB.".to_owned()),
        repository: Some(REPOSITORY.to_owned()),
        commit_sha: Some(COMMIT_SHA.to_owned()),
        approvers: vec!["cli:carol".to_owned(), "key:0123456789ab (release board)".to_owned()],
    }
}

/// `ReleaseRejected`.
pub fn release_rejected() -> ReleaseRejected {
    ReleaseRejected {
        release_id: RELEASE_ID.to_owned(),
        environment: Some("prod".to_owned()),
        approver: Some("cli:bob".to_owned()),
        reason: "Payment freeze until the end of the quarter.".to_owned(),
        timed_out: false,
        rejected_at: datetime!(2026-11-29 14:05:00 UTC),
    }
}

/// `ReleaseBlocked`.
pub fn release_blocked() -> ReleaseBlocked {
    ReleaseBlocked {
        release_id: RELEASE_ID.to_owned(),
        failing_step: ReleaseStep::ContainerImage,
        reason: "push to contoso.azurecr.io failed after 4 attempts: 403 Forbidden".to_owned(),
        environment: None,
        blocked_at: datetime!(2026-11-29 10:20:00 UTC),
    }
}

/// `ProvisionInfrastructure`.
pub fn provision_infrastructure() -> ProvisionInfrastructure {
    ProvisionInfrastructure {
        plan_id: format!("{RELEASE_ID}-prod"),
        stack: "payments/prod".to_owned(),
        environment: "prod".to_owned(),
        release_id: Some(RELEASE_ID.to_owned()),
        config: BTreeMap::from([
            ("azure-native:location".to_owned(), json!("westeurope")),
            ("payments:replicas".to_owned(), json!(3)),
        ]),
        resources: vec![ResourceSpec {
            resource_type: "azure-native:storage:StorageAccount".to_owned(),
            name: "paymentsreceipts".to_owned(),
            properties: BTreeMap::from([
                ("kind".to_owned(), json!("StorageV2")),
                ("sku".to_owned(), json!({"name": "Standard_ZRS"})),
            ]),
        }],
        preview_only: false,
        repository: Some(REPOSITORY.to_owned()),
        commit_sha: Some(COMMIT_SHA.to_owned()),
    }
}

/// `InfrastructureProvisioned`.
pub fn infrastructure_provisioned() -> InfrastructureProvisioned {
    InfrastructureProvisioned {
        plan_id: format!("{RELEASE_ID}-prod"),
        stack: "payments/prod".to_owned(),
        environment: "prod".to_owned(),
        release_id: Some(RELEASE_ID.to_owned()),
        preview_only: false,
        changes: ResourceChanges {
            created: 1,
            updated: 1,
            replaced: 0,
            deleted: 0,
            unchanged: 14,
        },
        outputs: BTreeMap::from([
            (
                "receiptsEndpoint".to_owned(),
                json!("https://paymentsreceipts.blob.core.windows.net/"),
            ),
            ("databasePassword".to_owned(), json!("[secret]")),
        ]),
        log: Some(blob(
            "iac-logs",
            "contoso/payments/prod/payments-api-1.4.0-7f3c2a1-prod/apply.log",
            22_118,
            "d4156628319e7fc795df59398a738fa9c3c7ff4d0ca336576c10221382ed1cd4",
            "text/plain; charset=utf-8",
        )),
        provisioned_at: datetime!(2026-11-29 14:09:12 UTC),
    }
}

/// `InfrastructureDriftDetected`.
pub fn infrastructure_drift_detected() -> InfrastructureDriftDetected {
    InfrastructureDriftDetected {
        plan_id: format!("{RELEASE_ID}-prod"),
        stack: "payments/prod".to_owned(),
        environment: "prod".to_owned(),
        drifted: vec![DriftedResource {
            urn: "urn:pulumi:prod::payments::azure-native:storage:StorageAccount::paymentsreceipts".to_owned(),
            resource_type: "azure-native:storage:StorageAccount".to_owned(),
            name: "paymentsreceipts".to_owned(),
            drift: DriftKind::Modified,
            properties: vec!["allowBlobPublicAccess".to_owned()],
        }],
        detected_at: datetime!(2026-11-30 03:00:00 UTC),
    }
}

/// `DeploymentPromoted`.
pub fn deployment_promoted() -> DeploymentPromoted {
    DeploymentPromoted {
        release_id: RELEASE_ID.to_owned(),
        module_id: MODULE_ID.to_owned(),
        environment: "prod".to_owned(),
        image: Some(image()),
        package: Some(package()),
        environment_repository: ENVIRONMENT_REPOSITORY.to_owned(),
        desired_commit_sha: ENVIRONMENT_COMMIT_SHA.to_owned(),
        approved_by: "key:0123456789ab (release board)".to_owned(),
        promoted_at: datetime!(2026-11-29 14:09:30 UTC),
    }
}

/// `ReconcileEnvironment`.
pub fn reconcile_environment() -> ReconcileEnvironment {
    ReconcileEnvironment {
        environment: "prod".to_owned(),
        desired_commit_sha: Some(ENVIRONMENT_COMMIT_SHA.to_owned()),
        reason: ReconcileReason::Manual,
        requested_by: Some("alice@contoso.com".to_owned()),
    }
}

/// `GitOpsSynced`.
pub fn gitops_synced() -> GitOpsSynced {
    GitOpsSynced {
        environment: "prod".to_owned(),
        commit_sha: ENVIRONMENT_COMMIT_SHA.to_owned(),
        release_id: Some(RELEASE_ID.to_owned()),
        applied: vec![
            AppliedResource {
                kind: "Deployment".to_owned(),
                name: "payments-api".to_owned(),
                namespace: Some("payments".to_owned()),
                action: SyncAction::Configured,
            },
            AppliedResource {
                kind: "Service".to_owned(),
                name: "payments-api".to_owned(),
                namespace: Some("payments".to_owned()),
                action: SyncAction::Unchanged,
            },
        ],
        healthy: true,
        synced_at: datetime!(2026-11-29 14:11:02 UTC),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CATALOGUE, Envelope};
    use uuid::Uuid;

    #[test]
    fn samples_cover_the_catalogue_in_order() {
        let types: Vec<&str> = samples().iter().map(Message::message_type).collect();
        let catalogue: Vec<&str> = CATALOGUE.iter().map(|spec| spec.message_type).collect();
        assert_eq!(types, catalogue);
    }

    #[test]
    fn every_sample_is_valid() {
        for message in samples() {
            assert_eq!(message.validate(), Ok(()), "{}", message.message_type());
        }
    }

    #[test]
    fn every_sample_round_trips_through_the_envelope() {
        let correlation_id = Uuid::now_v7();
        for message in samples() {
            let envelope = Envelope::new(&message, correlation_id, TENANT_ID, "agent:samples");
            let (parsed, decoded) = Envelope::parse(&envelope.to_vec()).unwrap();
            assert_eq!(parsed, envelope, "{}", message.message_type());
            assert_eq!(decoded, message, "{}", message.message_type());
        }
    }

    #[test]
    fn every_sample_round_trips_through_its_type_name() {
        for message in samples() {
            let back = Message::from_type_and_payload(message.message_type(), &message.to_payload()).unwrap();
            assert_eq!(back, message);
        }
    }

    #[test]
    fn sample_finds_by_type() {
        assert_eq!(sample("BuildCompleted"), Some(build_completed().into()));
        assert_eq!(sample("LaunchRocket"), None);
    }
}
