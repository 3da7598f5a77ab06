//! The front door's rules, shared by the HTTP API and the MCP server: who
//! may do what ([`Caller`] and [`Scope`]), for which tenant, and the
//! `Idempotency-Key` contract. Everything it does goes through
//! [`Operator`], acting as the caller's key, so every command and replay
//! records which key did it.
//!
//! Tenant isolation: a key of tenant A gets "not found" for anything of
//! tenant B (never "forbidden", which would tell that it exists). Data whose
//! tenant is unknown (a dead letter whose bytes are not an envelope) is seen
//! by platform keys (tenant `*`) only.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bosun_contracts::{ContractError, MessageKind, MessageSpec};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use bosun_consumers::blob::sha256_hex;

use crate::front::access::{self, ALL_TENANTS, Caller, Scope};
use crate::operator::{Delivery, Operator, OperatorError, SendOptions};
use crate::ports::store::{
    AccessStore, DeadLetterFilter, DeadLetterRecord, DeadLetterStatus, IdempotencyClaim, ReplayRecord, SagaRecord,
    StoreError, TimelineEntry,
};
use crate::wiring::Backends;

/// How long a request may hold an `Idempotency-Key` before another request
/// with the same key takes it over (its process is presumed dead).
const IDEMPOTENCY_STALE_AFTER: Duration = Duration::from_secs(60);
/// How long a request waits for a concurrent request with the same key.
const IDEMPOTENCY_WAIT: Duration = Duration::from_secs(10);
/// How often waits look again.
const POLL: Duration = Duration::from_millis(200);
/// The most dead letters one bulk replay takes.
const MAX_BULK_REPLAY: usize = 10_000;

/// Why the front door said no.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// No key, or a key that is unknown, malformed or revoked.
    #[error("{0}")]
    Unauthorized(String),
    /// The key lacks the scope.
    #[error("this key lacks the `{scope}` scope")]
    Forbidden {
        /// The scope needed.
        scope: Scope,
    },
    /// Nothing with that id (for this tenant).
    #[error("no {what} `{id}`")]
    NotFound {
        /// What was looked up.
        what: &'static str,
        /// The id.
        id: String,
    },
    /// A message type bosun does not know, or not a command.
    #[error("{0}")]
    UnknownType(String),
    /// The request is not valid.
    #[error("{message}")]
    Invalid {
        /// The offending field, when one is to blame.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The `Idempotency-Key` was used before with a different request.
    #[error("Idempotency-Key `{0}` was already used with a different request")]
    IdempotencyReused(String),
    /// A request with the same `Idempotency-Key` is still being processed.
    #[error("a request with Idempotency-Key `{0}` is still being processed; retry later")]
    IdempotencyInProgress(String),
    /// A concurrent change won (a saga version conflict).
    #[error("{0}")]
    Conflict(String),
    /// The store or transport failed.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl GatewayError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            Self::Unauthorized(_) => 401,
            Self::Forbidden { .. } => 403,
            Self::NotFound { .. } | Self::UnknownType(_) => 404,
            Self::Invalid { .. } | Self::IdempotencyReused(_) => 422,
            Self::IdempotencyInProgress(_) | Self::Conflict(_) => 409,
            Self::Unavailable(_) => 503,
        }
    }

    /// A short machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden { .. } => "forbidden",
            Self::NotFound { .. } => "not-found",
            Self::UnknownType(_) => "unknown-type",
            Self::Invalid { .. } => "invalid-field",
            Self::IdempotencyReused(_) => "idempotency-key-reused",
            Self::IdempotencyInProgress(_) => "idempotency-in-progress",
            Self::Conflict(_) => "conflict",
            Self::Unavailable(_) => "unavailable",
        }
    }

    /// The field to blame, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => field.as_deref(),
            Self::UnknownType(_) => Some("type"),
            _ => None,
        }
    }

    /// The error as the API's JSON body.
    pub fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code(), "message": self.to_string()});
        if let (Some(field), Some(object)) = (self.field(), error.as_object_mut()) {
            object.insert("field".into(), json!(field));
        }
        json!({ "error": error })
    }

    fn not_found(what: &'static str, id: &str) -> Self {
        Self::NotFound {
            what,
            id: id.to_owned(),
        }
    }
}

