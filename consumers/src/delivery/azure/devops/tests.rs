//! Tests of `consumers/src/delivery/azure/devops.rs`.

use super::*;
use crate::delivery::azure::test_server::{MockAzure, Reply};

fn client(url: &str) -> AzureDevOpsClient {
    AzureDevOpsClient::new(&AzureDevOpsConfig::new(
        url,
        "proj",
        AzureDevOpsAuth::Pat("secret-pat".into()),
    ))
    .unwrap()
}

#[test]
fn debug_output_never_shows_the_token() {
    let config = AzureDevOpsConfig::new(
        "https://dev.azure.com/o",
        "p",
        AzureDevOpsAuth::Bearer("tok-123".into()),
    );
    let shown = format!("{config:?} {:?}", AzureDevOpsClient::new(&config).unwrap());
    assert!(!shown.contains("tok-123"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn urls_are_built_from_encoded_segments_with_the_api_version() {
    let client = client("https://dev.azure.com/contoso/");
    let url = client.url(
        &["My Project", "_apis", "git", "repositories", "r"],
        &[("filter", "heads/main")],
    );
    assert_eq!(
        url.as_str(),
        "https://dev.azure.com/contoso/My%20Project/_apis/git/repositories/r?filter=heads%2Fmain&api-version=7.1"
    );
}

#[test]
fn a_project_template_names_a_project_per_tenant() {
    let template = |project: &str| {
        AzureDevOpsClient::new(&AzureDevOpsConfig::new(
            "https://dev.azure.com/contoso",
            project,
            AzureDevOpsAuth::Pat("x".into()),
        ))
    };
    let client = template("Delivery {tenant}").unwrap();
    assert!(client.project_per_tenant());
    assert_eq!(client.project_for("fabrikam"), "Delivery fabrikam");
    assert_eq!(
        client
            .project_url("fabrikam", &["git", "repositories", "r"], &[])
            .as_str(),
        "https://dev.azure.com/contoso/Delivery%20fabrikam/_apis/git/repositories/r?api-version=7.1"
    );
    let shared = template("Delivery").unwrap();
    assert!(!shared.project_per_tenant());
    assert_eq!(shared.project_for("contoso"), shared.project_for("fabrikam"));
    assert_eq!(shared.project_for("fabrikam"), "Delivery");

    for (project, expected) in [
        ("", ProjectTemplateError::Empty),
        (
            "delivery-{team}",
            ProjectTemplateError::UnknownTemplateVariable {
                variable: "{team}".into(),
            },
        ),
        (
            "{tenant}-{Tenant}",
            ProjectTemplateError::UnknownTemplateVariable {
                variable: "{Tenant}".into(),
            },
        ),
        ("delivery-{tenant", ProjectTemplateError::UnmatchedBrace { brace: '{' }),
        ("delivery-tenant}", ProjectTemplateError::UnmatchedBrace { brace: '}' }),
    ] {
        assert_eq!(check_project_template(project), Err(expected), "{project}");
        let err = template(project).unwrap_err();
        assert_eq!(err.disposition(), Disposition::Permanent, "{err}");
    }
    assert_eq!(check_project_template("{tenant}"), Ok(()));
    assert_eq!(check_project_template("{tenant}-{tenant}"), Ok(()));
}

#[test]
fn bad_configuration_is_rejected() {
    let err = AzureDevOpsClient::new(&AzureDevOpsConfig::new(
        "not a url",
        "p",
        AzureDevOpsAuth::Pat("x".into()),
    ))
    .unwrap_err();
    assert_eq!(err.disposition(), Disposition::Permanent);
}

/// A credential whose tokens expire after `lifetime`, numbered in the
/// order they are given out.
#[derive(Debug)]
struct ExpiringTokens {
    lifetime: time::Duration,
    issued: std::sync::Mutex<Vec<time::OffsetDateTime>>,
}

#[async_trait::async_trait]
impl crate::delivery::azure::credential::TokenCredential for ExpiringTokens {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<crate::delivery::azure::credential::TokenRequestOptions<'_>>,
    ) -> azure_core::Result<crate::delivery::azure::credential::AccessToken> {
        assert_eq!(scopes, [AZURE_DEVOPS_SCOPE]);
        let mut issued = self.issued.lock().unwrap();
        let expires_on = time::OffsetDateTime::now_utc() + self.lifetime;
        issued.push(expires_on);
        Ok(crate::delivery::azure::credential::AccessToken::new(
            format!("token-{}", issued.len()),
            expires_on,
        ))
    }
}

/// Sends three requests with tokens from `credential`; returns the
/// bearer tokens the server saw and when each issued token expired.
async fn three_requests(
    lifetime: time::Duration,
) -> (Vec<String>, Vec<time::OffsetDateTime>, Vec<time::OffsetDateTime>) {
    let credential = Arc::new(ExpiringTokens {
        lifetime,
        issued: std::sync::Mutex::default(),
    });
    let server = MockAzure::start(vec![
        Reply::json("GET", "/org/a", 200, "{}"),
        Reply::json("GET", "/org/b", 200, "{}"),
        Reply::json("GET", "/org/c", 200, "{}"),
    ])
    .await;
    let tokens = Arc::new(RefreshingToken::new(credential.clone(), AZURE_DEVOPS_SCOPE));
    let client = AzureDevOpsClient::new(&AzureDevOpsConfig::new(
        server.url("/org"),
        "proj",
        AzureDevOpsAuth::Entra(tokens),
    ))
    .unwrap();
    let mut sent_at = Vec::new();
    for path in ["a", "b", "c"] {
        sent_at.push(time::OffsetDateTime::now_utc());
        client
            .get_json::<serde_json::Value>(client.url(&[path], &[]))
            .await
            .unwrap();
    }
    let seen = server
        .finish()
        .await
        .iter()
        .map(|request| request.header("authorization").unwrap_or_default().to_owned())
        .collect();
    let issued = credential.issued.lock().unwrap().clone();
    (seen, issued, sent_at)
}

#[tokio::test]
async fn a_token_close_to_its_expiry_is_replaced_before_a_request_and_never_sent_expired() {
    use crate::delivery::azure::credential::REFRESH_BEFORE_EXPIRY;
    // Tokens that live less than the refresh margin: none may be reused.
    let short = time::Duration::try_from(REFRESH_BEFORE_EXPIRY).unwrap() / 2;
    let (seen, issued, sent_at) = three_requests(short).await;
    assert_eq!(seen, ["Bearer token-1", "Bearer token-2", "Bearer token-3"]);
    for (expires_on, sent) in issued.iter().zip(&sent_at) {
        assert!(expires_on > sent, "every token sent was still valid");
    }
    // Tokens that live an hour: one serves every request.
    let (seen, issued, _) = three_requests(time::Duration::hours(1)).await;
    assert_eq!(seen, ["Bearer token-1", "Bearer token-1", "Bearer token-1"]);
    assert_eq!(issued.len(), 1, "asked once while the token was fresh");
}

#[tokio::test]
async fn an_expired_token_from_the_credential_is_refused_not_sent() {
    let credential = Arc::new(ExpiringTokens {
        lifetime: time::Duration::seconds(-1),
        issued: std::sync::Mutex::default(),
    });
    let server = MockAzure::start(Vec::new()).await;
    let tokens = Arc::new(RefreshingToken::new(credential, AZURE_DEVOPS_SCOPE));
    let client = AzureDevOpsClient::new(&AzureDevOpsConfig::new(
        server.url("/org"),
        "proj",
        AzureDevOpsAuth::Entra(tokens),
    ))
    .unwrap();
    let err = client
        .get_json::<serde_json::Value>(client.url(&["a"], &[]))
        .await
        .unwrap_err();
    assert!(matches!(err, AzureDevOpsError::Credential(_)), "{err}");
    assert_eq!(err.disposition(), Disposition::Transient);
    assert!(server.finish().await.is_empty(), "nothing was sent");
}

#[tokio::test]
async fn statuses_map_to_dispositions() {
    let server = MockAzure::start(vec![
        Reply::json("GET", "/org/a", 429, r#"{"message":"slow down"}"#).header("Retry-After", "12"),
        Reply::json("GET", "/org/b", 503, "{}"),
        Reply::json("GET", "/org/c", 401, "{}"),
        Reply::json(
            "GET",
            "/org/d",
            400,
            r#"{"message":"bad","typeKey":"InvalidArgumentValueException"}"#,
        ),
        Reply::json("GET", "/org/e", 500, "{}"),
        Reply::json("GET", "/org/f", 203, "<html>sign in</html>"),
        Reply::json("GET", "/org/g", 403, "{}"),
    ])
    .await;
    let client = client(&server.url("/org"));
    let mut seen = Vec::new();
    for path in ["a", "b", "c", "d", "e", "f", "g"] {
        let err = client
            .get_json::<serde_json::Value>(client.url(&[path], &[]))
            .await
            .unwrap_err();
        seen.push(err.disposition());
        if path == "d" {
            assert!(err.to_string().contains("bad"), "{err}");
        }
    }
    assert_eq!(
        seen,
        vec![
            Disposition::RetryAfter(Duration::from_secs(12)),
            Disposition::Transient,
            Disposition::Permanent,
            Disposition::Permanent,
            Disposition::Transient,
            Disposition::Permanent,
            Disposition::Permanent,
        ]
    );
    let requests = server.finish().await;
    let auth = requests[0].header("authorization").unwrap();
    assert_eq!(
        auth,
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(":secret-pat")
        )
    );
}

#[tokio::test]
async fn unreachable_host_is_transient() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/org", listener.local_addr().unwrap());
    drop(listener);
    let client = client(&url);
    let err = client
        .get_json::<serde_json::Value>(client.url(&["x"], &[]))
        .await
        .unwrap_err();
    assert_eq!(err.disposition(), Disposition::Transient, "{err}");
    assert!(matches!(HandlerError::from(err), HandlerError::Transient(_)));
}
