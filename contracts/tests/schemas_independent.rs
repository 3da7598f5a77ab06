//! The checked-in schemas in `contracts/schemas/`, read from disk, against
//! bosun's own decoding, with an independent JSON Schema validator (the
//! `jsonschema` crate, draft 2020-12):
//!
//! - every sample message is valid by its schemas and by bosun;
//! - every refused change below, at least one for each rule of
//!   `bosun_contracts::validate` and each rule between fields that JSON
//!   Schema can say, is refused by the schemas and by bosun, both naming
//!   the same field;
//! - the changes bosun refuses that no schema can express are still
//!   accepted by the schemas, and their schemas say so in a description;
//! - some unusual values bosun accepts are accepted by the schemas too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use bosun_contracts::schema_rules::BEYOND_SCHEMA;
use bosun_contracts::{CATALOGUE, Envelope, samples, validate};
use jsonschema::Validator;
use serde_json::{Value, json};

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

fn read_json(name: &str) -> Value {
    let path = schema_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The envelope schema and every payload schema `index.json` lists.
struct Schemas {
    envelope: Validator,
    payloads: BTreeMap<String, (String, Validator)>,
}

impl Schemas {
    fn load() -> Self {
        let compile = |name: &str| {
            jsonschema::draft202012::new(&read_json(name))
                .unwrap_or_else(|err| panic!("{name} does not compile: {err}"))
        };
        let mut payloads = BTreeMap::new();
        for entry in read_json("index.json").as_array().into_iter().flatten() {
            let (Some(message_type), Some(file)) = (entry["type"].as_str(), entry["schema"].as_str()) else {
                panic!("index.json entry without type or schema: {entry}");
            };
            payloads.insert(message_type.to_owned(), (file.to_owned(), compile(file)));
        }
        Self {
            envelope: compile("envelope.schema.json"),
            payloads,
        }
    }

    /// The places (JSON pointers into the envelope) where the schemas
    /// refuse it; empty when it is valid.
    fn refusals(&self, envelope: &Value) -> Vec<String> {
        let mut places: Vec<String> = self
            .envelope
            .iter_errors(envelope)
            .map(|err| format!("{} ({err})", err.instance_path().as_str()))
            .collect();
        let message_type = envelope["type"].as_str().unwrap_or_default();
        let (_, payload) = self
            .payloads
            .get(message_type)
            .unwrap_or_else(|| panic!("index.json has no schema for {message_type}"));
        places.extend(
            payload
                .iter_errors(&envelope["payload"])
                .map(|err| format!("/payload{} ({err})", err.instance_path().as_str())),
        );
        places
    }

    fn file_of(&self, message_type: &str) -> &str {
        self.payloads.get(message_type).map_or("", |(file, _)| file.as_str())
    }
}

/// The sample of a type in a new envelope, as JSON.
fn sample_envelope(message_type: &str) -> Value {
    let message = samples::sample(message_type).unwrap_or_else(|| panic!("no sample of {message_type}"));
    let envelope = Envelope::new(&message, uuid::Uuid::now_v7(), samples::TENANT_ID, "agent:test");
    serde_json::to_value(&envelope).expect("an envelope serializes")
}

/// What bosun says of an envelope: the field it refuses, if any. The
/// envelope decoder checks the payload; the tenant id is checked, with the
/// same rule, by the front door and the consumers.
fn bosun_refuses(envelope: &Value) -> Option<String> {
    if let Err(err) = validate::tenant_id("tenantId", envelope["tenantId"].as_str().unwrap_or_default()) {
        return Some(err.field);
    }
    let bytes = serde_json::to_vec(envelope).expect("JSON serializes");
    Envelope::parse(&bytes)
        .err()
        .map(|err| err.field().unwrap_or(".").to_owned())
}

/// `payload.files[0].path` as a JSON pointer, `/payload/files/0/path`.
fn pointer_of(field: &str) -> String {
    let mut pointer = String::new();
    for part in field.split('.') {
        let mut pieces = part.split('[');
        pointer.push('/');
        pointer.push_str(pieces.next().unwrap_or_default());
        for index in pieces {
            pointer.push('/');
            pointer.push_str(index.trim_end_matches(']'));
        }
    }
    pointer
}

/// One change to a sample envelope.
struct Change {
    /// The rule the change breaks (for refused changes) or touches.
    rule: &'static str,
    message_type: &'static str,
    /// The field bosun names, e.g. `payload.files[0].path`.
    field: &'static str,
    change: fn(&mut Value),
}

const fn change(rule: &'static str, message_type: &'static str, field: &'static str, change: fn(&mut Value)) -> Change {
    Change {
        rule,
        message_type,
        field,
        change,
    }
}

/// Changes bosun refuses and the schemas refuse, at the same field.
fn refused() -> Vec<Change> {
    vec![
        // Repository paths.
        change("repository_path", "CreateCommit", "payload.files[0].path", |e| {
            e["payload"]["files"][0]["path"] = json!("../x")
        }),
        change("repository_path", "CreateCommit", "payload.files[0].path", |e| {
            e["payload"]["files"][0]["path"] = json!("/etc/passwd")
        }),
        change("repository_path", "CreateCommit", "payload.files[0].path", |e| {
            e["payload"]["files"][0]["path"] = json!("a/.git/config")
        }),
        change("repository_path", "CreateCommit", "payload.files[0].path", |e| {
            e["payload"]["files"][0]["path"] = json!("a\\b")
        }),
        change("repository_path", "CreateCommit", "payload.files[0].path", |e| {
            e["payload"]["files"][0]["path"] = json!("a//b")
        }),
        change("repository_path", "CreateCommit", "payload.delete[0]", |e| {
            e["payload"]["delete"] = json!(["a/../b"])
        }),
        change("repository_path", "GeneratePipeline", "payload.pipelinePath", |e| {
            e["payload"]["pipelinePath"] = json!("../azure-pipelines.yml")
        }),
        change("repository_path", "BuildCompleted", "payload.module.path", |e| {
            e["payload"]["module"]["path"] = json!("/src")
        }),
        change(
            "repository_path",
            "OpenPullRequest",
            "payload.module.container.dockerfile",
            |e| e["payload"]["module"]["container"]["dockerfile"] = json!("./Dockerfile"),
        ),
        // Branches.
        change("branch_name", "CreateCommit", "payload.branch", |e| {
            e["payload"]["branch"] = json!("a..b")
        }),
        change("branch_name", "CreateCommit", "payload.branch", |e| {
            e["payload"]["branch"] = json!("-x")
        }),
        change("branch_name", "CreateCommit", "payload.branch", |e| {
            e["payload"]["branch"] = json!("x.lock")
        }),
        change("branch_name", "CreateCommit", "payload.branch", |e| {
            e["payload"]["branch"] = json!("refs/heads/@")
        }),
        change("branch_name", "CreateCommit", "payload.branch", |e| {
            e["payload"]["branch"] = json!("a".repeat(256))
        }),
        change("branch_name", "CreateCommit", "payload.baseBranch", |e| {
            e["payload"]["baseBranch"] = json!("a b")
        }),
        change("branch_name", "CreateCommit", "payload.pullRequestTarget", |e| {
            e["payload"]["pullRequestTarget"] = json!("main/")
        }),
        change("branch_name", "ProvisionRepository", "payload.defaultBranch", |e| {
            e["payload"]["defaultBranch"] = json!("a@{1}")
        }),
        change("branch_name", "OpenPullRequest", "payload.sourceBranch", |e| {
            e["payload"]["sourceBranch"] = json!("bad~branch")
        }),
        // Repository names.
        change("repository_name", "CreateCommit", "payload.repository", |e| {
            e["payload"]["repository"] = json!("_x")
        }),
        change("repository_name", "CreateCommit", "payload.repository", |e| {
            e["payload"]["repository"] = json!("a/b")
        }),
        change("repository_name", "CreateCommit", "payload.repository", |e| {
            e["payload"]["repository"] = json!("x".repeat(65))
        }),
        change("repository_name", "ProvisionRepository", "payload.name", |e| {
            e["payload"]["name"] = json!("name.")
        }),
        change(
            "repository_name",
            "RepositoryProvisioned",
            "payload.repository.name",
            |e| e["payload"]["repository"]["name"] = json!("a b"),
        ),
        change(
            "repository_name",
            "DeploymentPromoted",
            "payload.environmentRepository",
            |e| e["payload"]["environmentRepository"] = json!("a:b"),
        ),
        // Required text and text lengths.
        change("non_empty", "CreateCommit", "payload.message", |e| {
            e["payload"]["message"] = json!("  ")
        }),
        change("non_empty", "CreateCommit", "payload.author.name", |e| {
            e["payload"]["author"]["name"] = json!("")
        }),
        change("non_empty", "RepositoryProvisioned", "payload.repository.id", |e| {
            e["payload"]["repository"]["id"] = json!("")
        }),
        change("non_empty", "RepositoryProvisioned", "payload.repository.url", |e| {
            e["payload"]["repository"]["url"] = json!("\t")
        }),
        change("text", "OpenPullRequest", "payload.title", |e| {
            e["payload"]["title"] = json!("")
        }),
        change("text", "OpenPullRequest", "payload.title", |e| {
            e["payload"]["title"] = json!("t".repeat(401))
        }),
        change("text", "OpenPullRequest", "payload.requiredChecks[0]", |e| {
            e["payload"]["requiredChecks"] = json!([" "])
        }),
        change("text", "RejectRelease", "payload.reason", |e| {
            e["payload"]["reason"] = json!("")
        }),
        change("text", "ReleaseApproved", "payload.approver", |e| {
            e["payload"]["approver"] = json!("a".repeat(257))
        }),
        change("text", "ReleaseBlocked", "payload.reason", |e| {
            e["payload"]["reason"] = json!("r".repeat(4001))
        }),
        change("text", "ApproveRelease", "payload.onBehalfOf", |e| {
            e["payload"]["onBehalfOf"] = json!(" ")
        }),
        change("text", "PipelineRunCompleted", "payload.failedStep", |e| {
            e["payload"]["failedStep"] = json!(" ")
        }),
        change("text", "ContainerImageBuilt", "payload.platform", |e| {
            e["payload"]["platform"] = json!("")
        }),
        change("text", "BuildCompleted", "payload.module.buildCommand", |e| {
            e["payload"]["module"]["buildCommand"] = json!("")
        }),
        change("text", "BuildCompleted", "payload.failedTests[0]", |e| {
            e["payload"]["failedTests"] = json!(["t".repeat(1025)])
        }),
        change("text", "ReconcileEnvironment", "payload.requestedBy", |e| {
            e["payload"]["requestedBy"] = json!("")
        }),
        change("text", "GitOpsSynced", "payload.applied[0].kind", |e| {
            e["payload"]["applied"][0]["kind"] = json!("k".repeat(129))
        }),
        change("text", "ProvisionInfrastructure", "payload.resources[0].type", |e| {
            e["payload"]["resources"][0]["type"] = json!("")
        }),
        change("text", "InfrastructureDriftDetected", "payload.drifted[0].urn", |e| {
            e["payload"]["drifted"][0]["urn"] = json!("")
        }),
        change(
            "text",
            "InfrastructureDriftDetected",
            "payload.drifted[0].properties[0]",
            |e| e["payload"]["drifted"][0]["properties"] = json!([""]),
        ),
        change("max_chars", "OpenPullRequest", "payload.description", |e| {
            e["payload"]["description"] = json!("d".repeat(4001))
        }),
        change("max_chars", "ApproveRelease", "payload.comment", |e| {
            e["payload"]["comment"] = json!("é".repeat(4001))
        }),
        // Object ids, digests and hashes.
        change("git_sha", "CommitCreated", "payload.commitSha", |e| {
            e["payload"]["commitSha"] = json!("HEAD")
        }),
        change("git_sha", "CommitCreated", "payload.parentSha", |e| {
            e["payload"]["parentSha"] = json!("ABC".repeat(13) + "A")
        }),
        change("git_sha", "ReconcileEnvironment", "payload.desiredCommitSha", |e| {
            e["payload"]["desiredCommitSha"] = json!("main")
        }),
        change("git_sha", "DeploymentPromoted", "payload.desiredCommitSha", |e| {
            e["payload"]["desiredCommitSha"] = json!("abc")
        }),
        change("oci_digest", "ContainerImageBuilt", "payload.digest", |e| {
            e["payload"]["digest"] = json!("sha256:1234")
        }),
        change("oci_digest", "ReleasePlanned", "payload.artifacts.image.digest", |e| {
            e["payload"]["artifacts"]["image"]["digest"] = json!("latest")
        }),
        change(
            "sha256_hex",
            "PipelineRunCompleted",
            "payload.testResults[0].sha256",
            |e| e["payload"]["testResults"][0]["sha256"] = json!("nope"),
        ),
        change("sha512_hex", "PackagePublished", "payload.sha512", |e| {
            e["payload"]["sha512"] = json!("ab".repeat(32))
        }),
        // Identifiers and versions.
        change("identifier", "ProvisionRepository", "payload.project", |e| {
            e["payload"]["project"] = json!("a b")
        }),
        change("identifier", "PipelineRunStarted", "payload.releaseId", |e| {
            e["payload"]["releaseId"] = json!("")
        }),
        change("identifier", "PipelineGenerated", "payload.pipelineId", |e| {
            e["payload"]["pipelineId"] = json!("-42")
        }),
        change("identifier", "BuildCompleted", "payload.artifacts[0].name", |e| {
            e["payload"]["artifacts"][0]["name"] = json!("a b")
        }),
        change("identifier", "OpenPullRequest", "payload.module.moduleId", |e| {
            e["payload"]["module"]["moduleId"] = json!("bad id")
        }),
        change("identifier", "ProvisionInfrastructure", "payload.planId", |e| {
            e["payload"]["planId"] = json!("i".repeat(129))
        }),
        change("identifier", "Probe", "payload.group", |e| {
            e["payload"]["group"] = json!("")
        }),
        change("identifier", "ProbeEchoed", "payload.group", |e| {
            e["payload"]["group"] = json!("a b")
        }),
        change(
            "identifier",
            "InfrastructureProvisioned",
            "payload.outputs.bad name",
            |e| e["payload"]["outputs"]["bad name"] = json!(1),
        ),
        change(
            "identifier",
            "BuildCompleted",
            "payload.module.container.buildArgs.bad key",
            |e| e["payload"]["module"]["container"]["buildArgs"]["bad key"] = json!("x"),
        ),
        change("semantic_version", "GeneratePipeline", "payload.templateVersion", |e| {
            e["payload"]["templateVersion"] = json!("latest")
        }),
        change("semantic_version", "PackagePublished", "payload.version", |e| {
            e["payload"]["version"] = json!("1.4")
        }),
        change("semantic_version", "ReleasePlanned", "payload.version", |e| {
            e["payload"]["version"] = json!("01.4.0")
        }),
        change("semantic_version", "GeneratePipeline", "payload.module.version", |e| {
            e["payload"]["module"]["version"] = json!("v1.4.0")
        }),
        change("stack_name", "ProvisionInfrastructure", "payload.stack", |e| {
            e["payload"]["stack"] = json!("a/b/c/d")
        }),
        change("stack_name", "InfrastructureProvisioned", "payload.stack", |e| {
            e["payload"]["stack"] = json!("/prod")
        }),
        // Tenants and environments.
        change("tenant_id", "ProvisionRepository", "tenantId", |e| {
            e["tenantId"] = json!("Contoso")
        }),
        change("tenant_id", "CreateCommit", "tenantId", |e| {
            e["tenantId"] = json!("-contoso")
        }),
        change("environment_name", "ApproveRelease", "payload.environment", |e| {
            e["payload"]["environment"] = json!("Prod Env")
        }),
        change(
            "environment_name",
            "ReleaseApprovalTimeout",
            "payload.environment",
            |e| e["payload"]["environment"] = json!("prod!"),
        ),
        change(
            "environment_name",
            "ReleasePlanned",
            "payload.environments[1].environment",
            |e| e["payload"]["environments"][1]["environment"] = json!("Staging"),
        ),
        change(
            "environment_name",
            "ProvisionInfrastructure",
            "payload.environment",
            |e| e["payload"]["environment"] = json!("dev-"),
        ),
        change(
            "environment_name",
            "GitOpsSynced",
            "payload.applied[1].namespace",
            |e| e["payload"]["applied"][1]["namespace"] = json!("Payments"),
        ),
        // Blobs.
        change("blob_container", "PipelineRunCompleted", "payload.log.container", |e| {
            e["payload"]["log"]["container"] = json!("Build_Logs")
        }),
        change(
            "blob_container",
            "BuildCompleted",
            "payload.artifacts[0].blob.container",
            |e| e["payload"]["artifacts"][0]["blob"]["container"] = json!("x"),
        ),
        change("blob_key", "PipelineRunCompleted", "payload.log.key", |e| {
            e["payload"]["log"]["key"] = json!("/etc/passwd")
        }),
        change("blob_key", "InfrastructureProvisioned", "payload.log.key", |e| {
            e["payload"]["log"]["key"] = json!("a/../b")
        }),
        change("media_type", "PipelineRunCompleted", "payload.log.contentType", |e| {
            e["payload"]["log"]["contentType"] = json!("text")
        }),
        change("media_type", "BuildCompleted", "payload.log.contentType", |e| {
            e["payload"]["log"]["contentType"] = json!("te xt/plain")
        }),
        // URLs.
        change("url", "PullRequestOpened", "payload.url", |e| {
            e["payload"]["url"] = json!("dev.azure.com/contoso")
        }),
        change("url", "PipelineRunStarted", "payload.url", |e| {
            e["payload"]["url"] = json!("ftp://x")
        }),
        change("url", "PackagePublished", "payload.url", |e| {
            e["payload"]["url"] = json!("https://a b")
        }),
        // Images, registries and packages.
        change("oci_repository", "ContainerImageBuilt", "payload.image", |e| {
            e["payload"]["image"] = json!("a..b")
        }),
        change(
            "oci_repository",
            "BuildCompleted",
            "payload.module.container.image",
            |e| e["payload"]["module"]["container"]["image"] = json!("Contoso/Payments"),
        ),
        change("oci_tag", "ContainerImageBuilt", "payload.tag", |e| {
            e["payload"]["tag"] = json!("-1.4.0")
        }),
        change("oci_tag", "DeploymentPromoted", "payload.image.tag", |e| {
            e["payload"]["image"]["tag"] = json!("t".repeat(129))
        }),
        change("registry_host", "ContainerImageBuilt", "payload.registry", |e| {
            e["payload"]["registry"] = json!("host:0")
        }),
        change(
            "registry_host",
            "BuildCompleted",
            "payload.module.container.registry",
            |e| e["payload"]["module"]["container"]["registry"] = json!("Not A Host"),
        ),
        change(
            "registry_host",
            "ReleasePlanned",
            "payload.artifacts.image.registry",
            |e| e["payload"]["artifacts"]["image"]["registry"] = json!("https://x.io"),
        ),
        change("nuget_package_id", "PackagePublished", "payload.packageId", |e| {
            e["payload"]["packageId"] = json!("Contoso..Payments")
        }),
        change(
            "nuget_package_id",
            "OpenPullRequest",
            "payload.module.package.packageId",
            |e| e["payload"]["module"]["package"]["packageId"] = json!("A B"),
        ),
        // Numbers and lists.
        change("positive", "PullRequestOpened", "payload.pullRequestId", |e| {
            e["payload"]["pullRequestId"] = json!(0)
        }),
        change("positive", "PollPipelineRun", "payload.poll", |e| {
            e["payload"]["poll"] = json!(0)
        }),
        change("positive", "ContainerImageBuilt", "payload.sizeBytes", |e| {
            e["payload"]["sizeBytes"] = json!(0)
        }),
        change("non_empty_list", "ReleasePlanned", "payload.environments", |e| {
            e["payload"]["environments"] = json!([])
        }),
        change(
            "non_empty_list",
            "InfrastructureDriftDetected",
            "payload.drifted",
            |e| e["payload"]["drifted"] = json!([]),
        ),
        change("unique", "OpenPullRequest", "payload.requiredChecks[1]", |e| {
            e["payload"]["requiredChecks"] = json!(["build", "build"])
        }),
        change("unique", "PullRequestOpened", "payload.requiredChecks[1]", |e| {
            e["payload"]["requiredChecks"] = json!(["build", "build"])
        }),
        change("max_items", "BuildCompleted", "payload.failedTests", |e| {
            e["payload"]["failedTests"] = json!(vec!["t"; 101])
        }),
        change("maximum", "Probe", "payload.workMs", |e| {
            e["payload"]["workMs"] = json!(60_001)
        }),
        // Rules of one message.
        change("base64", "CreateCommit", "payload.files[0].content", |e| {
            e["payload"]["files"][0]["encoding"] = json!("base64");
            e["payload"]["files"][0]["content"] = json!("not base64!");
        }),
        change("email", "CreateCommit", "payload.author.email", |e| {
            e["payload"]["author"]["email"] = json!("nobody")
        }),
        change("files_or_delete", "CreateCommit", "payload.files", |e| {
            e["payload"]["files"] = json!([])
        }),
        change("config_key", "ProvisionInfrastructure", "payload.config.bad key", |e| {
            e["payload"]["config"]["bad key"] = json!(1)
        }),
        change(
            "merge_commit_when_completed",
            "PullRequestOpened",
            "payload.mergeCommitSha",
            |e| {
                e["payload"]["status"] = json!("completed");
                if let Some(payload) = e["payload"].as_object_mut() {
                    payload.remove("mergeCommitSha");
                }
            },
        ),
        change(
            "approver_unless_timed_out",
            "ReleaseRejected",
            "payload.approver",
            |e| {
                e["payload"]["timedOut"] = json!(false);
                e["payload"]["approver"] = Value::Null;
            },
        ),
        change("image_or_package", "DeploymentPromoted", "payload.image", |e| {
            if let Some(payload) = e["payload"].as_object_mut() {
                payload.remove("image");
                payload.remove("package");
            }
        }),
    ]
}

/// Changes bosun refuses that no JSON Schema can express: the schemas
/// accept them, and their description says what bosun checks.
fn beyond_schema() -> Vec<(Change, &'static str)> {
    vec![
        (
            change("unique", "BuildCompleted", "payload.artifacts[2]", |e| {
                let first = e["payload"]["artifacts"][0].clone();
                if let Some(list) = e["payload"]["artifacts"].as_array_mut() {
                    list.push(first);
                }
            }),
            "each artifact `name` at most once",
        ),
        (
            change("unique", "ReleasePlanned", "payload.environments[3]", |e| {
                let first = e["payload"]["environments"][0].clone();
                if let Some(list) = e["payload"]["environments"].as_array_mut() {
                    list.push(first);
                }
            }),
            "each `environment` at most once",
        ),
        (
            change("unique", "ProvisionInfrastructure", "payload.resources[1]", |e| {
                let first = e["payload"]["resources"][0].clone();
                if let Some(list) = e["payload"]["resources"].as_array_mut() {
                    list.push(first);
                }
            }),
            "each `type` and `name` pair at most once",
        ),
        (
            change("not_before", "PipelineRunCompleted", "payload.finishedAt", |e| {
                e["payload"]["finishedAt"] = json!("2026-11-29T10:00:00Z");
            }),
            "not earlier than `startedAt`",
        ),
        (
            change("test_summary", "BuildCompleted", "payload.testSummary.total", |e| {
                let total = e["payload"]["testSummary"]["total"].as_u64().unwrap_or_default();
                e["payload"]["testSummary"]["total"] = json!(total + 1);
            }),
            "equals `passed + failed + skipped`",
        ),
        (
            change("distinct_branches", "OpenPullRequest", "payload.targetBranch", |e| {
                let source = e["payload"]["sourceBranch"].as_str().unwrap_or_default().to_owned();
                e["payload"]["targetBranch"] = json!(format!("refs/heads/{source}"));
            }),
            "differs from `sourceBranch`",
        ),
        (
            change("branch_name", "CreateCommit", "payload.branch", |e| {
                e["payload"]["branch"] = json!("é".repeat(200))
            }),
            "at most 255 bytes of UTF-8",
        ),
        (
            change("url", "PullRequestOpened", "payload.url", |e| {
                e["payload"]["url"] = json!(format!("https://{}", "é".repeat(1500)));
            }),
            "at most 2048 bytes of UTF-8",
        ),
    ]
}

/// Unusual changes that bosun accepts: the schemas must accept them too.
fn accepted() -> Vec<Change> {
    vec![
        change("branch_name", "CreateCommit", "", |e| {
            e["payload"]["branch"] = json!("refs/heads/release/1.0")
        }),
        change("branch_name", "CreateCommit", "", |e| {
            e["payload"]["branch"] = json!(format!("refs/heads/{}", "b".repeat(255)))
        }),
        change("repository_path", "CreateCommit", "", |e| {
            e["payload"]["files"][0]["path"] = json!(".github/workflows/ci.yml")
        }),
        change("files_or_delete", "CreateCommit", "", |e| {
            e["payload"]["files"] = json!([]);
            e["payload"]["delete"] = json!(["old.txt"]);
        }),
        change("base64", "CreateCommit", "", |e| {
            e["payload"]["files"][0]["encoding"] = json!("base64");
            e["payload"]["files"][0]["content"] = json!("YWJj\nZGVmZw==");
        }),
        change("optional", "CreateCommit", "", |e| {
            e["payload"]["baseBranch"] = Value::Null;
            e["payload"]["author"] = Value::Null;
        }),
        change("registry_host", "ContainerImageBuilt", "", |e| {
            e["payload"]["registry"] = json!("localhost:5000")
        }),
        change("semantic_version", "PackagePublished", "", |e| {
            e["payload"]["version"] = json!("1.4.0-rc.1+build.7")
        }),
        change("media_type", "BuildCompleted", "", |e| {
            e["payload"]["log"]["contentType"] = json!("application/vnd.oci.image.manifest.v1+json")
        }),
        change("url", "PipelineRunStarted", "", |e| {
            e["payload"]["url"] = json!("file:///var/lib/bosun/runs/4711")
        }),
        change("merge_commit_when_completed", "PullRequestOpened", "", |e| {
            e["payload"]["status"] = json!("completed");
            e["payload"]["mergeCommitSha"] = json!("3e4d5c6b7a8f9e1c2d3b4e5a6f0c4d8b9e1a2c3f");
        }),
        change("approver_unless_timed_out", "ReleaseRejected", "", |e| {
            e["payload"]["timedOut"] = json!(true);
            if let Some(payload) = e["payload"].as_object_mut() {
                payload.remove("approver");
            }
        }),
        change("image_or_package", "DeploymentPromoted", "", |e| {
            if let Some(payload) = e["payload"].as_object_mut() {
                payload.remove("image");
            }
        }),
        change("maximum", "Probe", "", |e| e["payload"]["workMs"] = json!(60_000)),
    ]
}

#[test]
fn index_lists_every_catalogued_type_with_a_schema_file() {
    let schemas = Schemas::load();
    let listed: BTreeSet<&str> = schemas.payloads.keys().map(String::as_str).collect();
    let catalogued: BTreeSet<&str> = CATALOGUE.iter().map(|spec| spec.message_type).collect();
    assert_eq!(listed, catalogued);
}

#[test]
fn every_sample_is_valid_by_the_schemas_and_by_bosun() {
    let schemas = Schemas::load();
    for spec in CATALOGUE {
        let envelope = sample_envelope(spec.message_type);
        let refusals = schemas.refusals(&envelope);
        assert!(
            refusals.is_empty(),
            "{}: the schemas refuse the sample: {refusals:?}",
            spec.message_type
        );
        assert_eq!(
            bosun_refuses(&envelope),
            None,
            "{}: bosun refuses the sample",
            spec.message_type
        );
    }
}

#[test]
fn refused_changes_are_refused_by_the_schemas_and_by_bosun_at_the_same_field() {
    let schemas = Schemas::load();
    let mut failures = Vec::new();
    for case in refused() {
        let mut envelope = sample_envelope(case.message_type);
        (case.change)(&mut envelope);
        let label = format!("{} {} ({})", case.message_type, case.field, case.rule);
        match bosun_refuses(&envelope) {
            Some(field) if field == case.field => {}
            other => failures.push(format!("{label}: bosun says {other:?}")),
        }
        let pointer = pointer_of(case.field);
        let refusals = schemas.refusals(&envelope);
        // A rule between fields is reported at the object holding them.
        let at_field = refusals.iter().any(|refusal| {
            let place = refusal.split(' ').next().unwrap_or_default();
            pointer == place || pointer.starts_with(&format!("{place}/"))
        });
        if !at_field {
            failures.push(format!(
                "{label}: {} does not refuse it at {pointer}: {refusals:?}",
                schemas.file_of(case.message_type)
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn what_no_schema_can_say_is_refused_by_bosun_and_described() {
    let schemas = Schemas::load();
    for (case, description) in beyond_schema() {
        let mut envelope = sample_envelope(case.message_type);
        (case.change)(&mut envelope);
        let label = format!("{} {} ({})", case.message_type, case.field, case.rule);
        assert_eq!(bosun_refuses(&envelope).as_deref(), Some(case.field), "{label}");
        let refusals = schemas.refusals(&envelope);
        assert!(
            refusals.is_empty(),
            "{label}: the schemas now refuse it; move it to the refused changes: {refusals:?}"
        );
        let file = schemas.file_of(case.message_type);
        let text = std::fs::read_to_string(schema_dir().join(file)).unwrap();
        assert!(
            text.contains(&format!("{BEYOND_SCHEMA} {description}")),
            "{label}: {file} does not say `{BEYOND_SCHEMA} {description}`"
        );
    }
}

#[test]
fn unusual_values_bosun_accepts_are_valid_by_the_schemas() {
    let schemas = Schemas::load();
    for case in accepted() {
        let mut envelope = sample_envelope(case.message_type);
        (case.change)(&mut envelope);
        let label = format!("{} ({})", case.message_type, case.rule);
        assert_eq!(bosun_refuses(&envelope), None, "{label}: bosun refuses it");
        let refusals = schemas.refusals(&envelope);
        assert!(refusals.is_empty(), "{label}: the schemas refuse it: {refusals:?}");
    }
}

/// Every rule function of `validate.rs` (those taking `field: &str` first)
/// has a change above, refused by the schemas or described as beyond them.
#[test]
fn every_rule_of_validate_rs_is_covered() {
    let source = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/validate.rs")).unwrap();
    let rules: BTreeSet<&str> = source
        .lines()
        .filter_map(|line| line.strip_prefix("pub fn "))
        .filter(|rest| rest.contains("(field: &str"))
        .filter_map(|rest| rest.split(['(', '<']).next())
        .collect();
    assert!(rules.len() > 20, "found only {rules:?}");
    let covered: BTreeSet<&str> = refused()
        .iter()
        .map(|case| case.rule)
        .chain(beyond_schema().iter().map(|(case, _)| case.rule))
        .collect();
    let missing: Vec<&&str> = rules.iter().filter(|rule| !covered.contains(**rule)).collect();
    assert!(missing.is_empty(), "rules without a refused change: {missing:?}");
}

/// Every sample written for every older wire (`BOSUN_COMPAT_VERSION`) is
/// valid by the schema of the version it is written at, as `index.json`
/// lists it: the frozen file its release wrote for an older version.
#[test]
fn every_sample_written_for_an_older_wire_is_valid_by_that_versions_schema() {
    let index = read_json("index.json");
    for message in samples::samples() {
        let spec = message.spec();
        let entry = index
            .as_array()
            .into_iter()
            .flatten()
            .find(|entry| entry["type"] == spec.message_type)
            .unwrap_or_else(|| panic!("{} not in index.json", spec.message_type));
        for wire in 1..=bosun_contracts::WIRE_VERSION {
            let envelope = Envelope::new(&message, uuid::Uuid::now_v7(), samples::TENANT_ID, "agent:test");
            let bytes = bosun_contracts::envelope::bytes_for_wire(&envelope.to_vec(), wire)
                .unwrap()
                .unwrap_or_else(|| envelope.to_vec());
            let sent: Value = serde_json::from_slice(&bytes).unwrap();
            let version = sent["schemaVersion"].as_u64().unwrap();
            let file = entry["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["schemaVersion"] == version)
                .and_then(|v| v["schema"].as_str())
                .unwrap_or_else(|| panic!("{} v{version} not in index.json", spec.message_type));
            let validator = jsonschema::draft202012::new(&read_json(file)).unwrap();
            let errors: Vec<String> = validator.iter_errors(&sent["payload"]).map(|e| e.to_string()).collect();
            assert!(
                errors.is_empty(),
                "{} for wire {wire} by {file}: {errors:?}",
                spec.message_type
            );
        }
    }
}
