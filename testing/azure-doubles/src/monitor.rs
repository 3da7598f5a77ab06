//! Azure Monitor's Alerts Management: the alerts Azure Monitor's alert
//! rules fired, listed as `Alerts - Get All` lists them (api-version
//! [`API_VERSION`]), behind the [`Auth`] the test gives (an Entra token
//! from the [`crate::TokenBook`], as Azure Resource Manager wants):
//!
//! `GET /subscriptions/{subscriptionId}/providers/Microsoft.AlertsManagement/alerts`
//! with the filters `alertRule`, `monitorCondition` (`Fired`,
//! `Resolved`), `severity` (`Sev0` to `Sev4`), `targetResourceGroup` and
//! `pageCount` (alerts per page). The answer is an `AlertsList`,
//! `{"value": [Alert], "nextLink"}`, each alert
//! `{"id", "type", "name", "properties": {"essentials": {...}}}` with the
//! essentials Azure Monitor sets (`severity`, `signalType`, `alertState`,
//! `monitorCondition`, `monitorService`, `targetResource*`, `alertRule`,
//! `sourceCreatedId`, `startDateTime`, `lastModifiedDateTime`,
//! `lastModifiedUserName`, and `monitorConditionResolvedDateTime` once
//! resolved). A page that is not the last has a `nextLink`: an absolute
//! URL on the same host with a `$skiptoken`.
//!
//! State: the subscriptions that exist ([`MonitorDouble::start`]) and the
//! alerts fired in them, which a test fires ([`MonitorDouble::fire`]) and
//! resolves ([`MonitorDouble::resolve`]) as the rule's condition comes and
//! goes.
//!
//! What it checks, in ARM's `{"error": {"code", "message"}}`: the
//! `api-version` (`400 MissingApiVersionParameter` /
//! `InvalidApiVersionParameter`), the subscription (`404
//! SubscriptionNotFound`), the filters' values (`400 InvalidParameter`)
//! and a `$skiptoken` it issued (`400 InvalidSkipToken`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::HashMap;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::serve::lock;
use crate::{Auth, Faults, Journal, Running, ServeError, serve};

/// The double's name in the journal and fault rules.
pub const SERVICE: &str = "monitor";

/// The api-version of `Alerts - Get All` the double serves.
pub const API_VERSION: &str = "2019-05-05-preview";

/// Alerts per page when the request sets no `pageCount`.
pub const DEFAULT_PAGE_SIZE: usize = 25;

/// An alert the double holds, as a test reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// Its id, the alert's GUID.
    pub id: String,
    /// Its subscription.
    pub subscription: String,
    /// The alert rule's resource id that fired it.
    pub alert_rule: String,
    /// Its name: the rule's name, as Azure Monitor names its alerts.
    pub name: String,
    /// `Sev0` to `Sev4`.
    pub severity: String,
    /// `Fired` or `Resolved`.
    pub monitor_condition: String,
    /// When it fired (RFC 3339).
    pub start_date_time: String,
    /// When it was resolved (RFC 3339).
    pub resolved_date_time: Option<String>,
}

impl Alert {
    /// The alert as `Alerts - Get All` returns it.
    fn to_json(&self) -> Value {
        let group = resource_group(&self.alert_rule).unwrap_or_default();
        let target = format!("/subscriptions/{}/resourceGroups/{group}", self.subscription);
        let mut essentials = json!({
            "severity": self.severity,
            "signalType": "Metric",
            "alertState": "New",
            "monitorCondition": self.monitor_condition,
            "monitorService": "Platform",
            "targetResource": target,
            "targetResourceName": group,
            "targetResourceGroup": group,
            "targetResourceType": "resourceGroups",
            "alertRule": self.alert_rule,
            "sourceCreatedId": format!("{}_{}", self.id, self.alert_rule.to_ascii_lowercase()),
            "smartGroupId": "",
            "smartGroupingReason": "",
            "startDateTime": self.start_date_time,
            "lastModifiedDateTime": self.resolved_date_time.as_deref().unwrap_or(&self.start_date_time),
            "lastModifiedUserName": "System",
        });
        if let (Some(resolved), Some(map)) = (&self.resolved_date_time, essentials.as_object_mut()) {
            map.insert("monitorConditionResolvedDateTime".to_owned(), json!(resolved));
        }
        json!({
            "properties": { "essentials": essentials },
            "id": format!(
                "/subscriptions/{}/providers/Microsoft.AlertsManagement/alerts/{}",
                self.subscription, self.id
            ),
            "type": "Microsoft.AlertsManagement/alerts",
            "name": self.name,
        })
    }
}

