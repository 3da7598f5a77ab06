//! What a tenant's policy asks of a release once it is synced in an
//! environment ([`Verification`], under `verification` of the
//! [`ApprovalPolicy`](super::ApprovalPolicy)): a soak time, checks sampled
//! every `intervalSeconds` ([`VerificationCheck`]: an HTTP health URL, a
//! Prometheus query with bounds, an Azure Monitor alert rule that must stay
//! quiet), how many failed samples are tolerated, whether a failure rolls
//! the environment back, and the environments a release must have been
//! verified in before it may be promoted there (the promotion graph).
//!
//! The saga never runs a check: the release-orchestration consumer samples
//! them through its probes and hands the outcomes ([`CheckOutcome`]) to
//! [`ReleaseSaga::apply_samples`](super::ReleaseSaga::apply_samples).

use std::collections::BTreeMap;

use bosun_contracts::validate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most checks one environment's verification can have.
pub const MAX_CHECKS: usize = 16;

/// The longest soak time: 7 days, in seconds.
pub const MAX_SOAK_SECONDS: u64 = 7 * 24 * 3600;

/// The longest interval between samples: 1 hour, in seconds.
pub const MAX_INTERVAL_SECONDS: u64 = 3600;

/// The interval between samples when the policy names none: 30 seconds.
pub const DEFAULT_INTERVAL_SECONDS: u64 = 30;

/// The most successes an HTTP check can require.
pub const MAX_SUCCESSES: u32 = 1000;

/// The longest URL or query a check can name, in characters.
pub const MAX_TARGET_CHARS: usize = 2048;

/// The verification of one environment: what must hold for a release
/// synced there to count as verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verification {
    /// How long the release must run there before it counts as verified,
    /// in seconds (0 to 604800, 7 days; default 0: as soon as its checks pass).
    /// Also checked by bosun, beyond this schema: a whole number.
    #[serde(default)]
    #[schemars(range(max = 604_800))]
    pub soak_seconds: u64,
    /// Seconds between two samples of the checks (1 to 3600; default 30).
    /// Also checked by bosun, beyond this schema: a whole number.
    #[serde(default = "default_interval")]
    #[schemars(range(min = 1, max = 3600))]
    pub interval_seconds: u64,
    /// Failed samples tolerated before the verification fails (default 0:
    /// the first failed sample fails it).
    #[serde(default)]
    #[schemars(range(max = 1000))]
    pub failure_limit: u32,
    /// The checks, each sampled every `intervalSeconds` (at most 16).
    /// Also checked by bosun, beyond this schema: each check's name is used once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub checks: Vec<VerificationCheck>,
    /// Whether a failed verification rolls the environment back to its
    /// last verified release (default true).
    #[serde(default = "yes")]
    pub roll_back: bool,
    /// Whether a release the environment is rolled back to is verified
    /// again, as a promotion is (default true; false: it was verified there
    /// before, and that is enough). A rollback whose verification fails
    /// rolls back further.
    #[serde(default = "yes")]
    pub verify_rollbacks: bool,
    /// Environments a release must have been verified in before it may be
    /// promoted here: the promotion graph.
    /// Also checked by bosun, beyond this schema: each is an environment name, named once, not this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub requires_verified_in: Vec<String>,
}

fn default_interval() -> u64 {
    DEFAULT_INTERVAL_SECONDS
}

fn yes() -> bool {
    true
}

impl Verification {
    /// Whether a release synced there has anything to wait for (a soak
    /// time or a check); without, a healthy sync verifies it.
    pub fn waits(&self) -> bool {
        self.soak_seconds > 0 || !self.checks.is_empty()
    }

    /// The check named `name`.
    pub fn check(&self, name: &str) -> Option<&VerificationCheck> {
        self.checks.iter().find(|check| check.name() == name)
    }
}

/// One check, sampled every `intervalSeconds` while a release verifies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum VerificationCheck {
    /// An HTTP URL that must answer 2xx.
    Http(HttpCheck),
    /// A Prometheus instant query whose every value must stay within bounds.
    Prometheus(PrometheusCheck),
    /// An Azure Monitor alert rule that must not fire.
    AzureMonitor(AzureMonitorCheck),
}

