//! The Entra double's rules: client secrets and federated assertions give
//! tokens the token book accepts for the configured lifetime; each wrong
//! request gets the AADSTS error Entra answers for it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bosun_azure_doubles::entra::{
    EntraDouble, FederatedCredential, FederatedToken, GrantKind, JWT_BEARER, TOKEN_EXCHANGE_AUDIENCE,
};
use bosun_azure_doubles::{Faults, Journal, TokenBook, TokenProblem};
use serde_json::Value;

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "6c3c2b4e-7a8d-4c1e-9f0a-1b2c3d4e5f60";
const ISSUER: &str = "https://oidc.prod-aks.azure.com/cluster/";
const SUBJECT: &str = "system:serviceaccount:bosun:bosun";
const SCOPE: &str = "https://management.azure.com/.default";

async fn double() -> EntraDouble {
    let entra = EntraDouble::start(Faults::default(), Journal::default(), TokenBook::default())
        .await
        .unwrap();
    entra.add_client_secret(TENANT, CLIENT, "s3cret");
    entra.add_federated_credential(
        TENANT,
        CLIENT,
        FederatedCredential {
            issuer: ISSUER.into(),
            subject: SUBJECT.into(),
            audience: TOKEN_EXCHANGE_AUDIENCE.into(),
        },
    );
    entra
}

async fn ask(entra: &EntraDouble, tenant: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let answer = reqwest::Client::new()
        .post(entra.token_url(tenant))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encode(form))
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.json().await.unwrap())
}

/// `application/x-www-form-urlencoded`.
fn encode(form: &[(&str, &str)]) -> String {
    let escape = |text: &str| -> String {
        text.bytes()
            .map(|byte| match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(byte).to_string(),
                _ => format!("%{byte:02X}"),
            })
            .collect()
    };
    form.iter()
        .map(|(name, value)| format!("{}={}", escape(name), escape(value)))
        .collect::<Vec<_>>()
        .join("&")
}

fn assertion_form(assertion: &str) -> Vec<(&str, &str)> {
    vec![
        ("grant_type", "client_credentials"),
        ("client_id", CLIENT),
        ("scope", SCOPE),
        ("client_assertion_type", JWT_BEARER),
        ("client_assertion", assertion),
    ]
}

fn code(body: &Value) -> u64 {
    let description = body["error_description"].as_str().unwrap();
    let code = body["error_codes"][0].as_u64().unwrap();
    assert!(description.starts_with(&format!("AADSTS{code}: ")), "{description}");
    code
}

