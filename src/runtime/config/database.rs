//! The PostgreSQL settings: `BOSUN_DATABASE_URL`, and how bosun signs in
//! to that database (`BOSUN_DATABASE_AUTH`, `BOSUN_DATABASE_CLIENT_ID`):
//! with the URL's password, or with Microsoft Entra ID access tokens of an
//! identity, the production way on Azure Database for PostgreSQL.

use bosun_consumers::delivery::azure::credential::EntraIdCredential;

use super::types::{ConfigError, EntraIdentity, Secret, invalid};
use crate::backends::postgres::{EntraUrlProblem, check_entra_url};

/// How bosun signs in to PostgreSQL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DatabaseAuth {
    /// `BOSUN_DATABASE_AUTH=password` (the default): the password of
    /// `BOSUN_DATABASE_URL`, or none (trust, `PGPASSWORD`).
    #[default]
    Password,
    /// `BOSUN_DATABASE_AUTH=workload-identity`, `managed-identity` or
    /// `azure-cli`: each new connection's password is a fresh Entra ID
    /// token of this identity for Azure Database for PostgreSQL; the URL
    /// names the principal as its user and holds no password.
    EntraId {
        /// Where the tokens come from.
        identity: EntraIdentity,
        /// `BOSUN_DATABASE_CLIENT_ID`: the identity the tokens are issued
        /// to, when not the pod's own (workload identity: an identity with
        /// a federated credential for the pod's ServiceAccount, as the
        /// database identity every component of bosun shares on AKS) or
        /// not the system-assigned one (managed identity).
        client_id: Option<String>,
    },
}

impl DatabaseAuth {
    /// The Entra ID credential the tokens come from (`None`: the URL's
    /// password).
    pub fn credential(&self) -> Option<EntraIdCredential> {
        let Self::EntraId { identity, client_id } = self else {
            return None;
        };
        Some(match (identity, client_id.clone()) {
            (EntraIdentity::WorkloadIdentity, Some(client_id)) => EntraIdCredential::WorkloadIdentityFor { client_id },
            (EntraIdentity::WorkloadIdentity, None) => EntraIdCredential::WorkloadIdentity,
            (EntraIdentity::ManagedIdentity, client_id) => EntraIdCredential::ManagedIdentity { client_id },
            (EntraIdentity::AzureCli, _) => EntraIdCredential::DeveloperTools,
            (EntraIdentity::Default, _) => EntraIdCredential::Default,
        })
    }
}

/// Reads `BOSUN_DATABASE_URL`, `BOSUN_DATABASE_AUTH` and
/// `BOSUN_DATABASE_CLIENT_ID`, checked against each other: with Entra ID
/// the URL names a user and holds no password (a URL with a password
/// beside `BOSUN_DATABASE_AUTH` is refused, naming both, rather than one
/// silently winning).
pub(super) fn read(get: &dyn Fn(&str) -> Option<String>) -> Result<(Option<Secret>, DatabaseAuth), ConfigError> {
    let url = get("BOSUN_DATABASE_URL").map(Secret::new);
    if url
        .as_ref()
        .is_some_and(|url| !url.expose().starts_with("postgres://") && !url.expose().starts_with("postgresql://"))
    {
        return Err(invalid("BOSUN_DATABASE_URL", "must be a postgres:// URL"));
    }
    let client_id = get("BOSUN_DATABASE_CLIENT_ID")
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty());
    let auth = match get("BOSUN_DATABASE_AUTH").as_deref().map(str::trim) {
        None | Some("password") => DatabaseAuth::Password,
        Some(text @ ("workload-identity" | "managed-identity" | "azure-cli")) => DatabaseAuth::EntraId {
            identity: EntraIdentity::parse("BOSUN_DATABASE_AUTH", text)?,
            client_id: client_id.clone(),
        },
        Some(other) => {
            return Err(invalid(
                "BOSUN_DATABASE_AUTH",
                format!("`{other}` is not password, workload-identity, managed-identity or azure-cli"),
            ));
        }
    };
    let entra = match &auth {
        DatabaseAuth::Password => None,
        DatabaseAuth::EntraId { identity, .. } => Some(*identity),
    };
    if client_id.is_some()
        && !matches!(
            entra,
            Some(EntraIdentity::WorkloadIdentity | EntraIdentity::ManagedIdentity)
        )
    {
        return Err(invalid(
            "BOSUN_DATABASE_CLIENT_ID",
            "applies only with BOSUN_DATABASE_AUTH=workload-identity or managed-identity",
        ));
    }
    let Some(identity) = entra else {
        return Ok((url, auth));
    };
    let name = match identity {
        EntraIdentity::WorkloadIdentity => "workload-identity",
        EntraIdentity::ManagedIdentity => "managed-identity",
        EntraIdentity::AzureCli | EntraIdentity::Default => "azure-cli",
    };
    let Some(text) = &url else {
        return Err(invalid(
            "BOSUN_DATABASE_AUTH",
            format!("`{name}` signs in to the database of BOSUN_DATABASE_URL, which is not set"),
        ));
    };
    match check_entra_url(text.expose()) {
        Ok(()) => Ok((url, auth)),
        Err(EntraUrlProblem::Password) => Err(invalid(
            "BOSUN_DATABASE_URL",
            format!(
                "holds a password, and BOSUN_DATABASE_AUTH={name} signs in with Entra ID tokens instead: \
                 remove the password from BOSUN_DATABASE_URL, or unset BOSUN_DATABASE_AUTH to sign in with it"
            ),
        )),
        Err(problem) => Err(invalid(
            "BOSUN_DATABASE_URL",
            format!("with BOSUN_DATABASE_AUTH={name}: {problem}"),
        )),
    }
}
