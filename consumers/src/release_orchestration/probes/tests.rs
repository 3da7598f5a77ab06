//! The probes against small local servers: a scripted HTTP server for the
//! health URLs and Prometheus (answers in the shapes of Prometheus' HTTP
//! API documentation), raw listeners for a refused connection and an
//! answer that never comes, and the Alerts Management double with state
//! (`bosun_azure_doubles::monitor`) behind Entra tokens.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bosun_azure_doubles::monitor::MonitorDouble;
use bosun_azure_doubles::{Auth, Faults, Journal, TokenBook};
use bosun_sagas::release::{AzureMonitorCheck, CheckOutcome, HttpCheck, PrometheusCheck, VerificationCheck};
use tokio::net::TcpListener;

use super::{AzureMonitorAccess, Probes, VerificationProbes};
use crate::delivery::azure::ARM_SCOPE;
use crate::delivery::azure::credential::{AccessToken, RefreshingToken, TokenCredential, TokenRequestOptions};
use crate::delivery::azure::test_server::{MockAzure, Reply};

const SUBSCRIPTION: &str = "4385cf00-2d3a-425a-832f-f4285b1c9dce";
const RULE: &str = "/subscriptions/4385cf00-2d3a-425a-832f-f4285b1c9dce/resourceGroups/payments-rg/providers/Microsoft.Insights/metricAlerts/payments-5xx";

async fn sample(probes: &Probes, check: VerificationCheck) -> CheckOutcome {
    probes.sample("contoso", "rel-42", "production", &check).await
}

fn probes() -> Probes {
    Probes::new(None).unwrap()
}

fn http(url: &str, timeout_seconds: u64) -> VerificationCheck {
    VerificationCheck::Http(HttpCheck {
        name: "health".to_owned(),
        url: url.to_owned(),
        successes: 1,
        timeout_seconds,
    })
}

fn prometheus(url: &str, min: Option<f64>, max: Option<f64>) -> VerificationCheck {
    VerificationCheck::Prometheus(PrometheusCheck {
        name: "error-rate".to_owned(),
        url: url.to_owned(),
        query: r#"sum(rate(http_requests_total{code=~"5.."}[5m])) / sum(rate(http_requests_total[5m]))"#.to_owned(),
        min,
        max,
    })
}

fn azure_monitor(rule: &str) -> VerificationCheck {
    VerificationCheck::AzureMonitor(AzureMonitorCheck {
        name: "no-5xx-alert".to_owned(),
        alert_rule_id: rule.to_owned(),
    })
}

/// A Prometheus `success` answer of `result_type` holding `result`.
fn answer(result_type: &str, result: &str) -> String {
    format!(r#"{{"status":"success","data":{{"resultType":"{result_type}","result":{result}}}}}"#)
}

// --- HTTP ---------------------------------------------------------------

#[tokio::test]
async fn http_200_passes_and_the_detail_shows_no_query_or_user_info() {
    let server = MockAzure::start(vec![Reply::json("GET", "/health", 200, r#"{"status":"ok"}"#)]).await;
    let url = server
        .url("/health?token=s3cr3t")
        .replace("http://", "http://ops:hunter2@");
    let outcome = sample(&probes(), http(&url, 5)).await;
    assert!(outcome.passed, "{outcome:?}");
    assert_eq!(outcome.check, "health");
    assert_eq!(outcome.detail, format!("GET {} answered 200 OK", server.url("/health")));
    for secret in ["s3cr3t", "hunter2", "ops:"] {
        assert!(!outcome.detail.contains(secret), "{}", outcome.detail);
    }
    let requests = server.finish().await;
    assert_eq!(requests[0].query("token"), Some("s3cr3t"), "the URL is sent whole");
    assert!(
        requests[0]
            .header("user-agent")
            .is_some_and(|agent| agent.starts_with("bosun/"))
    );
}

#[tokio::test]
async fn http_500_fails_with_the_status_and_never_the_body() {
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/health",
        500,
        r#"{"error":"database password rejected"}"#,
    )])
    .await;
    let outcome = sample(&probes(), http(&server.url("/health"), 5)).await;
    assert!(!outcome.passed);
    assert_eq!(
        outcome.detail,
        format!("GET {} answered 500 Internal Server Error", server.url("/health"))
    );
    assert!(!outcome.detail.contains("password"));
    server.finish().await;
}

#[tokio::test]
async fn http_redirect_is_not_followed_and_fails() {
    let server = MockAzure::start(Vec::new()).await;
    server.script(vec![
        Reply::json("GET", "/health", 302, "").header("Location", &server.url("/elsewhere")),
    ]);
    let outcome = sample(&probes(), http(&server.url("/health"), 5)).await;
    assert!(!outcome.passed);
    assert!(outcome.detail.contains("answered 302 Found"), "{}", outcome.detail);
    assert!(
        outcome.detail.contains("redirects are not followed"),
        "{}",
        outcome.detail
    );
    // `finish` fails the test had `/elsewhere` been asked for.
    assert_eq!(server.finish().await.len(), 1);
}

#[tokio::test]
async fn http_connection_refused_fails() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let outcome = sample(&probes(), http(&format!("http://{addr}/health"), 5)).await;
    assert!(!outcome.passed);
    assert_eq!(
        outcome.detail,
        format!("GET http://{addr}/health failed: connection refused")
    );
}

