//! What each store operation is doing, as its errors name it
//! ([`StoreError::doing`](super::StoreError::doing)): one function per
//! [`Store`](super::Store), [`AccessStore`](super::AccessStore),
//! [`PolicyStore`](super::PolicyStore) and [`AuditStore`](super::AuditStore) method,
//! written once for every backend.

use bosun_contracts::Destination;
use uuid::Uuid;

use super::{AcceptedCommand, ApiKeyRecord, AuditEntry, DeadLetterRecord, DeliveryRecord, HandledMessage};

/// [`Store::is_handled`](super::Store::is_handled).
pub(crate) fn is_handled(consumer: &str, message_id: &str) -> String {
    format!("checking whether {consumer} handled message {message_id}")
}

/// [`Store::commit_handled`](super::Store::commit_handled), and a
/// [`Commit`](crate::ports::settle::Commit) of the same message.
pub(crate) fn commit_handled(handled: &HandledMessage) -> String {
    format!(
        "committing the handling of message {} by {}",
        handled.message_id, handled.consumer
    )
}

/// [`Store::record_retry`](super::Store::record_retry).
pub(crate) fn record_retry(consumer: &str, message_id: &str) -> String {
    format!("recording a retry of message {message_id} at {consumer}")
}

/// [`Store::attempts`](super::Store::attempts).
pub(crate) fn attempts(consumer: &str, message_id: &str) -> String {
    format!("reading the attempts of message {message_id} at {consumer}")
}

/// [`Store::record_dead_letter`](super::Store::record_dead_letter).
pub(crate) fn record_dead_letter(record: &DeadLetterRecord) -> String {
    format!("recording dead letter {}", record.id)
}

/// [`Store::dead_letters`](super::Store::dead_letters).
pub(crate) fn dead_letters() -> &'static str {
    "listing dead letters"
}

/// [`Store::dead_letter`](super::Store::dead_letter).
pub(crate) fn dead_letter(id: &str) -> String {
    format!("looking up dead letter {id}")
}

/// [`Store::dead_letter_for`](super::Store::dead_letter_for).
pub(crate) fn dead_letter_for(entity: &Destination, sequence: i64) -> String {
    format!("looking up the dead letter of {entity} message {sequence}")
}

/// [`Store::record_replay`](super::Store::record_replay).
pub(crate) fn record_replay(id: Uuid) -> String {
    format!("recording a replay of dead letter {id}")
}

/// [`Store::purge_dead_letter`](super::Store::purge_dead_letter).
pub(crate) fn purge_dead_letter(id: Uuid) -> String {
    format!("purging dead letter {id}")
}

/// [`Store::enqueue_outbox`](super::Store::enqueue_outbox).
pub(crate) fn accept_command(accepted: &AcceptedCommand) -> String {
    format!(
        "accepting command {} of delivery {}",
        accepted.timeline.message_id, accepted.delivery.correlation_id
    )
}

/// [`Store::claim_outbox`](super::Store::claim_outbox).
pub(crate) fn claim_outbox() -> &'static str {
    "claiming outbox entries"
}

/// [`Store::mark_dispatched`](super::Store::mark_dispatched).
pub(crate) fn mark_dispatched(ids: &[i64]) -> String {
    format!("marking {} outbox entries sent", ids.len())
}

/// [`Store::outbox_backlog`](super::Store::outbox_backlog).
pub(crate) fn outbox_backlog() -> &'static str {
    "counting the outbox backlog"
}

/// [`Store::emitted`](super::Store::emitted).
pub(crate) fn emitted(correlation_id: &str) -> String {
    format!("reading the messages sent for delivery {correlation_id}")
}

/// [`Store::load_saga`](super::Store::load_saga).
pub(crate) fn load_saga(kind: &str, key: &str) -> String {
    format!("loading saga {kind}/{key}")
}

/// [`Store::list_sagas`](super::Store::list_sagas).
pub(crate) fn list_sagas() -> &'static str {
    "listing sagas"
}

/// [`Store::append_timeline`](super::Store::append_timeline).
pub(crate) fn append_timeline() -> &'static str {
    "appending to the timeline"
}

/// [`Store::timeline`](super::Store::timeline).
pub(crate) fn timeline(correlation_id: &str) -> String {
    format!("reading the timeline of delivery {correlation_id}")
}

/// [`Store::record_delivery`](super::Store::record_delivery).
pub(crate) fn record_delivery(record: &DeliveryRecord) -> String {
    format!("recording delivery {}", record.correlation_id)
}

/// [`Store::delivery_record`](super::Store::delivery_record).
pub(crate) fn delivery_record(correlation_id: &str) -> String {
    format!("reading delivery {correlation_id}")
}

/// [`Store::list_deliveries`](super::Store::list_deliveries).
pub(crate) fn list_deliveries() -> &'static str {
    "listing deliveries"
}

/// [`Store::deliveries_by_prefix`](super::Store::deliveries_by_prefix).
pub(crate) fn deliveries_by_prefix(prefix: &str) -> String {
    format!("looking up deliveries beginning {prefix}")
}

/// [`Store::prune`](super::Store::prune).
pub(crate) fn prune() -> &'static str {
    "pruning rows past their retention"
}

/// [`AccessStore::insert_api_key`](super::AccessStore::insert_api_key).
pub(crate) fn insert_api_key(key: &ApiKeyRecord) -> String {
    format!("storing API key {}", key.id)
}

/// [`AccessStore::api_key`](super::AccessStore::api_key).
pub(crate) fn api_key(id: &str) -> String {
    format!("reading API key {id}")
}