impl From<StoreError> for GatewayError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound { what, id } => Self::NotFound { what, id },
            StoreError::SagaConflict { .. } | StoreError::Ambiguous { .. } => Self::Conflict(err.to_string()),
            other => Self::Unavailable(other.to_string()),
        }
    }
}

impl From<ContractError> for GatewayError {
    fn from(err: ContractError) -> Self {
        Self::Invalid {
            field: err.field().map(str::to_owned),
            message: err.to_string(),
        }
    }
}

impl From<OperatorError> for GatewayError {
    fn from(err: OperatorError) -> Self {
        match err {
            OperatorError::Contract(err) => err.into(),
            OperatorError::Store(err) => err.into(),
            OperatorError::Transport(err) => Self::Unavailable(err.to_string()),
            OperatorError::Internal(_) => Self::UnknownType(err.to_string()),
            OperatorError::Invalid(message) => Self::Invalid { field: None, message },
        }
    }
}

/// The answer to an accepted command.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandAccepted {
    /// The 202 body.
    pub body: Value,
    /// True when this is the stored answer of an earlier request with the
    /// same `Idempotency-Key` (nothing was sent now).
    pub replayed: bool,
}

/// A delivery in a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliverySummary {
    /// The correlation id.
    pub correlation_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Who started it.
    pub started_by: String,
    /// The first command.
    pub message_type: String,
    /// The first command's messageId.
    pub message_id: String,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// `in-progress`, `completed` or `failed`.
    pub status: String,
}

/// Dead letters that failed the same way.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureGroup {
    /// The cause.
    pub reason: String,
    /// The consumer that gave up.
    pub consumer: Option<String>,
    /// The message type.
    pub message_type: Option<String>,
    /// How many.
    pub count: usize,
    /// The oldest.
    #[serde(with = "time::serde::rfc3339")]
    pub first_at: OffsetDateTime,
    /// The newest.
    #[serde(with = "time::serde::rfc3339")]
    pub last_at: OffsetDateTime,
    /// The newest one's description.
    pub description: String,
    /// Their ids, newest first.
    pub ids: Vec<Uuid>,
}

/// A dead letter with its original message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetterDetail {
    /// The record.
    #[serde(flatten)]
    pub record: DeadLetterRecord,
    /// The original envelope, when the bytes are JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Value>,
    /// The original bytes as text (lossy), when they are not JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_text: Option<String>,
}

/// A replay answered to the API: the record plus whether the payload was edited.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayDone {
    /// The replay.
    #[serde(flatten)]
    pub replay: ReplayRecord,
    /// The dead letter replayed.
    pub dead_letter_id: Uuid,
    /// Whether the payload was replaced.
    pub edited: bool,
}

/// What a bulk replay should take.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BulkReplayRequest {
    /// These dead letters ...
    pub ids: Vec<Uuid>,
    /// ... or every dead (not yet replayed) one matching this filter.
    pub filter: Option<DeadLetterFilter>,
    /// At most this many per second.
    pub rate: Option<f64>,
}

/// A dead letter a bulk replay could not replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedReplay {
    /// The dead letter.
    pub id: Uuid,
    /// Why.
    pub error: String,
}

/// A bulk replay and how far it got.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayJob {
    /// Its id.
    pub id: Uuid,
    /// `running` or `finished`.
    pub status: String,
    /// Dead letters to replay.
    pub total: usize,
    /// Dead letters done (replayed or failed).
    pub done: usize,
    /// Replayed.
    pub replayed: Vec<Uuid>,
    /// Not replayed, with why.
    pub failed: Vec<FailedReplay>,
    /// Per second, when limited.
    pub rate: Option<f64>,
    /// Who started it.
    pub by: String,
    /// The tenant it ran for.
    #[serde(skip)]
    pub tenant_id: String,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When it finished.
    #[serde(with = "time::serde::rfc3339::option")]
    pub finished_at: Option<OffsetDateTime>,
}

/// `/readyz`: whether this process can serve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Readiness {
    /// All checks pass and the process is not draining.
    pub ready: bool,
    /// Each check: `ok` or what failed.
    pub checks: BTreeMap<&'static str, Value>,
}

