//! Probe consumer tests.

use bosun_contracts::{Envelope, Message, samples};
use uuid::Uuid;

use super::*;
use crate::SagaInstance;

#[tokio::test]
async fn a_probe_echoes_and_the_echo_is_counted() {
    let consumer = ProbeConsumer::new();
    let probe: Message = samples::probe().into();
    let envelope = Envelope::new(&probe, Uuid::now_v7(), "contoso", "test");
    assert_eq!(consumer.saga_of(&envelope, &probe), None);
    let outcome = consumer.handle(Inbound::new(&envelope, &probe)).await.unwrap();
    assert_eq!(outcome.messages.len(), 1);
    let echo = outcome.messages[0].message.clone();
    let envelope = Envelope::new(&echo, Uuid::now_v7(), "contoso", "test");
    let (kind, key) = consumer.saga_of(&envelope, &echo).unwrap();
    assert_eq!((kind, key.as_str()), ("probe", "contoso/canary"));
    let mut state = serde_json::Value::Null;
    for version in 0..3 {
        let saga = SagaInstance {
            kind,
            key: key.clone(),
            version,
            state: state.clone(),
        };
        let outcome = consumer
            .handle(Inbound {
                envelope: &envelope,
                message: &echo,
                saga: Some(&saga),
            })
            .await
            .unwrap();
        state = outcome.saga_state.unwrap();
    }
    assert_eq!(state["stateVersion"], 1, "{state}");
    let tally: ProbeTally = serde_json::from_value(state).unwrap();
    assert_eq!(tally.count, 3);
    assert_eq!(tally.highest_sequence, 7);
}

#[test]
fn the_tally_has_its_upcasts() {
    assert!(bosun_sagas::versioned::upcasts_are_complete::<ProbeTally>());
}

#[tokio::test]
async fn a_probe_without_echo_emits_nothing() {
    let consumer = ProbeConsumer::new();
    let mut probe = samples::probe();
    probe.echo = false;
    let message: Message = probe.into();
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
    let outcome = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap();
    assert_eq!(outcome, Outcome::default());
}

#[tokio::test]
async fn a_relayed_probe_is_passed_on_once_per_relay_then_echoed() {
    let consumer = ProbeConsumer::new();
    let mut probe = samples::probe();
    probe.relays = 2;
    let mut message: Message = probe.clone().into();
    for left in [1, 0] {
        let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
        let outcome = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap();
        assert_eq!(outcome.messages.len(), 1);
        message = outcome.messages[0].message.clone();
        assert_eq!(
            message,
            Message::Probe(Probe {
                relays: left,
                ..probe.clone()
            })
        );
    }
    let envelope = Envelope::new(&message, Uuid::now_v7(), "contoso", "test");
    let outcome = consumer.handle(Inbound::new(&envelope, &message)).await.unwrap();
    assert!(
        matches!(outcome.messages[0].message, Message::ProbeEchoed(_)),
        "{outcome:?}"
    );
}
