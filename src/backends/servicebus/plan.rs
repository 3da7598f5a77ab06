//! What a Service Bus namespace needs for bosun, and how far it is from it.
//!
//! Pure: no I/O. [`desired_entities`] turns a [`Topology`] and
//! [`TopologyOptions`] into [`EntitySpec`]s (queues, the events topic, its
//! subscriptions, two SQL rules per subscription and the removal of the
//! `$Default` rule); each spec renders the ATOM entry the management API
//! takes on `PUT`, with its elements in the order Service Bus requires (the
//! order of the official SDKs' serializers). `diff` compares the specs
//! with what the namespace answered and yields a [`Plan`], which
//! [`super::management::ManagementClient`] applies.
//!
//! The rules route by message type and make "send to one subscription"
//! possible on a topic: a send to the topic with the application property
//! `replayTo=<subscription>` reaches only that subscription.
//!
//! - `bosun-types`: `sys.Label IN ('A','B') AND NOT EXISTS(replayTo)`
//! - `bosun-replay`: `replayTo = '<subscription>'`

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::ports::topology::Topology;

/// Name of the rule that lets a subscription's event types through.
pub const TYPES_RULE: &str = "bosun-types";
/// Name of the rule that lets messages sent to this one subscription through.
pub const REPLAY_RULE: &str = "bosun-replay";
/// The rule Service Bus gives every new subscription (a true filter); bosun removes it.
pub const DEFAULT_RULE: &str = "$Default";
/// The application property naming the one subscription a topic send is for.
pub const REPLAY_PROPERTY: &str = "replayTo";

const ATOM_NAMESPACE: &str = "http://www.w3.org/2005/Atom";
const SERVICE_BUS_NAMESPACE: &str = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect";
const SCHEMA_INSTANCE_NAMESPACE: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// The settings bosun gives the entities it creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyOptions {
    /// Peek-lock duration of queues and subscriptions (Service Bus allows 5 s to 5 min).
    pub lock_duration: Duration,
    /// Deliveries before Service Bus dead-letters a message by itself.
    pub max_delivery_count: u32,
    /// Duplicate detection window of queues and the topic (20 s to 7 days).
    pub duplicate_detection_window: Duration,
    /// Default time to live of messages; expired ones are dead-lettered.
    pub default_message_ttl: Duration,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        Self {
            lock_duration: Duration::from_secs(60),
            max_delivery_count: 10,
            duplicate_detection_window: Duration::from_secs(10 * 60),
            default_message_ttl: Duration::from_secs(14 * 24 * 3600),
        }
    }
}

/// Topology options Service Bus would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Service Bus topology option `{option}`: {reason}")]
pub struct InvalidTopologyOptions {
    /// The option to blame.
    pub option: &'static str,
    /// Why.
    pub reason: String,
}

impl TopologyOptions {
    /// Checks the options against Service Bus's limits.
    pub fn validate(&self) -> Result<(), InvalidTopologyOptions> {
        let invalid = |option, reason: &str| {
            Err(InvalidTopologyOptions {
                option,
                reason: reason.to_owned(),
            })
        };
        if self.lock_duration < Duration::from_secs(5) || self.lock_duration > Duration::from_secs(300) {
            return invalid("lock_duration", "must be between 5 seconds and 5 minutes");
        }
        if self.max_delivery_count == 0 {
            return invalid("max_delivery_count", "must be at least 1");
        }
        if self.duplicate_detection_window < Duration::from_secs(20)
            || self.duplicate_detection_window > Duration::from_secs(7 * 24 * 3600)
        {
            return invalid("duplicate_detection_window", "must be between 20 seconds and 7 days");
        }
        if self.default_message_ttl < Duration::from_secs(1) {
            return invalid("default_message_ttl", "must be at least 1 second");
        }
        Ok(())
    }
}

/// What kind of entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntityKind {
    /// A queue.
    Queue,
    /// A topic.
    Topic,
    /// A topic subscription.
    Subscription,
    /// A subscription's filter rule.
    Rule,
}

impl fmt::Display for EntityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Queue => "queue",
            Self::Topic => "topic",
            Self::Subscription => "subscription",
            Self::Rule => "rule",
        })
    }
}

/// What an entity should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Description {
    /// A queue with these settings.
    Queue(TopologyOptions),
    /// A topic with these settings.
    Topic(TopologyOptions),
    /// A subscription with these settings.
    Subscription(TopologyOptions),
    /// A SQL filter rule.
    Rule {
        /// The rule's name.
        name: String,
        /// The SQL filter expression.
        sql_filter: String,
    },
    /// Must not exist: the subscription's `$Default` rule.
    Absent,
}

/// One entity bosun needs (or, for [`Description::Absent`], must not have).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntitySpec {
    /// What kind of entity.
    pub kind: EntityKind,
    /// Its path under the namespace: `commit`, `bosun-events`,
    /// `bosun-events/Subscriptions/commit`,
    /// `bosun-events/Subscriptions/commit/Rules/bosun-types`.
    pub path: String,
    /// What it should be.
    pub description: Description,
}

/// The management path of a subscription.
pub fn subscription_path(topic: &str, subscription: &str) -> String {
    format!("{topic}/Subscriptions/{subscription}")
}

/// The management path of a subscription's rule.
pub fn rule_path(topic: &str, subscription: &str, rule: &str) -> String {
    format!("{topic}/Subscriptions/{subscription}/Rules/{rule}")
}

/// The subscription path and rule name of a rule path.
fn split_rule_path(path: &str) -> Option<(&str, &str)> {
    path.rsplit_once("/Rules/")
}

/// A SQL string literal (single quotes doubled).
fn sql_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The `bosun-types` filter: the subscription's event types, unless the
/// message is addressed to one subscription.
pub fn types_filter(event_types: &[String]) -> String {
    if event_types.is_empty() {
        // `IN ()` is not valid SQL; a subscription without types takes no events.
        return format!("1=0 AND NOT EXISTS({REPLAY_PROPERTY})");
    }
    let list: Vec<String> = event_types.iter().map(|t| sql_literal(t)).collect();
    format!("sys.Label IN ({}) AND NOT EXISTS({REPLAY_PROPERTY})", list.join(","))
}