#[derive(Debug, Default)]
struct MonitorState {
    /// Subscription ids, lower case.
    subscriptions: BTreeSet<String>,
    /// Every alert, in the order fired.
    alerts: Vec<Alert>,
}

type Shared = Arc<Mutex<MonitorState>>;

/// The Alerts Management double; dropping it stops its server.
#[derive(Debug)]
pub struct MonitorDouble {
    server: Running,
    state: Shared,
}

impl MonitorDouble {
    /// Serves Alerts Management for `subscriptions` behind `auth`.
    pub async fn start(
        faults: Faults,
        journal: Journal,
        auth: Auth,
        subscriptions: &[&str],
    ) -> Result<Self, ServeError> {
        let state: Shared = Arc::new(Mutex::new(MonitorState {
            subscriptions: subscriptions.iter().map(|id| id.to_ascii_lowercase()).collect(),
            alerts: Vec::new(),
        }));
        let router = Router::new()
            .route(
                "/subscriptions/{subscription}/providers/Microsoft.AlertsManagement/alerts",
                get(list_alerts),
            )
            .with_state(state.clone());
        let server = serve(SERVICE, router, faults, journal, auth).await?;
        Ok(Self { server, state })
    }

    /// Azure Resource Manager's base URL (the probes' ARM endpoint).
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// The server (its journal and faults).
    pub fn server(&self) -> &Running {
        &self.server
    }

    /// The rule `alert_rule` (a resource id in one of the double's
    /// subscriptions) fires an alert of `severity` (`Sev0` to `Sev4`), now.
    /// Returns the alert's id; `None` when the rule's subscription is not
    /// the double's.
    pub fn fire(&self, alert_rule: &str, severity: &str) -> Option<String> {
        let subscription = subscription(alert_rule)?.to_ascii_lowercase();
        let mut state = lock(&self.state);
        if !state.subscriptions.contains(&subscription) {
            return None;
        }
        let id = uuid::Uuid::new_v4().to_string();
        let name = alert_rule.rsplit('/').next().unwrap_or(alert_rule).to_owned();
        state.alerts.push(Alert {
            id: id.clone(),
            subscription,
            alert_rule: alert_rule.to_owned(),
            name,
            severity: severity.to_owned(),
            monitor_condition: "Fired".to_owned(),
            start_date_time: now(),
            resolved_date_time: None,
        });
        Some(id)
    }

    /// The condition of `alert_rule` is gone: its fired alerts are
    /// resolved, now. Returns how many were.
    pub fn resolve(&self, alert_rule: &str) -> usize {
        let mut state = lock(&self.state);
        let mut resolved = 0;
        for alert in state
            .alerts
            .iter_mut()
            .filter(|alert| alert.alert_rule.eq_ignore_ascii_case(alert_rule) && alert.monitor_condition == "Fired")
        {
            alert.monitor_condition = "Resolved".to_owned();
            alert.resolved_date_time = Some(now());
            resolved += 1;
        }
        resolved
    }

    /// Every alert, in the order fired.
    pub fn alerts(&self) -> Vec<Alert> {
        lock(&self.state).alerts.clone()
    }
}

/// Now, in RFC 3339.
fn now() -> String {
    OffsetDateTime::now_utc().format(&Rfc3339).unwrap_or_default()
}

/// The subscription segment of a resource id.
fn subscription(resource_id: &str) -> Option<&str> {
    let mut segments = resource_id.split('/');
    match (segments.next(), segments.next(), segments.next()) {
        (Some(""), Some(first), Some(id)) if first.eq_ignore_ascii_case("subscriptions") && !id.is_empty() => Some(id),
        _ => None,
    }
}

