//! Sending commands: validation, the caller's rights, and the
//! `Idempotency-Key` contract.

use super::*;
use crate::runtime::telemetry::TraceContext;

/// How a command is sent besides what it is: the delivery it joins, the
/// caller's `Idempotency-Key` and the caller's trace context.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandRouting<'a> {
    /// Join this delivery instead of starting a new one.
    pub correlation_id: Option<Uuid>,
    /// A repeated request with this key gets the first answer and sends nothing.
    pub idempotency_key: Option<&'a str>,
    /// The caller's W3C trace context (`traceparent`, `tracestate`): the
    /// delivery's trace continues it.
    pub trace: Option<&'a TraceContext>,
}

impl Gateway {
    // -- commands -----------------------------------------------------------

    /// Validates and sends a command for the caller's tenant (a platform key
    /// names it in `tenant`). With an `idempotency_key`, a repeated request
    /// gets the first answer and sends nothing; concurrent ones wait for it.
    pub async fn send_command(
        &self,
        caller: &Caller,
        message_type: &str,
        payload: &Value,
        tenant: Option<&str>,
        routing: CommandRouting<'_>,
    ) -> Result<CommandAccepted, GatewayError> {
        let CommandRouting {
            correlation_id,
            idempotency_key,
            trace,
        } = routing;
        let spec = MessageSpec::find(message_type)
            .ok_or_else(|| GatewayError::UnknownType(format!("unknown message type `{message_type}`")))?;
        if spec.kind != MessageKind::Command {
            return Err(GatewayError::UnknownType(format!(
                "`{message_type}` is an event; only commands can be sent"
            )));
        }
        if spec.internal {
            return Err(OperatorError::Internal(spec.message_type.to_owned()).into());
        }
        if let Some(scope) = decision_scope(spec.message_type) {
            // Deciding on a release is its own right, not `commands:send`.
            let environment = payload.get("environment").and_then(Value::as_str);
            if !caller.may_decide(scope, environment) {
                return Err(GatewayError::Forbidden { scope });
            }
            if let Some(scope) = access::override_scope(spec.message_type, Some(payload))
                && !caller.may_decide(scope, environment)
            {
                return Err(GatewayError::Forbidden { scope });
            }
        } else {
            Self::require(caller, Scope::CommandsSend)?;
        }
        let tenant = match (caller.tenant_id.as_str(), tenant) {
            (ALL_TENANTS, Some(tenant)) => tenant.to_owned(),
            (ALL_TENANTS, None) => {
                return Err(GatewayError::Invalid {
                    field: Some("X-Bosun-Tenant".into()),
                    message: "a platform key (tenant `*`) must name the command's tenant in X-Bosun-Tenant".into(),
                });
            }
            (own, Some(named)) if named != own => {
                return Err(GatewayError::OtherTenant { own: own.to_owned() });
            }
            (own, _) => own.to_owned(),
        };
        // A command joins a delivery of its tenant that exists: one that does
        // not, and one of another tenant, read the same, byte for byte (no
        // oracle of other tenants' correlation ids). A new delivery's id is
        // bosun's to choose.
        let joined = match correlation_id {
            Some(correlation_id) => match self.backends.store.delivery_record(&correlation_id.to_string()).await? {
                Some(record) if record.tenant_id == tenant => Some(record),
                _ => return Err(GatewayError::not_found("delivery", &correlation_id.to_string())),
            },
            None => None,
        };
        // Checked once, before claiming a key: an invalid request stores
        // nothing.
        let operator = self.operator(caller);
        let command = operator.prepare(message_type, payload, &tenant)?;
        let Some(key) = idempotency_key else {
            let sent = self
                .send_now(
                    caller,
                    &operator,
                    command,
                    SendOptions {
                        correlation_id,
                        message_id: None,
                        trace: trace.cloned(),
                        joined,
                    },
                )
                .await?;
            return Ok(CommandAccepted {
                body: sent,
                replayed: false,
            });
        };
        if key.is_empty() || key.len() > 255 || key.chars().any(char::is_control) {
            return Err(GatewayError::Invalid {
                field: Some("Idempotency-Key".into()),
                message: "Idempotency-Key must be 1 to 255 printable characters".into(),
            });
        }
        let hash = request_hash(message_type, &tenant, correlation_id, payload);
        let deadline = tokio::time::Instant::now() + IDEMPOTENCY_WAIT;
        loop {
            match self
                .access
                .claim_idempotency(&tenant, key, &hash, IDEMPOTENCY_STALE_AFTER)
                .await?
            {
                IdempotencyClaim::Claimed => break,
                IdempotencyClaim::Completed {
                    request_hash, response, ..
                } => {
                    if request_hash != hash {
                        return Err(GatewayError::IdempotencyReused(key.to_owned()));
                    }
                    return Ok(CommandAccepted {
                        body: response,
                        replayed: true,
                    });
                }
                IdempotencyClaim::InProgress { request_hash } => {
                    if request_hash != hash {
                        return Err(GatewayError::IdempotencyReused(key.to_owned()));
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err(GatewayError::IdempotencyInProgress(key.to_owned()));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        // The ids follow from the key: if this process dies after sending and
        // before recording the answer, the request that takes the key over
        // sends the same messageId, which duplicate detection and the
        // consumers' idempotency absorb.
        let message_id = derived_uuid(&["message", &tenant, key]);
        let correlation_id = correlation_id.unwrap_or_else(|| derived_uuid(&["correlation", &tenant, key]));
        match self
            .send_now(
                caller,
                &operator,
                command,
                SendOptions {
                    correlation_id: Some(correlation_id),
                    message_id: Some(message_id),
                    trace: trace.cloned(),
                    joined,
                },
            )
            .await
        {
            Ok(body) => {
                self.access.complete_idempotency(&tenant, key, 202, &body).await?;
                Ok(CommandAccepted { body, replayed: false })
            }
            Err(err) => {
                if let Err(release) = self.access.release_idempotency(&tenant, key).await {
                    tracing::warn!(error = %release, "could not release an Idempotency-Key after a failed send");
                }
                Err(err)
            }
        }
    }

    pub(super) async fn send_now(
        &self,
        caller: &Caller,
        operator: &Operator,
        command: PreparedCommand,
        options: SendOptions,
    ) -> Result<Value, GatewayError> {
        let tenant = command.tenant().to_owned();
        let sent = operator.send_prepared(command, &options).await?;
        tracing::info!(
            key_id = %caller.key_id,
            tenant_id = %tenant,
            message_id = %sent.message_id,
            correlation_id = %sent.correlation_id,
            message_type = %sent.message_type,
            "command accepted"
        );
        let delivery = format!("/v1/deliveries/{}", sent.correlation_id);
        let answer = AcceptedCommand {
            message_id: sent.message_id,
            correlation_id: sent.correlation_id,
            message_type: sent.message_type,
            destination: sent.destination,
            tenant_id: tenant,
            links: CommandLinks {
                events: format!("{delivery}/events"),
                delivery,
            },
        };
        serde_json::to_value(&answer).map_err(|source| {
            GatewayError::Unavailable(Outage::Answer {
                what: "answer not serializable",
                source,
            })
        })
    }
}

/// SHA-256 over what makes two command requests the same request: type,
/// tenant, delivery and the payload with its object keys sorted.
pub(super) fn request_hash(message_type: &str, tenant: &str, correlation_id: Option<Uuid>, payload: &Value) -> String {
    let correlation = correlation_id.map(|id| id.to_string()).unwrap_or_default();
    let request = [
        message_type,
        tenant,
        correlation.as_str(),
        canonical(payload).to_string().as_str(),
    ]
    .join("\0");
    sha256_hex(request.as_bytes())
}

pub(super) fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, Value> = map.iter().map(|(k, v)| (k, canonical(v))).collect();
            Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// A UUID that follows from `parts` (the first 16 bytes of their SHA-256,
/// marked as a version 4 variant 1 UUID).
pub(super) fn derived_uuid(parts: &[&str]) -> Uuid {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}