/// The `bosun-replay` filter: messages addressed to this subscription.
pub fn replay_filter(subscription: &str) -> String {
    format!("{REPLAY_PROPERTY} = {}", sql_literal(subscription))
}

/// Everything the namespace needs, in the order to create it: queues, the
/// topic, the subscriptions, then per subscription its two rules and the
/// removal of `$Default` (after the rules exist).
pub fn desired_entities(topology: &Topology, options: &TopologyOptions) -> Vec<EntitySpec> {
    let mut specs: Vec<EntitySpec> = topology
        .queues
        .iter()
        .map(|queue| EntitySpec {
            kind: EntityKind::Queue,
            path: queue.clone(),
            description: Description::Queue(*options),
        })
        .collect();
    specs.push(EntitySpec {
        kind: EntityKind::Topic,
        path: topology.topic.clone(),
        description: Description::Topic(*options),
    });
    specs.extend(topology.subscriptions.iter().map(|subscription| EntitySpec {
        kind: EntityKind::Subscription,
        path: subscription_path(&topology.topic, &subscription.name),
        description: Description::Subscription(*options),
    }));
    for subscription in &topology.subscriptions {
        let rule = |name: &str, sql_filter: String| EntitySpec {
            kind: EntityKind::Rule,
            path: rule_path(&topology.topic, &subscription.name, name),
            description: Description::Rule {
                name: name.to_owned(),
                sql_filter,
            },
        };
        specs.push(rule(TYPES_RULE, types_filter(&subscription.event_types)));
        specs.push(rule(REPLAY_RULE, replay_filter(&subscription.name)));
        specs.push(EntitySpec {
            kind: EntityKind::Rule,
            path: rule_path(&topology.topic, &subscription.name, DEFAULT_RULE),
            description: Description::Absent,
        });
    }
    specs
}

impl EntitySpec {
    /// The ATOM entry to `PUT` for this entity (`None` for
    /// [`Description::Absent`]). Element order follows the official SDKs:
    /// Service Bus rejects descriptions whose elements are out of order.
    pub fn atom_entry(&self) -> Option<String> {
        let mut xml = String::new();
        match &self.description {
            Description::Queue(options) => {
                xml.push_str(&format!("<QueueDescription xmlns=\"{SERVICE_BUS_NAMESPACE}\">"));
                element(&mut xml, "LockDuration", &iso8601_duration(options.lock_duration));
                element(&mut xml, "RequiresDuplicateDetection", "true");
                element(&mut xml, "RequiresSession", "false");
                element(
                    &mut xml,
                    "DefaultMessageTimeToLive",
                    &iso8601_duration(options.default_message_ttl),
                );
                element(&mut xml, "DeadLetteringOnMessageExpiration", "true");
                element(
                    &mut xml,
                    "DuplicateDetectionHistoryTimeWindow",
                    &iso8601_duration(options.duplicate_detection_window),
                );
                element(&mut xml, "MaxDeliveryCount", &options.max_delivery_count.to_string());
                element(&mut xml, "EnableBatchedOperations", "true");
                xml.push_str("</QueueDescription>");
            }
            Description::Topic(options) => {
                xml.push_str(&format!("<TopicDescription xmlns=\"{SERVICE_BUS_NAMESPACE}\">"));
                element(
                    &mut xml,
                    "DefaultMessageTimeToLive",
                    &iso8601_duration(options.default_message_ttl),
                );
                element(&mut xml, "RequiresDuplicateDetection", "true");
                element(
                    &mut xml,
                    "DuplicateDetectionHistoryTimeWindow",
                    &iso8601_duration(options.duplicate_detection_window),
                );
                element(&mut xml, "EnableBatchedOperations", "true");
                xml.push_str("</TopicDescription>");
            }
            Description::Subscription(options) => {
                xml.push_str(&format!("<SubscriptionDescription xmlns=\"{SERVICE_BUS_NAMESPACE}\">"));
                element(&mut xml, "LockDuration", &iso8601_duration(options.lock_duration));
                element(&mut xml, "RequiresSession", "false");
                element(
                    &mut xml,
                    "DefaultMessageTimeToLive",
                    &iso8601_duration(options.default_message_ttl),
                );
                element(&mut xml, "DeadLetteringOnMessageExpiration", "true");
                element(&mut xml, "DeadLetteringOnFilterEvaluationExceptions", "true");
                element(&mut xml, "MaxDeliveryCount", &options.max_delivery_count.to_string());
                element(&mut xml, "EnableBatchedOperations", "true");
                xml.push_str("</SubscriptionDescription>");
            }
            Description::Rule { name, sql_filter } => {
                xml.push_str(&format!(
                    "<RuleDescription xmlns=\"{SERVICE_BUS_NAMESPACE}\" xmlns:i=\"{SCHEMA_INSTANCE_NAMESPACE}\">\
                     <Filter i:type=\"SqlFilter\">"
                ));
                element(&mut xml, "SqlExpression", sql_filter);
                xml.push_str("</Filter>");
                element(&mut xml, "Name", name);
                xml.push_str("</RuleDescription>");
            }
            Description::Absent => return None,
        }
        Some(format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
             <entry xmlns=\"{ATOM_NAMESPACE}\"><content type=\"application/xml\">{xml}</content></entry>"
        ))
    }

    /// How an observed entity differs from this spec (empty when it
    /// matches in every property bosun relies on).
    fn differences(&self, observed: &XmlElement) -> Vec<String> {
        let mut out = Vec::new();
        match &self.description {
            Description::Queue(options) => {
                compare_duration(&mut out, observed, "LockDuration", options.lock_duration);
                compare_u32(&mut out, observed, "MaxDeliveryCount", options.max_delivery_count);
                compare_bool(&mut out, observed, "RequiresDuplicateDetection", true);
                compare_bool(&mut out, observed, "RequiresSession", false);
                compare_bool(&mut out, observed, "DeadLetteringOnMessageExpiration", true);
                compare_duration(
                    &mut out,
                    observed,
                    "DefaultMessageTimeToLive",
                    options.default_message_ttl,
                );
                compare_duration(
                    &mut out,
                    observed,
                    "DuplicateDetectionHistoryTimeWindow",
                    options.duplicate_detection_window,
                );
                compare_status(&mut out, observed);
            }
            Description::Topic(options) => {
                compare_bool(&mut out, observed, "RequiresDuplicateDetection", true);
                compare_duration(
                    &mut out,
                    observed,
                    "DefaultMessageTimeToLive",
                    options.default_message_ttl,
                );
                compare_duration(
                    &mut out,
                    observed,
                    "DuplicateDetectionHistoryTimeWindow",
                    options.duplicate_detection_window,
                );
                compare_status(&mut out, observed);
            }
            Description::Subscription(options) => {
                compare_duration(&mut out, observed, "LockDuration", options.lock_duration);
                compare_u32(&mut out, observed, "MaxDeliveryCount", options.max_delivery_count);
                compare_bool(&mut out, observed, "RequiresSession", false);
                compare_bool(&mut out, observed, "DeadLetteringOnMessageExpiration", true);
                compare_bool(&mut out, observed, "DeadLetteringOnFilterEvaluationExceptions", true);
                compare_duration(
                    &mut out,
                    observed,
                    "DefaultMessageTimeToLive",
                    options.default_message_ttl,
                );
                compare_status(&mut out, observed);
            }
            Description::Rule { sql_filter, .. } => {
                let filter = observed.child("Filter");
                let kind = filter.and_then(|f| f.attribute("type")).unwrap_or("none");
                let expression = filter.and_then(|f| f.child_text("SqlExpression")).unwrap_or("");
                if kind != "SqlFilter" || !same_sql(expression, sql_filter) {
                    out.push(format!(
                        "filter is {kind} `{}`, bosun wants SqlFilter `{sql_filter}`",
                        expression.trim()
                    ));
                }
            }
            Description::Absent => {}
        }
        out
    }
}

