//! The masking over descriptions of real failures, as the host records
//! them (`failed N times; last error: …` after the retries, `permanent: …`,
//! a contract's refusal as it is): from every consumer's error texts
//! (`consumers/src/*/`), the contracts', the sagas', the store's and the
//! host's own. Each cause's occurrences differ only in what varies from one
//! to the next and share one pattern; no two causes share one.

use std::collections::HashMap;

use super::mask;

/// One cause: where its text comes from, the pattern its occurrences
/// share, and occurrences.
struct Cause {
    from: &'static str,
    pattern: &'static str,
    occurrences: &'static [&'static str],
}

const CAUSES: &[Cause] = &[
    // README's example: two commits to two missing repositories.
    Cause {
        from: "commit: CommitError::RepositoryNotFound",
        pattern: "failed <n> times; last error: transient: repository `<name>` not found for this tenant",
        occurrences: &[
            "failed 6 times; last error: transient: repository `orders` not found for this tenant",
            "failed 4 times; last error: transient: repository `ledger` not found for this tenant",
        ],
    },
    Cause {
        from: "commit: CommitError::BaseBranchNotFound",
        pattern: "failed <n> times; last error: transient: base branch `<name>` not found",
        occurrences: &[
            "failed 6 times; last error: transient: base branch `develop` not found",
            "failed 6 times; last error: transient: base branch `release/1.4` not found",
        ],
    },
    Cause {
        from: "commit: CommitError::Conflict",
        pattern: "failed <n> times; last error: transient: branch `<name>` kept moving under concurrent writers; \
                  gave up after <n> attempts",
        occurrences: &[
            "failed 6 times; last error: transient: branch `main` kept moving under concurrent writers; gave up after 5 attempts",
            "failed 2 times; last error: transient: branch `hotfix/PAY-1234` kept moving under concurrent writers; gave up after 3 attempts",
        ],
    },
    // A refused push and two ways of not reaching the Git host, in the
    // same consumer: three causes.
    Cause {
        from: "commit: CommitError::Refused (Azure DevOps)",
        pattern: "permanent: Git host refused the request: create push: HTTP <n>: TF401027: You need the Git \
                  '<name>' permission to perform this action. Details: identity '<name>', scope '<name>'.",
        occurrences: &[
            r"permanent: Git host refused the request: create push: HTTP 403: TF401027: You need the Git 'GenericContribute' permission to perform this action. Details: identity 'Build\8f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5b', scope 'repository'.",
            r"permanent: Git host refused the request: create push: HTTP 403: TF401027: You need the Git 'GenericContribute' permission to perform this action. Details: identity 'contoso\svc-bosun', scope 'branch'.",
        ],
    },
    Cause {
        from: "commit: CommitError::Unavailable, a timeout",
        pattern: "failed <n> times; last error: transient: Git host unavailable: create push: error sending request \
                  for url (<url>): operation timed out",
        occurrences: &[
            "failed 6 times; last error: transient: Git host unavailable: create push: error sending request for url (https://dev.azure.com/contoso/Payments/_apis/git/repositories/orders/pushes?api-version=7.1): operation timed out",
            "failed 6 times; last error: transient: Git host unavailable: create push: error sending request for url (https://dev.azure.com/fabrikam/Ledger/_apis/git/repositories/3f9c2a1e-0b4d-4e8f-9a7b-6c5d4e3f2a1b/pushes?api-version=7.1): operation timed out",
        ],
    },
    Cause {
        from: "commit: CommitError::Unavailable, refused",
        pattern: "failed <n> times; last error: transient: Git host unavailable: create push: error sending request \
                  for url (<url>): client error (Connect): tcp connect error: Connection refused (os error <n>)",
        occurrences: &[
            "failed 6 times; last error: transient: Git host unavailable: create push: error sending request for url (https://dev.azure.com/contoso/Payments/_apis/git/repositories/orders/pushes?api-version=7.1): client error (Connect): tcp connect error: Connection refused (os error 111)",
            "failed 3 times; last error: transient: Git host unavailable: create push: error sending request for url (http://10.0.0.4:8080/contoso/_apis/git/repositories/ledger/pushes?api-version=7.1): client error (Connect): tcp connect error: Connection refused (os error 111)",
        ],
    },
    Cause {
        from: "pull-request: PullRequestError::Conflict",
        pattern: "failed <n> times; last error: transient: target branch `<name>` kept moving while merging; gave up \
                  after <n> attempts",
        occurrences: &[
            "failed 6 times; last error: transient: target branch `main` kept moving while merging; gave up after 3 attempts",
            "failed 5 times; last error: transient: target branch `release/2026.12` kept moving while merging; gave up after 4 attempts",
        ],
    },
    Cause {
        from: "pull-request: PullRequestError::Unavailable (Azure DevOps TF401028)",
        pattern: "failed <n> times; last error: transient: Git host unavailable: update ref: HTTP <n>: TF401028: The \
                  reference '<name>' has already been updated by another client, so you cannot update it. Please try \
                  again.",
        occurrences: &[
            "failed 6 times; last error: transient: Git host unavailable: update ref: HTTP 409: TF401028: The reference 'refs/heads/feature/x' has already been updated by another client, so you cannot update it. Please try again.",
            "failed 6 times; last error: transient: Git host unavailable: update ref: HTTP 409: TF401028: The reference 'refs/heads/bosun/payments-api-7' has already been updated by another client, so you cannot update it. Please try again.",
        ],
    },
    Cause {
        from: "gitops-sync: GitOpsError::CommitNotFound",
        pattern: "permanent: commit <hash> not found in the environment repository",
        occurrences: &[
            "permanent: commit 9c1581f87c1a42b9cca654aed6a4675d9fdfb309 not found in the environment repository",
            "permanent: commit 04b7e2c1d9a83f5e6b0c7d2a1e9f8b3c4d5a6e7f not found in the environment repository",
        ],
    },
    Cause {
        from: "gitops-sync: GitOpsError::Unavailable (Argo CD)",
        pattern: "failed <n> times; last error: transient: environment unavailable: Argo CD application `<name>` is \
                  not readable: HTTP <n>: applications.argoproj.io \"<name>\" not found",
        occurrences: &[
            "failed 6 times; last error: transient: environment unavailable: Argo CD application `bosun-contoso.dev` is not readable: HTTP 404: applications.argoproj.io \"bosun-contoso.dev\" not found",
            "failed 6 times; last error: transient: environment unavailable: Argo CD application `bosun-fabrikam.prod` is not readable: HTTP 404: applications.argoproj.io \"bosun-fabrikam.prod\" not found",
        ],
    },
    Cause {
        from: "pipeline-monitor: PipelineMonitorError::NotFound",
        pattern: "permanent: pipeline run `<name>` not found",
        occurrences: &[
            "permanent: pipeline run `4711` not found",
            "permanent: pipeline run `0193a1b2-c3d4-7e5f-8a6b-0c1d2e3f4a5b` not found",
        ],
    },
    Cause {
        from: "pipeline-monitor: PipelineMonitorError::GaveUp",
        pattern: "permanent: pipeline run `<name>` still not finished after <n> polls; giving up",
        occurrences: &[
            "permanent: pipeline run `4711` still not finished after 120 polls; giving up",
            "permanent: pipeline run `4820` still not finished after 90 polls; giving up",
        ],
    },
    Cause {
        from: "pipeline-monitor (local runner): StepError::ScriptFailed",
        pattern: "permanent: Script exited with code '<name>'.",
        occurrences: &[
            "permanent: Script exited with code '1'.",
            "permanent: Script exited with code '2'.",
        ],
    },
    Cause {
        from: "pipeline-monitor (local runner): StepError::TimedOut",
        pattern: "permanent: the step exceeded its time limit of <n> minutes and was cancelled",
        occurrences: &[
            "permanent: the step exceeded its time limit of 60 minutes and was cancelled",
            "permanent: the step exceeded its time limit of 15 minutes and was cancelled",
        ],
    },
    Cause {
        from: "pipeline-monitor (local runner): StepError::Spawn",
        pattern: "permanent: could not run `<name>`: No such file or directory (os error <n>)",
        occurrences: &[
            "permanent: could not run `terraform`: No such file or directory (os error 2)",
            "permanent: could not run `helm upgrade --install`: No such file or directory (os error 2)",
        ],
    },
    Cause {
        from: "pipeline-monitor (local runner): StepError::ArtifactMissing",
        pattern: "permanent: artifact path <path> is not there: The system cannot find the path specified. (os error <n>)",
        occurrences: &[
            r"permanent: artifact path C:\agent\_work\1\a\app.zip is not there: The system cannot find the path specified. (os error 3)",
            r"permanent: artifact path D:\a\12\s\out\web.zip is not there: The system cannot find the path specified. (os error 3)",
        ],
    },
    Cause {
        from: "pipeline-monitor (local runner): StepError::WorkingDirectory",
        pattern: "permanent: working directory <path> does not exist",
        occurrences: &[
            "permanent: working directory /var/lib/bosun/work/0193a1b2/src does not exist",
            "permanent: working directory ./services/ledger does not exist",
        ],
    },
    Cause {
        from: "delivery git: GitError::Failed (git's stderr)",
        pattern: "failed <n> times; last error: transient: Git host unavailable: `<name>` failed (exit status: <n>): \
                  fatal: unable to access '<name>': Could not resolve host: dev.azure.com",
        occurrences: &[
            "failed 6 times; last error: transient: Git host unavailable: `git push origin bosun/payments-api-7` failed (exit status: 128): fatal: unable to access 'https://dev.azure.com/contoso/Payments/_git/orders/': Could not resolve host: dev.azure.com",
            "failed 6 times; last error: transient: Git host unavailable: `git fetch origin main` failed (exit status: 128): fatal: unable to access 'https://dev.azure.com/fabrikam/Ledger/_git/ledger/': Could not resolve host: dev.azure.com",
        ],
    },
    Cause {
        from: "build-ingestion: BlobError::NotFound",
        pattern: "permanent: a blob of the run cannot be read: blob <path> not found",
        occurrences: &[
            "permanent: a blob of the run cannot be read: blob artifacts/0193a1b2-c3d4-7e5f-8a6b-0c1d2e3f4a5b/junit.xml not found",
            "permanent: a blob of the run cannot be read: blob artifacts/runs/4711/results/test-results.xml not found",
        ],
    },
    Cause {
        from: "build-ingestion: junit::Malformed",
        pattern: "permanent: invalid ingestion request: malformed XML at byte <n>: unexpected end of file",
        occurrences: &[
            "permanent: invalid ingestion request: malformed XML at byte 1532: unexpected end of file",
            "permanent: invalid ingestion request: malformed XML at byte 88: unexpected end of file",
        ],
    },
    Cause {
        from: "container-build: ContainerBuildError::TimedOut",
        pattern: "failed <n> times; last error: transient: buildah did not finish within <n> s \
                  (BOSUN_CONTAINER_BUILD_TIMEOUT_MS) and was stopped; the build is retried",
        occurrences: &[
            "failed 6 times; last error: transient: buildah did not finish within 1800 s (BOSUN_CONTAINER_BUILD_TIMEOUT_MS) and was stopped; the build is retried",
            "failed 6 times; last error: transient: buildah did not finish within 600 s (BOSUN_CONTAINER_BUILD_TIMEOUT_MS) and was stopped; the build is retried",
        ],
    },
    Cause {
        from: "container-build: ContainerBuildError::StillRunning (ACR Tasks)",
        pattern: "permanent: ACR Tasks run `<name>` still not finished after <n> polls; giving up",
        occurrences: &[
            "permanent: ACR Tasks run `cb3f` still not finished after 360 polls; giving up",
            "permanent: ACR Tasks run `dt2a1` still not finished after 120 polls; giving up",
        ],
    },
    Cause {
        from: "container-build: DistributionError::Refused",
        pattern: "permanent: registry refused the request: registry refused <path>: HTTP <n> Unauthorized",
        occurrences: &[
            "permanent: registry refused the request: registry refused contoso.azurecr.io/payments-api:1.4.2: HTTP 401 Unauthorized",
            "permanent: registry refused the request: registry refused registry.fabrikam.com/ledger/api@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855: HTTP 401 Unauthorized",
        ],
    },
    Cause {
        from: "container-build: TarError::CutShort",
        pattern: "permanent: build context unavailable: malformed tar archive: `<name>` is cut short (<n> of <n> bytes)",
        occurrences: &[
            "permanent: build context unavailable: malformed tar archive: `bin/app` is cut short (512 of 2048 bytes)",
            "permanent: build context unavailable: malformed tar archive: `Dockerfile` is cut short (0 of 311 bytes)",
        ],
    },
    Cause {
        from: "package-publishing: ZipError::Inflate",
        pattern: "permanent: package content: malformed zip archive: `<name>` does not inflate to the <n> bytes its \
                  header says",
        occurrences: &[
            "permanent: package content: malformed zip archive: `lib/net8.0/Contoso.Payments.dll` does not inflate to the 4096 bytes its header says",
            "permanent: package content: malformed zip archive: `README.md` does not inflate to the 911 bytes its header says",
        ],
    },
    Cause {
        from: "package-publishing: PackageError::Refused (Azure Artifacts)",
        pattern: "permanent: feed refused the request: publish package: HTTP <n>: The feed '<name>' already contains \
                  '<name>'.",
        occurrences: &[
            "permanent: feed refused the request: publish package: HTTP 409: The feed 'contoso-packages' already contains 'Contoso.Payments 1.4.2'.",
            "permanent: feed refused the request: publish package: HTTP 409: The feed 'ledger' already contains 'Fabrikam.Ledger 2.0.0-beta.3'.",
        ],
    },
    Cause {
        from: "repository-provisioning: RepositoryError::ElsewhereInProject",
        pattern: "permanent: repository `<name>` already exists in project `<name>`, not in `<name>`",
        occurrences: &[
            "permanent: repository `orders` already exists in project `Payments`, not in `Ledger`",
            "permanent: repository `ledger-api` already exists in project `Finance Platform`, not in `Payments`",
        ],
    },
    Cause {
        from: "repository-provisioning: RepositoryError::ProjectNotFound",
        pattern: "permanent: project `<name>` does not exist",
        occurrences: &[
            "permanent: project `Payments` does not exist",
            "permanent: project `My Team` does not exist",
        ],
    },
    Cause {
        from: "iac-provisioning: IacError::Owned",
        pattern: "permanent: resource `<name>` belongs to stack `<name>`",
        occurrences: &[
            "permanent: resource `urn:pulumi:dev::payments::azure-native:storage:StorageAccount::logs` belongs to stack `contoso/payments/dev`",
            "permanent: resource `urn:pulumi:prod::ledger::azure-native:sql:Server::db` belongs to stack `fabrikam/ledger/prod`",
        ],
    },
    Cause {
        from: "iac-provisioning: IacError::Interrupted",
        pattern: "failed <n> times; last error: transient: apply of plan `<name>` interrupted after <n> of <n> changes: \
                  infrastructure engine unavailable: `<name>` printed non-UTF-8 output",
        occurrences: &[
            "failed 6 times; last error: transient: apply of plan `plan-7f3a9c21` interrupted after 3 of 12 changes: infrastructure engine unavailable: `pulumi up` printed non-UTF-8 output",
            "failed 6 times; last error: transient: apply of plan `plan-0b12de44` interrupted after 0 of 4 changes: infrastructure engine unavailable: `pulumi preview --diff` printed non-UTF-8 output",
        ],
    },
    Cause {
        from: "pipeline-generation: PipelineError::RepositoryNotFound",
        pattern: "failed <n> times; last error: transient: repository `<name>` not found for this tenant",
        occurrences: &[
            "failed 6 times; last error: transient: repository `payments-api` not found for this tenant",
            "failed 6 times; last error: transient: repository `ledger` not found for this tenant",
        ],
    },
    Cause {
        from: "pipeline-generation: template::UnknownVersion",
        pattern: "permanent: invalid pipeline request: unknown pipeline template version `<name>` (this build renders \
                  <n>)",
        occurrences: &[
            "permanent: invalid pipeline request: unknown pipeline template version `v9` (this build renders 2026.11.1)",
            "permanent: invalid pipeline request: unknown pipeline template version `2025.04.2` (this build renders 2026.11.1)",
        ],
    },
    Cause {
        from: "release-orchestration: UnknownRelease",
        pattern: "permanent: ReleaseApproved refused: tenant `<name>` has no release `<name>`",
        occurrences: &[
            "permanent: ReleaseApproved refused: tenant `contoso` has no release `payments-api-1`",
            "permanent: ReleaseApproved refused: tenant `fabrikam` has no release `ledger-2026.12`",
        ],
    },
    Cause {
        from: "release-orchestration: an HTTP probe's failure (http_check), timed out",
        pattern: "GET <url> failed: timed out after <n>s",
        occurrences: &[
            "GET http://10.0.0.4:8080/healthz failed: timed out after 30s",
            "GET https://payments.contoso.com/health failed: timed out after 2.5s",
        ],
    },
    Cause {
        from: "release-orchestration: an HTTP probe's failure (http_check), refused",
        pattern: "GET <url> failed: connection refused",
        occurrences: &[
            "GET http://10.0.0.4:8080/healthz failed: connection refused",
            "GET http://[fd00::12]:9090/ready failed: connection refused",
        ],
    },
    Cause {
        from: "probe: UnexpectedMessage",
        pattern: "permanent: consumer `<name>` does not handle `<name>` messages",
        occurrences: &[
            "permanent: consumer `probe` does not handle `CreateCommit` messages",
            "permanent: consumer `probe` does not handle `OpenPullRequest` messages",
        ],
    },
    Cause {
        from: "contracts: ContractError::InvalidField",
        pattern: "invalid field `<name>`: must not be empty",
        occurrences: &[
            "invalid field `payload.branch`: must not be empty",
            "invalid field `payload.files[3].path`: must not be empty",
        ],
    },
    Cause {
        from: "contracts: ContractError::UnknownType",
        pattern: "unknown message type `<name>` in field `<name>`",
        occurrences: &[
            "unknown message type `LaunchRocket` in field `type`",
            "unknown message type `CreateCommitV9` in field `type`",
        ],
    },
    Cause {
        from: "contracts: ContractError::Oversized",
        pattern: "message is <n> bytes, over the limit of <n> bytes",
        occurrences: &[
            "message is 1048577 bytes, over the limit of 1048576 bytes",
            "message is 2500000 bytes, over the limit of 1048576 bytes",
        ],
    },
    Cause {
        from: "contracts: ContractError::MalformedEnvelope (serde's text)",
        pattern: "malformed envelope at `<name>`: invalid type: string \"<name>\", expected u<n> at line <n> column <n>",
        occurrences: &[
            "malformed envelope at `schemaVersion`: invalid type: string \"2\", expected u32 at line 1 column 57",
            "malformed envelope at `schemaVersion`: invalid type: string \"v1\", expected u32 at line 3 column 20",
        ],
    },
    Cause {
        from: "host: needs-newer, the patience run out",
        pattern: "waited for a newer bosun since <time>, longer than the patience of <n> s \
                  (BOSUN_NEWER_MESSAGE_PATIENCE), and no process that reads it took it; upgrade bosun and replay it: \
                  needs a newer bosun: field `<name>` is <n> but this build reads `<name>` up to version <n>; it waits \
                  for a newer bosun",
        occurrences: &[
            "waited for a newer bosun since 2026-12-01T23:37:06Z, longer than the patience of 604800 s (BOSUN_NEWER_MESSAGE_PATIENCE), and no process that reads it took it; upgrade bosun and replay it: needs a newer bosun: field `schemaVersion` is 3 but this build reads `CreateCommit` up to version 2; it waits for a newer bosun",
            "waited for a newer bosun since 2027-01-15T08:00:00.125+01:00, longer than the patience of 86400 s (BOSUN_NEWER_MESSAGE_PATIENCE), and no process that reads it took it; upgrade bosun and replay it: needs a newer bosun: field `schemaVersion` is 2 but this build reads `ApproveRelease` up to version 1; it waits for a newer bosun",
        ],
    },
    Cause {
        from: "host: a tenant mismatch",
        pattern: "tenant mismatch: `<name>` of tenant `<name>` names saga `<name>` of tenant `<name>`; refused",
        occurrences: &[
            "tenant mismatch: `ReleaseApproved` of tenant `contoso` names saga `release/payments-api-1` of tenant `fabrikam`; refused",
            "tenant mismatch: `DeploymentPromoted` of tenant `fabrikam` names saga `release/ledger-12` of tenant `contoso`; refused",
        ],
    },
    Cause {
        from: "host: corrupt-state (a saga's stored state)",
        pattern: "permanent: release saga <id>: the release saga's stored state (version <n>) cannot be read: missing \
                  field `<name>` at line <n> column <n>",
        occurrences: &[
            "permanent: release saga payments-api-1: the release saga's stored state (version 3) cannot be read: missing field `environments` at line 1 column 42",
            "permanent: release saga ledger-12: the release saga's stored state (version 2) cannot be read: missing field `policy` at line 1 column 7",
        ],
    },
    Cause {
        from: "store: StoreError::Unavailable",
        pattern: "failed <n> times; last error: transient: store unavailable while committing a handled message: error communicating \
                  with database: Connection reset by peer (os error <n>)",
        occurrences: &[
            "failed 6 times; last error: transient: store unavailable while committing a handled message: error communicating with database: Connection reset by peer (os error 104)",
            "failed 3 times; last error: transient: store unavailable while committing a handled message: error communicating with database: Connection reset by peer (os error 104)",
        ],
    },
    Cause {
        from: "transport: a message delivered too often (SQLite)",
        pattern: "message was delivered <n> times without being completed",
        occurrences: &[
            "message was delivered 10 times without being completed",
            "message was delivered 5 times without being completed",
        ],
    },
];

#[test]
fn each_cause_has_one_pattern_and_no_two_causes_share_one() {
    let mut seen: HashMap<String, &str> = HashMap::new();
    for cause in CAUSES {
        assert!(cause.occurrences.len() >= 2, "{}: two occurrences at least", cause.from);
        for (i, occurrence) in cause.occurrences.iter().enumerate() {
            assert!(
                !cause.occurrences[..i].contains(occurrence),
                "{}: the occurrences differ",
                cause.from
            );
            assert_eq!(mask(occurrence), cause.pattern, "{}: {occurrence}", cause.from);
        }
        if let Some(other) = seen.insert(cause.pattern.to_owned(), cause.from) {
            // The same text in two consumers is two groups (the consumer is
            // part of the fingerprint); within one source it must differ.
            assert_ne!(
                consumer(other),
                consumer(cause.from),
                "{other} and {} share a pattern",
                cause.from
            );
        }
    }
    assert!(
        seen.len() >= 15,
        "a corpus of at least 15 causes, {} distinct patterns",
        seen.len()
    );
}

/// The consumer (or part of bosun) a cause's text comes from.
fn consumer(from: &str) -> &str {
    from.split([':', ' ']).next().unwrap_or(from)
}
