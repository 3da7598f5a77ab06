//! An Azure Monitor check's sample: the rule's fired alerts, listed with
//! Alerts Management (`Alerts - Get All`, api-version [`API_VERSION`]):
//!
//! `GET {arm}/subscriptions/{subscriptionId}/providers/Microsoft.AlertsManagement/alerts?api-version=2019-05-05-preview&alertRule={alertRuleId}&monitorCondition=Fired`
//!
//! with an Entra ID token of bosun's identity for Azure Resource Manager
//! (the same [`RefreshingToken`] as ACR Tasks' calls: a 401 to a token
//! still valid by its expiry is answered by one more try with a new one).
//! The answer is an `AlertsList`, `{"value": [Alert], "nextLink"}`, each
//! alert `{"id", "name", "properties": {"essentials": {"severity",
//! "monitorCondition", "alertRule", "startDateTime", ...}}}`; `nextLink` is
//! followed for up to [`MAX_PAGES`] pages, and only while it stays on the
//! ARM endpoint (the token goes nowhere else).
//!
//! The sample passes when no alert of the rule is fired, and fails naming
//! how many are and the first one's name, severity and start; an ARM error
//! (`{"error": {"code", "message"}}`) fails it with its code and message,
//! clipped.

use std::sync::Arc;
use std::time::Duration;

use bosun_sagas::release::AzureMonitorCheck;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::adapter::{AzureMonitorAccess, ProbesError, Sample, clip, failure, read_answer};
use crate::delivery::azure::credential::{CredentialError, FRESH_TOKEN_REFUSED, RefreshingToken};
use crate::delivery::azure::http;

/// The api-version of Alerts Management's `Alerts - Get All`.
pub const API_VERSION: &str = "2019-05-05-preview";

/// The most pages of alerts one sample reads.
pub const MAX_PAGES: usize = 5;

/// Alerts Management through Azure Resource Manager.
#[derive(Debug)]
pub(super) struct AzureMonitor {
    endpoint: Url,
    tokens: Arc<RefreshingToken>,
}

/// `AlertsList`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AlertsList {
    #[serde(default)]
    value: Vec<Alert>,
    next_link: Option<String>,
}

/// The part of an `Alert` a sample reads.
#[derive(Debug, Deserialize)]
struct Alert {
    name: Option<String>,
    properties: Option<AlertProperties>,
}

#[derive(Debug, Deserialize)]
struct AlertProperties {
    essentials: Option<Essentials>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Essentials {
    severity: Option<String>,
    monitor_condition: Option<String>,
    start_date_time: Option<String>,
}

/// ARM's error answer.
#[derive(Debug, Deserialize)]
struct ArmError {
    error: Option<ArmErrorBody>,
}

#[derive(Debug, Deserialize)]
struct ArmErrorBody {
    code: Option<String>,
    message: Option<String>,
}

/// One answer of ARM.
struct Answer {
    status: StatusCode,
    body: Vec<u8>,
}

/// Why a page could not be had: the detail's reason.
struct Failed(String);

impl From<CredentialError> for Failed {
    fn from(err: CredentialError) -> Self {
        Self(format!("no Entra ID token of bosun's identity: {err}"))
    }
}

impl AzureMonitor {
    /// Alerts Management as `access` says; fails when its endpoint is not
    /// an `http(s)` URL.
    pub(super) fn new(access: AzureMonitorAccess) -> Result<Self, ProbesError> {
        let invalid = || ProbesError::ArmEndpoint {
            endpoint: access.endpoint.clone(),
        };
        let endpoint = Url::parse(access.endpoint.trim()).map_err(|_| invalid())?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.cannot_be_a_base() || endpoint.host().is_none() {
            return Err(invalid());
        }
        Ok(Self {
            endpoint,
            tokens: access.tokens,
        })
    }

    /// The first page's URL for `check`; `None` when its rule id names no
    /// subscription.
    fn alerts_url(&self, check: &AzureMonitorCheck) -> Option<Url> {
        let subscription = check.subscription()?;
        let mut url = self.endpoint.clone();
        url.set_query(None);
        url.set_fragment(None);
        {
            let mut segments = url.path_segments_mut().ok()?;
            segments.pop_if_empty().extend([
                "subscriptions",
                subscription,
                "providers",
                "Microsoft.AlertsManagement",
                "alerts",
            ]);
        }
        url.query_pairs_mut()
            .append_pair("api-version", API_VERSION)
            .append_pair("alertRule", &check.alert_rule_id)
            .append_pair("monitorCondition", "Fired");
        Some(url)
    }

    /// Whether `next` may be followed with the token: on the ARM endpoint.
    fn on_endpoint(&self, next: &Url) -> bool {
        next.scheme() == self.endpoint.scheme()
            && next.host_str() == self.endpoint.host_str()
            && next.port_or_known_default() == self.endpoint.port_or_known_default()
    }