fn element(xml: &mut String, name: &str, value: &str) {
    xml.push_str(&format!("<{name}>{}</{name}>", xml_escape(value)));
}

fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            other => out.push(other),
        }
    }
    out
}

/// SQL expressions compared without whitespace outside string literals.
fn same_sql(a: &str, b: &str) -> bool {
    fn squeeze(sql: &str) -> String {
        let mut out = String::with_capacity(sql.len());
        let mut quoted = false;
        for c in sql.chars() {
            if c == '\'' {
                quoted = !quoted;
            }
            if quoted || !c.is_whitespace() {
                out.push(c);
            }
        }
        out
    }
    squeeze(a) == squeeze(b)
}

fn compare_duration(out: &mut Vec<String>, observed: &XmlElement, name: &str, wanted: Duration) {
    let Some(text) = observed.child_text(name) else { return };
    let matches = parse_iso8601_duration(text).is_some_and(|seen| seen.abs_diff(wanted) < Duration::from_millis(1));
    if !matches {
        out.push(format!(
            "{name} is {}, bosun wants {}",
            text.trim(),
            iso8601_duration(wanted)
        ));
    }
}

fn compare_u32(out: &mut Vec<String>, observed: &XmlElement, name: &str, wanted: u32) {
    let Some(text) = observed.child_text(name) else { return };
    if text.trim().parse::<u32>().ok() != Some(wanted) {
        out.push(format!("{name} is {}, bosun wants {wanted}", text.trim()));
    }
}

fn compare_bool(out: &mut Vec<String>, observed: &XmlElement, name: &str, wanted: bool) {
    let Some(text) = observed.child_text(name) else { return };
    if !text.trim().eq_ignore_ascii_case(if wanted { "true" } else { "false" }) {
        out.push(format!("{name} is {}, bosun wants {wanted}", text.trim()));
    }
}

fn compare_status(out: &mut Vec<String>, observed: &XmlElement) {
    let Some(text) = observed.child_text("Status") else {
        return;
    };
    if !text.trim().eq_ignore_ascii_case("Active") {
        out.push(format!("Status is {}, bosun needs Active", text.trim()));
    }
}

/// An ISO 8601 duration as Service Bus writes them: `PT1M`, `P14D`, `PT10M`.
pub fn iso8601_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (days, hours, minutes, seconds) = (total / 86_400, total / 3600 % 24, total / 60 % 60, total % 60);
    let nanos = duration.subsec_nanos();
    let mut out = String::from("P");
    if days > 0 {
        out.push_str(&format!("{days}D"));
    }
    if hours > 0 || minutes > 0 || seconds > 0 || nanos > 0 || days == 0 {
        out.push('T');
        if hours > 0 {
            out.push_str(&format!("{hours}H"));
        }
        if minutes > 0 {
            out.push_str(&format!("{minutes}M"));
        }
        if nanos > 0 {
            let fraction = format!("{nanos:09}");
            out.push_str(&format!("{seconds}.{}S", fraction.trim_end_matches('0')));
        } else if seconds > 0 || (hours == 0 && minutes == 0) {
            out.push_str(&format!("{seconds}S"));
        }
    }
    out
}

/// Reads an ISO 8601 duration with days, hours, minutes and (fractional)
/// seconds (`P10675199DT2H48M5.4775807S`); years, months and weeks are not
/// used by Service Bus and give `None`.
pub fn parse_iso8601_duration(text: &str) -> Option<Duration> {
    let rest = text.trim().strip_prefix('P')?;
    if rest.is_empty() {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut total = Duration::ZERO;
    if !date.is_empty() {
        let days: u64 = date.strip_suffix('D')?.parse().ok()?;
        total += Duration::from_secs(days.checked_mul(86_400)?);
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        while !time.is_empty() {
            let end = time.find(|c: char| c.is_ascii_alphabetic())?;
            let (number, unit) = (&time[..end], &time[end..=end]);
            total += match unit {
                "H" => Duration::from_secs(number.parse::<u64>().ok()?.checked_mul(3600)?),
                "M" => Duration::from_secs(number.parse::<u64>().ok()?.checked_mul(60)?),
                "S" => Duration::try_from_secs_f64(number.parse::<f64>().ok()?).ok()?,
                _ => return None,
            };
            time = &time[end + 1..];
        }
    }
    Some(total)
}

/// What to do about one entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "lowercase")]
pub enum PlanAction {
    /// Missing: apply creates it.
    Create,
    /// Present as bosun needs it.
    Exists,
    /// Present but different.
    Differs {
        /// Each difference, in words.
        what: Vec<String>,
        /// Apply replaces it (bosun's own rules); otherwise apply leaves it
        /// and an operator decides (queue, topic and subscription settings,
        /// rules bosun does not manage).
        fixed_by_apply: bool,
    },
    /// Present but must not be: apply deletes it (only ever a
    /// subscription's `$Default` rule).
    Delete,
}

/// One line of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanItem {
    /// What kind of entity.
    pub kind: EntityKind,
    /// Its management path.
    pub path: String,
    /// What apply does about it.
    #[serde(flatten)]
    pub action: PlanAction,
    /// The ATOM entry apply sends (for `Create`, and `Differs` that apply fixes).
    #[serde(skip)]
    pub entry: Option<String>,
}