/// The front door over one set of backends.
#[derive(Clone)]
pub struct Gateway {
    backends: Backends,
    access: Arc<dyn AccessStore>,
    jobs: Arc<Mutex<HashMap<Uuid, ReplayJob>>>,
    draining: CancellationToken,
}

impl Gateway {
    /// A gateway over `backends`; `draining` is cancelled when the process
    /// starts to shut down (readiness turns false).
    pub fn new(backends: Backends, draining: CancellationToken) -> Self {
        Self {
            access: Arc::clone(&backends.access),
            backends,
            jobs: Arc::default(),
            draining,
        }
    }

    fn operator(&self, caller: &Caller) -> Operator {
        self.backends
            .operator(&caller.identity())
            .acting_as(caller.identity(), format!("api:{}", caller.key_id))
            .approving_as(caller.principal())
    }

    fn require(caller: &Caller, scope: Scope) -> Result<(), GatewayError> {
        if caller.has(scope) {
            Ok(())
        } else {
            Err(GatewayError::Forbidden { scope })
        }
    }

    /// Checks a presented key (the text after `Bearer `).
    pub async fn authenticate(&self, presented: &str) -> Result<Caller, GatewayError> {
        let refused = || GatewayError::Unauthorized("invalid or revoked API key".into());
        let (id, secret) = access::parse_key(presented).map_err(|_| refused())?;
        let record = self.access.api_key(id).await?.ok_or_else(refused)?;
        access::verify(&record, secret).ok_or_else(refused)
    }

    // -- commands -----------------------------------------------------------

    /// Validates and sends a command for the caller's tenant (a platform key
    /// names it in `tenant`). With `idempotency_key`, a repeated request
    /// gets the first answer and sends nothing; concurrent ones wait for it.
    pub async fn send_command(
        &self,
        caller: &Caller,
        message_type: &str,
        payload: &Value,
        tenant: Option<&str>,
        correlation_id: Option<Uuid>,
        idempotency_key: Option<&str>,
    ) -> Result<CommandAccepted, GatewayError> {
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
        if matches!(spec.message_type, "ApproveRelease" | "RejectRelease") {
            // Deciding on a release is its own right, not `commands:send`.
            let environment = payload.get("environment").and_then(Value::as_str);
            if !caller.may_approve(environment) {
                return Err(GatewayError::Forbidden {
                    scope: Scope::ReleasesApprove,
                });
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
                return Err(GatewayError::Invalid {
                    field: Some("X-Bosun-Tenant".into()),
                    message: format!("this key acts for tenant `{own}` only"),
                });
            }
            (own, _) => own.to_owned(),
        };
        if let Some(correlation_id) = correlation_id {
            let existing = self.backends.store.delivery_record(&correlation_id.to_string()).await?;
            if existing.is_some_and(|record| record.tenant_id != tenant) {
                return Err(GatewayError::not_found("delivery", &correlation_id.to_string()));
            }
        }
        // Validate before claiming a key: an invalid request stores nothing.
        bosun_contracts::Message::from_type_and_payload(message_type, payload)?;
        let Some(key) = idempotency_key else {
            let sent = self
                .send_now(caller, message_type, payload, &tenant, correlation_id, None)
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
                message_type,
                payload,
                &tenant,
                Some(correlation_id),
                Some(message_id),
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

    async fn send_now(
        &self,
        caller: &Caller,
        message_type: &str,
        payload: &Value,
        tenant: &str,
        correlation_id: Option<Uuid>,
        message_id: Option<Uuid>,
    ) -> Result<Value, GatewayError> {
        let options = SendOptions {
            correlation_id,
            message_id,
        };
        let sent = self
            .operator(caller)
            .send_with(message_type, payload, tenant, &options)
            .await?;
        tracing::info!(
            key_id = %caller.key_id,
            tenant_id = %tenant,
            message_id = %sent.message_id,
            correlation_id = %sent.correlation_id,
            message_type = %sent.message_type,
            "command accepted"
        );
        let delivery = format!("/v1/deliveries/{}", sent.correlation_id);
        Ok(json!({
            "messageId": sent.message_id,
            "correlationId": sent.correlation_id,
            "messageType": sent.message_type,
            "destination": sent.destination,
            "tenantId": tenant,
            "links": {"delivery": delivery, "events": format!("{delivery}/events")},
        }))
    }

    // -- deliveries ---------------------------------------------------------

    /// Recent deliveries the caller may see, newest first.
    pub async fn deliveries(&self, caller: &Caller, limit: usize) -> Result<Vec<DeliverySummary>, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let records = self
            .backends
            .store
            .list_deliveries(caller.tenant_filter().as_deref(), limit.clamp(1, 500))
            .await?;
        let operator = self.operator(caller);
        let mut summaries = Vec::with_capacity(records.len());
        for record in records {
            let status = match operator.delivery(&record.correlation_id).await {
                Ok(delivery) => delivery.status,
                Err(OperatorError::Store(StoreError::NotFound { .. })) => "in-progress".to_owned(),
                Err(err) => return Err(err.into()),
            };
            summaries.push(DeliverySummary {
                correlation_id: record.correlation_id,
                tenant_id: record.tenant_id,
                started_by: record.started_by,
                message_type: record.message_type,
                message_id: record.message_id,
                started_at: record.started_at,
                status,
            });
        }
        Ok(summaries)
    }

    /// One delivery's timeline.
    pub async fn delivery(&self, caller: &Caller, correlation_id: &str) -> Result<Delivery, GatewayError> {
        Ok(self.visible_delivery(caller, correlation_id).await?.0)
    }

    /// A delivery and its timeline lines, if the caller may read it.
    async fn visible_delivery(
        &self,
        caller: &Caller,
        correlation_id: &str,
    ) -> Result<(Delivery, Vec<TimelineEntry>), GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let (delivery, lines) = self.operator(caller).delivery_with_lines(correlation_id).await?;
        if !caller.sees(delivery.tenant_id.as_deref()) {
            return Err(GatewayError::not_found("delivery", correlation_id));
        }
        Ok((delivery, lines))
    }

