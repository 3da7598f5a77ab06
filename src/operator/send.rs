//! Sending a command from outside (the HTTP API, MCP, `bosun send`, the
//! demo): checked once ([`Operator::prepare`]), accepted in one store
//! transaction with its delivery and its `sent` line, then sent at once
//! (or by an outbox dispatcher when that fails).

use bosun_contracts::routing::destination_of;
use bosun_contracts::validate::tenant_id;
use bosun_contracts::{ContractError, Destination, Envelope, Message, MessageSpec, versions};
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use super::{Operator, OperatorError};
use crate::host::dispatcher;
use crate::ports::store::{
    AcceptedCommand, DeliveryRecord, OutboxPurpose, PendingOutbox, TimelineEntry, TimelineStatus,
};
use crate::ports::transport::OutboundMessage;
use crate::runtime::telemetry::{self, TraceContext};

/// What `send` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SentMessage {
    /// The new message's id.
    pub message_id: Uuid,
    /// The delivery it belongs to.
    pub correlation_id: Uuid,
    /// Its type.
    pub message_type: String,
    /// Where it went.
    pub destination: String,
}

/// A command [`Operator::prepare`] checked: ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedCommand {
    message: Message,
    destination: Destination,
    tenant: String,
}

impl PreparedCommand {
    /// The tenant it is sent for.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }
}

/// How [`Operator::send_with`] sends a command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// Join this delivery instead of starting a new one.
    pub correlation_id: Option<Uuid>,
    /// Use this messageId (e.g. derived from an `Idempotency-Key`, so that a
    /// re-sent request is caught by duplicate detection) instead of a new one.
    pub message_id: Option<Uuid>,
    /// The caller's trace context: the command's producer span continues
    /// it (else the command starts the delivery's trace).
    pub trace: Option<TraceContext>,
    /// The record of the delivery `correlation_id` names, when the caller
    /// read it already (so it is not read twice).
    pub joined: Option<DeliveryRecord>,
}

impl Operator {
    /// Validates a payload against its contract and sends it as a new
    /// message of a new (or the given) delivery.
    pub async fn send(
        &self,
        message_type: &str,
        payload: &Value,
        correlation_id: Option<Uuid>,
        tenant: &str,
    ) -> Result<SentMessage, OperatorError> {
        let options = SendOptions {
            correlation_id,
            message_id: None,
            trace: None,
            joined: None,
        };
        self.send_with(message_type, payload, tenant, &options).await
    }

    /// [`Operator::send`] with every option. The delivery is recorded as
    /// started by this operator for `tenant` (unless it already exists).
    pub async fn send_with(
        &self,
        message_type: &str,
        payload: &Value,
        tenant: &str,
        options: &SendOptions,
    ) -> Result<SentMessage, OperatorError> {
        let command = self.prepare(message_type, payload, tenant)?;
        self.send_prepared(command, options).await
    }

    /// Checks a command once, without writing anything: `tenant` is a
    /// tenant id, `message_type` a command that may be sent from outside,
    /// `payload` its valid payload (an approval or rejection is stamped with
    /// who this operator is, whatever the payload says). The front door
    /// calls it before anything is stored, and sends what it returns with
    /// [`Operator::send_prepared`].
    pub fn prepare(&self, message_type: &str, payload: &Value, tenant: &str) -> Result<PreparedCommand, OperatorError> {
        tenant_id("tenantId", tenant).map_err(|err| ContractError::InvalidField {
            field: err.field,
            reason: err.reason,
        })?;
        let spec = MessageSpec::find(message_type).ok_or_else(|| ContractError::UnknownType {
            message_type: message_type.to_owned(),
        })?;
        if spec.internal {
            return Err(OperatorError::Internal(spec.message_type.to_owned()));
        }
        // A payload written against the previous release (a field a later
        // version retired) is read as that version, not stripped of it.
        let payload = versions::payload_as_sent(spec, payload)?;
        let mut message = Message::from_type_and_payload(message_type, &payload)?;
        // Who decides on a release is who bosun authenticated, whatever the
        // payload says.
        match &mut message {
            Message::ApproveRelease(approve) => {
                approve.approved_by = Some(self.principal.clone());
                approve.approver_identities = self.identities.clone();
            }
            Message::RejectRelease(reject) => reject.rejected_by = Some(self.principal.clone()),
            Message::OverrideReleaseWindow(overriding) => {
                overriding.overridden_by = Some(self.principal.clone());
                overriding.overrider_identities = self.identities.clone();
            }
            Message::RollbackEnvironment(rollback) => {
                rollback.requested_by = Some(self.principal.clone());
                rollback.requester_identities = self.identities.clone();
                // When is bosun's to say (it orders the rollback after what it
                // undoes), and a failed release is the release saga's to name.
                rollback.requested_at = OffsetDateTime::now_utc();
                rollback.failed_release_id = None;
            }
            _ => {}
        }
        message.validate()?;
        let destination = destination_of(spec.message_type)
            .ok_or_else(|| OperatorError::Invalid(format!("no consumer handles `{message_type}`")))?;
        Ok(PreparedCommand {
            message,
            destination,
            tenant: tenant.to_owned(),
        })
    }

