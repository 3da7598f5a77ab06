//! gitops-sync: reconciles an environment with its desired state in Git
//! (the GitOps saga).

use std::sync::Arc;

use bosun_consumers::Consumer;
use bosun_consumers::gitops_sync::azure::{ArgoCdConfig, AzureEnvironments, AzureGitOpsConfig};
use bosun_consumers::gitops_sync::{GitOpsSync, NAME, local, saga_of};
use bosun_sagas::gitops::GitOpsSaga;
use bosun_sagas::{SagaKind, StateMachine};

use super::{Registration, RegistryError, SagaRegistration, Shared, adapter_error, azure_config};
use crate::runtime::config::{AdapterKind, Settings};

pub(super) const REGISTRATION: Registration = Registration {
    name: NAME,
    build,
    keeps_blobs: false,
    blob_containers: &[],
    settings: &[
        "BOSUN_RECONCILE_MS",
        "BOSUN_RECONCILE_MAX_MS",
        "BOSUN_ARGOCD_URL",
        "BOSUN_ARGOCD_TOKEN",
    ],
    // Its messages are handled one saga key at a time (Service Bus sessions).
    // An environment's saga never finishes: it is never pruned.
    saga: Some(SagaRegistration {
        kind: SagaKind::Gitops.as_str(),
        key: saga_of,
        diagram: |settings| gitops_saga(settings).diagram(),
        finished: None,
    }),
};

fn build(settings: &Settings, shared: &Shared) -> Result<Arc<dyn Consumer>, RegistryError> {
    let delivery = &settings.delivery;
    let azure = match &settings.adapters {
        AdapterKind::Local => {
            return Ok(Arc::new(
                GitOpsSync::new(
                    local::LocalEnvironments::with_host(Arc::clone(&shared.git), settings.data_dir.join("environments")),
                    gitops_saga(settings),
                    delivery.reconcile,
                    delivery.reconcile_max,
                )
                .with_governance(Arc::clone(&shared.governance)),
            ));
        }
        AdapterKind::Azure(azure) => azure,
    };
    let argo = azure.argo_cd.as_ref().ok_or(RegistryError::MissingSetting {
        consumer: NAME,
        settings: &["BOSUN_ARGOCD_URL", "BOSUN_ARGOCD_TOKEN"],
        what: "the Argo CD server that reconciles the environments (https://argocd.example.com) and an API token \
               of an account allowed to sync its applications",
    })?;
    let config = AzureGitOpsConfig {
        azure_devops: azure_config(azure)?,
        argo_cd: ArgoCdConfig::new(argo.url.clone(), argo.token.expose().to_owned()),
    };
    let environments = AzureEnvironments::new(&config).map_err(|err| adapter_error(NAME, &err))?;
    Ok(Arc::new(
        GitOpsSync::new(environments, gitops_saga(settings), delivery.reconcile, delivery.reconcile_max)
            .with_governance(Arc::clone(&shared.governance)),
    ))
}

/// The GitOps saga with the configured reconcile backoff. While
/// `BOSUN_COMPAT_VERSION` says a previous release may be running beside
/// this one, promotions are not queued (a previous release would read a
/// queued state and save it without its queue): a newer promotion
/// supersedes the one in flight, as it did before.
fn gitops_saga(settings: &Settings) -> GitOpsSaga {
    GitOpsSaga::new()
        .with_reconcile_backoff(settings.delivery.reconcile, settings.delivery.reconcile_max)
        .queueing_promotions(settings.message_versions.compat_version.is_none())
}
