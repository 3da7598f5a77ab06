//! When a release may be promoted: a tenant's promotion windows and holds
//! (part of its release policy document, beside the approval rules), and
//! the gate a promotion passes ([`ApprovalPolicy::promotion_gate`](super::ApprovalPolicy::promotion_gate)).
//!
//! - A **deny window** (a freeze) is open from each time its `schedule` (a
//!   cron pattern, seconds optional) matches in its `timeZone`, for
//!   `durationSeconds`: `0 18 * * FRI` for 62 hours in `Europe/Berlin` is
//!   every weekend from Friday 18:00 Berlin time.
//! - **Allow windows** (business hours): where any applies to an
//!   environment, a promotion there happens only while one of them is open.
//!   A deny window wins over an allow window.
//! - A **hold** stops every promotion to one environment, with a reason,
//!   until it is lifted (or until its `until`, when it names one).
//!
//! A promotion that meets a closed gate waits; [`Closure::until`] says when
//! the gate opens (the first time no deny window and no hold applies and,
//! where allow windows apply, one is open), so the saga can say until
//! when and look again then. An override (its own right, with a reason)
//! lets one release through to one environment.

use std::collections::BTreeMap;
use std::str::FromStr;

use bosun_contracts::validate;
use chrono::{DateTime, TimeZone, Utc};
use croner::Cron;
use croner::parser::CronParser;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use time::format_description::well_known::Rfc3339;

/// The most windows a policy can have.
pub const MAX_WINDOWS: usize = 32;

/// The longest a window stays open after each match of its schedule: 31
/// days, in seconds.
pub const MAX_WINDOW_SECONDS: u64 = 31 * 24 * 3600;

/// The longest schedule and time zone, in characters.
const MAX_SCHEDULE_CHARS: usize = 128;

/// How far ahead the gate looks for its opening: beyond it, a gate is
/// closed with no known end (its saga looks again later).
const HORIZON: time::Duration = time::Duration::days(400);

/// How many window edges the gate walks looking for its opening.
const MAX_EDGES: usize = 256;

/// Whether a window allows or denies promotions while it is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WindowKind {
    /// Promotions happen only while it (or another allow window) is open.
    Allow,
    /// No promotion while it is open (a freeze).
    Deny,
}

/// A recurring window of time in which promotions to some environments
/// are allowed or denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromotionWindow {
    /// The window's name, shown where it makes a promotion wait.
    /// Also checked by bosun, beyond this schema: an identifier (letters,
    /// digits, `.`, `_`, `-`), unique in the policy.
    pub name: String,
    /// `allow` or `deny`.
    pub kind: WindowKind,
    /// The environments it applies to; empty: every environment.
    /// Also checked by bosun, beyond this schema: each is an environment name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environments: Vec<String>,
    /// When it opens: a cron pattern (minute hour day-of-month month
    /// day-of-week, with an optional leading seconds field), e.g.
    /// `0 18 * * FRI`, read in `timeZone`.
    /// Also checked by bosun, beyond this schema: a cron pattern that parses.
    #[schemars(length(min = 1, max = 128))]
    pub schedule: String,
    /// How long it stays open after each time `schedule` matches, in
    /// seconds (at most 31 days).
    /// Also checked by bosun, beyond this schema: a whole number.
    #[schemars(range(min = 1, max = 2_678_400))]
    pub duration_seconds: u64,
    /// The IANA time zone `schedule` is read in (`Europe/Berlin`); default
    /// `UTC`. Daylight saving time is followed.
    /// Also checked by bosun, beyond this schema: a zone of the IANA database.
    #[serde(default = "utc", skip_serializing_if = "is_utc")]
    #[schemars(length(min = 1, max = 128))]
    pub time_zone: String,
}

fn utc() -> String {
    "UTC".to_owned()
}

fn is_utc(zone: &String) -> bool {
    zone == "UTC"
}

/// A hold on one environment: no promotion there until it is lifted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Hold {
    /// Why (shown to whoever waits on it).
    /// Also checked by bosun, beyond this schema: 1 to 4000 characters, no
    /// control characters.
    #[schemars(length(min = 1, max = 4000))]
    pub reason: String,
    /// When it ends on its own, if it does (RFC 3339).
    /// Also checked by bosun, beyond this schema: a year from 1 to 9999, and no leap second.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub until: Option<OffsetDateTime>,
}

