//! Tests of the topology plan: the specs, their ATOM entries, the diff.

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
        sessions: Vec::new(),
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
        description: Description::Queue {
            options: TopologyOptions::default(),
            requires_session: false,
        },
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
fn a_doctype_is_never_expanded_and_other_entities_stay_as_written() {
    // A billion-laughs prologue: skipped, never expanded.
    let text = r#"<?xml version="1.0"?>
<!DOCTYPE entry [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>
<entry xmlns="http://www.w3.org/2005/Atom"><title>&lol2;</title><content type="application/xml"><QueueDescription><Name>a &amp; &unknown; b&#33;</Name></QueueDescription></content></entry>"#;
    let AtomDocument::Entry(entry) = parse_atom(text).unwrap() else {
        panic!("an entry")
    };
    assert_eq!(entry.title, "&lol2;");
    assert_eq!(entry.name(), "a & &unknown; b!");
    // A cut-short answer is refused, whatever was read before the cut.
    let cut = &text[..text.len() - 20];
    assert!(parse_atom(cut).is_err());
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

/// The registry's topology: the saga consumers' entities require sessions.
fn saga_topology() -> Topology {
    crate::runtime::registry::topology()
}

#[test]
fn the_saga_consumers_queues_and_subscriptions_require_sessions() {
    let specs = desired_entities(&saga_topology(), &TopologyOptions::default());
    let sessions: Vec<(&str, bool)> = specs
        .iter()
        .filter_map(|spec| match &spec.description {
            Description::Queue { requires_session, .. } | Description::Subscription { requires_session, .. } => {
                Some((spec.path.as_str(), *requires_session))
            }
            _ => None,
        })
        .filter(|(_, requires)| *requires)
        .collect();
    assert_eq!(
        sessions.iter().map(|(path, _)| *path).collect::<Vec<_>>(),
        [
            "release-orchestration",
            "gitops-sync",
            "probe",
            "bosun-events/Subscriptions/release-orchestration",
            "bosun-events/Subscriptions/gitops-sync",
            "bosun-events/Subscriptions/probe",
        ]
    );
    let entry_of = |path: &str| {
        specs
            .iter()
            .find(|spec| spec.path == path)
            .and_then(EntitySpec::atom_entry)
            .unwrap()
    };
    assert!(entry_of("probe").contains("<RequiresSession>true</RequiresSession>"));
    assert!(entry_of("bosun-events/Subscriptions/gitops-sync").contains("<RequiresSession>true</RequiresSession>"));
    assert!(entry_of("commit").contains("<RequiresSession>false</RequiresSession>"));
    assert!(entry_of("bosun-events/Subscriptions/pull-request").contains("<RequiresSession>false</RequiresSession>"));
    // A session subscription takes only what is addressed to it.
    let rule = |subscription: &str, name: &str| {
        specs
            .iter()
            .find(|spec| spec.path == rule_path("bosun-events", subscription, name))
            .map(|spec| spec.description.clone())
            .unwrap()
    };
    assert_eq!(
        rule("gitops-sync", TYPES_RULE),
        Description::Rule {
            name: TYPES_RULE.into(),
            sql_filter: SESSION_TYPES_FILTER.into()
        }
    );
    assert_eq!(
        rule("gitops-sync", REPLAY_RULE),
        Description::Rule {
            name: REPLAY_RULE.into(),
            sql_filter: "replayTo = 'gitops-sync'".into()
        }
    );
}

#[test]
fn an_entity_made_without_sessions_must_be_recreated_and_blocks_serving() {
    let specs = desired_entities(&saga_topology(), &TopologyOptions::default());
    let mut observed = Observed::default();
    for spec in specs.iter().filter(|spec| spec.kind != EntityKind::Rule) {
        let Some(entry) = spec.atom_entry() else { continue };
        let AtomDocument::Entry(mut entry) = parse_atom(&entry).unwrap() else {
            panic!("an entry")
        };
        if spec.path == "gitops-sync" {
            // Made by an older bosun: no sessions.
            let xml = spec.atom_entry().unwrap().replace(
                "<RequiresSession>true</RequiresSession>",
                "<RequiresSession>false</RequiresSession>",
            );
            let AtomDocument::Entry(older) = parse_atom(&xml).unwrap() else {
                panic!("an entry")
            };
            entry = older;
        }
        observed.entities.insert(spec.path.clone(), entry);
    }
    let plan = diff(&specs, &observed);
    let gitops = plan.items.iter().find(|item| item.path == "gitops-sync").unwrap();
    let PlanAction::Recreate { what } = &gitops.action else {
        panic!("gitops-sync must be recreated: {:?}", gitops.action);
    };
    assert!(
        what[0].contains("RequiresSession is false, bosun wants true"),
        "{what:?}"
    );
    assert!(what[0].contains("only when an entity is created"), "{what:?}");
    assert!(what[0].contains("drain"), "{what:?}");
    assert!(gitops.entry.is_none(), "apply never deletes or replaces it");
    assert!(!gitops.changes_on_apply());
    assert!(!plan.is_up_to_date());
    assert!(
        plan.blocking_problems()
            .iter()
            .any(|problem| problem.starts_with("queue gitops-sync must be recreated")),
        "serve does not start on it: {:?}",
        plan.blocking_problems()
    );
    let text = plan.to_string();
    assert!(
        text.contains("recreate (apply leaves it; drain and delete it first)"),
        "{text}"
    );
    assert!(text.contains("1 to recreate by hand"), "{text}");
    let json = serde_json::to_value(&plan).unwrap();
    assert!(
        json["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|item| item["path"] == "gitops-sync" && item["action"] == "recreate"),
        "{json:#}"
    );
}