/// [`AccessStore::list_api_keys`](super::AccessStore::list_api_keys).
pub(crate) fn list_api_keys() -> &'static str {
    "listing API keys"
}

/// [`AccessStore::revoke_api_key`](super::AccessStore::revoke_api_key).
pub(crate) fn revoke_api_key(id: &str) -> String {
    format!("revoking API key {id}")
}

/// [`AccessStore::rotate_api_key`](super::AccessStore::rotate_api_key).
pub(crate) fn rotate_api_key(id: &str) -> String {
    format!("rotating API key {id}")
}

/// [`AccessStore::touch_api_key`](super::AccessStore::touch_api_key).
pub(crate) fn touch_api_key(id: &str) -> String {
    format!("recording when API key {id} was last used")
}

/// [`AccessStore::claim_idempotency`](super::AccessStore::claim_idempotency).
pub(crate) fn claim_idempotency(tenant_id: &str, key: &str) -> String {
    format!("claiming Idempotency-Key `{key}` of tenant {tenant_id}")
}

/// [`AccessStore::complete_idempotency`](super::AccessStore::complete_idempotency).
pub(crate) fn complete_idempotency(tenant_id: &str, key: &str) -> String {
    format!("completing Idempotency-Key `{key}` of tenant {tenant_id}")
}

/// [`AccessStore::release_idempotency`](super::AccessStore::release_idempotency).
pub(crate) fn release_idempotency(tenant_id: &str, key: &str) -> String {
    format!("releasing Idempotency-Key `{key}` of tenant {tenant_id}")
}

/// [`ReplayJobStore::create_replay_job`](super::ReplayJobStore::create_replay_job).
pub(crate) fn create_replay_job(id: Uuid) -> String {
    format!("storing replay job {id}")
}

/// [`ReplayJobStore::replay_job`](super::ReplayJobStore::replay_job) and
/// [`ReplayJobStore::replay_job_items`](super::ReplayJobStore::replay_job_items).
pub(crate) fn replay_job(id: Uuid) -> String {
    format!("reading replay job {id}")
}

/// [`ReplayJobStore::list_replay_jobs`](super::ReplayJobStore::list_replay_jobs).
pub(crate) fn list_replay_jobs() -> String {
    "listing replay jobs".to_owned()
}

/// [`ReplayJobStore::claim_replay_job`](super::ReplayJobStore::claim_replay_job).
pub(crate) fn claim_replay_job() -> String {
    "claiming a replay job to run".to_owned()
}

/// [`ReplayJobStore::renew_replay_job`](super::ReplayJobStore::renew_replay_job).
pub(crate) fn renew_replay_job(id: Uuid) -> String {
    format!("renewing the lease on replay job {id}")
}

/// [`ReplayJobStore::record_replay_item`](super::ReplayJobStore::record_replay_item).
pub(crate) fn record_replay_item(id: Uuid, position: u32) -> String {
    format!("recording item {position} of replay job {id}")
}

/// [`ReplayJobStore::release_replay_job`](super::ReplayJobStore::release_replay_job).
pub(crate) fn release_replay_job(id: Uuid) -> String {
    format!("releasing replay job {id}")
}

/// [`ReplayJobStore::control_replay_job`](super::ReplayJobStore::control_replay_job).
pub(crate) fn control_replay_job(id: Uuid) -> String {
    format!("changing the status of replay job {id}")
}

/// [`AdminStore::heartbeat`](super::AdminStore::heartbeat) and
/// [`AdminStore::leave_fleet`](super::AdminStore::leave_fleet).
pub(crate) const HEARTBEAT: &str = "recording this process in the fleet";

/// [`AdminStore::fleet`](super::AdminStore::fleet).
pub(crate) const FLEET: &str = "listing the fleet of processes";

/// [`PolicyStore::put_release_policy`](super::PolicyStore::put_release_policy).
pub(crate) fn put_release_policy(tenant_id: &str, expected: Option<u64>) -> String {
    match expected {
        Some(version) => format!("storing the release policy of tenant {tenant_id} over version {version}"),
        None => format!("storing the first release policy of tenant {tenant_id}"),
    }
}

/// [`PolicyStore::release_policy`](super::PolicyStore::release_policy).
pub(crate) fn release_policy(tenant_id: &str) -> String {
    format!("reading the release policy of tenant {tenant_id}")
}

/// [`PolicyStore::release_policy_history`](super::PolicyStore::release_policy_history).
pub(crate) fn release_policy_history(tenant_id: &str) -> String {
    format!("reading the release policy history of tenant {tenant_id}")
}

/// [`AuditStore::append_audit`](super::AuditStore::append_audit).
pub(crate) fn append_audit(entry: &AuditEntry) -> String {
    format!(
        "appending entry {} ({}) to the release audit of tenant {}",
        entry.id, entry.action, entry.tenant_id
    )
}

/// [`AuditStore::audit_entries`](super::AuditStore::audit_entries).
pub(crate) fn audit_entries(tenant_id: &str) -> String {
    format!("reading the release audit of tenant {tenant_id}")
}

/// [`ControlStore::record_control`](super::ControlStore::record_control).
pub(crate) fn record_control(consumer: &str, action: &str) -> String {
    format!("recording the {action} of consumer {consumer}")
}

/// [`ControlStore::latest_controls`](super::ControlStore::latest_controls)
/// and [`ControlStore::controls`](super::ControlStore::controls).
pub(crate) const CONTROLS: &str = "reading the consumers' pauses and resumes";

/// The [`ControlStore`](super::ControlStore)'s failure group acknowledgements.
pub(crate) const GROUP_ACKNOWLEDGEMENTS: &str = "reading or writing the acknowledgements of failure groups";