    /// One sample of `check` with `client`, each call waiting at most
    /// `timeout`.
    pub(super) async fn sample(
        &self,
        client: &reqwest::Client,
        check: &AzureMonitorCheck,
        timeout: Duration,
    ) -> Sample {
        let Some(mut url) = self.alerts_url(check) else {
            return Sample::fail("the alert rule id names no subscription (`/subscriptions/<id>/...`)");
        };
        let mut fired: Vec<Alert> = Vec::new();
        let mut pages = 0;
        loop {
            pages += 1;
            let page = match self.page(client, &url, timeout).await {
                Ok(page) => page,
                Err(Failed(reason)) => return Sample::fail(format!("listing the rule's alerts: {reason}")),
            };
            fired.extend(page.value.into_iter().filter(is_fired));
            let Some(next) = page.next_link.filter(|next| !next.trim().is_empty()) else {
                break;
            };
            let next = match self.endpoint.join(next.trim()) {
                Ok(next) if self.on_endpoint(&next) => next,
                _ => {
                    return Sample::fail(
                        "listing the rule's alerts: Alerts Management's nextLink points off the Azure Resource Manager endpoint",
                    );
                }
            };
            if pages == MAX_PAGES {
                if fired.is_empty() {
                    return Sample::fail(format!(
                        "listing the rule's alerts: no end after {MAX_PAGES} pages and no fired alert in them"
                    ));
                }
                return Sample::fail(describe(&fired, true));
            }
            url = next;
        }
        if fired.is_empty() {
            Sample::pass("no alert of the rule is fired")
        } else {
            Sample::fail(describe(&fired, false))
        }
    }

    /// One page of alerts.
    async fn page(&self, client: &reqwest::Client, url: &Url, timeout: Duration) -> Result<AlertsList, Failed> {
        let answered = self
            .tokens
            .send_with_token(
                |token| self.attempt(client, url.clone(), token, timeout),
                |answer: &Answer| answer.status == StatusCode::UNAUTHORIZED,
            )
            .await?;
        if answered.fresh_token_refused {
            return Err(Failed(format!("401 Unauthorized: {FRESH_TOKEN_REFUSED}")));
        }
        let Answer { status, body } = answered.answer;
        if !status.is_success() {
            let error = serde_json::from_slice::<ArmError>(&body)
                .ok()
                .and_then(|answer| answer.error);
            return Err(Failed(match error {
                Some(ArmErrorBody { code, message }) => format!(
                    "{status}: {}",
                    clip(&format!(
                        "{}: {}",
                        code.as_deref().unwrap_or("error"),
                        message.as_deref().unwrap_or("no message")
                    ))
                ),
                None => status.to_string(),
            }));
        }
        serde_json::from_slice::<AlertsList>(&body)
            .map_err(|_| Failed(format!("{status} with something that is not an AlertsList")))
    }

    /// Sends one request with `token` and reads its answer.
    async fn attempt(
        &self,
        client: &reqwest::Client,
        url: Url,
        token: String,
        timeout: Duration,
    ) -> Result<Answer, Failed> {
        let mut bearer = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Failed("the ARM token cannot be sent in a header".to_owned()))?;
        bearer.set_sensitive(true);
        let request = client.get(url).header(AUTHORIZATION, bearer).timeout(timeout);
        let response = http::send(request)
            .await
            .map_err(|err| Failed(failure(&err, timeout)))?;
        let status = response.status();
        let body = read_answer(response, timeout).await.map_err(Failed)?;
        tracing::debug!(status = status.as_u16(), "Alerts Management call");
        Ok(Answer { status, body })
    }
}

/// Whether an alert the listing returned is fired (the listing asked for
/// fired ones; one without a condition counts as fired).
fn is_fired(alert: &Alert) -> bool {
    essentials(alert)
        .monitor_condition
        .as_deref()
        .is_none_or(|condition| !condition.eq_ignore_ascii_case("Resolved"))
}

fn essentials(alert: &Alert) -> &Essentials {
    static NONE: Essentials = Essentials {
        severity: None,
        monitor_condition: None,
        start_date_time: None,
    };
    alert
        .properties
        .as_ref()
        .and_then(|properties| properties.essentials.as_ref())
        .unwrap_or(&NONE)
}

/// The detail of a failed sample: how many alerts are fired (`at least`
/// when pages were left unread) and the first one.
fn describe(fired: &[Alert], more: bool) -> String {
    let count = fired.len();
    let (noun, verb) = if count == 1 { ("alert", "is") } else { ("alerts", "are") };
    let at_least = if more { "at least " } else { "" };
    let Some(first) = fired.first() else {
        return format!("{at_least}{count} {noun} of the rule {verb} fired");
    };
    let essentials = essentials(first);
    format!(
        "{at_least}{count} {noun} of the rule {verb} fired; the first: `{}` ({}) since {}",
        clip(first.name.as_deref().unwrap_or("unnamed")),
        clip(essentials.severity.as_deref().unwrap_or("no severity")),
        clip(essentials.start_date_time.as_deref().unwrap_or("an unknown time")),
    )
}
