//! Collecting a release: the build and the artifacts its module requires
//! arrive in any order; a failed build (or one with nothing to deploy)
//! blocks the release; once all are in, the release is planned and enters
//! its first environment.

use std::fmt::Write as _;

use bosun_contracts::messages::{
    BuildCompleted, ContainerImageBuilt, PackagePublished, PipelineResult, ReleaseArtifacts, ReleaseDecision,
    ReleasePlanned, ReleaseStep,
};

use super::apply::Step;
use super::state::step;
use super::{BuildRecord, ReleasePhase};
use crate::SagaError;

/// Failing test names quoted in the reason of a blocked build.
const QUOTED_FAILED_TESTS: usize = 10;

impl Step<'_> {
    pub(super) fn on_build_completed(&mut self, build: &BuildCompleted) -> Result<(), SagaError> {
        if self.state.phase.is_final() || self.state.build.is_some() {
            // The first successful build is the one the release ships.
            return Ok(());
        }
        let blocked = self.state.phase == ReleasePhase::Blocked;
        if !build.result.is_success() || !build.test_summary.all_passed() {
            if !blocked {
                self.block(ReleaseStep::Build, build_failure(build), None);
                self.note(format!("build {} failed: the release is blocked", build.build_id));
                self.enter(ReleasePhase::Blocked)?;
            }
            return Ok(());
        }
        if build.module.container.is_none() && build.module.package.is_none() {
            if !blocked {
                let reason = format!(
                    "module `{}` declares neither a container image nor a package: there is nothing to promote",
                    build.module.module_id
                );
                self.block(ReleaseStep::Promotion, reason, None);
                self.note(format!(
                    "build {} has nothing to deploy: the release is blocked",
                    build.build_id
                ));
                self.enter(ReleasePhase::Blocked)?;
            }
            return Ok(());
        }
        let record = BuildRecord::of(build);
        self.note(format!(
            "build {} of commit {} recorded (image {}, package {})",
            record.build_id,
            record.commit_sha,
            if record.needs_image { "required" } else { "not required" },
            if record.needs_package {
                "required"
            } else {
                "not required"
            },
        ));
        self.state.build = Some(record);
        if blocked {
            self.state.blocked = None;
            self.note("a successful re-run unblocks the release");
            self.enter(ReleasePhase::Collecting)?;
        }
        self.try_plan()
    }

    pub(super) fn on_image(&mut self, image: &ContainerImageBuilt) -> Result<(), SagaError> {
        if self.state.phase.is_final() || self.state.plan.is_some() || self.state.images.contains_key(&image.build_id) {
            return Ok(());
        }
        let artifact = image.artifact();
        self.note(format!(
            "image {} of build {} recorded",
            artifact.reference(),
            image.build_id
        ));
        self.state.images.insert(image.build_id.clone(), artifact);
        self.try_plan()
    }

    pub(super) fn on_package(&mut self, package: &PackagePublished) -> Result<(), SagaError> {
        if self.state.phase.is_final()
            || self.state.plan.is_some()
            || self.state.packages.contains_key(&package.build_id)
        {
            return Ok(());
        }
        self.note(format!(
            "package {} {} of build {} recorded",
            package.package_id, package.version, package.build_id
        ));
        self.state.packages.insert(package.build_id.clone(), package.artifact());
        self.try_plan()
    }

    /// Plans the release once the build and its required artifacts are in.
    pub(super) fn try_plan(&mut self) -> Result<(), SagaError> {
        if self.state.phase != ReleasePhase::Collecting || self.state.plan.is_some() {
            return Ok(());
        }
        let Some(build) = self.state.build.clone() else {
            return Ok(());
        };
        let image = match (build.needs_image, self.state.images.get(&build.build_id)) {
            (false, _) => None,
            (true, Some(image)) => Some(image.clone()),
            (true, None) => return Ok(()),
        };
        let package = match (build.needs_package, self.state.packages.get(&build.build_id)) {
            (false, _) => None,
            (true, Some(package)) => Some(package.clone()),
            (true, None) => return Ok(()),
        };
        self.policy
            .validate()
            .map_err(|err| self.refuse(format!("cannot plan release {}: {err}", self.release_id)))?;
        let plan = ReleasePlanned {
            release_id: self.release_id.clone(),
            module_id: build.module_id.clone(),
            version: build.version.clone(),
            environments: self.policy.planned_environments(),
            artifacts: ReleaseArtifacts {
                build: build.artifact(),
                image,
                package,
            },
            planned_at: self.now,
        };
        self.note(format!(
            "planned: {}",
            plan.environments
                .iter()
                .map(|planned| planned.environment.as_str())
                .collect::<Vec<_>>()
                .join(" then ")
        ));
        if !self.state.emitted.contains(&step::planned()) {
            let mut decision = self.decision(ReleaseDecision::Requested, None);
            decision.by = self.state.requested_by.first().cloned();
            decision.identities = self.state.requested_by.clone();
            decision.reason = Some(format!(
                "build {} of {} at {}",
                plan.artifacts.build.build_id, plan.artifacts.build.repository, plan.artifacts.build.commit_sha
            ));
            self.record(decision);
        }
        self.send(step::planned(), plan.clone().into());
        self.state.plan = Some(plan);
        self.enter_environment(0)
    }
}

/// The reason of a blocked build: what failed, and which tests.
fn build_failure(build: &BuildCompleted) -> String {
    let outcome = match build.result {
        PipelineResult::Succeeded => "succeeded",
        PipelineResult::Failed => "failed",
        PipelineResult::Canceled => "was canceled",
    };
    let short_sha: String = build.commit_sha.chars().take(12).collect();
    let mut reason = format!(
        "build {} (pipeline run {}, commit {short_sha}) {outcome}",
        build.build_id, build.pipeline_run_id
    );
    let summary = build.test_summary;
    if summary.failed > 0 {
        let _ = write!(reason, "; {} of {} tests failed", summary.failed, summary.total);
        if !build.failed_tests.is_empty() {
            let quoted: Vec<&str> = build
                .failed_tests
                .iter()
                .take(QUOTED_FAILED_TESTS)
                .map(String::as_str)
                .collect();
            let _ = write!(reason, ": {}", quoted.join(", "));
            let more = build.failed_tests.len().saturating_sub(QUOTED_FAILED_TESTS);
            if more > 0 {
                let _ = write!(reason, " and {more} more");
            }
        }
    }
    reason
}