/// What a namespace needs, entity by entity, in the order apply goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// One item per entity (already-absent `$Default` rules are left out).
    pub items: Vec<PlanItem>,
}

impl Plan {
    /// Nothing to create, update or delete.
    pub fn is_up_to_date(&self) -> bool {
        self.items.iter().all(|item| !item.changes_on_apply())
    }

    /// What keeps bosun from working on this namespace: missing entities,
    /// wrong bosun rules, `$Default` rules still present. Each entry names
    /// the entity and the problem.
    pub fn blocking_problems(&self) -> Vec<String> {
        self.items
            .iter()
            .filter_map(|item| match &item.action {
                PlanAction::Create => Some(format!("{} {} is missing", item.kind, item.path)),
                PlanAction::Delete => Some(format!(
                    "{} {} must be removed (it lets every message through)",
                    item.kind, item.path
                )),
                PlanAction::Differs {
                    what,
                    fixed_by_apply: true,
                } => Some(format!("{} {}: {}", item.kind, item.path, what.join("; "))),
                _ => None,
            })
            .collect()
    }

    fn count(&self, wanted: fn(&PlanAction) -> bool) -> usize {
        self.items.iter().filter(|item| wanted(&item.action)).count()
    }
}

impl PlanItem {
    /// Apply sends a request for this item.
    pub fn changes_on_apply(&self) -> bool {
        matches!(
            self.action,
            PlanAction::Create
                | PlanAction::Delete
                | PlanAction::Differs {
                    fixed_by_apply: true,
                    ..
                }
        )
    }
}

impl fmt::Display for PlanAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Create => f.write_str("create"),
            Self::Exists => f.write_str("exists"),
            Self::Delete => f.write_str("delete"),
            Self::Differs {
                what,
                fixed_by_apply: true,
            } => write!(f, "replace: {}", what.join("; ")),
            Self::Differs {
                what,
                fixed_by_apply: false,
            } => write!(f, "differs (apply leaves it): {}", what.join("; ")),
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind_width = self
            .items
            .iter()
            .map(|item| item.kind.to_string().len())
            .chain(["KIND".len()])
            .max()
            .unwrap_or(4);
        let path_width = self
            .items
            .iter()
            .map(|item| item.path.len())
            .chain(["PATH".len()])
            .max()
            .unwrap_or(4);
        writeln!(f, "{:kind_width$}  {:path_width$}  ACTION", "KIND", "PATH")?;
        for item in &self.items {
            writeln!(
                f,
                "{:kind_width$}  {:path_width$}  {}",
                item.kind.to_string(),
                item.path,
                item.action
            )?;
        }
        let differ = self.count(|a| matches!(a, PlanAction::Differs { .. }));
        write!(
            f,
            "{} to create, {} to delete, {differ} differ, {} exist",
            self.count(|a| matches!(a, PlanAction::Create)),
            self.count(|a| matches!(a, PlanAction::Delete)),
            self.count(|a| matches!(a, PlanAction::Exists)),
        )
    }
}

/// What the namespace answered: entities by path (queues, the topic,
/// subscriptions; absent when missing) and the rules of each subscription
/// that exists.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    /// Entries of the entities that exist, by path.
    pub(crate) entities: HashMap<String, AtomEntry>,
    /// The rules of each existing subscription, by subscription path.
    pub(crate) rules: HashMap<String, Vec<AtomEntry>>,
}

/// Compares what bosun needs with what the namespace has.
pub(crate) fn diff(specs: &[EntitySpec], observed: &Observed) -> Plan {
    let item = |spec: &EntitySpec, action: PlanAction| PlanItem {
        kind: spec.kind,
        path: spec.path.clone(),
        entry: match &action {
            PlanAction::Create
            | PlanAction::Differs {
                fixed_by_apply: true, ..
            } => spec.atom_entry(),
            _ => None,
        },
        action,
    };
    let mut items = Vec::new();
    for spec in specs {
        let seen = match spec.kind {
            EntityKind::Rule => split_rule_path(&spec.path).and_then(|(subscription, name)| {
                observed.rules.get(subscription).map(|rules| {
                    rules
                        .iter()
                        .find(|rule| rule.name() == name)
                        .map(|rule| &rule.description)
                })
            }),
            _ => Some(observed.entities.get(&spec.path).map(|entry| &entry.description)),
        };
        // `seen`: None = its parent is missing; Some(None) = missing; Some(Some(_)) = present.
        let action = match (&spec.description, seen.flatten()) {
            // A new subscription comes with `$Default`: delete it after the rules.
            (Description::Absent, None) if seen.is_none() => Some(PlanAction::Delete),
            (Description::Absent, None) => None,
            (Description::Absent, Some(_)) => Some(PlanAction::Delete),
            (_, None) => Some(PlanAction::Create),
            (_, Some(description)) => {
                let what = spec.differences(description);
                Some(if what.is_empty() {
                    PlanAction::Exists
                } else {
                    PlanAction::Differs {
                        what,
                        fixed_by_apply: spec.kind == EntityKind::Rule,
                    }
                })
            }
        };
        if let Some(action) = action {
            items.push(item(spec, action));
        }
    }
    // Rules bosun does not manage, after the subscription's own.
    let mut subscriptions: Vec<&str> = specs
        .iter()
        .filter(|spec| spec.kind == EntityKind::Subscription)
        .map(|spec| spec.path.as_str())
        .collect();
    subscriptions.dedup();
    for subscription in subscriptions {
        let Some(rules) = observed.rules.get(subscription) else {
            continue;
        };
        for rule in rules {
            let path = format!("{subscription}/Rules/{}", rule.name());
            if specs.iter().any(|spec| spec.path == path) {
                continue;
            }
            let position = items
                .iter()
                .rposition(|item| item.path.starts_with(&format!("{subscription}/")) || item.path == subscription)
                .map_or(items.len(), |at| at + 1);
            items.insert(
                position,
                PlanItem {
                    kind: EntityKind::Rule,
                    path,
                    action: PlanAction::Differs {
                        what: vec!["a rule bosun does not manage (it may let other messages in)".to_owned()],
                        fixed_by_apply: false,
                    },
                    entry: None,
                },
            );
        }
    }
    Plan { items }
}