#[tokio::test]
async fn http_answer_that_never_comes_fails_after_the_check_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let started = std::time::Instant::now();
    let outcome = sample(&probes(), http(&format!("http://{addr}/slow"), 1)).await;
    holder.abort();
    assert!(!outcome.passed);
    assert_eq!(
        outcome.detail,
        format!("GET http://{addr}/slow failed: timed out after 1s")
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn http_link_local_hosts_are_refused_without_a_request() {
    for url in [
        "http://169.254.169.254/metadata/identity/oauth2/token?resource=x&api-version=2018-02-01",
        "http://[fe80::1]/health",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        // Written in another form, still 169.254.169.254.
        "http://0xA9FEA9FE/latest/meta-data/",
    ] {
        let outcome = sample(&probes(), http(url, 5)).await;
        assert!(!outcome.passed, "{url}");
        assert!(outcome.detail.contains("link-local"), "{url}: {}", outcome.detail);
        assert!(!outcome.detail.contains("resource=x"), "{}", outcome.detail);
    }
    let outcome = sample(&probes(), prometheus("http://169.254.169.254/", None, Some(1.0))).await;
    assert!(!outcome.passed);
    assert!(outcome.detail.contains("link-local"), "{}", outcome.detail);
}

#[tokio::test]
async fn only_the_hosts_an_operator_allows_are_probed() {
    let allowed = probes().with_allowed_hosts(vec!["*.Contoso.net".to_owned(), " prometheus.monitoring ".to_owned()]);
    for url in [
        "http://10.0.0.7:8080/health",
        "http://contoso.net.evil.example/health",
        "http://localhost:9090/metrics",
    ] {
        let outcome = sample(&allowed, http(url, 5)).await;
        assert!(!outcome.passed, "{url}");
        assert!(
            outcome.detail.contains("BOSUN_VERIFY_ALLOWED_HOSTS"),
            "{url}: {}",
            outcome.detail
        );
    }
    let outcome = sample(
        &allowed,
        prometheus("http://prometheus.monitoring.evil:9090", None, Some(1.0)),
    )
    .await;
    assert!(
        outcome.detail.contains("BOSUN_VERIFY_ALLOWED_HOSTS"),
        "{}",
        outcome.detail
    );
    // An allowed host is probed (nothing answers there: the request failed,
    // it was not refused).
    for url in ["http://payments.contoso.net:1/health", "http://contoso.net:1/health"] {
        let outcome = sample(&allowed, http(url, 1)).await;
        assert!(
            !outcome.detail.contains("BOSUN_VERIFY_ALLOWED_HOSTS"),
            "{url}: {}",
            outcome.detail
        );
    }
}

#[tokio::test]
async fn http_unreadable_or_non_http_urls_fail() {
    let outcome = sample(&probes(), http("not a url", 5)).await;
    assert!(!outcome.passed);
    assert!(
        outcome.detail.starts_with("the URL cannot be read"),
        "{}",
        outcome.detail
    );
    let outcome = sample(&probes(), http("ftp://example.com/health", 5)).await;
    assert!(!outcome.passed);
    assert!(
        outcome.detail.contains("is not an http or https URL"),
        "{}",
        outcome.detail
    );
}

// --- Prometheus ---------------------------------------------------------

#[tokio::test]
async fn prometheus_values_within_bounds_pass_and_the_query_is_sent_encoded() {
    let vector = r#"[
        {"metric":{"job":"api","instance":"10.0.0.1:9090"},"value":[1700000000.781,"0.01"]},
        {"metric":{"job":"api","instance":"10.0.0.2:9090"},"value":[1700000000.781,"0.02"]}
    ]"#;
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/prom/api/v1/query",
        200,
        &answer("vector", vector),
    )])
    .await;
    let check = prometheus(&server.url("/prom/"), Some(0.0), Some(0.05));
    let outcome = sample(&probes(), check.clone()).await;
    assert!(outcome.passed, "{outcome:?}");
    assert_eq!(outcome.detail, "all 2 values are within [0, 0.05]");
    let requests = server.finish().await;
    let VerificationCheck::Prometheus(check) = check else {
        unreachable!()
    };
    assert_eq!(requests[0].query("query"), Some(check.query.as_str()));
}