    /// Sends a command [`Operator::prepare`] checked.
    pub async fn send_prepared(
        &self,
        command: PreparedCommand,
        options: &SendOptions,
    ) -> Result<SentMessage, OperatorError> {
        let PreparedCommand {
            message,
            destination,
            tenant,
        } = command;
        let tenant = tenant.as_str();
        let correlation_id = options.correlation_id.unwrap_or_else(Uuid::now_v7);
        let source = self.source.clone();
        let mut envelope = Envelope::new(&message, correlation_id, tenant, &source);
        if let Some(message_id) = options.message_id {
            envelope.message_id = message_id;
        }
        // The producer span of the command: the caller's child, or the
        // root of the delivery's trace; the consumer's span is its child.
        let span_name = format!("send {destination}");
        let span = tracing::info_span!(
            "send",
            otel.name = span_name.as_str(),
            otel.kind = "producer",
            messaging.system = self.messaging_system,
            messaging.operation.type = "send",
            messaging.operation.name = "send",
            messaging.destination.name = %destination,
            messaging.message.id = %envelope.message_id,
            messaging.message.conversation_id = %correlation_id,
            message_type = envelope.message_type.as_str(),
            tenant,
            source = source.as_str(),
        );
        // The delivery's trace: a command that joins a delivery of this
        // tenant continues the trace its first command started, unless the
        // caller hands over a trace of its own; then the command is a span
        // of the caller's trace, linked to the delivery's.
        let joined = match (&options.joined, options.correlation_id) {
            // The caller read it already (the front door, checking whose it is).
            (Some(record), Some(correlation_id)) if record.correlation_id == correlation_id.to_string() => {
                Some(record.clone())
            }
            (_, Some(correlation_id)) => self.store.delivery_record(&correlation_id.to_string()).await?,
            (_, None) => None,
        };
        let delivery_trace = joined
            .filter(|record| record.tenant_id == tenant)
            .and_then(|record| TraceContext::from_headers(record.traceparent.as_deref(), record.tracestate.as_deref()));
        let parent = options.trace.as_ref().or(delivery_trace.as_ref());
        telemetry::continue_trace(&span, parent);
        if options.trace.is_some()
            && let Some(delivery_trace) = &delivery_trace
        {
            telemetry::link_to(&span, delivery_trace);
        }
        let context = telemetry::outgoing_context(&span, parent);
        envelope.traceparent = Some(context.traceparent.clone());
        envelope.tracestate = context.tracestate.clone();
        // One write: the delivery (ownership first: a delivery belongs to
        // its tenant before any consumer emits anything for it), the
        // command in the outbox and its `sent` line. Then it is sent at
        // once; if that fails, or this process ends first, an outbox
        // dispatcher sends it when the claim's lease is over.
        let message = OutboundMessage {
            destination: destination.clone(),
            broker_message_id: envelope.message_id.to_string(),
            message_type: Some(envelope.message_type.clone()),
            correlation_id: Some(correlation_id.to_string()),
            body: envelope.to_vec(),
            scheduled_at: None,
        };
        let accepted = AcceptedCommand {
            delivery: DeliveryRecord {
                correlation_id: correlation_id.to_string(),
                tenant_id: tenant.to_owned(),
                started_by: source.clone(),
                message_type: envelope.message_type.clone(),
                message_id: envelope.message_id.to_string(),
                started_at: OffsetDateTime::now_utc(),
                traceparent: Some(context.traceparent),
                tracestate: context.tracestate,
            },
            message: message.clone(),
            timeline: TimelineEntry {
                correlation_id: correlation_id.to_string(),
                message_id: envelope.message_id.to_string(),
                message_type: envelope.message_type.clone(),
                consumer: None,
                status: TimelineStatus::Sent,
                attempt: 0,
                at: OffsetDateTime::now_utc(),
                detail: Some(format!("to {destination} by {source}")),
            },
        };
        let outbox_id = self.store.accept_command(accepted, dispatcher::LEASE).await?;
        self.dispatch_accepted(outbox_id, message).await;
        Ok(SentMessage {
            message_id: envelope.message_id,
            correlation_id,
            message_type: envelope.message_type,
            destination: destination.path(),
        })
    }

    /// Sends a command accepted into the outbox as entry `outbox_id` and
    /// marks the entry sent, as the outbox dispatcher sends what it claims.
    /// A failure is not the caller's: the command is accepted, and an
    /// outbox dispatcher sends it once the entry's lease
    /// ([`dispatcher::LEASE`]) is over (the transport's duplicate detection
    /// drops a second send).
    async fn dispatch_accepted(&self, outbox_id: i64, message: OutboundMessage) {
        let entry = PendingOutbox {
            id: outbox_id,
            purpose: OutboxPurpose::Sent,
            message,
            message_id: None,
        };
        let sent = dispatcher::send_pending(
            self.transport.as_ref(),
            self.store.as_ref(),
            self.claim_check.as_ref(),
            self.wire,
            vec![entry],
        )
        .await;
        if let Err(err) = sent {
            let error = crate::host::error_chain(&err).join(": ");
            tracing::warn!(
                error,
                outbox_id,
                "accepted, not sent at once; the outbox dispatcher sends it"
            );
        }
    }
}