/// An ATOM entry from the management API: its title and the description
/// inside its content (`QueueDescription`, `RuleDescription`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AtomEntry {
    /// The entry's title (the entity's name).
    pub(crate) title: String,
    /// The description element.
    pub(crate) description: XmlElement,
}

impl AtomEntry {
    /// The entity's name: the description's `Name` (rules), else the title.
    pub(crate) fn name(&self) -> &str {
        self.description
            .child_text("Name")
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .unwrap_or(self.title.trim())
    }
}

/// A management API answer: one entry, or a feed (a list; empty when a
/// `GET` names an entity that does not exist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AtomDocument {
    /// One entity.
    Entry(AtomEntry),
    /// A list of entities.
    Feed(Vec<AtomEntry>),
}

/// An answer that is not the ATOM bosun expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable ATOM document: {0}")]
pub(crate) struct AtomError(pub(crate) String);

/// Reads a management API answer.
pub(crate) fn parse_atom(text: &str) -> Result<AtomDocument, AtomError> {
    let root = parse_xml(text)?;
    let entry = |element: &XmlElement| -> Result<AtomEntry, AtomError> {
        let description = element
            .child("content")
            .and_then(|content| content.children.first())
            .ok_or_else(|| AtomError("an entry without content".to_owned()))?;
        Ok(AtomEntry {
            title: element.child_text("title").unwrap_or_default().trim().to_owned(),
            description: description.clone(),
        })
    };
    match root.name.as_str() {
        "entry" => Ok(AtomDocument::Entry(entry(&root)?)),
        "feed" => Ok(AtomDocument::Feed(
            root.children
                .iter()
                .filter(|child| child.name == "entry")
                .map(entry)
                .collect::<Result<_, _>>()?,
        )),
        other => Err(AtomError(format!("root element `{other}`, expected entry or feed"))),
    }
}

/// An XML element by local name (namespace prefixes dropped, `xmlns`
/// attributes left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct XmlElement {
    /// Local name.
    pub(crate) name: String,
    /// Attributes by local name.
    pub(crate) attributes: Vec<(String, String)>,
    /// Child elements in order.
    pub(crate) children: Vec<XmlElement>,
    /// The text directly inside, entities decoded.
    pub(crate) text: String,
}

impl XmlElement {
    /// The first child with this local name.
    pub(crate) fn child(&self, name: &str) -> Option<&XmlElement> {
        self.children.iter().find(|child| child.name == name)
    }

    /// The text of the first child with this local name.
    pub(crate) fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|child| child.text.as_str())
    }

    /// An attribute by local name.
    pub(crate) fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

fn local_name(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, local)| local)
}

/// A small XML reader for the management API's answers: elements,
/// attributes, text, CDATA, comments, the XML declaration; no DTDs (a
/// DOCTYPE is skipped, entities other than the predefined and numeric ones
/// are kept as written).
pub(crate) fn parse_xml(text: &str) -> Result<XmlElement, AtomError> {
    let error = |what: &str| AtomError(what.to_owned());
    let mut stack: Vec<XmlElement> = Vec::new();
    let mut root = None;
    let mut rest = text;
    while !rest.is_empty() {
        let Some(open) = rest.find('<') else {
            if let Some(top) = stack.last_mut() {
                top.text.push_str(&decode_entities(rest));
            }
            break;
        };
        if let Some(top) = stack.last_mut() {
            top.text.push_str(&decode_entities(&rest[..open]));
        }
        rest = &rest[open..];
        if let Some(after) = rest.strip_prefix("<?") {
            let end = after.find("?>").ok_or_else(|| error("unterminated <?"))?;
            rest = &after[end + 2..];
        } else if let Some(after) = rest.strip_prefix("<!--") {
            let end = after.find("-->").ok_or_else(|| error("unterminated comment"))?;
            rest = &after[end + 3..];
        } else if let Some(after) = rest.strip_prefix("<![CDATA[") {
            let end = after.find("]]>").ok_or_else(|| error("unterminated CDATA"))?;
            if let Some(top) = stack.last_mut() {
                top.text.push_str(&after[..end]);
            }
            rest = &after[end + 3..];
        } else if let Some(after) = rest.strip_prefix("<!") {
            let end = after.find('>').ok_or_else(|| error("unterminated <!"))?;
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix("</") {
            let end = after.find('>').ok_or_else(|| error("unterminated end tag"))?;
            let name = local_name(after[..end].trim());
            let element = stack.pop().ok_or_else(|| error("end tag without start tag"))?;
            if element.name != name {
                return Err(AtomError(format!("</{name}> closes <{}>", element.name)));
            }
            match stack.last_mut() {
                Some(parent) => parent.children.push(element),
                None => root = Some(element),
            }
            rest = &after[end + 1..];
        } else {
            if root.is_some() {
                return Err(error("content after the root element"));
            }
            let (element, self_closing, after) = start_tag(&rest[1..])?;
            rest = after;
            if self_closing {
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => root = Some(element),
                }
            } else {
                stack.push(element);
            }
        }
    }
    if !stack.is_empty() {
        return Err(error("unclosed element"));
    }
    root.ok_or_else(|| error("no element"))
}