    /// A delivery's timeline lines in the order they were written, and its
    /// status (for the server-sent-event stream).
    pub async fn delivery_timeline(
        &self,
        caller: &Caller,
        correlation_id: &str,
    ) -> Result<(Vec<TimelineEntry>, String), GatewayError> {
        let (delivery, lines) = self.visible_delivery(caller, correlation_id).await?;
        Ok((lines, delivery.status))
    }

    /// Waits until the delivery completes or fails, or `timeout` passes;
    /// returns it as it then is.
    pub async fn wait_for_delivery(
        &self,
        caller: &Caller,
        correlation_id: &str,
        timeout: Duration,
    ) -> Result<Delivery, GatewayError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let delivery = self.delivery(caller, correlation_id).await?;
            if delivery.status != "in-progress" || tokio::time::Instant::now() >= deadline {
                return Ok(delivery);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    // -- sagas --------------------------------------------------------------

    /// Sagas the caller may see.
    pub async fn sagas(&self, caller: &Caller, kind: Option<&str>) -> Result<Vec<SagaRecord>, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let mut sagas = self.operator(caller).sagas(kind).await?;
        sagas.retain(|saga| caller.sees(saga.tenant_id.as_deref()));
        Ok(sagas)
    }

    /// One saga.
    pub async fn saga(&self, caller: &Caller, kind: &str, key: &str) -> Result<SagaRecord, GatewayError> {
        Self::require(caller, Scope::DeliveriesRead)?;
        let not_found = || GatewayError::not_found("saga", &format!("{kind}/{key}"));
        let operator = self.operator(caller);
        // A tenant's key names its own sagas, with or without the tenant (a
        // saga whose tenant nothing recorded keeps its old key).
        let saga = match caller.tenant_filter() {
            Some(tenant) if !key.contains('/') => {
                match self.backends.store.load_saga(kind, &format!("{tenant}/{key}")).await? {
                    Some(saga) => saga,
                    None => self.backends.store.load_saga(kind, key).await?.ok_or_else(not_found)?,
                }
            }
            _ => match operator.saga(kind, key).await {
                Err(OperatorError::Store(StoreError::NotFound { .. })) => return Err(not_found()),
                other => other?,
            },
        };
        if !caller.sees(saga.tenant_id.as_deref()) {
            return Err(not_found());
        }
        Ok(saga)
    }

