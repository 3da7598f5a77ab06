//! bosun's Argo CD side of the Azure GitOps adapter
//! ([`AzureEnvironments::reconcile`]) against the Argo CD double with
//! state (`bosun_azure_doubles::argocd`): reconciles repeated as the
//! gitops-sync saga repeats them (after `Retry-After` when throttled,
//! again after a transient error, again while the sync is still running)
//! until the environment reports the promoted commit. Every request bosun
//! sent is checked by the double against Argo CD's swagger definitions
//! (`testing/azure-doubles/conformance/argocd-swagger-subset.json`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bosun_azure_doubles::argocd::{ArgoCdDouble, ManagedResource, SERVICE};
use bosun_azure_doubles::{Auth, Fault, FaultRule, Faults, Journal};
use bosun_consumers::delivery::azure::devops::{AzureDevOpsAuth, AzureDevOpsConfig};
use bosun_consumers::gitops_sync::azure::{ArgoCdConfig, AzureEnvironments, AzureGitOpsConfig, TENANT_LABEL};
use bosun_consumers::gitops_sync::{EnvironmentReport, Environments, GitOpsError, ReconcileRequest};
use bosun_contracts::messages::SyncAction;
use serde_json::{Value, json};

const TOKEN: &str = "argocd-api-token";
const PROMOTED: &str = "3c1f0a9e2b7d4c6f8a1e0d3b5c7e9f1a2b4c6d8e";
const EARLIER: &str = "0a0b0c0d0e0f101112131415161718191a1b1c1d";

async fn argo() -> ArgoCdDouble {
    ArgoCdDouble::start(Faults::default(), Journal::default(), Auth::default().bearer(TOKEN))
        .await
        .unwrap()
}

fn adapter(argo: &ArgoCdDouble) -> AzureEnvironments {
    let mut argo_cd = ArgoCdConfig::new(argo.base_url(), TOKEN);
    argo_cd.application_prefix = "bosun-".to_owned();
    AzureEnvironments::new(&AzureGitOpsConfig {
        // Reconciling never calls Azure DevOps (only writing the desired
        // state does); nothing listens here.
        azure_devops: AzureDevOpsConfig::new(
            "http://127.0.0.1:9/contoso",
            "Delivery",
            AzureDevOpsAuth::Pat("pat".into()),
        ),
        argo_cd,
    })
    .unwrap()
}

fn application(name: &str, tenant: Option<&str>) -> Value {
    let mut app = json!({
        "metadata": { "name": name },
        "spec": {
            "project": "default",
            "source": { "repoURL": "https://dev.azure.com/contoso/Delivery/_git/environments", "path": "dev", "targetRevision": "main" },
            "destination": { "server": "https://kubernetes.default.svc", "namespace": "payments" },
        }
    });
    if let Some(tenant) = tenant {
        app["metadata"]["labels"] = json!({ TENANT_LABEL: tenant });
    }
    app
}

fn request(commit: Option<&str>) -> ReconcileRequest {
    ReconcileRequest {
        tenant: "contoso".into(),
        environment: "dev".into(),
        repository: "environments".into(),
        commit_sha: commit.map(str::to_owned),
    }
}

/// Reconciles as the saga does until the environment runs `commit`: a
/// throttle waits its `Retry-After`, a transient error and a report of
/// another commit are tried again; the report and what was met on the way.
async fn reconcile_until(environments: &AzureEnvironments, commit: &str) -> (EnvironmentReport, Vec<String>) {
    let mut seen = Vec::new();
    for _ in 0..8 {
        match environments.reconcile(&request(Some(commit))).await {
            Ok(report) if report.commit_sha.as_deref() == Some(commit) => return (report, seen),
            Ok(report) => seen.push(format!("not yet: {:?}", report.commit_sha)),
            Err(GitOpsError::Throttled { after, .. }) => {
                seen.push(format!("throttled {after:?}"));
                tokio::time::sleep(after.min(Duration::from_secs(2))).await;
            }
            Err(err) if err.is_retryable() => seen.push(format!("transient: {err}")),
            Err(err) => panic!("permanent: {err}; after {seen:#?}"),
        }
    }
    panic!("the environment never ran {commit}: {seen:#?}");
}