impl VerificationCheck {
    /// The check's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Http(check) => &check.name,
            Self::Prometheus(check) => &check.name,
            Self::AzureMonitor(check) => &check.name,
        }
    }

    /// Its kind, as the policy names it (`http`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Prometheus(_) => "prometheus",
            Self::AzureMonitor(_) => "azureMonitor",
        }
    }

    /// Passing samples this check needs before the release counts as
    /// verified (an HTTP check's `successes`; one for the others).
    pub fn successes(&self) -> u32 {
        match self {
            Self::Http(check) => check.successes,
            _ => 1,
        }
    }
}

/// An HTTP health URL: `GET` it; a 2xx answer passes, anything else (or no
/// answer within `timeoutSeconds`) fails. Redirects are not followed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpCheck {
    /// The check's name (an identifier).
    /// Also checked by bosun, beyond this schema: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// The URL (`http` or `https`).
    /// Also checked by bosun, beyond this schema: at most 2048 characters, no spaces or control characters.
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// How many passing samples it needs (1 to 1000; default 1).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1000))]
    pub successes: u32,
    /// Seconds to wait for an answer (1 to 60; default 10).
    #[serde(default = "ten")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: u64,
}

fn one() -> u32 {
    1
}

fn ten() -> u64 {
    10
}

/// A Prometheus instant query (`GET <url>/api/v1/query`): every value it
/// returns must be within `[min, max]`. A query that returns nothing fails
/// (no data is not health).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrometheusCheck {
    /// The check's name (an identifier).
    /// Also checked by bosun, beyond this schema: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// The Prometheus server (`http` or `https`), without `/api/v1/query`.
    /// Also checked by bosun, beyond this schema: at most 2048 characters, no spaces or control characters.
    #[schemars(length(min = 1, max = 2048))]
    pub url: String,
    /// The PromQL query.
    #[schemars(length(min = 1, max = 2048))]
    pub query: String,
    /// The least value allowed, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// The greatest value allowed, if any.
    /// Also checked by bosun, beyond this schema: `min` or `max` is given, both are finite, and `min` is at most `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

// Bounds are finite (checked by `validate`), so equality is an equivalence.
impl Eq for PrometheusCheck {}

/// An Azure Monitor alert rule that must stay quiet: a sample fails while
/// an alert of that rule is fired (Alerts Management, `monitorCondition`
/// `Fired`). bosun reads it with its workload identity (the role Monitoring
/// Reader on the rule's subscription).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AzureMonitorCheck {
    /// The check's name (an identifier).
    /// Also checked by bosun, beyond this schema: letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// The alert rule's Azure resource id
    /// (`/subscriptions/<id>/resourceGroups/<group>/providers/<provider>/<type>/<name>`).
    /// Also checked by bosun, beyond this schema: it starts with `/subscriptions/<id>/resourceGroups/` and has no spaces or control characters.
    #[schemars(length(min = 1, max = 2048))]
    pub alert_rule_id: String,
}

impl AzureMonitorCheck {
    /// The subscription the alert rule is in (the segment after
    /// `/subscriptions/`).
    pub fn subscription(&self) -> Option<&str> {
        let mut segments = self.alert_rule_id.split('/');
        match (segments.next(), segments.next(), segments.next()) {
            (Some(""), Some(first), Some(id)) if first.eq_ignore_ascii_case("subscriptions") && !id.is_empty() => {
                Some(id)
            }
            _ => None,
        }
    }
}

/// One sample of one check: passed or not, and what was seen (a status, a
/// value, an alert; never a response body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckOutcome {
    /// The check's name.
    pub check: String,
    /// Whether it passed.
    pub passed: bool,
    /// What was seen, for a person.
    pub detail: String,
}

/// Checks `verification` (the policy of each named environment).
pub(super) fn validate_all(verification: &BTreeMap<String, Verification>) -> Result<(), validate::FieldError> {
    for (environment, verification) in verification {
        let field = format!("verification.{environment}");
        validate::environment_name(&field, environment)?;
        verification.validate(&field, environment)?;
    }
    Ok(())
}