    // -- dead letters -------------------------------------------------------

    fn require_dead_letter_read(caller: &Caller) -> Result<(), GatewayError> {
        if caller.has(Scope::DeliveriesRead) || caller.has(Scope::DeadLettersReplay) {
            Ok(())
        } else {
            Err(GatewayError::Forbidden {
                scope: Scope::DeliveriesRead,
            })
        }
    }

    /// Dead letters of the caller's tenant matching `filter`.
    pub async fn dead_letters(
        &self,
        caller: &Caller,
        mut filter: DeadLetterFilter,
    ) -> Result<Vec<DeadLetterRecord>, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        filter.tenant_id = caller.tenant_filter();
        Ok(self.operator(caller).dead_letters(&filter).await?)
    }

    /// Dead letters grouped by cause, consumer and type, largest group first.
    pub async fn dead_letter_groups(
        &self,
        caller: &Caller,
        filter: DeadLetterFilter,
    ) -> Result<Vec<FailureGroup>, GatewayError> {
        let records = self.dead_letters(caller, filter).await?;
        Ok(group_failures(&records))
    }

    /// One dead letter with its original message.
    pub async fn dead_letter(&self, caller: &Caller, id: &str) -> Result<DeadLetterDetail, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        let record = self.visible_dead_letter(caller, id).await?;
        let (envelope, body_text) = match serde_json::from_slice::<Value>(&record.body) {
            Ok(value) => (Some(value), None),
            Err(_) => (None, Some(String::from_utf8_lossy(&record.body).into_owned())),
        };
        Ok(DeadLetterDetail {
            record,
            envelope,
            body_text,
        })
    }

    async fn visible_dead_letter(&self, caller: &Caller, id: &str) -> Result<DeadLetterRecord, GatewayError> {
        let tenant = caller.tenant_filter();
        Ok(self.operator(caller).dead_letter_of(id, tenant.as_deref()).await?)
    }

    /// Replaying an approval or a rejection decides on a release again: it
    /// needs `releases:approve` for the environment the replayed payload
    /// names, as sending one does.
    fn require_decision_right(
        caller: &Caller,
        record: &DeadLetterRecord,
        edited_payload: Option<&Value>,
    ) -> Result<(), GatewayError> {
        if !matches!(record.message_type.as_deref(), Some("ApproveRelease" | "RejectRelease")) {
            return Ok(());
        }
        let original = bosun_contracts::Envelope::from_slice(&record.body).ok();
        let payload = edited_payload.or(original.as_ref().map(|envelope| &envelope.payload));
        let environment = payload
            .and_then(|payload| payload.get("environment"))
            .and_then(Value::as_str);
        if caller.may_approve(environment) {
            Ok(())
        } else {
            Err(GatewayError::Forbidden {
                scope: Scope::ReleasesApprove,
            })
        }
    }

    /// Replays one dead letter, its payload replaced by `edited_payload`
    /// when given.
    pub async fn replay(
        &self,
        caller: &Caller,
        id: &str,
        edited_payload: Option<&Value>,
    ) -> Result<ReplayDone, GatewayError> {
        Self::require(caller, Scope::DeadLettersReplay)?;
        let record = self.visible_dead_letter(caller, id).await?;
        Self::require_decision_right(caller, &record, edited_payload)?;
        let replay = self
            .operator(caller)
            .replay_with(&record.id.to_string(), edited_payload)
            .await?;
        tracing::info!(
            key_id = %caller.key_id,
            dead_letter = %record.id,
            correlation_id = record.correlation_id.as_deref().unwrap_or(""),
            edited = edited_payload.is_some(),
            "dead letter replayed"
        );
        Ok(ReplayDone {
            replay,
            dead_letter_id: record.id,
            edited: edited_payload.is_some(),
        })
    }

    /// Starts replaying many dead letters in the background; follow it with
    /// [`Gateway::replay_job`].
    pub async fn start_bulk_replay(
        &self,
        caller: &Caller,
        request: BulkReplayRequest,
    ) -> Result<ReplayJob, GatewayError> {
        Self::require(caller, Scope::DeadLettersReplay)?;
        if let Some(rate) = request.rate
            && !(rate > 0.0 && rate.is_finite())
        {
            return Err(GatewayError::Invalid {
                field: Some("rate".into()),
                message: "rate must be a positive number of replays per second".into(),
            });
        }
        let ids: Vec<Uuid> = match (&request.filter, request.ids.is_empty()) {
            (Some(filter), true) => {
                let filter = DeadLetterFilter {
                    include_replayed: false,
                    limit: Some(MAX_BULK_REPLAY),
                    ..filter.clone()
                };
                let records = self.dead_letters(caller, filter).await?;
                for record in &records {
                    Self::require_decision_right(caller, record, None)?;
                }
                records.iter().map(|r| r.id).collect()
            }
            (None, false) => {
                let mut ids = Vec::new();
                for id in &request.ids {
                    let record = self.visible_dead_letter(caller, &id.to_string()).await?;
                    Self::require_decision_right(caller, &record, None)?;
                    ids.push(record.id);
                }
                ids
            }
            _ => {
                return Err(GatewayError::Invalid {
                    field: Some("ids".into()),
                    message: "give either `ids` (a non-empty list) or `filter`".into(),
                });
            }
        };
        if ids.len() > MAX_BULK_REPLAY {
            return Err(GatewayError::Invalid {
                field: Some("ids".into()),
                message: format!("at most {MAX_BULK_REPLAY} dead letters per bulk replay"),
            });
        }
        let job = ReplayJob {
            id: Uuid::now_v7(),
            status: if ids.is_empty() { "finished" } else { "running" }.to_owned(),
            total: ids.len(),
            done: 0,
            replayed: Vec::new(),
            failed: Vec::new(),
            rate: request.rate,
            by: caller.identity(),
            tenant_id: caller.tenant_id.clone(),
            started_at: OffsetDateTime::now_utc(),
            finished_at: ids.is_empty().then(OffsetDateTime::now_utc),
        };
        self.lock_jobs().insert(job.id, job.clone());
        if ids.is_empty() {
            return Ok(job);
        }
        let operator = self.operator(caller);
        let jobs = Arc::clone(&self.jobs);
        let job_id = job.id;
        let rate = request.rate;
        tracing::info!(key_id = %caller.key_id, job = %job_id, total = ids.len(), ?rate, "bulk replay started");
        tokio::spawn(async move {
            let update = |f: &mut dyn FnMut(&mut ReplayJob)| {
                let mut guard = jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(job) = guard.get_mut(&job_id) {
                    f(job);
                }
            };
            operator
                .replay_many(&ids, rate, |done, _, id, result| {
                    update(&mut |job| {
                        job.done = done;
                        match result {
                            Ok(_) => job.replayed.push(*id),
                            Err(error) => job.failed.push(FailedReplay {
                                id: *id,
                                error: error.clone(),
                            }),
                        }
                    });
                })
                .await;
            update(&mut |job| {
                job.status = "finished".into();
                job.finished_at = Some(OffsetDateTime::now_utc());
            });
            tracing::info!(job = %job_id, "bulk replay finished");
        });
        Ok(job)
    }

    /// A bulk replay's progress.
    pub fn replay_job(&self, caller: &Caller, id: &str) -> Result<ReplayJob, GatewayError> {
        Self::require_dead_letter_read(caller)?;
        let job = Uuid::parse_str(id)
            .ok()
            .and_then(|id| self.lock_jobs().get(&id).cloned())
            .filter(|job| caller.tenant_id == ALL_TENANTS || job.tenant_id == caller.tenant_id);
        job.ok_or_else(|| GatewayError::not_found("replay", id))
    }

    fn lock_jobs(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, ReplayJob>> {
        self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Deletes a dead letter (admin only).
    pub async fn purge(&self, caller: &Caller, id: &str) -> Result<Uuid, GatewayError> {
        Self::require(caller, Scope::Admin)?;
        let record = self.visible_dead_letter(caller, id).await?;
        let purged = self.operator(caller).purge(&record.id.to_string()).await?;
        tracing::info!(key_id = %caller.key_id, dead_letter = %purged, "dead letter purged");
        Ok(purged)
    }

    // -- health -------------------------------------------------------------

    /// Whether the transport, the store and its schema answer, and the
    /// process is not draining.
    pub async fn readiness(&self) -> Readiness {
        let mut checks = BTreeMap::new();
        let draining = self.draining.is_cancelled();
        let entity = crate::ports::transport::Topology::from_routing()
            .receive_entities()
            .into_iter()
            .next();
        let transport = match entity {
            Some(entity) => match self.backends.transport.depth(&entity).await {
                Ok(_) => Ok(()),
                Err(err) => Err(err.to_string()),
            },
            None => Ok(()),
        };
        let store = self
            .backends
            .store
            .outbox_backlog()
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        let schema = self.backends.store.check_schema().await.map_err(|e| e.to_string());
        let mut ready = !draining;
        for (name, result) in [("transport", transport), ("store", store), ("schema", schema)] {
            ready &= result.is_ok();
            checks.insert(name, json!(result.err().unwrap_or_else(|| "ok".to_owned())));
        }
        checks.insert("draining", json!(draining));
        Readiness { ready, checks }
    }

    /// The backends (for metrics).
    pub fn backends(&self) -> &Backends {
        &self.backends
    }
}

/// Groups dead letters by (reason, consumer, type), largest group first.
pub fn group_failures(records: &[DeadLetterRecord]) -> Vec<FailureGroup> {
    let mut groups: Vec<FailureGroup> = Vec::new();
    for record in records.iter().filter(|r| r.status == DeadLetterStatus::Dead) {
        let found = groups.iter_mut().find(|g| {
            g.reason == record.reason && g.consumer == record.consumer && g.message_type == record.message_type
        });
        match found {
            Some(group) => {
                group.count += 1;
                group.ids.push(record.id);
                if record.dead_lettered_at < group.first_at {
                    group.first_at = record.dead_lettered_at;
                }
                if record.dead_lettered_at > group.last_at {
                    group.last_at = record.dead_lettered_at;
                    group.description = record.description.clone();
                }
            }
            None => groups.push(FailureGroup {
                reason: record.reason.clone(),
                consumer: record.consumer.clone(),
                message_type: record.message_type.clone(),
                count: 1,
                first_at: record.dead_lettered_at,
                last_at: record.dead_lettered_at,
                description: record.description.clone(),
                ids: vec![record.id],
            }),
        }
    }
    groups.sort_by(|a, b| b.count.cmp(&a.count).then(b.last_at.cmp(&a.last_at)));
    groups
}

/// SHA-256 over what makes two command requests the same request: type,
/// tenant, delivery and the payload with its object keys sorted.
fn request_hash(message_type: &str, tenant: &str, correlation_id: Option<Uuid>, payload: &Value) -> String {
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

fn canonical(value: &Value) -> Value {
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
fn derived_uuid(parts: &[&str]) -> Uuid {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_hash_ignores_key_order_but_not_values() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": "s"}});
        let b = json!({"a": {"x": "s", "y": [1, 2]}, "b": 1});
        let c = json!({"a": {"x": "s", "y": [2, 1]}, "b": 1});
        assert_eq!(request_hash("T", "t", None, &a), request_hash("T", "t", None, &b));
        assert_ne!(request_hash("T", "t", None, &a), request_hash("T", "t", None, &c));
        assert_ne!(request_hash("T", "t", None, &a), request_hash("T", "u", None, &a));
        assert_ne!(request_hash("T", "t", None, &a), request_hash("U", "t", None, &a));
        assert_eq!(derived_uuid(&["m", "t", "k"]), derived_uuid(&["m", "t", "k"]));
        assert_ne!(derived_uuid(&["m", "t", "k"]), derived_uuid(&["m", "t", "k2"]));
    }

    #[test]
    fn errors_carry_status_code_and_field() {
        let err = GatewayError::from(ContractError::InvalidField {
            field: "payload.branch".into(),
            reason: "missing".into(),
        });
        assert_eq!(err.status(), 422);
        assert_eq!(err.to_json()["error"]["field"], "payload.branch");
        assert_eq!(GatewayError::Forbidden { scope: Scope::Admin }.status(), 403);
        assert_eq!(GatewayError::from(StoreError::unavailable("x", "y")).status(), 503);
    }
}
