//! bosun as deployed on AKS, whole, on one machine: every Deployment of
//! `infra/kubernetes` started as its pod would be ([`cluster`]: the
//! rendered commands, the rendered and overlay environment, workload
//! identity through an Entra double, only addresses replaced), each turning
//! ready, then a delivery of the demo's module carried by those pods over
//! the Service Bus test broker, PostgreSQL and Azurite with
//! `BOSUN_ADAPTERS=azure`, from `ProvisionRepository` to `GitOpsSynced`,
//! through the Azure DevOps, Azure Artifacts, ACR Tasks and Argo CD
//! doubles and a scripted Pulumi ([`delivery`]):
//!
//! - plainly, then every pod stops cleanly on SIGTERM;
//! - with faults: each adapter's service answers a 429 (with
//!   `Retry-After`) and a 5xx at least once, and the pipeline monitor's
//!   process is SIGKILLed while the pipeline runs and started again, as
//!   the kubelet restarts a container.
//!
//! Both must end with one pull request, one pipeline and one run, one
//! package version, one ACR Tasks run with its image, one Pulumi update
//! and every message of the delivery handled once.
//!
//! Ignored unless Azurite runs (scripts/test starts it and runs this with
//! --ignored, one test at a time); it needs PostgreSQL too.

// Test code: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(unix)]

mod common;

#[path = "aks/cluster.rs"]
mod cluster;
#[path = "aks/delivery.rs"]
mod delivery;

use std::time::Instant;

use bosun_azure_doubles::entra::GrantKind;
use bosun_azure_doubles::{Fault, FaultRule, Faults, acr, argocd, artifacts, devops};
use cluster::{Cluster, PodEnv, client_id};

/// The scripted Pulumi on iac-provisioning's PATH, ahead of the machine's.
fn iac_path(cluster: &Cluster) -> PodEnv {
    let bin = delivery::scripted_pulumi(cluster.scratch.path());
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    PodEnv::from([("bosun-iac-provisioning", vec![("PATH".to_owned(), path)])])
}