/// The resource group segment of a resource id.
fn resource_group(resource_id: &str) -> Option<&str> {
    let segments: Vec<&str> = resource_id.split('/').collect();
    match segments.get(3..5) {
        Some([kind, group]) if kind.eq_ignore_ascii_case("resourceGroups") => Some(group),
        _ => None,
    }
}

/// An ARM error answer.
fn arm_error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(json!({"error": {"code": code, "message": message}}))).into_response()
}

/// `Alerts - Get All`.
async fn list_alerts(
    State(state): State<Shared>,
    Path(subscription): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    match query.get("api-version").map(String::as_str) {
        None | Some("") => {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            );
        }
        Some(API_VERSION) => {}
        Some(other) => {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidApiVersionParameter",
                &format!("The api-version '{other}' is invalid. The supported versions are '{API_VERSION}'."),
            );
        }
    }
    let condition = query.get("monitorCondition").map(String::as_str);
    if let Some(condition) = condition
        && !matches!(condition, "Fired" | "Resolved")
    {
        return arm_error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            &format!("The monitorCondition '{condition}' is not one of Fired, Resolved."),
        );
    }
    let severity = query.get("severity").map(String::as_str);
    if let Some(severity) = severity
        && !matches!(severity, "Sev0" | "Sev1" | "Sev2" | "Sev3" | "Sev4")
    {
        return arm_error(
            StatusCode::BAD_REQUEST,
            "InvalidParameter",
            &format!("The severity '{severity}' is not one of Sev0 to Sev4."),
        );
    }
    let page_size = match query.get("pageCount").map(|count| count.parse::<usize>()) {
        None => DEFAULT_PAGE_SIZE,
        Some(Ok(count)) if (1..=250).contains(&count) => count,
        Some(_) => {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidParameter",
                "The pageCount must be a whole number from 1 to 250.",
            );
        }
    };
    let skip = match query.get("$skiptoken").map(|token| token.parse::<usize>()) {
        None => 0,
        Some(Ok(skip)) => skip,
        Some(Err(_)) => {
            return arm_error(
                StatusCode::BAD_REQUEST,
                "InvalidSkipToken",
                "The $skiptoken is not valid.",
            );
        }
    };
    let state = lock(&state);
    if !state.subscriptions.contains(&subscription.to_ascii_lowercase()) {
        return arm_error(
            StatusCode::NOT_FOUND,
            "SubscriptionNotFound",
            &format!("The subscription '{subscription}' could not be found."),
        );
    }
    let rule = query.get("alertRule");
    let group = query.get("targetResourceGroup");
    let matching: Vec<&Alert> = state
        .alerts
        .iter()
        .filter(|alert| alert.subscription.eq_ignore_ascii_case(&subscription))
        .filter(|alert| rule.is_none_or(|rule| alert.alert_rule.eq_ignore_ascii_case(rule)))
        .filter(|alert| condition.is_none_or(|condition| alert.monitor_condition == condition))
        .filter(|alert| severity.is_none_or(|severity| alert.severity == severity))
        .filter(|alert| {
            group.is_none_or(|group| resource_group(&alert.alert_rule).is_some_and(|g| g.eq_ignore_ascii_case(group)))
        })
        .collect();
    let page: Vec<Value> = matching
        .iter()
        .skip(skip)
        .take(page_size)
        .map(|alert| alert.to_json())
        .collect();
    let mut answer = json!({ "value": page });
    if skip + page_size < matching.len() {
        let host = headers
            .get(header::HOST)
            .and_then(|host| host.to_str().ok())
            .unwrap_or("127.0.0.1");
        let mut next = reqwest::Url::parse(&format!(
            "http://{host}/subscriptions/{subscription}/providers/Microsoft.AlertsManagement/alerts"
        ))
        .ok();
        if let Some(next) = next.as_mut() {
            let mut pairs = next.query_pairs_mut();
            for (name, value) in query.iter().filter(|(name, _)| *name != "$skiptoken") {
                pairs.append_pair(name, value);
            }
            pairs.append_pair("$skiptoken", &(skip + page_size).to_string());
        }
        if let (Some(next), Some(map)) = (next, answer.as_object_mut()) {
            map.insert("nextLink".to_owned(), json!(next.as_str()));
        }
    }
    axum::Json(answer).into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::*;
    use crate::TokenBook;

    const SUBSCRIPTION: &str = "4385cf00-2d3a-425a-832f-f4285b1c9dce";
    const RULE: &str = "/subscriptions/4385cf00-2d3a-425a-832f-f4285b1c9dce/resourceGroups/payments-rg/providers/Microsoft.Insights/metricAlerts/payments-5xx";

    async fn start(book: &TokenBook) -> MonitorDouble {
        MonitorDouble::start(
            Faults::default(),
            Journal::default(),
            Auth::default().entra(book.clone()),
            &[SUBSCRIPTION],
        )
        .await
        .unwrap()
    }

    fn list_url(double: &MonitorDouble, extra: &str) -> String {
        format!(
            "{}/subscriptions/{SUBSCRIPTION}/providers/Microsoft.AlertsManagement/alerts?api-version={API_VERSION}{extra}",
            double.base_url()
        )
    }

    #[tokio::test]
    async fn fired_alerts_are_listed_by_rule_and_condition_until_resolved() {
        let book = TokenBook::default();
        let double = start(&book).await;
        let token = book.issue(
            "bosun",
            "https://management.azure.com/.default",
            Duration::from_secs(600),
        );
        let client = reqwest::Client::new();
        let other_rule = RULE.replace("payments-5xx", "payments-latency");
        double.fire(RULE, "Sev1").unwrap();
        double.fire(&other_rule, "Sev3").unwrap();
        let url = list_url(&double, &format!("&alertRule={RULE}&monitorCondition=Fired"));
        let answer: Value = client
            .get(&url)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let value = answer["value"].as_array().unwrap();
        assert_eq!(value.len(), 1, "{answer}");
        let essentials = &value[0]["properties"]["essentials"];
        assert_eq!(essentials["alertRule"], RULE);
        assert_eq!(essentials["monitorCondition"], "Fired");
        assert_eq!(essentials["severity"], "Sev1");
        assert_eq!(value[0]["name"], "payments-5xx");
        assert!(answer.get("nextLink").is_none());

        assert_eq!(double.resolve(RULE), 1);
        let answer: Value = client
            .get(&url)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["value"].as_array().unwrap().len(), 0);
        let resolved = list_url(&double, &format!("&alertRule={RULE}&monitorCondition=Resolved"));
        let answer: Value = client
            .get(&resolved)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(answer["value"][0]["properties"]["essentials"]["monitorConditionResolvedDateTime"].is_string());
    }

    #[tokio::test]
    async fn pages_follow_next_links_and_requests_are_checked() {
        let book = TokenBook::default();
        let double = start(&book).await;
        let token = book.issue(
            "bosun",
            "https://management.azure.com/.default",
            Duration::from_secs(600),
        );
        let client = reqwest::Client::new();
        for _ in 0..3 {
            double.fire(RULE, "Sev2").unwrap();
        }
        let first: Value = client
            .get(list_url(&double, "&pageCount=2"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(first["value"].as_array().unwrap().len(), 2);
        let next = first["nextLink"].as_str().unwrap();
        assert!(next.starts_with(&double.base_url()), "{next}");
        let second: Value = client
            .get(next)
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(second["value"].as_array().unwrap().len(), 1);
        assert!(second.get("nextLink").is_none());

        let status = |url: String, token: Option<String>| {
            let mut request = client.get(url);
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            async move { request.send().await.unwrap().status().as_u16() }
        };
        assert_eq!(status(list_url(&double, ""), None).await, 401);
        let old = double.base_url()
            + "/subscriptions/"
            + SUBSCRIPTION
            + "/providers/Microsoft.AlertsManagement/alerts?api-version=2018-05-05";
        assert_eq!(status(old, Some(token.clone())).await, 400);
        let unknown = list_url(&double, "").replace(SUBSCRIPTION, "00000000-0000-0000-0000-000000000000");
        assert_eq!(status(unknown, Some(token.clone())).await, 404);
        assert_eq!(
            status(list_url(&double, "&monitorCondition=Burning"), Some(token)).await,
            400
        );
        assert_eq!(
            double.fire("/subscriptions/other/resourceGroups/x/providers/y/z/w", "Sev1"),
            None
        );
    }
}
