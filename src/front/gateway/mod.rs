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

mod commands;
mod consumers;
mod dead_letters;
mod environments;
mod error;
pub mod jobs;
mod policies;
mod reads;
mod views;

pub use commands::CommandRouting;
pub use environments::{
    CurrentRelease, EnvironmentView, ModuleView, RollbackAccepted, RollbackAsk, RollbackPlanView, VerifiedView,
};
pub use error::{ErrorBody, ErrorDetail, GatewayError, Outage};
pub use policies::AuditPage;
pub use views::*;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bosun_contracts::{ContractError, MessageKind, MessageSpec};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use bosun_consumers::delivery::blob::sha256_hex;

use crate::front::access::{self, ALL_TENANTS, Caller, Refusal, Scope, decision_scope};
use crate::front::ops::{self, Readiness};
use crate::operator::{Delivery, Operator, OperatorError, PreparedCommand, SendOptions};
use crate::ports::store::{
    AccessStore, DeadLetterFilter, DeadLetterRecord, IdempotencyClaim, ReplayRecord, SagaRecord, StoreError,
    TimelineEntry, TimelineWait,
};
use crate::runtime::receiving::Receiving;
use crate::wiring::Backends;

/// How long a request may hold an `Idempotency-Key` before another request
/// with the same key takes it over (its process is presumed dead).
const IDEMPOTENCY_STALE_AFTER: Duration = Duration::from_secs(60);
/// How long a request waits for a concurrent request with the same key.
const IDEMPOTENCY_WAIT: Duration = Duration::from_secs(10);
/// How often a key's last use is recorded: a busy key costs one write a
/// minute, not one a request.
const LAST_USED_RESOLUTION: time::Duration = time::Duration::minutes(1);
/// The most dead letters one bulk replay takes.
const MAX_BULK_REPLAY: usize = 10_000;

/// The front door over one set of backends.
#[derive(Clone)]
pub struct Gateway {
    backends: Backends,
    access: Arc<dyn AccessStore>,
    /// Wakes this process's replay job runner when a job is started or
    /// resumed here.
    wake_runner: Arc<tokio::sync::Notify>,
    /// Readiness checks over the backends, with their last answers.
    health: ops::Health,
}

impl Gateway {
    /// A gateway over `backends`; `draining` is cancelled when the process
    /// starts to shut down (readiness turns false).
    pub fn new(backends: Backends, draining: CancellationToken) -> Self {
        Self {
            access: Arc::clone(&backends.access),
            health: ops::Health::new(backends.clone(), draining.clone()),
            backends,
            wake_runner: Arc::default(),
        }
    }

    fn operator(&self, caller: &Caller) -> Operator {
        self.backends
            .operator(&caller.identity())
            .acting_as(caller.identity(), format!("api:{}", caller.key_id))
            .approving_as(caller.principal())
            .answering_to(caller.identities())
    }

    fn require(caller: &Caller, scope: Scope) -> Result<(), GatewayError> {
        if caller.has(scope) {
            Ok(())
        } else {
            Err(GatewayError::Forbidden { scope })
        }
    }

    /// Checks a presented key (the text after `Bearer `): its secret, and
    /// that it is neither revoked nor expired. Records when it was last
    /// used (at most once a minute per key).
    pub async fn authenticate(&self, presented: &str) -> Result<Caller, GatewayError> {
        let (id, secret) = access::parse_key(presented).map_err(|_| GatewayError::Unauthorized(Refusal::Malformed))?;
        let record = self
            .access
            .api_key(id)
            .await?
            .ok_or(GatewayError::Unauthorized(Refusal::Invalid))?;
        let now = OffsetDateTime::now_utc();
        let caller = access::verify(&record, secret, now).map_err(GatewayError::Unauthorized)?;
        if record
            .last_used_at
            .is_none_or(|last| now - last >= LAST_USED_RESOLUTION)
            && let Err(err) = self.access.touch_api_key(&record.id, now).await
        {
            // The request goes on: when a key was last used is a record for
            // people, not a condition of access.
            tracing::warn!(key_id = %record.id, error = %err, "cannot record when the API key was last used");
        }
        Ok(caller)
    }

    /// Checks again, before an effect of long-running work it started (a
    /// replay job's next replay, a stdio MCP session's next call), that
    /// `caller`'s key still holds: not revoked, not expired, not removed.
    /// Returns the key's rights as they are now.
    pub async fn recheck(&self, caller: &Caller) -> Result<Caller, GatewayError> {
        let record = self
            .access
            .api_key(&caller.key_id)
            .await?
            .ok_or(GatewayError::Unauthorized(Refusal::Invalid))?;
        access::check(&record, OffsetDateTime::now_utc()).map_err(GatewayError::Unauthorized)
    }

    // -- health -------------------------------------------------------------

    /// Whether the transport, the store and its schema answer, each of
    /// this process's consumers receives (`receiving`), and the process is
    /// not draining ([`ops::Health::readiness`]), within a second.
    pub async fn readiness(&self, receiving: &Receiving) -> Readiness {
        self.health.readiness(receiving).await
    }

    /// The health checks over the backends (for metrics).
    pub fn health(&self) -> &ops::Health {
        &self.health
    }

    /// The backends.
    pub fn backends(&self) -> &Backends {
        &self.backends
    }
}
#[cfg(test)]
mod tests;