#[test]
#[ignore = "needs Azurite (scripts/test starts it and runs this with --ignored) and PostgreSQL"]
fn every_deployment_starts_and_the_pods_carry_a_delivery_to_gitops_synced() {
    let started = Instant::now();
    // ACR Tasks builds the module's multi-stage Dockerfile with buildah when
    // scripts/test provides the container tools (it says so with
    // BOSUN_TEST_AKS_BUILDAH=1; they need root to install); else the ACR
    // double's own builder builds Dockerfile.scratch.
    let buildah = std::env::var("BOSUN_TEST_AKS_BUILDAH").is_ok_and(|value| value == "1");
    eprintln!(
        "aks: ACR Tasks builds with {}",
        if buildah {
            "buildah, into Debian's docker-registry"
        } else {
            "the double's own builder (no RUN)"
        }
    );
    let mut cluster = Cluster::new("aks_plain", Faults::default(), buildah);
    cluster.devops.on_run(delivery::pipeline_run);
    let extra = iac_path(&cluster);
    cluster.start(&extra);
    eprintln!(
        "aks: every Deployment ready after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let correlation = delivery::send_delivery(&cluster);
    delivery::wait_for(&cluster, &correlation, "GitOpsSynced", 1, delivery::DELIVERY_WITHIN);
    eprintln!("aks: delivered in {:.1}s", started.elapsed().as_secs_f64());
    delivery::assert_done_once(&cluster, &correlation);
    // Each pod used its own workload identity.
    let grants = cluster.entra.grants();
    for deployment in [
        "bosun-repository-provisioning",
        "bosun-container-build",
        "bosun-pipeline-monitor",
    ] {
        assert!(
            grants
                .iter()
                .any(|grant| grant.kind == GrantKind::FederatedAssertion && grant.client_id == client_id(deployment)),
            "{deployment}'s own identity got its tokens: {grants:?}"
        );
    }
    // Every pod signed in to PostgreSQL with the database identity's token.
    assert!(
        grants.iter().any(|grant| grant.client_id == cluster::DATABASE_CLIENT_ID
            && grant.scope == "https://ossrdbms-aad.database.windows.net/.default"),
        "the pods asked for PostgreSQL tokens of the database identity: {grants:?}"
    );
    report_usage(&cluster);
    cluster.stop();
    eprintln!("aks: plain delivery, {:.1}s in all", started.elapsed().as_secs_f64());
}

/// Prints each pod's peak memory and CPU time after the delivery, with
/// its rendered memory request and limit; a pod whose peak passed its
/// limit would have been OOM-killed on AKS.
fn report_usage(cluster: &Cluster) {
    for (name, peak_kib, cpu_s, (request, limit)) in cluster.usage() {
        let peak_mib = peak_kib as f64 / 1024.0;
        eprintln!(
            "aks: usage {name}: peak RSS {peak_mib:.1} MiB (request {request} MiB, limit {limit} MiB), CPU {cpu_s:.2} s"
        );
        assert!(
            peak_mib < limit as f64,
            "{name} peaked at {peak_mib:.1} MiB, over its rendered memory limit {limit} MiB"
        );
    }
}

/// A 429 and then a 503 for the first request of one adapter's operation.
fn throttle_then_fail(faults: &Faults, service: &'static str, method: &str, path: &str) {
    faults.add(FaultRule::new(service, path, Fault::Throttle { retry_after_secs: 1 }, 1).method(method));
    faults.add(FaultRule::new(service, path, Fault::Status(503), 1).method(method));
}

#[test]
#[ignore = "needs Azurite (scripts/test starts it and runs this with --ignored) and PostgreSQL"]
fn through_faults_and_a_sigkilled_consumer_the_delivery_completes_once() {
    let started = Instant::now();
    let faults = Faults::default();
    // Each adapter meets a 429 and a 5xx: repository provisioning, commit,
    // pull request, pipeline generation, the pipeline monitor, build
    // ingestion (test runs), container build (ACR Tasks), package
    // publishing (Azure Artifacts) and gitops-sync (Argo CD).
    throttle_then_fail(&faults, devops::SERVICE, "POST", "/_apis/git/repositories?");
    throttle_then_fail(&faults, devops::SERVICE, "POST", "/pushes");
    throttle_then_fail(&faults, devops::SERVICE, "POST", "/pullrequests");
    throttle_then_fail(&faults, devops::SERVICE, "POST", "/_apis/pipelines?");
    throttle_then_fail(&faults, devops::SERVICE, "GET", "/runs/");
    throttle_then_fail(&faults, devops::SERVICE, "GET", "/_apis/test/runs");
    throttle_then_fail(&faults, acr::SERVICE, "POST", "/scheduleRun");
    throttle_then_fail(&faults, artifacts::SERVICE, "PUT", "/nuget/v2");
    throttle_then_fail(&faults, argocd::SERVICE, "POST", "/sync");
    let mut cluster = Cluster::new("aks_faults", faults.clone(), false);
    // The run stays in progress until the test has killed the monitor.
    cluster.devops.on_run(|run| delivery::pipeline_run(run).held());
    let extra = iac_path(&cluster);
    cluster.start(&extra);
    eprintln!(
        "aks: every Deployment ready after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let correlation = delivery::send_delivery(&cluster);
    delivery::wait_for(
        &cluster,
        &correlation,
        "PipelineRunStarted",
        1,
        delivery::DELIVERY_WITHIN,
    );
    // The monitor has a poll of the run in flight: kill it, start it
    // again, and let the run finish.
    std::thread::sleep(std::time::Duration::from_secs(3));
    cluster.kill_and_restart("bosun-pipeline-monitor");
    let project = cluster.pod_env["BOSUN_AZURE_DEVOPS_PROJECT"].clone();
    let runs = cluster.devops.runs(&project);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(cluster.devops.finish_run(runs[0].id));
    delivery::wait_for(&cluster, &correlation, "GitOpsSynced", 1, delivery::DELIVERY_WITHIN);
    eprintln!(
        "aks: delivered through faults in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    delivery::assert_done_once(&cluster, &correlation);
    let pending = faults.pending();
    assert!(pending.is_empty(), "every planned fault fired: {pending:#?}");
    let fired = cluster.journal.faults();
    eprintln!("aks: {} faults answered: {fired:?}", fired.len());
    report_usage(&cluster);
    cluster.stop();
    eprintln!(
        "aks: delivery with faults and a SIGKILL, {:.1}s in all",
        started.elapsed().as_secs_f64()
    );
}
