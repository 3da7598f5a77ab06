//! Build ingestion: `BuildCompleted` (consumer `build-ingestion`), the
//! normalized result of a pipeline run: test counts from JUnit, logs and
//! artifacts in the blob store, and the module's package and container
//! settings for the consumers that act on a build.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::blob::{ArtifactKind, ArtifactRef, BlobRef};
use super::module::ModuleMetadata;
use super::pipeline::PipelineResult;
use crate::schema_rules as rule;
use crate::validate::{self, FieldError, Validate};

/// Most failing test names listed on a `BuildCompleted`; the full list is in
/// the test report blob.
pub const MAX_FAILED_TESTS: usize = 100;
/// Longest failing test name.
pub const MAX_TEST_NAME_CHARS: usize = 1024;

/// Test counts of a build. `total` is `passed + failed + skipped`; errored
/// tests count as failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestSummary {
    /// Tests run or skipped.
    #[schemars(transform = rule::also_checked("equals `passed + failed + skipped`"))]
    pub total: u32,
    /// Tests that passed.
    pub passed: u32,
    /// Tests that failed or errored.
    pub failed: u32,
    /// Tests skipped or ignored.
    pub skipped: u32,
}

impl TestSummary {
    /// Whether no test failed.
    pub fn all_passed(&self) -> bool {
        self.failed == 0
    }
}

impl Validate for TestSummary {
    fn validate(&self) -> Result<(), FieldError> {
        let sum = u64::from(self.passed) + u64::from(self.failed) + u64::from(self.skipped);
        if sum != u64::from(self.total) {
            return Err(FieldError::new(
                "total",
                format!("is {} but passed + failed + skipped is {sum}", self.total),
            ));
        }
        Ok(())
    }
}

/// A pipeline run's results are ingested: tests counted, logs and artifacts
/// stored. Idempotent on `buildId`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildCompleted {
    /// Id of the build record, derived from the pipeline run so re-ingesting
    /// the same run gives the same id.
    #[schemars(transform = rule::identifier)]
    pub build_id: String,
    /// The pipeline run ingested.
    #[schemars(transform = rule::identifier)]
    pub pipeline_run_id: String,
    /// The release this build is a candidate for.
    #[schemars(transform = rule::identifier)]
    pub release_id: String,
    /// Repository name.
    #[schemars(transform = rule::repository_name)]
    pub repository: String,
    /// Branch built.
    #[schemars(transform = rule::branch_name)]
    pub branch: String,
    /// Commit built.
    #[schemars(transform = rule::git_sha)]
    pub commit_sha: String,
    /// How the run ended.
    pub result: PipelineResult,
    /// Test counts from the JUnit files.
    pub test_summary: TestSummary,
    /// Names of failing tests (at most 100; the report has them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::max_items(MAX_FAILED_TESTS), transform = rule::each(rule::text(MAX_TEST_NAME_CHARS)))]
    pub failed_tests: Vec<String>,
    /// The build log.
    pub log: BlobRef,
    /// The normalized test report (JSON), when the run wrote JUnit files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_report: Option<BlobRef>,
    /// Artifacts the build produced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = rule::also_checked("each artifact `name` at most once"))]
    pub artifacts: Vec<ArtifactRef>,
    /// The module built, with its package and container settings.
    pub module: ModuleMetadata,
    /// When ingestion finished.
    #[serde(with = "time::serde::rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub completed_at: OffsetDateTime,
}

impl BuildCompleted {
    /// The artifacts of one kind.
    pub fn artifacts_of(&self, kind: ArtifactKind) -> impl Iterator<Item = &ArtifactRef> {
        self.artifacts.iter().filter(move |artifact| artifact.kind == kind)
    }
}

impl Validate for BuildCompleted {
    fn validate(&self) -> Result<(), FieldError> {
        validate::identifier("buildId", &self.build_id)?;
        validate::identifier("pipelineRunId", &self.pipeline_run_id)?;
        validate::identifier("releaseId", &self.release_id)?;
        validate::repository_name("repository", &self.repository)?;
        validate::branch_name("branch", &self.branch)?;
        validate::git_sha("commitSha", &self.commit_sha)?;
        self.test_summary
            .validate()
            .map_err(|err| validate::nested("testSummary", err))?;
        if self.failed_tests.len() > MAX_FAILED_TESTS {
            return Err(FieldError::new(
                "failedTests",
                format!(
                    "lists {} tests, over the limit of {MAX_FAILED_TESTS}",
                    self.failed_tests.len()
                ),
            ));
        }
        for (index, name) in self.failed_tests.iter().enumerate() {
            validate::text(&format!("failedTests[{index}]"), name, MAX_TEST_NAME_CHARS)?;
        }
        self.log.validate().map_err(|err| validate::nested("log", err))?;
        if let Some(report) = &self.test_report {
            report.validate().map_err(|err| validate::nested("testReport", err))?;
        }
        for (index, artifact) in self.artifacts.iter().enumerate() {
            artifact
                .validate()
                .map_err(|err| validate::nested_item("artifacts", index, err))?;
        }
        validate::unique("artifacts", self.artifacts.iter().map(|a| a.name.as_str()))?;
        self.module.validate().map_err(|err| validate::nested("module", err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use crate::samples;

    #[test]
    fn the_sample_is_valid() {
        assert_eq!(samples::build_completed().validate(), Ok(()));
    }

    #[test]
    fn test_summary_must_add_up() {
        let summary = TestSummary {
            total: 10,
            passed: 7,
            failed: 2,
            skipped: 1,
        };
        assert_eq!(summary.validate(), Ok(()));
        assert!(!summary.all_passed());
        let mut event = samples::build_completed();
        event.test_summary.total += 1;
        assert_eq!(event.validate().unwrap_err().field, "testSummary.total");
    }

    #[test]
    fn bad_fields_are_named() {
        let mut event = samples::build_completed();
        event.build_id = "build 1".into();
        assert_eq!(event.validate().unwrap_err().field, "buildId");

        let mut event = samples::build_completed();
        event.artifacts[0].blob.container = "x".into();
        assert_eq!(event.validate().unwrap_err().field, "artifacts[0].blob.container");

        let mut event = samples::build_completed();
        let first = event.artifacts[0].clone();
        event.artifacts.push(first);
        assert!(event.validate().unwrap_err().field.starts_with("artifacts["));

        let mut event = samples::build_completed();
        event.failed_tests = vec!["t".into(); MAX_FAILED_TESTS + 1];
        assert_eq!(event.validate().unwrap_err().field, "failedTests");

        let mut event = samples::build_completed();
        if let Some(container) = event.module.container.as_mut() {
            container.registry = "Not A Host".into();
        }
        assert_eq!(event.validate().unwrap_err().field, "module.container.registry");
    }

    #[test]
    fn decoding_names_nested_payload_fields() {
        let mut payload = Message::from(samples::build_completed()).to_payload();
        payload["testSummary"]["passed"] = serde_json::json!(-1);
        let err = Message::from_type_and_payload("BuildCompleted", &payload).unwrap_err();
        assert_eq!(err.field(), Some("payload.testSummary.passed"), "{err}");
    }

    #[test]
    fn artifacts_are_found_by_kind() {
        let event = samples::build_completed();
        assert_eq!(event.artifacts_of(ArtifactKind::Package).count(), 1);
        assert_eq!(event.artifacts_of(ArtifactKind::Report).count(), 0);
    }
}
