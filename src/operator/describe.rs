//! One-line descriptions of messages for people: what a delivery's
//! messages say (the commit, the test counts, the digest, why a release
//! stopped), used by `bosun deliveries show` and `bosun demo`.

use bosun_contracts::Message;

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// Who decided on a release: the authenticated caller, with the name the
/// sender gave when it says more.
fn decided_by(authenticated: Option<&str>, claimed: Option<&str>) -> String {
    match (authenticated, claimed) {
        (Some(by), Some(name)) if by != name => format!("{by} (as \"{name}\")"),
        (Some(by), _) => by.to_owned(),
        (None, Some(name)) => format!("\"{name}\" (unauthenticated)"),
        (None, None) => "no one authenticated".to_owned(),
    }
}

/// What a message says, in one line, or `None` when its type says it all.
pub fn describe(message: &Message) -> Option<String> {
    let text = match message {
        Message::ProvisionRepository(m) => format!("repository {}", m.name),
        Message::RepositoryProvisioned(m) => format!(
            "{} {} ({})",
            m.repository.name,
            if m.created { "created" } else { "already existed" },
            m.repository.url
        ),
        Message::CreateCommit(m) => format!("{} file(s) to {}/{}", m.files.len(), m.repository, m.branch),
        Message::CommitCreated(m) => format!(
            "{} {} on {}{}",
            m.repository,
            short(&m.commit_sha),
            m.branch,
            if m.no_op { " (no change)" } else { "" }
        ),
        Message::OpenPullRequest(m) => format!("{} {} -> {}", m.repository, m.source_branch, m.target_branch),
        Message::PullRequestOpened(m) => format!(
            "#{} {} -> {} {:?}{}",
            m.pull_request_id,
            m.source_branch,
            m.target_branch,
            m.status,
            m.merge_commit_sha
                .as_deref()
                .map(|sha| format!(", merged as {}", short(sha)))
                .unwrap_or_default()
        )
        .to_lowercase(),
        Message::GeneratePipeline(m) => format!("{} {}", m.repository, m.module.module_id),
        Message::PipelineGenerated(m) => format!(
            "{} template {} at {}",
            m.pipeline_path,
            m.template_version,
            short(&m.commit_sha)
        ),
        Message::PipelineRunStarted(m) => format!(
            "run {} of {} for release {}",
            m.pipeline_run_id,
            short(&m.commit_sha),
            m.release_id
        ),
        Message::PollPipelineRun(m) => format!("run {} poll {}", m.pipeline_run_id, m.poll),
        Message::PollContainerBuild(m) => format!("ACR run {} of {}:{} poll {}", m.run_id, m.image, m.tag, m.poll),
        Message::PipelineRunCompleted(m) => format!(
            "run {} {:?} in {} ms{}",
            m.pipeline_run_id,
            m.result,
            m.duration_ms,
            m.failed_step
                .as_deref()
                .map(|step| format!(", failed step: {step}"))
                .unwrap_or_default()
        )
        .to_lowercase(),
        Message::BuildCompleted(m) => format!(
            "build {} {:?}: {} passed, {} failed, {} skipped{}",
            m.build_id,
            m.result,
            m.test_summary.passed,
            m.test_summary.failed,
            m.test_summary.skipped,
            if m.failed_tests.is_empty() {
                String::new()
            } else {
                format!(" (failed: {})", m.failed_tests.join(", "))
            }
        ),
        Message::ContainerImageBuilt(m) => m.artifact().reference(),
        Message::PackagePublished(m) => format!("{} {} to {}", m.package_id, m.version, m.feed),
        Message::ReleasePlanned(m) => format!("release {}", m.release_id),
        Message::ApproveRelease(m) => format!(
            "release {} in {} by {}",
            m.release_id,
            m.environment,
            decided_by(m.approved_by.as_deref(), m.on_behalf_of.as_deref())
        ),
        Message::RejectRelease(m) => format!(
            "release {} by {}: {}",
            m.release_id,
            decided_by(m.rejected_by.as_deref(), m.on_behalf_of.as_deref()),
            m.reason
        ),
        Message::ReleaseApprovalTimeout(m) => format!("release {} in {}", m.release_id, m.environment),
        Message::ReleaseDecisionRecorded(m) => format!(
            "release {}: {}",
            m.release_id,
            m.decisions
                .iter()
                .map(|entry| match &entry.environment {
                    Some(environment) => format!("{} in {environment}", entry.decision.as_str()),
                    None => entry.decision.as_str().to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Message::ReleaseWindowCheck(m) => format!("release {} in {}", m.release_id, m.environment),
        Message::OverrideReleaseWindow(m) => format!(
            "release {} in {} by {}: {}",
            m.release_id,
            m.environment,
            decided_by(m.overridden_by.as_deref(), m.on_behalf_of.as_deref()),
            m.reason
        ),
        Message::ReleaseVerificationCheck(m) => {
            format!("release {} in {}, sample {}", m.release_id, m.environment, m.attempt)
        }
        Message::ReleaseVerified(m) => format!("release {} in {}: {}", m.release_id, m.environment, m.summary),
        Message::RollbackEnvironment(m) => format!(
            "{} in {} to {} by {}: {}",
            m.module_id,
            m.environment,
            m.to_release_id.as_deref().unwrap_or("the last verified release"),
            decided_by(m.requested_by.as_deref(), m.on_behalf_of.as_deref()),
            m.reason
        ),
        Message::ReleaseApproved(m) => format!("release {} in {} by {}", m.release_id, m.environment, m.approver),
        Message::ReleaseRejected(m) => format!("release {}: {}", m.release_id, m.reason),
        Message::ReleaseBlocked(m) => format!("release {} stopped at {:?}: {}", m.release_id, m.failing_step, m.reason),
        Message::ProvisionInfrastructure(m) => format!("plan {} for {}", m.plan_id, m.environment),
        Message::InfrastructureProvisioned(m) => format!(
            "plan {} in {}: {} created, {} updated, {} replaced, {} deleted",
            m.plan_id, m.environment, m.changes.created, m.changes.updated, m.changes.replaced, m.changes.deleted
        ),
        Message::InfrastructureDriftDetected(m) => {
            format!("{} drifted resource(s) in {}", m.drifted.len(), m.environment)
        }
        Message::DeploymentPromoted(m) => format!("release {} to {}", m.release_id, m.environment),
        Message::ReconcileEnvironment(m) => m.environment.clone(),
        Message::GitOpsSynced(m) => format!(
            "{} at {}{}",
            m.environment,
            short(&m.commit_sha),
            if m.healthy { "" } else { " (unhealthy)" }
        ),
        Message::Probe(m) => format!(
            "probe {} #{}{}",
            m.group,
            m.sequence,
            if m.echo { "" } else { " (no echo)" }
        ),
        Message::ProbeEchoed(m) => format!("probe {} #{}", m.group, m.sequence),
    };
    Some(text)
}