/// Reads a start tag after its `<`: the element, whether it closes itself,
/// and the text after the tag.
fn start_tag(text: &str) -> Result<(XmlElement, bool, &str), AtomError> {
    let error = |what: &str| AtomError(what.to_owned());
    let name_end = text
        .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
        .ok_or_else(|| error("unterminated start tag"))?;
    if name_end == 0 {
        return Err(error("a start tag without a name"));
    }
    let mut element = XmlElement {
        name: local_name(&text[..name_end]).to_owned(),
        ..XmlElement::default()
    };
    let mut rest = &text[name_end..];
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("/>") {
            return Ok((element, true, after));
        }
        if let Some(after) = rest.strip_prefix('>') {
            return Ok((element, false, after));
        }
        let equals = rest.find('=').ok_or_else(|| error("an attribute without a value"))?;
        let name = rest[..equals].trim();
        let value_text = rest[equals + 1..].trim_start();
        let quote = value_text
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| error("an unquoted attribute value"))?;
        let end = value_text[1..]
            .find(quote)
            .ok_or_else(|| error("an unterminated attribute value"))?;
        let value = decode_entities(&value_text[1..=end]);
        if name != "xmlns" && !name.starts_with("xmlns:") {
            element.attributes.push((local_name(name).to_owned(), value));
        }
        rest = &value_text[end + 2..];
    }
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';').filter(|end| *end <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let entity = &rest[1..end];
        let decoded = match entity {
            "lt" => Some('<'),
            "gt" => Some('>'),
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .map(|hex| u32::from_str_radix(hex, 16))
                .or_else(|| entity.strip_prefix('#').map(str::parse::<u32>))
                .and_then(Result::ok)
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::topology::Subscription;

    fn small_topology() -> Topology {
        Topology {
            queues: vec!["commit".into()],
            topic: "bosun-events".into(),
            subscriptions: vec![Subscription {
                name: "release-orchestration".into(),
                event_types: vec!["BuildCompleted".into(), "ImagePublished".into()],
            }],
        }
    }

    fn entry(xml_description: &str) -> AtomEntry {
        let text = format!(
            "<entry xmlns=\"{ATOM_NAMESPACE}\"><title type=\"text\">x</title><content type=\"application/xml\">{xml_description}</content></entry>"
        );
        match parse_atom(&text).unwrap() {
            AtomDocument::Entry(entry) => entry,
            other => panic!("{other:?}"),
        }
    }

    /// The child element names of the description in an entry, in order.
    fn element_order(entry_xml: &str) -> Vec<String> {
        match parse_atom(entry_xml).unwrap() {
            AtomDocument::Entry(entry) => entry.description.children.iter().map(|c| c.name.clone()).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn desired_entities_in_creation_order() {
        let specs = desired_entities(&Topology::from_routing(), &TopologyOptions::default());
        let kinds: Vec<EntityKind> = specs.iter().map(|s| s.kind).collect();
        let first_topic = kinds.iter().position(|k| *k == EntityKind::Topic).unwrap();
        let first_subscription = kinds.iter().position(|k| *k == EntityKind::Subscription).unwrap();
        let first_rule = kinds.iter().position(|k| *k == EntityKind::Rule).unwrap();
        assert!(first_topic == 12 && first_topic < first_subscription && first_subscription < first_rule);
        let topology = Topology::from_routing();
        assert_eq!(
            specs.len(),
            topology.queues.len() + 1 + topology.subscriptions.len() * 4,
            "queues, topic, and per subscription: itself, two rules, $Default's removal"
        );
        let pull_request: Vec<&EntitySpec> = specs
            .iter()
            .filter(|s| s.path.starts_with("bosun-events/Subscriptions/pull-request"))
            .collect();
        assert_eq!(
            pull_request.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
            [
                "bosun-events/Subscriptions/pull-request",
                "bosun-events/Subscriptions/pull-request/Rules/bosun-types",
                "bosun-events/Subscriptions/pull-request/Rules/bosun-replay",
                "bosun-events/Subscriptions/pull-request/Rules/$Default",
            ]
        );
        assert_eq!(
            pull_request[1].description,
            Description::Rule {
                name: "bosun-types".into(),
                sql_filter: "sys.Label IN ('CommitCreated') AND NOT EXISTS(replayTo)".into()
            }
        );
        assert_eq!(pull_request[3].description, Description::Absent);
    }

    #[test]
    fn filters_quote_their_literals() {
        assert_eq!(
            types_filter(&["BuildCompleted".into(), "ImagePublished".into()]),
            "sys.Label IN ('BuildCompleted','ImagePublished') AND NOT EXISTS(replayTo)"
        );
        assert_eq!(replay_filter("pull-request"), "replayTo = 'pull-request'");
        assert_eq!(replay_filter("o'brien"), "replayTo = 'o''brien'");
        assert_eq!(types_filter(&[]), "1=0 AND NOT EXISTS(replayTo)");
    }

    #[test]
    fn queue_entry_is_exactly_what_service_bus_takes() {
        let spec = EntitySpec {
            kind: EntityKind::Queue,
            path: "commit".into(),
            description: Description::Queue(TopologyOptions::default()),
        };
        assert_eq!(
            spec.atom_entry().unwrap(),
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\
             <entry xmlns=\"http://www.w3.org/2005/Atom\"><content type=\"application/xml\">\
             <QueueDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect\">\
             <LockDuration>PT1M</LockDuration>\
             <RequiresDuplicateDetection>true</RequiresDuplicateDetection>\
             <RequiresSession>false</RequiresSession>\
             <DefaultMessageTimeToLive>P14D</DefaultMessageTimeToLive>\
             <DeadLetteringOnMessageExpiration>true</DeadLetteringOnMessageExpiration>\
             <DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow>\
             <MaxDeliveryCount>10</MaxDeliveryCount>\
             <EnableBatchedOperations>true</EnableBatchedOperations>\
             </QueueDescription></content></entry>"
        );
    }

    #[test]
    fn topic_and_subscription_elements_follow_the_sdk_order() {
        let options = TopologyOptions {
            lock_duration: Duration::from_secs(90),
            max_delivery_count: 7,
            ..TopologyOptions::default()
        };
        let specs = desired_entities(&small_topology(), &options);
        let topic = specs.iter().find(|s| s.kind == EntityKind::Topic).unwrap();
        assert_eq!(
            element_order(&topic.atom_entry().unwrap()),
            [
                "DefaultMessageTimeToLive",
                "RequiresDuplicateDetection",
                "DuplicateDetectionHistoryTimeWindow",
                "EnableBatchedOperations"
            ]
        );
        let subscription = specs.iter().find(|s| s.kind == EntityKind::Subscription).unwrap();
        let xml = subscription.atom_entry().unwrap();
        assert_eq!(
            element_order(&xml),
            [
                "LockDuration",
                "RequiresSession",
                "DefaultMessageTimeToLive",
                "DeadLetteringOnMessageExpiration",
                "DeadLetteringOnFilterEvaluationExceptions",
                "MaxDeliveryCount",
                "EnableBatchedOperations"
            ]
        );
        assert!(xml.contains("<LockDuration>PT1M30S</LockDuration>"), "{xml}");
        assert!(xml.contains("<MaxDeliveryCount>7</MaxDeliveryCount>"), "{xml}");
    }

    #[test]
    fn rule_entry_carries_an_escaped_sql_filter_then_its_name() {
        let spec = EntitySpec {
            kind: EntityKind::Rule,
            path: rule_path("bosun-events", "s", "bosun-types"),
            description: Description::Rule {
                name: "bosun-types".into(),
                sql_filter: "a < 1 AND b = 'x&y'".into(),
            },
        };
        let xml = spec.atom_entry().unwrap();
        assert!(
            xml.contains(
                "<RuleDescription xmlns=\"http://schemas.microsoft.com/netservices/2010/10/servicebus/connect\" \
                 xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\">\
                 <Filter i:type=\"SqlFilter\"><SqlExpression>a &lt; 1 AND b = 'x&amp;y'</SqlExpression></Filter>\
                 <Name>bosun-types</Name></RuleDescription>"
            ),
            "{xml}"
        );
        // It reads back to the same filter.
        let AtomDocument::Entry(read) = parse_atom(&xml).unwrap() else {
            panic!()
        };
        assert_eq!(read.name(), "bosun-types");
        assert!(spec.differences(&read.description).is_empty());
        let absent = EntitySpec {
            description: Description::Absent,
            ..spec
        };
        assert_eq!(absent.atom_entry(), None);
    }

    #[test]
    fn durations_round_trip_as_service_bus_writes_them() {
        for (duration, text) in [
            (Duration::from_secs(60), "PT1M"),
            (Duration::from_secs(600), "PT10M"),
            (Duration::from_secs(14 * 86_400), "P14D"),
            (Duration::from_secs(30), "PT30S"),
            (Duration::from_secs(90), "PT1M30S"),
            (Duration::from_secs(86_400 + 3600), "P1DT1H"),
            (Duration::ZERO, "PT0S"),
            (Duration::from_millis(1500), "PT1.5S"),
        ] {
            assert_eq!(iso8601_duration(duration), text);
            assert_eq!(parse_iso8601_duration(text), Some(duration), "{text}");
        }
        assert_eq!(
            parse_iso8601_duration("P10675199DT2H48M5.4775807S").map(|d| d.as_secs()),
            Some(10_675_199 * 86_400 + 2 * 3600 + 48 * 60 + 5)
        );
        for bad in ["", "P", "PT", "1M", "P1Y", "PT1X", "P1W"] {
            assert_eq!(parse_iso8601_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn options_are_checked_against_service_bus_limits() {
        assert!(TopologyOptions::default().validate().is_ok());
        let bad = TopologyOptions {
            lock_duration: Duration::from_secs(600),
            ..TopologyOptions::default()
        };
        assert_eq!(bad.validate().unwrap_err().option, "lock_duration");
        let bad = TopologyOptions {
            max_delivery_count: 0,
            ..TopologyOptions::default()
        };
        assert_eq!(bad.validate().unwrap_err().option, "max_delivery_count");
    }

    #[test]
    fn reads_entries_feeds_and_escapes() {
        let feed = r#"<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title type="text">Publicly Listed Services</title>
  <subtitle type="text">This is the list of publicly-listed services currently available.</subtitle>
  <!-- a comment with <tags> -->
</feed>"#;
        assert_eq!(parse_atom(feed).unwrap(), AtomDocument::Feed(vec![]));
        let rules = r#"<feed xmlns="http://www.w3.org/2005/Atom">
  <entry><title type="text">$Default</title><content type="application/xml">
    <RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">
      <Filter i:type="TrueFilter"><SqlExpression>1=1</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>
      <Action i:type="EmptyRuleAction"/><CreatedAt>2024-03-01T08:30:00Z</CreatedAt><Name>$Default</Name>
    </RuleDescription></content></entry>
  <entry><title type="text">x</title><content type="application/xml">
    <RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><Filter xmlns:p="http://www.w3.org/2001/XMLSchema-instance" p:type='SqlFilter'><SqlExpression><![CDATA[a < 'b']]> &amp;&#x41;&#66;</SqlExpression></Filter><Name>bosun-types</Name></RuleDescription>
  </content></entry>
</feed>"#;
        let AtomDocument::Feed(entries) = parse_atom(rules).unwrap() else {
            panic!()
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].name(), "$Default");
        let filter = entries[0].description.child("Filter").unwrap();
        assert_eq!(filter.attribute("type"), Some("TrueFilter"));
        assert_eq!(entries[1].name(), "bosun-types");
        let filter = entries[1].description.child("Filter").unwrap();
        assert_eq!(filter.attribute("type"), Some("SqlFilter"));
        assert_eq!(filter.child_text("SqlExpression"), Some("a < 'b' &AB"));
        for bad in [
            "",
            "text",
            "<a><b></a>",
            "<a>",
            "<a/><b/>",
            "<a x=1/>",
            "<?xml",
            "<error/>",
        ] {
            assert!(parse_atom(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_empty_namespace_needs_everything_and_new_subscriptions_lose_default() {
        let specs = desired_entities(&small_topology(), &TopologyOptions::default());
        let plan = diff(&specs, &Observed::default());
        let actions: Vec<(EntityKind, &str, &PlanAction)> = plan
            .items
            .iter()
            .map(|i| (i.kind, i.path.as_str(), &i.action))
            .collect();
        assert_eq!(
            actions,
            [
                (EntityKind::Queue, "commit", &PlanAction::Create),
                (EntityKind::Topic, "bosun-events", &PlanAction::Create),
                (
                    EntityKind::Subscription,
                    "bosun-events/Subscriptions/release-orchestration",
                    &PlanAction::Create
                ),
                (
                    EntityKind::Rule,
                    "bosun-events/Subscriptions/release-orchestration/Rules/bosun-types",
                    &PlanAction::Create
                ),
                (
                    EntityKind::Rule,
                    "bosun-events/Subscriptions/release-orchestration/Rules/bosun-replay",
                    &PlanAction::Create
                ),
                (
                    EntityKind::Rule,
                    "bosun-events/Subscriptions/release-orchestration/Rules/$Default",
                    &PlanAction::Delete
                ),
            ]
        );
        assert!(plan.items[..5].iter().all(|item| item.entry.is_some()));
        assert!(plan.items[5].entry.is_none());
        assert!(!plan.is_up_to_date());
        assert_eq!(plan.blocking_problems().len(), 6);
    }

    #[test]
    fn an_existing_namespace_shows_what_differs_and_what_apply_fixes() {
        let specs = desired_entities(&small_topology(), &TopologyOptions::default());
        let subscription = "bosun-events/Subscriptions/release-orchestration";
        let mut observed = Observed::default();
        observed.entities.insert(
            "commit".into(),
            entry(
                "<QueueDescription><LockDuration>PT30S</LockDuration><MaxDeliveryCount>5</MaxDeliveryCount>\
                 <RequiresDuplicateDetection>true</RequiresDuplicateDetection><RequiresSession>false</RequiresSession>\
                 <DefaultMessageTimeToLive>P14D</DefaultMessageTimeToLive><Status>Active</Status></QueueDescription>",
            ),
        );
        observed.entities.insert(
            "bosun-events".into(),
            entry(
                "<TopicDescription><DefaultMessageTimeToLive>P14D</DefaultMessageTimeToLive>\
                 <RequiresDuplicateDetection>true</RequiresDuplicateDetection>\
                 <DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow></TopicDescription>",
            ),
        );
        observed.entities.insert(
            subscription.into(),
            entry(
                "<SubscriptionDescription><LockDuration>PT1M</LockDuration><MaxDeliveryCount>10</MaxDeliveryCount>\
                 <DeadLetteringOnMessageExpiration>true</DeadLetteringOnMessageExpiration>\
                 <DeadLetteringOnFilterEvaluationExceptions>true</DeadLetteringOnFilterEvaluationExceptions>\
                 <Status>Active</Status></SubscriptionDescription>",
            ),
        );
        observed.rules.insert(
            subscription.into(),
            vec![
                entry(
                    "<RuleDescription><Filter type=\"SqlFilter\"><SqlExpression>sys.Label IN ('BuildCompleted') \
                     AND NOT EXISTS(replayTo)</SqlExpression></Filter><Name>bosun-types</Name></RuleDescription>",
                ),
                entry(
                    "<RuleDescription><Filter type=\"SqlFilter\"><SqlExpression>replayTo='release-orchestration'\
                     </SqlExpression></Filter><Name>bosun-replay</Name></RuleDescription>",
                ),
                entry(
                    "<RuleDescription><Filter type=\"TrueFilter\"><SqlExpression>1=1</SqlExpression></Filter>\
                     <Name>$Default</Name></RuleDescription>",
                ),
                entry(
                    "<RuleDescription><Filter type=\"SqlFilter\"><SqlExpression>1=1</SqlExpression></Filter>\
                     <Name>everything</Name></RuleDescription>",
                ),
            ],
        );
        let plan = diff(&specs, &observed);
        let by_path = |path: &str| plan.items.iter().find(|i| i.path == path).unwrap();
        assert_eq!(
            by_path("commit").action,
            PlanAction::Differs {
                what: vec![
                    "LockDuration is PT30S, bosun wants PT1M".into(),
                    "MaxDeliveryCount is 5, bosun wants 10".into()
                ],
                fixed_by_apply: false
            }
        );
        assert!(by_path("commit").entry.is_none(), "apply does not touch a queue");
        assert_eq!(by_path("bosun-events").action, PlanAction::Exists);
        assert_eq!(by_path(subscription).action, PlanAction::Exists);
        let types = by_path(&format!("{subscription}/Rules/bosun-types"));
        assert!(
            matches!(&types.action, PlanAction::Differs { fixed_by_apply: true, what }
            if what[0].contains("'ImagePublished'"))
        );
        assert!(types.entry.as_deref().unwrap().contains("ImagePublished"));
        assert_eq!(
            by_path(&format!("{subscription}/Rules/bosun-replay")).action,
            PlanAction::Exists,
            "whitespace outside literals does not matter"
        );
        assert_eq!(
            by_path(&format!("{subscription}/Rules/$Default")).action,
            PlanAction::Delete
        );
        let extra = plan.items.last().unwrap();
        assert_eq!(extra.path, format!("{subscription}/Rules/everything"));
        assert!(matches!(
            extra.action,
            PlanAction::Differs {
                fixed_by_apply: false,
                ..
            }
        ));
        assert_eq!(plan.blocking_problems().len(), 2, "{:?}", plan.blocking_problems());

        // Without $Default it is not listed at all.
        observed.rules.get_mut(subscription).unwrap().remove(2);
        let plan = diff(&specs, &observed);
        assert!(!plan.items.iter().any(|i| i.path.ends_with("$Default")));
    }

    #[test]
    fn plans_print_as_a_table_and_as_json() {
        let specs = desired_entities(&small_topology(), &TopologyOptions::default());
        let plan = diff(&specs, &Observed::default());
        let table = plan.to_string();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("KIND          PATH"), "{table}");
        assert!(lines[1].starts_with("queue         commit"), "{table}");
        assert!(lines[1].ends_with("  create"), "{table}");
        assert!(
            table.ends_with("5 to create, 1 to delete, 0 differ, 0 exist"),
            "{table}"
        );
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(
            json["items"][0],
            serde_json::json!({"kind": "queue", "path": "commit", "action": "create"})
        );
        let differs = Plan {
            items: vec![PlanItem {
                kind: EntityKind::Rule,
                path: "t/Subscriptions/s/Rules/bosun-types".into(),
                action: PlanAction::Differs {
                    what: vec!["filter".into()],
                    fixed_by_apply: true,
                },
                entry: Some("<entry/>".into()),
            }],
        };
        assert_eq!(
            serde_json::to_value(&differs).unwrap()["items"][0],
            serde_json::json!({"kind": "rule", "path": "t/Subscriptions/s/Rules/bosun-types",
                "action": "differs", "what": ["filter"], "fixed_by_apply": true})
        );
        assert!(differs.to_string().contains("replace: filter"));
    }
}