#[tokio::test]
async fn a_client_secret_gives_a_token_the_book_accepts_until_its_lifetime_ends() {
    let entra = double().await;
    entra.set_token_lifetime(Duration::from_secs(2));
    let (status, body) = ask(
        &entra,
        TENANT,
        &[
            ("grant_type", "client_credentials"),
            ("client_id", CLIENT),
            ("client_secret", "s3cret"),
            ("scope", SCOPE),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 2);
    assert_eq!(body["ext_expires_in"], 2);
    let token = body["access_token"].as_str().unwrap();
    let issued = entra.tokens().check(token).unwrap();
    assert_eq!((issued.client_id.as_str(), issued.scope.as_str()), (CLIENT, SCOPE));
    assert_eq!(entra.grants()[0].kind, GrantKind::ClientSecret);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(entra.tokens().check(token), Err(TokenProblem::Expired));
}

#[tokio::test]
async fn a_federated_token_matching_a_registered_credential_gives_a_token() {
    let entra = double().await;
    let jwt = FederatedToken::new(ISSUER, SUBJECT).jwt();
    let (status, body) = ask(&entra, TENANT, &assertion_form(&jwt)).await;
    assert_eq!(status, 200, "{body}");
    assert!(entra.tokens().check(body["access_token"].as_str().unwrap()).is_ok());
    assert_eq!(entra.grants()[0].kind, GrantKind::FederatedAssertion);
}

/// A wrong request: its name, its form, and Entra's status, error and AADSTS code.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16, &'a str, u64);

#[tokio::test]
async fn each_wrong_request_gets_entras_error() {
    let entra = double().await;
    let other_subject = FederatedToken::new(ISSUER, "system:serviceaccount:other:other").jwt();
    let other_issuer = FederatedToken::new("https://elsewhere/", SUBJECT).jwt();
    let mut wrong_audience = FederatedToken::new(ISSUER, SUBJECT);
    wrong_audience.audience = "api://other".into();
    let wrong_audience = wrong_audience.jwt();
    let mut expired = FederatedToken::new(ISSUER, SUBJECT);
    expired.lifetime = Duration::ZERO;
    let expired = expired.jwt();
    let cases: Vec<Case> = vec![
        (
            "unknown tenant",
            vec![
                ("grant_type", "client_credentials"),
                ("client_id", CLIENT),
                ("client_secret", "s3cret"),
                ("scope", SCOPE),
            ],
            400,
            "invalid_request",
            90002,
        ),
        (
            "no grant type",
            vec![("client_id", CLIENT), ("scope", SCOPE)],
            400,
            "invalid_request",
            900_144,
        ),
        (
            "another grant",
            vec![("grant_type", "password"), ("client_id", CLIENT), ("scope", SCOPE)],
            400,
            "unsupported_grant_type",
            70003,
        ),
        (
            "unknown client",
            vec![
                ("grant_type", "client_credentials"),
                ("client_id", "00000000-0000-0000-0000-000000000000"),
                ("client_secret", "s3cret"),
                ("scope", SCOPE),
            ],
            400,
            "unauthorized_client",
            700_016,
        ),
        (
            "scope without /.default",
            vec![
                ("grant_type", "client_credentials"),
                ("client_id", CLIENT),
                ("client_secret", "s3cret"),
                ("scope", "https://management.azure.com/user_impersonation"),
            ],
            400,
            "invalid_scope",
            1_002_012,
        ),
        (
            "wrong secret",
            vec![
                ("grant_type", "client_credentials"),
                ("client_id", CLIENT),
                ("client_secret", "nope"),
                ("scope", SCOPE),
            ],
            401,
            "invalid_client",
            7_000_215,
        ),
        ("not a JWT", assertion_form("not-a-jwt"), 400, "invalid_request", 50027),
        (
            "other issuer",
            assertion_form(&other_issuer),
            400,
            "invalid_client",
            700_211,
        ),
        (
            "other subject",
            assertion_form(&other_subject),
            400,
            "invalid_client",
            700_213,
        ),
        (
            "other audience",
            assertion_form(&wrong_audience),
            400,
            "invalid_client",
            700_212,
        ),
        (
            "expired assertion",
            assertion_form(&expired),
            400,
            "invalid_client",
            700_024,
        ),
    ];
    for (name, form, status, error, expected) in cases {
        let tenant = if name == "unknown tenant" {
            "contoso.onmicrosoft.com"
        } else {
            TENANT
        };
        let (got, body) = ask(&entra, tenant, &form).await;
        assert_eq!(
            (got, body["error"].as_str().unwrap()),
            (status, error),
            "{name}: {body}"
        );
        assert_eq!(code(&body), expected, "{name}");
    }
    assert!(entra.grants().is_empty());
    assert_eq!(entra.tokens().issued(), 0);
}

#[tokio::test]
async fn the_metadata_msal_asks_for_points_at_the_double() {
    let entra = double().await;
    let client = reqwest::Client::new();
    let config: Value = client
        .get(format!(
            "{}/{TENANT}/v2.0/.well-known/openid-configuration",
            entra.base_url()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(config["token_endpoint"], entra.token_url(TENANT));
    let discovery: Value = client
        .get(format!(
            "{}/common/discovery/instance?api-version=1.1&authorization_endpoint={}/{TENANT}/oauth2/v2.0/authorize",
            entra.base_url(),
            entra.base_url()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(discovery["api-version"], "1.1");
    assert!(
        discovery["tenant_discovery_endpoint"]
            .as_str()
            .unwrap()
            .ends_with("/openid-configuration")
    );
}

/// Over HTTPS (`start_tls`), as Microsoft's identity clients require of an
/// authority: a client trusting the loopback certificate gets a token; one
/// that does not trust it cannot connect.
#[tokio::test]
async fn over_tls_the_double_answers_clients_that_trust_its_certificate() {
    use bosun_azure_doubles::TlsIdentity;
    let entra = EntraDouble::start_tls(
        Faults::default(),
        Journal::default(),
        TokenBook::default(),
        TlsIdentity::loopback(),
    )
    .await
    .unwrap();
    entra.add_client_secret(TENANT, CLIENT, "s3cret");
    assert!(
        entra.base_url().starts_with("https://127.0.0.1:"),
        "{}",
        entra.base_url()
    );
    let certificate = reqwest::Certificate::from_pem(TlsIdentity::loopback().certificate()).unwrap();
    let trusting = reqwest::Client::builder()
        .add_root_certificate(certificate)
        .build()
        .unwrap();
    let form = encode(&[
        ("grant_type", "client_credentials"),
        ("client_id", CLIENT),
        ("client_secret", "s3cret"),
        ("scope", SCOPE),
    ]);
    let answer = trusting
        .post(entra.token_url(TENANT))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let body: Value = answer.json().await.unwrap();
    assert!(body["access_token"].as_str().is_some_and(|token| !token.is_empty()));
    let untrusting = reqwest::Client::new()
        .post(entra.token_url(TENANT))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await;
    assert!(
        untrusting.is_err(),
        "a client that does not trust the certificate cannot connect"
    );
}
