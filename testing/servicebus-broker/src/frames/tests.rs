//! Tests of `testing/servicebus-broker/src/frames.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fe2o3_amqp::types::definitions::Handle;
use fe2o3_amqp::types::definitions::{self, ErrorCondition};
use fe2o3_amqp::types::messaging::message::__private::{Deserializable, Serializable};
use fe2o3_amqp::types::messaging::{Accepted, AmqpValue, Body, Message, Received};
use fe2o3_amqp::types::primitives::Symbol;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn transfer(tag: &[u8]) -> Transfer {
    Transfer {
        handle: Handle(1),
        delivery_id: Some(7),
        delivery_tag: Some(DeliveryTag::from(tag.to_vec())),
        message_format: Some(0),
        settled: Some(false),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

/// A frame on channel 3 (data offset 2, AMQP type) of `performative`.
fn frame(performative: impl serde::Serialize, payload: &[u8]) -> Vec<u8> {
    let encoded = serde_amqp::to_vec(&performative).unwrap();
    frame_with(&[0, 0, 0, 0, 2, 0, 0, 3], &encoded, payload).unwrap()
}

fn message_bytes(token: Option<Uuid>) -> Vec<u8> {
    let mut annotations = MessageAnnotations::default();
    annotations
        .0
        .insert(OwnedKey::from("x-opt-sequence-number"), Value::Long(5));
    if let Some(token) = token {
        annotations.0.insert(
            OwnedKey::from("x-opt-lock-token"),
            Value::Uuid(token.into_bytes().into()),
        );
    }
    let message = Message::builder()
        .header(Header::default())
        .message_annotations(annotations)
        .body(Body::<Value>::Value(AmqpValue(Value::String("hello".into()))))
        .build();
    serde_amqp::to_vec(&Serializable(message)).unwrap()
}

fn decoded(frame: &[u8]) -> (Transfer, Vec<u8>) {
    let parts = parts(frame).unwrap();
    (
        serde_amqp::from_slice(parts.performative).unwrap(),
        parts.payload.to_vec(),
    )
}

#[test]
fn a_peek_locked_transfer_carries_its_lock_token_in_dotnet_order() {
    let token = Uuid::parse_str("00112233-4455-6677-8899-aabbccddeeff").unwrap();
    let payload = message_bytes(Some(token));
    let rewritten = outgoing_frame(&frame(transfer(&[0, 0, 0, 9]), &payload)).unwrap();
    let (sent, sent_payload) = decoded(&rewritten);
    let tag = sent.delivery_tag.unwrap().into_vec();
    assert_eq!(
        tag,
        [
            0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff
        ],
        "the first three groups little-endian, as .NET's Guid.ToByteArray"
    );
    assert_eq!(Uuid::from_bytes_le(tag.try_into().unwrap()), token);
    assert_eq!(sent.delivery_id, Some(7), "the delivery id stays");
    let message: Deserializable<Message<Body<Value>>> = serde_amqp::from_slice(&sent_payload).unwrap();
    assert_eq!(message.0.header.unwrap().delivery_count, 0);
    let annotations = message.0.message_annotations.unwrap();
    assert_eq!(
        annotations.0.get(&OwnedKey::from("x-opt-sequence-number")),
        Some(&Value::Long(5))
    );
    assert_eq!(
        annotations.0.get(&OwnedKey::from(LOCK_TOKEN)),
        None,
        "the tag is the only lock token"
    );
    let (header, _) = described(&payload).unwrap();
    assert_eq!(header, HEADER);
    let (_, header_length) = described(&sent_payload).unwrap();
    assert_eq!(
        &sent_payload[..header_length],
        explicit_header(&payload[..described(&payload).unwrap().1]).unwrap(),
        "the header written out in full"
    );
    assert_eq!(message.0.body, Body::Value(AmqpValue(Value::String("hello".into()))));
    let size = u32::from_be_bytes(rewritten[..4].try_into().unwrap()) as usize;
    assert_eq!(size, rewritten.len());
}

#[test]
fn other_frames_pass_unchanged() {
    let unlocked = frame(transfer(&[0, 0, 0, 9]), &message_bytes(None));
    let (sent, _) = decoded(&outgoing_frame(&unlocked).unwrap());
    assert_eq!(
        sent.delivery_tag.unwrap().into_vec(),
        [0, 0, 0, 9],
        "receive-and-delete keeps its tag"
    );
    let mut continuation = transfer(&[]);
    continuation.delivery_tag = None;
    let continuation = frame(continuation, b"rest of a message");
    assert_eq!(outgoing_frame(&continuation).unwrap(), continuation);
    let heartbeat = [0, 0, 0, 8, 2, 0, 0, 0];
    assert_eq!(outgoing_frame(&heartbeat).unwrap(), heartbeat);
}

#[test]
fn the_explicit_header_keeps_every_field() {
    let header = Header {
        durable: true,
        priority: 7.into(),
        ttl: Some(60_000),
        first_acquirer: true,
        delivery_count: 3,
    };
    let message = Message::builder()
        .header(header.clone())
        .body(Body::<Value>::Value(AmqpValue(Value::Int(1))))
        .build();
    let payload = serde_amqp::to_vec(&Serializable(message)).unwrap();
    let (_, length) = described(&payload).unwrap();
    let explicit = explicit_header(&payload[..length]).unwrap();
    assert_eq!(described(&explicit).unwrap().1, explicit.len());
    let read: Header = serde_amqp::from_slice(&explicit).unwrap();
    assert_eq!(read, header);
    assert_eq!(
        service_bus_payload(b"\x00\x53\x73\x45"),
        None,
        "no header, nothing to write"
    );
}

#[test]
fn the_engine_sees_the_clients_frames_headroom_smaller() {
    let open = Open {
        container_id: "client".into(),
        hostname: None,
        max_frame_size: MaxFrameSize(65_536),
        channel_max: Default::default(),
        idle_time_out: None,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    let shown = incoming_open(&parts(&frame(open.clone(), &[])).unwrap()).unwrap();
    let parts = parts(&shown).unwrap();
    let shown: Open = serde_amqp::from_slice(parts.performative).unwrap();
    assert_eq!(shown.max_frame_size.0, 65_536 - HEADROOM);
    assert_eq!(shown.container_id, "client");
}

#[tokio::test]
async fn bytes_cut_anywhere_arrive_rewritten_and_whole() {
    let token = Uuid::new_v4();
    let header = *b"AMQP\x00\x01\x00\x00";
    let first = frame(transfer(&[0, 0, 0, 1]), &message_bytes(Some(token)));
    let second = frame(transfer(&[0, 0, 0, 2]), &message_bytes(None));
    let mut stream = Vec::new();
    stream.extend_from_slice(&header);
    stream.extend_from_slice(&first);
    stream.extend_from_slice(&second);

    let (near, mut far) = tokio::io::duplex(1 << 16);
    let mut tags = LockTokenTags::new(near, Arc::default());
    for piece in stream.chunks(5) {
        tags.write_all(piece).await.unwrap();
    }
    tags.flush().await.unwrap();
    drop(tags);
    let mut sent = Vec::new();
    far.read_to_end(&mut sent).await.unwrap();

    let mut expected = header.to_vec();
    expected.extend_from_slice(&outgoing_frame(&first).unwrap());
    expected.extend_from_slice(&outgoing_frame(&second).unwrap());
    assert_eq!(sent, expected);
    assert_ne!(outgoing_frame(&first).unwrap(), first);
}

fn open(max_frame_size: u32) -> Open {
    Open {
        container_id: "c".into(),
        hostname: None,
        max_frame_size: MaxFrameSize(max_frame_size),
        channel_max: Default::default(),
        idle_time_out: None,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

fn disposition(settled: bool, state: Option<DeliveryState>) -> Disposition {
    Disposition {
        role: Role::Receiver,
        first: 4,
        last: Some(5),
        settled,
        state,
        batchable: false,
    }
}

fn begin(remote_channel: Option<u16>) -> Begin {
    Begin {
        remote_channel,
        next_outgoing_id: 0,
        incoming_window: 100,
        outgoing_window: 100,
        handle_max: Default::default(),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    }
}

/// `frame` on another channel.
fn on_channel(mut frame: Vec<u8>, channel: u16) -> Vec<u8> {
    frame[6..8].copy_from_slice(&channel.to_be_bytes());
    frame
}

#[test]
fn only_unsettled_terminal_dispositions_of_the_receiver_are_settled_back() {
    let accepted = Some(DeliveryState::Accepted(Accepted {}));
    let unsettled = frame(disposition(false, accepted.clone()), &[]);
    let (shown, echo) = settle_second(&parts(&unsettled).unwrap()).unwrap();
    let shown: Disposition = serde_amqp::from_slice(parts(&shown).unwrap().performative).unwrap();
    assert!(shown.settled, "the engine sees it settled");
    assert_eq!((shown.first, shown.last), (4, Some(5)));
    assert!(echo.settled);
    assert!(matches!(echo.role, Role::Sender));
    assert_eq!((echo.first, echo.last), (4, Some(5)));
    assert!(matches!(echo.state, Some(DeliveryState::Accepted(_))));

    let settled = frame(disposition(true, accepted.clone()), &[]);
    assert!(settle_second(&parts(&settled).unwrap()).is_none(), "already settled");
    let received = Some(DeliveryState::Received(Received {
        section_number: 0,
        section_offset: 0,
    }));
    let not_terminal = frame(disposition(false, received), &[]);
    assert!(
        settle_second(&parts(&not_terminal).unwrap()).is_none(),
        "not an outcome"
    );
    let dead_letter = Some(DeliveryState::Rejected(Rejected {
        error: Some(definitions::Error::new(
            ErrorCondition::Custom(Symbol::from("com.microsoft:dead-letter")),
            Some("field x is missing".to_owned()),
            None,
        )),
    }));
    let rejected = frame(disposition(false, dead_letter), &[]);
    let (shown, echo) = settle_second(&parts(&rejected).unwrap()).unwrap();
    let shown: Disposition = serde_amqp::from_slice(parts(&shown).unwrap().performative).unwrap();
    assert!(
        matches!(&shown.state, Some(DeliveryState::Rejected(Rejected { error: Some(_) }))),
        "the engine keeps the reason"
    );
    assert!(
        matches!(echo.state, Some(DeliveryState::Rejected(Rejected { error: None }))),
        "the client is told it worked"
    );

    let mut from_a_sender = disposition(false, accepted);
    from_a_sender.role = Role::Sender;
    let from_a_sender = frame(from_a_sender, &[]);
    assert!(
        settle_second(&parts(&from_a_sender).unwrap()).is_none(),
        "about deliveries the client sent"
    );
}

#[tokio::test]
async fn a_settlement_owed_goes_back_on_the_brokers_channel_for_the_session() {
    let header = *b"AMQP\x00\x01\x00\x00";
    let client_open = frame(open(1_000), &[]);
    let client_begin = on_channel(frame(begin(None), &[]), 7);
    let accepted = Some(DeliveryState::Accepted(Accepted {}));
    let client_disposition = on_channel(frame(disposition(false, accepted), &[]), 7);
    let other = on_channel(frame(transfer(&[1, 2, 3, 4]), b"payload"), 7);

    let (mut client, near) = tokio::io::duplex(1 << 16);
    let mut tags = LockTokenTags::new(near, Arc::default());
    let mut from_client = header.to_vec();
    from_client.extend_from_slice(&client_open);
    from_client.extend_from_slice(&client_begin);
    client.write_all(&from_client).await.unwrap();
    let mut seen = vec![0; header.len() + client_open.len() - 1 + client_begin.len()];
    // The open is shown re-encoded; read what the engine gets up to the begin.
    let mut got = Vec::new();
    while got.len() < header.len() + 8 || next_unit(&got[header.len()..]).unwrap().is_none() {
        let count = tags.read(&mut seen).await.unwrap();
        got.extend_from_slice(&seen[..count]);
    }
    // The broker answers the client's channel 7 on its channel 2.
    let broker_begin = on_channel(frame(begin(Some(7)), &[]), 2);
    tags.write_all(&broker_begin).await.unwrap();
    tags.flush().await.unwrap();
    let mut answer = vec![0; broker_begin.len()];
    client.read_exact(&mut answer).await.unwrap();
    assert_eq!(answer, broker_begin);

    let mut rest = client_disposition.clone();
    rest.extend_from_slice(&other);
    client.write_all(&rest).await.unwrap();
    let (shown, echo) = settle_second(&parts(&client_disposition).unwrap()).unwrap();
    let mut expected: Vec<u8> = Vec::new();
    expected.extend_from_slice(&client_begin);
    expected.extend_from_slice(&shown);
    expected.extend_from_slice(&other);
    while got.len() < header.len() + incoming_open(&parts(&client_open).unwrap()).unwrap().len() + expected.len() {
        let count = tags.read(&mut seen).await.unwrap();
        got.extend_from_slice(&seen[..count]);
    }
    assert!(
        got.ends_with(&expected),
        "the engine sees the begin, the disposition settled, then the rest"
    );
    let echo = frame_on(2, &echo).unwrap();
    let mut settled_back = vec![0; echo.len()];
    client.read_exact(&mut settled_back).await.unwrap();
    assert_eq!(
        settled_back, echo,
        "the client gets its settlement on the broker's channel 2"
    );
}