/// A promotion reaches the environment through a throttled read (429) and
/// a failed sync (502): the first sync accepted is followed while it runs
/// (the next reconcile's sync is refused as "another operation is already
/// in progress" and only observes), then the application is `Synced` and
/// `Healthy` at the promoted commit, with one sync taken at that commit
/// and every request of bosun's as the swagger defines it.
#[tokio::test]
async fn a_promotion_is_synced_to_the_promoted_revision_through_faults() {
    let argo = argo().await;
    argo.create_application(application("bosun-contoso.dev", Some("contoso")))
        .unwrap();
    argo.set_resources(
        "bosun-contoso.dev",
        vec![
            ManagedResource::new("apps", "v1", "Deployment", "payments", "payments-api"),
            ManagedResource::new("", "v1", "Service", "payments", "payments-api"),
        ],
    );
    // Argo CD takes a while: two reads see the sync running.
    argo.set_reads_while_running(2);
    let faults = argo.running().faults();
    faults.add(
        FaultRule::new(
            SERVICE,
            "/bosun-contoso.dev",
            Fault::Throttle { retry_after_secs: 1 },
            1,
        )
        .method("GET"),
    );
    faults.add(FaultRule::new(SERVICE, "/sync", Fault::Status(502), 1));
    let environments = adapter(&argo);

    let (report, seen) = reconcile_until(&environments, PROMOTED).await;
    // Two reads see the sync running: the one after asking for it, and the
    // next reconcile's, which observes it without asking again.
    assert_eq!(seen.len(), 4, "{seen:#?}");
    assert!(seen[0].starts_with("throttled 1s"), "{seen:#?}");
    assert!(seen[1].starts_with("transient"), "{seen:#?}");
    assert_eq!(
        seen[2..],
        ["not yet: None", "not yet: None"],
        "the sync was still running"
    );
    assert!(report.healthy);
    let applied: Vec<(&str, SyncAction)> = report.applied.iter().map(|r| (r.kind.as_str(), r.action)).collect();
    assert_eq!(
        applied,
        vec![("Deployment", SyncAction::Created), ("Service", SyncAction::Created)]
    );
    assert!(faults.pending().is_empty());

    let app = argo.application("bosun-contoso.dev").unwrap();
    assert_eq!(app["status"]["sync"]["status"], "Synced");
    assert_eq!(app["status"]["sync"]["revision"], PROMOTED);
    assert_eq!(app["status"]["health"]["status"], "Healthy");
    assert_eq!(app["status"]["history"].as_array().unwrap().len(), 1);
    assert_eq!(
        argo.syncs("bosun-contoso.dev"),
        vec![json!({ "prune": true, "revision": PROMOTED })],
        "one sync taken, at the promoted commit"
    );
    let violations = argo.violations();
    assert!(
        violations.is_empty(),
        "bosun's requests depart from the swagger: {violations:#?}"
    );

    // Reconciling the commit the environment already runs (a retry, a
    // redelivery) starts no second sync and reports what the sync applied.
    let (again, seen) = reconcile_until(&environments, PROMOTED).await;
    assert!(seen.is_empty(), "{seen:#?}");
    assert_eq!(again.applied, report.applied);
    assert!(again.healthy);
    assert_eq!(argo.syncs("bosun-contoso.dev").len(), 1, "no second sync");
    assert!(argo.violations().is_empty(), "{:#?}", argo.violations());
}

/// A failed sync or a degraded environment is not reported as running the
/// commit healthy: the failed operation reports no commit, and a commit
/// that runs degraded is reported unhealthy.
#[tokio::test]
async fn a_failed_sync_reports_no_commit_and_a_degraded_environment_is_unhealthy() {
    let argo = argo().await;
    argo.set_reads_while_running(0);
    argo.create_application(application("bosun-contoso.dev", Some("contoso")))
        .unwrap();
    argo.fail_next_sync("bosun-contoso.dev", "one or more objects failed to apply");
    let environments = adapter(&argo);
    let report = environments.reconcile(&request(Some(PROMOTED))).await.unwrap();
    assert_eq!(report.commit_sha, None);
    assert!(!report.healthy);
    argo.set_health("bosun-contoso.dev", "Degraded");
    let (report, _) = reconcile_until(&environments, EARLIER).await;
    assert!(!report.healthy);
    assert_eq!(
        argo.application("bosun-contoso.dev").unwrap()["status"]["sync"]["revision"],
        EARLIER
    );
    assert!(argo.violations().is_empty(), "{:#?}", argo.violations());
}

/// Tenants: the tenant's application missing is `403` from Argo CD (no
/// project named), so bosun falls back to the application named before
/// tenants only when it is labelled for the tenant; labelled for another
/// tenant, it is refused and never synced.
#[tokio::test]
async fn the_application_named_before_tenants_is_synced_only_for_its_tenant() {
    let argo = argo().await;
    argo.set_reads_while_running(0);
    argo.create_application(application("bosun-dev", Some("globex")))
        .unwrap();
    let environments = adapter(&argo);
    let err = environments.reconcile(&request(Some(PROMOTED))).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(err.to_string().contains("globex"), "{err}");
    assert!(argo.syncs("bosun-dev").is_empty());

    argo.create_application(application("bosun-dev", Some("contoso")))
        .unwrap();
    let (report, _) = reconcile_until(&environments, PROMOTED).await;
    assert_eq!(report.commit_sha.as_deref(), Some(PROMOTED));
    assert_eq!(argo.syncs("bosun-dev").len(), 1);
    assert_eq!(argo.names(), vec!["bosun-dev".to_owned()]);
}
