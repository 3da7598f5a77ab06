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
//!
//! The session-keyed consumers' queue and subscription require sessions
//! ([`Topology::requires_session`]). A message has one session id, but an
//! event fans out to subscriptions keyed differently (`InfrastructureProvisioned`
//! is keyed by release for release-orchestration and by environment for
//! gitops-sync), so the transport sends each session subscription its own
//! copy, addressed with `replayTo` and carrying that subscription's session
//! id, beside one untargeted copy for the others; a session subscription's
//! `bosun-types` rule is therefore `1=0` (it takes no untargeted copy, so it
//! gets each event exactly once, through `bosun-replay`).
//!
//! `RequiresSession` can only be set when an entity is created: an
//! existing entity whose setting differs is planned as
//! [`PlanAction::Recreate`] (drain it, delete it, apply creates it again),
//! which `serve`'s start-up check refuses to run with.
//!
//! The ATOM and XML reading of the management API's answers is in `atom`.
//!
//! Over 800 lines on purpose: every property bosun sets on each entity, beside
//! the comparison of a live namespace with it.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::ports::topology::Topology;

mod atom;
mod iso8601;

pub(crate) use atom::{AtomDocument, AtomEntry, XmlElement, parse_atom, parse_xml};
pub use iso8601::{iso8601_duration, parse_iso8601_duration};

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
    Queue {
        /// Its settings.
        options: TopologyOptions,
        /// Whether it requires sessions (its consumer is session-keyed).
        requires_session: bool,
    },
    /// A topic with these settings.
    Topic(TopologyOptions),
    /// A subscription with these settings.
    Subscription {
        /// Its settings.
        options: TopologyOptions,
        /// Whether it requires sessions (its consumer is session-keyed).
        requires_session: bool,
    },
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

/// The `bosun-types` filter of a session subscription: nothing. It takes
/// only the copies addressed to it (`bosun-replay`), each with its own
/// session id; an untargeted copy carries another subscription's.
pub const SESSION_TYPES_FILTER: &str = "1=0";

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
            description: Description::Queue {
                options: *options,
                requires_session: topology.session_keyed(queue).is_some(),
            },
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
        description: Description::Subscription {
            options: *options,
            requires_session: topology.session_keyed(&subscription.name).is_some(),
        },
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
        let types = if topology.session_keyed(&subscription.name).is_some() {
            SESSION_TYPES_FILTER.to_owned()
        } else {
            types_filter(&subscription.event_types)
        };
        specs.push(rule(TYPES_RULE, types));
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
            Description::Queue {
                options,
                requires_session,
            } => {
                xml.push_str(&format!("<QueueDescription xmlns=\"{SERVICE_BUS_NAMESPACE}\">"));
                element(&mut xml, "LockDuration", &iso8601_duration(options.lock_duration));
                element(&mut xml, "RequiresDuplicateDetection", "true");
                element(&mut xml, "RequiresSession", &requires_session.to_string());
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
            Description::Subscription {
                options,
                requires_session,
            } => {
                xml.push_str(&format!("<SubscriptionDescription xmlns=\"{SERVICE_BUS_NAMESPACE}\">"));
                element(&mut xml, "LockDuration", &iso8601_duration(options.lock_duration));
                element(&mut xml, "RequiresSession", &requires_session.to_string());
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

    /// Whether an observed entity's `RequiresSession` is not this spec's:
    /// Service Bus sets it only when an entity is created, so the entity
    /// must be drained, deleted and created again. The difference, in words.
    fn session_mismatch(&self, observed: &XmlElement) -> Option<String> {
        let wanted = match &self.description {
            Description::Queue { requires_session, .. } | Description::Subscription { requires_session, .. } => {
                *requires_session
            }
            _ => return None,
        };
        let mut out = Vec::new();
        compare_bool(&mut out, observed, "RequiresSession", wanted);
        out.pop().map(|what| {
            format!(
                "{what} (Service Bus sets RequiresSession only when an entity is created: stop its senders, \
                 let it drain, delete it, then run bosun topology apply to create it again)"
            )
        })
    }

    /// How an observed entity differs from this spec (empty when it
    /// matches in every property bosun relies on), `RequiresSession` aside
    /// ([`EntitySpec::session_mismatch`]).
    fn differences(&self, observed: &XmlElement) -> Vec<String> {
        let mut out = Vec::new();
        match &self.description {
            Description::Queue { options, .. } => {
                compare_duration(&mut out, observed, "LockDuration", options.lock_duration);
                compare_u32(&mut out, observed, "MaxDeliveryCount", options.max_delivery_count);
                compare_bool(&mut out, observed, "RequiresDuplicateDetection", true);
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
            Description::Subscription { options, .. } => {
                compare_duration(&mut out, observed, "LockDuration", options.lock_duration);
                compare_u32(&mut out, observed, "MaxDeliveryCount", options.max_delivery_count);
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
    /// Present with a setting Service Bus cannot change on an existing
    /// entity (`RequiresSession`): it must be drained, deleted and created
    /// again (apply then creates it); apply never deletes it, and `serve`
    /// does not start while it is so.
    Recreate {
        /// Each difference, in words (the setting-can-only-be-set-at-creation one first).
        what: Vec<String>,
    },
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
    /// Nothing to create, update, delete or recreate.
    pub fn is_up_to_date(&self) -> bool {
        self.items
            .iter()
            .all(|item| !item.changes_on_apply() && !matches!(item.action, PlanAction::Recreate { .. }))
    }

    /// What keeps bosun from working on this namespace: missing entities,
    /// wrong bosun rules, `$Default` rules still present. Each entry names
    /// the entity and the problem.
    pub fn blocking_problems(&self) -> Vec<String> {
        self.items
            .iter()
            .filter_map(|item| match &item.action {
                PlanAction::Create => Some(format!("{} {} is missing", item.kind, item.path)),
                PlanAction::Recreate { what } => Some(format!(
                    "{} {} must be recreated: {}",
                    item.kind,
                    item.path,
                    what.join("; ")
                )),
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
            Self::Recreate { what } => write!(
                f,
                "recreate (apply leaves it; drain and delete it first): {}",
                what.join("; ")
            ),
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
        )?;
        let recreate = self.count(|a| matches!(a, PlanAction::Recreate { .. }));
        if recreate > 0 {
            write!(f, ", {recreate} to recreate by hand")?;
        }
        Ok(())
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
                Some(if let Some(session) = spec.session_mismatch(description) {
                    PlanAction::Recreate {
                        what: std::iter::once(session).chain(what).collect(),
                    }
                } else if what.is_empty() {
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

#[cfg(test)]
mod tests;
