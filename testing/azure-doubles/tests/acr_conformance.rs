//! The ACR Tasks and Entra doubles driven by Microsoft's Python SDKs
//! (`azure-mgmt-containerregistry` at api-version 2019-06-01-preview and
//! `azure-identity`, pinned in scripts/azure-python-sdk):
//! conformance/acr.py gets tokens with `ClientSecretCredential` and
//! `WorkloadIdentityCredential` (MSAL's instance discovery and OpenID
//! metadata included), is refused a wrong secret with its AADSTS code,
//! then uploads a context, schedules a `DockerBuildRequest`, follows the
//! run to `Succeeded` with its `outputImages`, reads its log through
//! `get_log_sas_url`, and gets `ResourceNotFoundError` for an unknown run
//! and registry, printing a line per check. Ignored unless the SDKs are
//! installed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use bosun_azure_doubles::acr::{AcrConfig, AcrDouble, RunStatus};
use bosun_azure_doubles::entra::{
    EntraDouble, FederatedCredential, FederatedToken, GrantKind, TOKEN_EXCHANGE_AUDIENCE,
};
use bosun_azure_doubles::{Auth, Faults, Journal, TokenBook};

const PYTHON_VAR: &str = "BOSUN_TEST_AZURE_PYTHON_SDK";
const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "6c3c2b4e-7a8d-4c1e-9f0a-1b2c3d4e5f60";
const SECRET: &str = "conformance-secret";
const ISSUER: &str = "https://oidc.prod-aks.azure.com/conformance/";
const SUBJECT: &str = "system:serviceaccount:bosun:bosun";
const SUBSCRIPTION: &str = "4385cf00-2d3a-425a-832f-f4285b1c9dce";
/// The checks conformance/acr.py prints.
const CHECKS: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Microsoft's Python SDKs: scripts/azure-python-sdk install (scripts/test runs it)"]
async fn microsofts_python_sdks_conform() {
    let python = std::env::var(PYTHON_VAR).unwrap_or_else(|_| {
        panic!(
            "{PYTHON_VAR} is not set: set it to the python that has azure-mgmt-containerregistry and azure-identity, \
             {PYTHON_VAR}=\"$(scripts/azure-python-sdk install)\" (scripts/test does this)"
        )
    });
    let faults = Faults::default();
    let journal = Journal::default();
    let book = TokenBook::default();
    let entra = EntraDouble::start(faults.clone(), journal.clone(), book.clone())
        .await
        .unwrap();
    entra.add_client_secret(TENANT, CLIENT, SECRET);
    entra.add_federated_credential(
        TENANT,
        CLIENT,
        FederatedCredential {
            issuer: ISSUER.into(),
            subject: SUBJECT.into(),
            audience: TOKEN_EXCHANGE_AUDIENCE.into(),
        },
    );
    let mut config = AcrConfig::new(SUBSCRIPTION, "delivery-rg", "contoso");
    config.entra = Some(book.clone());
    let acr = AcrDouble::start(faults, journal, Auth::default().entra(book), config)
        .await
        .unwrap();
    let dir = tempfile_dir();
    let token_file = dir.join("azure-identity-token");
    std::fs::write(&token_file, FederatedToken::new(ISSUER, SUBJECT).jwt()).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/acr.py");
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(&script)
        .env("ENTRA_URL", entra.base_url())
        .env("ARM_URL", acr.base_url())
        .env("TENANT_ID", TENANT)
        .env("CLIENT_ID", CLIENT)
        .env("CLIENT_SECRET", SECRET)
        .env("AZURE_FEDERATED_TOKEN_FILE", &token_file)
        .env("SUBSCRIPTION", SUBSCRIPTION)
        .env("RESOURCE_GROUP", "delivery-rg")
        .env("REGISTRY", "contoso")
        .env("LOGIN_SERVER", acr.login_server())
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("AZURE_AUTHORITY_HOST");
    common::run_script(command, &format!("acr.py ({python}, {PYTHON_VAR})"), CHECKS).await;
    std::fs::remove_dir_all(&dir).ok();
    // What the SDKs did is what the doubles hold.
    let runs = acr.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Succeeded);
    assert!(acr.image("conformance/api", "1.0.0").is_some());
    let kinds: Vec<GrantKind> = entra.grants().iter().map(|grant| grant.kind).collect();
    assert!(kinds.contains(&GrantKind::ClientSecret) && kinds.contains(&GrantKind::FederatedAssertion));
}

/// A fresh directory under the system's temporary one.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bosun-acr-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