impl Verification {
    fn validate(&self, field: &str, environment: &str) -> Result<(), validate::FieldError> {
        if self.soak_seconds > MAX_SOAK_SECONDS {
            return Err(validate::FieldError::new(
                format!("{field}.soakSeconds"),
                format!("must be at most {MAX_SOAK_SECONDS} (7 days)"),
            ));
        }
        if !(1..=MAX_INTERVAL_SECONDS).contains(&self.interval_seconds) {
            return Err(validate::FieldError::new(
                format!("{field}.intervalSeconds"),
                format!("must be between 1 and {MAX_INTERVAL_SECONDS}"),
            ));
        }
        if self.failure_limit > MAX_SUCCESSES {
            return Err(validate::FieldError::new(
                format!("{field}.failureLimit"),
                format!("must be at most {MAX_SUCCESSES}"),
            ));
        }
        if self.checks.len() > MAX_CHECKS {
            return Err(validate::FieldError::new(
                format!("{field}.checks"),
                format!("has {} checks; at most {MAX_CHECKS} are allowed", self.checks.len()),
            ));
        }
        for (index, check) in self.checks.iter().enumerate() {
            check.validate(&format!("{field}.checks[{index}]"))?;
        }
        validate::unique(
            &format!("{field}.checks"),
            self.checks.iter().map(VerificationCheck::name),
        )?;
        let upstream_field = format!("{field}.requiresVerifiedIn");
        if self.requires_verified_in.len() > MAX_CHECKS {
            return Err(validate::FieldError::new(
                upstream_field,
                format!(
                    "names {} environments; at most {MAX_CHECKS} are allowed",
                    self.requires_verified_in.len()
                ),
            ));
        }
        for (index, upstream) in self.requires_verified_in.iter().enumerate() {
            validate::environment_name(&format!("{upstream_field}[{index}]"), upstream)?;
            if upstream == environment {
                return Err(validate::FieldError::new(
                    format!("{upstream_field}[{index}]"),
                    "names the environment itself: no release could ever be promoted there",
                ));
            }
        }
        validate::unique(&upstream_field, self.requires_verified_in.iter().map(String::as_str))
    }
}

impl VerificationCheck {
    fn validate(&self, field: &str) -> Result<(), validate::FieldError> {
        validate::identifier(&format!("{field}.name"), self.name())?;
        match self {
            Self::Http(check) => {
                url(&format!("{field}.url"), &check.url)?;
                if !(1..=MAX_SUCCESSES).contains(&check.successes) {
                    return Err(validate::FieldError::new(
                        format!("{field}.successes"),
                        format!("must be between 1 and {MAX_SUCCESSES}"),
                    ));
                }
                if !(1..=60).contains(&check.timeout_seconds) {
                    return Err(validate::FieldError::new(
                        format!("{field}.timeoutSeconds"),
                        "must be between 1 and 60",
                    ));
                }
                Ok(())
            }
            Self::Prometheus(check) => {
                url(&format!("{field}.url"), &check.url)?;
                validate::text(&format!("{field}.query"), &check.query, MAX_TARGET_CHARS)?;
                if check.min.is_none() && check.max.is_none() {
                    return Err(validate::FieldError::new(
                        format!("{field}.max"),
                        "`min` or `max` is required: a query without bounds checks nothing",
                    ));
                }
                for (name, bound) in [("min", check.min), ("max", check.max)] {
                    if bound.is_some_and(|bound| !bound.is_finite()) {
                        return Err(validate::FieldError::new(
                            format!("{field}.{name}"),
                            "must be a finite number",
                        ));
                    }
                }
                if let (Some(min), Some(max)) = (check.min, check.max)
                    && min > max
                {
                    return Err(validate::FieldError::new(
                        format!("{field}.max"),
                        format!("is less than `min` ({max} < {min}): no value could pass"),
                    ));
                }
                Ok(())
            }
            Self::AzureMonitor(check) => {
                let rule_field = format!("{field}.alertRuleId");
                validate::text(&rule_field, &check.alert_rule_id, MAX_TARGET_CHARS)?;
                let has_group = check
                    .alert_rule_id
                    .split('/')
                    .nth(3)
                    .is_some_and(|segment| segment.eq_ignore_ascii_case("resourceGroups"));
                if check.subscription().is_none() || !has_group || check.alert_rule_id.chars().any(char::is_whitespace)
                {
                    return Err(validate::FieldError::new(
                        rule_field,
                        "must be an alert rule's resource id, `/subscriptions/<id>/resourceGroups/<group>/providers/...`",
                    ));
                }
                Ok(())
            }
        }
    }
}

/// An `http` or `https` URL with a host, no spaces or control characters.
fn url(field: &str, value: &str) -> Result<(), validate::FieldError> {
    validate::text(field, value, MAX_TARGET_CHARS)?;
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
        .ok_or_else(|| validate::FieldError::new(field, "must be an `http://` or `https://` URL"))?;
    if rest.is_empty() || rest.starts_with('/') || value.chars().any(char::is_whitespace) {
        return Err(validate::FieldError::new(field, "must name a host and have no spaces"));
    }
    Ok(())
}