/// What keeps a promotion waiting, as named where it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WindowRule {
    /// A hold on the environment.
    #[serde(rename = "hold")]
    Hold,
    /// A deny window is open.
    #[serde(rename = "deny-window")]
    DenyWindow,
    /// Allow windows apply and none is open.
    #[serde(rename = "allow-window")]
    AllowWindow,
}

impl WindowRule {
    /// The rule's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hold => "hold",
            Self::DenyWindow => "deny-window",
            Self::AllowWindow => "allow-window",
        }
    }
}

impl std::fmt::Display for WindowRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A closed gate: what closes it, and when it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closure {
    /// What closes it now.
    pub rule: WindowRule,
    /// The window that closes it (none for a hold).
    pub window: Option<String>,
    /// For a person: what closes it and until when.
    pub reason: String,
    /// When it opens, as far as the policy says; `None` when nothing in
    /// the policy ends it (a hold with no end) or it is not open within
    /// the next 400 days.
    pub until: Option<OffsetDateTime>,
}

/// A window ready to be evaluated.
struct Compiled<'a> {
    window: &'a PromotionWindow,
    cron: Cron,
    zone: chrono_tz::Tz,
    duration: time::Duration,
}

impl Compiled<'_> {
    /// The end of the opening that contains `at`, if one does.
    fn open_until(&self, at: OffsetDateTime) -> Option<OffsetDateTime> {
        let local = to_chrono(at)?.with_timezone(&self.zone);
        let start = self.cron.find_previous_occurrence(&local, true).ok()?;
        let end = from_chrono(&start)?.checked_add(self.duration)?;
        (end > at).then_some(end)
    }

    /// The first time it opens after `at`.
    fn next_opening(&self, at: OffsetDateTime) -> Option<OffsetDateTime> {
        let local = to_chrono(at)?.with_timezone(&self.zone);
        let next = self.cron.find_next_occurrence(&local, false).ok()?;
        from_chrono(&next)
    }
}

fn to_chrono(at: OffsetDateTime) -> Option<DateTime<Utc>> {
    Utc.timestamp_opt(at.unix_timestamp(), 0).single()
}

fn from_chrono<Tz: TimeZone>(at: &DateTime<Tz>) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp(at.timestamp()).ok()
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_else(|_| at.to_string())
}

fn parse_schedule(schedule: &str) -> Result<Cron, String> {
    CronParser::new().parse(schedule).map_err(|err| err.to_string())
}

fn parse_zone(zone: &str) -> Result<chrono_tz::Tz, String> {
    chrono_tz::Tz::from_str(zone).map_err(|_| format!("`{zone}` is not a time zone of the IANA database"))
}

impl PromotionWindow {
    /// Whether it applies to `environment`.
    pub fn applies_to(&self, environment: &str) -> bool {
        self.environments.is_empty() || self.environments.iter().any(|named| named == environment)
    }

    fn compile(&self) -> Option<Compiled<'_>> {
        Some(Compiled {
            window: self,
            cron: parse_schedule(&self.schedule).ok()?,
            zone: parse_zone(&self.time_zone).ok()?,
            duration: time::Duration::seconds(i64::try_from(self.duration_seconds).ok()?),
        })
    }

    pub(super) fn validate(&self, field: &str) -> Result<(), validate::FieldError> {
        validate::identifier(&format!("{field}.name"), &self.name)?;
        for (index, environment) in self.environments.iter().enumerate() {
            validate::environment_name(&format!("{field}.environments[{index}]"), environment)?;
        }
        validate::unique(
            &format!("{field}.environments"),
            self.environments.iter().map(String::as_str),
        )?;
        let schedule_field = format!("{field}.schedule");
        validate::text(&schedule_field, &self.schedule, MAX_SCHEDULE_CHARS)?;
        let cron = parse_schedule(&self.schedule)
            .map_err(|reason| validate::FieldError::new(&schedule_field, format!("not a cron pattern: {reason}")))?;
        let zone_field = format!("{field}.timeZone");
        validate::text(&zone_field, &self.time_zone, MAX_SCHEDULE_CHARS)?;
        let zone = parse_zone(&self.time_zone).map_err(|reason| validate::FieldError::new(&zone_field, reason))?;
        if !(1..=MAX_WINDOW_SECONDS).contains(&self.duration_seconds) {
            return Err(validate::FieldError::new(
                format!("{field}.durationSeconds"),
                format!("must be between 1 and {MAX_WINDOW_SECONDS} (31 days)"),
            ));
        }
        // A pattern that never matches (`0 0 31 2 *`) would make a window
        // that never opens: surely not what was meant.
        let now = to_chrono(OffsetDateTime::now_utc()).map(|now| now.with_timezone(&zone));
        if now.is_some_and(|now| cron.find_next_occurrence(&now, false).is_err()) {
            return Err(validate::FieldError::new(
                schedule_field,
                format!("`{}` never matches", self.schedule),
            ));
        }
        Ok(())
    }
}