#[tokio::test]
async fn prometheus_value_out_of_bounds_fails_naming_value_bound_and_series() {
    let vector = r#"[
        {"metric":{"__name__":"error_ratio","job":"api"},"value":[1700000000,"0.25"]},
        {"metric":{"__name__":"error_ratio","job":"worker"},"value":[1700000000,"0.01"]}
    ]"#;
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/api/v1/query",
        200,
        &answer("vector", vector),
    )])
    .await;
    let outcome = sample(&probes(), prometheus(&server.url(""), None, Some(0.1))).await;
    assert!(!outcome.passed);
    assert_eq!(
        outcome.detail,
        r#"value 0.25 of error_ratio{job="api"} is above the maximum 0.1 (1 of 2 values fail)"#
    );
    server.finish().await;
}

#[tokio::test]
async fn prometheus_empty_result_fails() {
    let server = MockAzure::start(vec![Reply::json("GET", "/api/v1/query", 200, &answer("vector", "[]"))]).await;
    let outcome = sample(&probes(), prometheus(&server.url("/"), None, Some(0.1))).await;
    assert!(!outcome.passed);
    assert_eq!(outcome.detail, "the query returned no data");
    server.finish().await;
}

#[tokio::test]
async fn prometheus_error_status_fails_with_its_type_and_clipped_message() {
    let long = "x".repeat(1000);
    let body = format!(r#"{{"status":"error","errorType":"bad_data","error":"1:5: parse error: {long}"}}"#);
    let server = MockAzure::start(vec![Reply::json("GET", "/api/v1/query", 400, &body)]).await;
    let outcome = sample(&probes(), prometheus(&server.url(""), None, Some(0.1))).await;
    assert!(!outcome.passed);
    assert!(
        outcome
            .detail
            .contains("failed (400 Bad Request): bad_data: 1:5: parse error: xxx"),
        "{}",
        outcome.detail
    );
    assert!(outcome.detail.ends_with('…'), "{}", outcome.detail);
    assert!(outcome.detail.chars().count() < 420, "{}", outcome.detail.len());
    server.finish().await;
}

#[tokio::test]
async fn prometheus_scalar_result_is_bounded_too() {
    let server = MockAzure::start(vec![
        Reply::json(
            "GET",
            "/api/v1/query",
            200,
            &answer("scalar", r#"[1700000000.5,"0.97"]"#),
        ),
        Reply::json(
            "GET",
            "/api/v1/query",
            200,
            &answer("scalar", r#"[1700000000.5,"0.93"]"#),
        ),
    ])
    .await;
    let check = prometheus(&server.url(""), Some(0.95), None);
    let passed = sample(&probes(), check.clone()).await;
    assert!(passed.passed, "{passed:?}");
    assert_eq!(passed.detail, "value 0.97 of the scalar is within the minimum 0.95");
    let failed = sample(&probes(), check).await;
    assert!(!failed.passed);
    assert_eq!(failed.detail, "value 0.93 of the scalar is below the minimum 0.95");
    server.finish().await;
}

#[tokio::test]
async fn prometheus_nan_fails() {
    let vector = r#"[{"metric":{"job":"api"},"value":[1700000000,"NaN"]}]"#;
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/api/v1/query",
        200,
        &answer("vector", vector),
    )])
    .await;
    let outcome = sample(&probes(), prometheus(&server.url(""), Some(0.0), Some(1.0))).await;
    assert!(!outcome.passed);
    assert_eq!(outcome.detail, r#"value NaN of {job="api"} is not a number"#);
    server.finish().await;
}

#[tokio::test]
async fn prometheus_matrix_values_are_all_bounded() {
    let matrix = r#"[{"metric":{"job":"api"},"values":[[1700000000,"0.01"],[1700000015,"0.5"]]}]"#;
    let server = MockAzure::start(vec![Reply::json(
        "GET",
        "/api/v1/query",
        200,
        &answer("matrix", matrix),
    )])
    .await;
    let outcome = sample(&probes(), prometheus(&server.url(""), None, Some(0.1))).await;
    assert!(!outcome.passed);
    assert!(
        outcome.detail.contains("value 0.5 of {job=\"api\"}"),
        "{}",
        outcome.detail
    );
    server.finish().await;
}

#[tokio::test]
async fn prometheus_unreadable_answers_and_other_statuses_fail_without_the_body() {
    let server = MockAzure::start(vec![
        Reply::bytes("GET", "/api/v1/query", 200, b"<html>login required for alice</html>"),
        Reply::bytes("GET", "/api/v1/query", 502, b"upstream alice is down"),
        Reply::json(
            "GET",
            "/api/v1/query",
            200,
            &answer("string", r#"[1700000000,"hello"]"#),
        ),
    ])
    .await;
    let check = prometheus(&server.url(""), None, Some(0.1));
    let html = sample(&probes(), check.clone()).await;
    assert!(!html.passed);
    assert!(html.detail.contains("not a Prometheus API answer"), "{}", html.detail);
    let bad_gateway = sample(&probes(), check.clone()).await;
    assert!(!bad_gateway.passed);
    assert!(
        bad_gateway.detail.ends_with("answered 502 Bad Gateway"),
        "{}",
        bad_gateway.detail
    );
    for outcome in [&html, &bad_gateway] {
        assert!(!outcome.detail.contains("alice"), "{}", outcome.detail);
    }
    let string = sample(&probes(), check).await;
    assert_eq!(string.detail, "the query returned a string, not a number");
    server.finish().await;
}

// --- Azure Monitor ------------------------------------------------------

/// Entra tokens for [`ARM_SCOPE`], issued in the double's book.
#[derive(Debug)]
struct BookTokens(TokenBook);

#[async_trait]
impl TokenCredential for BookTokens {
    async fn get_token(
        &self,
        scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        assert_eq!(scopes, [ARM_SCOPE]);
        let token = self.0.issue("bosun", ARM_SCOPE, Duration::from_secs(3600));
        Ok(AccessToken::new(
            token,
            time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        ))
    }
}

/// The Alerts Management double holding [`SUBSCRIPTION`], and probes that
/// reach it with tokens from `credential_book` (the double's own book
/// unless a test gives another).
async fn monitor(credential_book: Option<TokenBook>) -> (MonitorDouble, Probes) {
    let book = TokenBook::default();
    let double = MonitorDouble::start(
        Faults::default(),
        Journal::default(),
        Auth::default().entra(book.clone()),
        &[SUBSCRIPTION],
    )
    .await
    .unwrap();
    let tokens = Arc::new(RefreshingToken::new(
        Arc::new(BookTokens(credential_book.unwrap_or(book))),
        ARM_SCOPE,
    ));
    let access = AzureMonitorAccess::new(tokens).with_endpoint(double.base_url());
    let probes = Probes::new(Some(access)).unwrap();
    (double, probes)
}

#[tokio::test]
async fn azure_monitor_quiet_rule_passes() {
    let (double, probes) = monitor(None).await;
    double
        .fire(&RULE.replace("payments-5xx", "payments-latency"), "Sev3")
        .unwrap();
    double.fire(RULE, "Sev1").unwrap();
    assert_eq!(double.resolve(RULE), 1);
    let outcome = sample(&probes, azure_monitor(RULE)).await;
    assert!(outcome.passed, "{outcome:?}");
    assert_eq!(outcome.detail, "no alert of the rule is fired");
    let calls = double.server().journal().entries();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let path = &calls[0].path;
    assert!(
        path.starts_with(&format!(
            "/subscriptions/{SUBSCRIPTION}/providers/Microsoft.AlertsManagement/alerts?api-version=2019-05-05-preview&"
        )),
        "{path}"
    );
    assert!(path.contains("monitorCondition=Fired"), "{path}");
    assert!(path.contains("alertRule=%2Fsubscriptions%2F"), "{path}");
}

#[tokio::test]
async fn azure_monitor_fired_alert_fails_naming_it() {
    let (double, probes) = monitor(None).await;
    double.fire(RULE, "Sev1").unwrap();
    let outcome = sample(&probes, azure_monitor(RULE)).await;
    assert!(!outcome.passed);
    let start = &double.alerts()[0].start_date_time;
    assert_eq!(
        outcome.detail,
        format!("1 alert of the rule is fired; the first: `payments-5xx` (Sev1) since {start}")
    );
}

#[tokio::test]
async fn azure_monitor_counts_fired_alerts_across_pages() {
    let (double, probes) = monitor(None).await;
    for _ in 0..30 {
        double.fire(RULE, "Sev2").unwrap();
    }
    let outcome = sample(&probes, azure_monitor(RULE)).await;
    assert!(!outcome.passed);
    assert!(
        outcome.detail.starts_with("30 alerts of the rule are fired;"),
        "{}",
        outcome.detail
    );
    assert_eq!(double.server().journal().succeeded("monitor", "GET", "/alerts"), 2);
}

#[tokio::test]
async fn azure_monitor_without_credential_fails() {
    let outcome = sample(&probes(), azure_monitor(RULE)).await;
    assert!(!outcome.passed);
    assert!(
        outcome.detail.contains("needs bosun's Azure identity"),
        "{}",
        outcome.detail
    );
}

#[tokio::test]
async fn azure_monitor_refused_identity_and_arm_errors_fail_with_their_reason() {
    // Tokens from another book: the double refuses them, and the new one.
    let (double, probes) = monitor(Some(TokenBook::default())).await;
    let refused = sample(&probes, azure_monitor(RULE)).await;
    assert!(!refused.passed);
    assert!(refused.detail.contains("401 Unauthorized"), "{}", refused.detail);
    assert!(refused.detail.contains("was refused too"), "{}", refused.detail);
    assert_eq!(
        double.server().journal().entries().len(),
        2,
        "one more try with a new token"
    );

    let (_double, probes) = monitor(None).await;
    let elsewhere = RULE.replace(SUBSCRIPTION, "00000000-0000-0000-0000-000000000000");
    let unknown = sample(&probes, azure_monitor(&elsewhere)).await;
    assert!(!unknown.passed);
    assert!(
        unknown
            .detail
            .contains("404 Not Found: SubscriptionNotFound: The subscription"),
        "{}",
        unknown.detail
    );
}