/// Checks the windows and holds of a policy; the error names the field.
pub(super) fn validate(
    windows: &[PromotionWindow],
    holds: &BTreeMap<String, Hold>,
) -> Result<(), validate::FieldError> {
    if windows.len() > MAX_WINDOWS {
        return Err(validate::FieldError::new(
            "windows",
            format!("has {} windows; at most {MAX_WINDOWS} are allowed", windows.len()),
        ));
    }
    for (index, window) in windows.iter().enumerate() {
        window.validate(&format!("windows[{index}]"))?;
    }
    validate::unique("windows", windows.iter().map(|window| window.name.as_str()))?;
    for (environment, hold) in holds {
        let field = format!("holds.{environment}");
        validate::environment_name(&field, environment)?;
        validate::text(
            &format!("{field}.reason"),
            &hold.reason,
            bosun_contracts::messages::MAX_REASON_CHARS,
        )?;
    }
    Ok(())
}

/// Whether a promotion to `environment` may happen `at` under `windows`
/// and `holds`: `None` when it may, else what closes the gate and when it
/// opens.
pub(super) fn gate(
    windows: &[PromotionWindow],
    holds: &BTreeMap<String, Hold>,
    environment: &str,
    at: OffsetDateTime,
) -> Option<Closure> {
    let hold = holds
        .get(environment)
        .filter(|hold| hold.until.is_none_or(|until| until > at));
    let windows: Vec<Compiled<'_>> = windows
        .iter()
        .filter(|window| window.applies_to(environment))
        .filter_map(PromotionWindow::compile)
        .collect();
    let (deny, allow): (Vec<&Compiled<'_>>, Vec<&Compiled<'_>>) = windows
        .iter()
        .partition(|window| window.window.kind == WindowKind::Deny);
    if let Some(hold) = hold {
        let until = match hold.until {
            Some(until) => opening(&deny, &allow, until),
            None => None,
        };
        return Some(Closure {
            rule: WindowRule::Hold,
            window: None,
            reason: format!(
                "{environment} is on hold: {}{}",
                hold.reason,
                hold.until
                    .map(|until| format!(" (until {})", rfc3339(until)))
                    .unwrap_or_default()
            ),
            until,
        });
    }
    if let Some(denying) = deny.iter().find(|window| window.open_until(at).is_some()) {
        let until = opening(&deny, &allow, at);
        return Some(Closure {
            rule: WindowRule::DenyWindow,
            window: Some(denying.window.name.clone()),
            reason: format!(
                "deny window `{}` ({} for {}s, {}) is open",
                denying.window.name, denying.window.schedule, denying.window.duration_seconds, denying.window.time_zone
            ),
            until,
        });
    }
    if !allow.is_empty() && allow.iter().all(|window| window.open_until(at).is_none()) {
        let until = opening(&deny, &allow, at);
        let names: Vec<&str> = allow.iter().map(|window| window.window.name.as_str()).collect();
        return Some(Closure {
            rule: WindowRule::AllowWindow,
            window: names.first().map(|name| (*name).to_owned()),
            reason: format!(
                "{environment} is promoted only inside its allow windows ({}), and none is open",
                names.join(", ")
            ),
            until,
        });
    }
    None
}

/// The first time from `from` at which no deny window is open and, where
/// allow windows apply, one is; `None` beyond [`HORIZON`].
fn opening(deny: &[&Compiled<'_>], allow: &[&Compiled<'_>], from: OffsetDateTime) -> Option<OffsetDateTime> {
    let horizon = from.checked_add(HORIZON)?;
    let mut at = from;
    for _ in 0..MAX_EDGES {
        if at > horizon {
            return None;
        }
        if let Some(end) = deny.iter().filter_map(|window| window.open_until(at)).max() {
            at = end;
            continue;
        }
        if !allow.is_empty() && allow.iter().all(|window| window.open_until(at).is_none()) {
            at = allow.iter().filter_map(|window| window.next_opening(at)).min()?;
            continue;
        }
        return Some(at);
    }
    None
}
