//! The schema of `state.db` and its upgrades: the tables, the columns added
//! after their first release, and the data migrations numbered by
//! `PRAGMA user_version`.

use std::path::Path;
use std::time::Duration;

use rusqlite::TransactionBehavior;

use crate::ports::store::StoreError;

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS handled (
    consumer TEXT NOT NULL,
    message_id TEXT NOT NULL,
    handled_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, message_id)
);
-- Retention walks these by age (retention.rs).
CREATE INDEX IF NOT EXISTS handled_age ON handled (handled_at);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source_consumer TEXT,
    source_message_id TEXT,
    destination TEXT NOT NULL,
    broker_message_id TEXT NOT NULL,
    message_type TEXT,
    correlation_id TEXT,
    body BLOB NOT NULL,
    scheduled_at INTEGER,
    created_at INTEGER NOT NULL,
    claimed_until INTEGER,
    dispatched_at INTEGER,
    purpose TEXT NOT NULL DEFAULT 'emitted'
);
CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (dispatched_at, id);
CREATE TABLE IF NOT EXISTS sagas (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    tenant_id TEXT,
    PRIMARY KEY (kind, key)
);
CREATE INDEX IF NOT EXISTS sagas_age ON sagas (kind, updated_at);
CREATE TABLE IF NOT EXISTS saga_history (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    message_type TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (kind, key, version)
);
CREATE INDEX IF NOT EXISTS saga_history_age ON saga_history (at);
CREATE TABLE IF NOT EXISTS attempts (
    consumer TEXT NOT NULL,
    received_broker_message_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at INTEGER NOT NULL,
    error_chain TEXT NOT NULL,
    PRIMARY KEY (consumer, received_broker_message_id)
);
CREATE INDEX IF NOT EXISTS attempts_message ON attempts (consumer, message_id, at);
CREATE INDEX IF NOT EXISTS attempts_age ON attempts (at);
CREATE TABLE IF NOT EXISTS dead_letters (
    id TEXT PRIMARY KEY,
    consumer TEXT,
    entity TEXT NOT NULL,
    transport_sequence INTEGER,
    broker_message_id TEXT NOT NULL,
    message_id TEXT,
    message_type TEXT,
    correlation_id TEXT,
    tenant_id TEXT,
    body BLOB NOT NULL,
    reason TEXT NOT NULL,
    description TEXT NOT NULL,
    error_chain TEXT NOT NULL,
    attempts TEXT NOT NULL,
    dead_lettered_at INTEGER NOT NULL,
    origin TEXT NOT NULL,
    replays TEXT NOT NULL DEFAULT '[]'
);
CREATE UNIQUE INDEX IF NOT EXISTS dead_letters_transport ON dead_letters (entity, transport_sequence);
CREATE INDEX IF NOT EXISTS dead_letters_correlation ON dead_letters (correlation_id);
CREATE TABLE IF NOT EXISTS timeline (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    correlation_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    message_type TEXT NOT NULL,
    consumer TEXT,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at INTEGER NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS timeline_correlation ON timeline (correlation_id, id);
CREATE INDEX IF NOT EXISTS timeline_age ON timeline (at);
CREATE TABLE IF NOT EXISTS deliveries (
    correlation_id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    started_by TEXT NOT NULL,
    message_type TEXT NOT NULL,
    message_id TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    traceparent TEXT,
    tracestate TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_recent ON deliveries (started_at);
CREATE INDEX IF NOT EXISTS deliveries_tenant ON deliveries (tenant_id, started_at);
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    scopes TEXT NOT NULL,
    secret_hash TEXT NOT NULL,
    description TEXT,
    created_by TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER,
    expires_at INTEGER,
    last_used_at INTEGER,
    rotated_from TEXT,
    rotated_to TEXT,
    sponsor TEXT
);
CREATE TABLE IF NOT EXISTS http_idempotency (
    tenant_id TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    claim_id TEXT NOT NULL,
    claimed_at INTEGER NOT NULL,
    status INTEGER,
    response TEXT,
    completed_at INTEGER,
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX IF NOT EXISTS http_idempotency_age ON http_idempotency (claimed_at);
-- Bulk replay jobs (jobs.rs): what was asked, who asked, the progress and
-- the runner holding the job; each dead letter's item has the replay id it
-- is sent under, fixed when the job is made.
CREATE TABLE IF NOT EXISTS replay_jobs (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    source TEXT NOT NULL,
    principal TEXT NOT NULL,
    request TEXT NOT NULL,
    rate REAL,
    status TEXT NOT NULL,
    total INTEGER NOT NULL,
    replayed INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    finished_at INTEGER,
    lease_owner TEXT,
    lease_until INTEGER,
    controls TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS replay_jobs_runnable ON replay_jobs (status, created_at);
CREATE INDEX IF NOT EXISTS replay_jobs_tenant ON replay_jobs (tenant_id, created_at);
CREATE INDEX IF NOT EXISTS replay_jobs_ended ON replay_jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS replay_job_items (
    job_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    dead_letter_id TEXT NOT NULL,
    replay_id TEXT NOT NULL,
    state TEXT NOT NULL,
    error TEXT,
    at INTEGER,
    PRIMARY KEY (job_id, position)
);
-- Each tenant's release policy (policies.rs; see
-- migrations/postgres/0015_release_policies.sql): one row per version,
-- only ever inserted, the key the tenant and the version. Retention leaves
-- it alone, and the triggers refuse an update or a delete.
CREATE TABLE IF NOT EXISTS release_policies (
    tenant_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    document TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    changed_at INTEGER NOT NULL,
    reason TEXT,
    PRIMARY KEY (tenant_id, version)
);
CREATE TRIGGER IF NOT EXISTS release_policies_no_update BEFORE UPDATE ON release_policies
BEGIN SELECT RAISE(ABORT, 'release policy versions are append-only: store a new version'); END;
CREATE TRIGGER IF NOT EXISTS release_policies_no_delete BEFORE DELETE ON release_policies
BEGIN SELECT RAISE(ABORT, 'release policy versions are append-only: they are never deleted'); END;
-- Each tenant's release audit log (audit.rs; see
-- migrations/postgres/0016_release_audit.sql): one row per decision, only
-- ever inserted, the key the tenant and the entry's id, numbered per tenant
-- in the order appended. Retention leaves it alone, and the triggers refuse
-- an update or a delete.
CREATE TABLE IF NOT EXISTS release_audit (
    tenant_id TEXT NOT NULL,
    sequence INTEGER NOT NULL CHECK (sequence >= 1),
    id TEXT NOT NULL,
    at INTEGER NOT NULL,
    action TEXT NOT NULL,
    release_id TEXT,
    environment TEXT,
    by TEXT,
    door TEXT,
    reason TEXT,
    detail TEXT NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, sequence)
);
CREATE INDEX IF NOT EXISTS release_audit_at ON release_audit (tenant_id, at);
CREATE INDEX IF NOT EXISTS release_audit_release ON release_audit (tenant_id, release_id, sequence);
CREATE TRIGGER IF NOT EXISTS release_audit_no_update BEFORE UPDATE ON release_audit
BEGIN SELECT RAISE(ABORT, 'release audit entries are append-only: they are never changed'); END;
CREATE TRIGGER IF NOT EXISTS release_audit_no_delete BEFORE DELETE ON release_audit
BEGIN SELECT RAISE(ABORT, 'release audit entries are append-only: they are never deleted'); END;
-- Consumer pauses and resumes (as migrations/postgres/0018_consumer_controls.sql):
-- an append-only log; what is paused now is each consumer's latest row.
CREATE TABLE IF NOT EXISTS consumer_controls (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    action TEXT NOT NULL,
    by TEXT NOT NULL,
    door TEXT NOT NULL,
    reason TEXT,
    at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS consumer_controls_latest ON consumer_controls (consumer, sequence);
-- Acknowledged failure groups, one row per (scope, fingerprint).
CREATE TABLE IF NOT EXISTS failure_group_acks (
    scope TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    by TEXT NOT NULL,
    door TEXT NOT NULL,
    note TEXT,
    at INTEGER NOT NULL,
    PRIMARY KEY (scope, fingerprint)
);
";

/// Columns added to tables after their first release: state.db files made by
/// an older bosun get them when opened (`CREATE TABLE IF NOT EXISTS` leaves
/// an existing table alone).
pub(super) const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("sagas", "tenant_id", "TEXT"),
    // What an outbox entry is for (`OutboxPurpose`); set for older rows by
    // data migration 2.
    ("outbox", "purpose", "TEXT NOT NULL DEFAULT 'emitted'"),
    // The delivery's trace (see migrations/postgres/0008_delivery_trace.sql).
    ("deliveries", "traceparent", "TEXT"),
    ("deliveries", "tracestate", "TEXT"),
    // A key's lifecycle (see migrations/postgres/0013_key_lifecycle.sql).
    ("api_keys", "expires_at", "INTEGER"),
    ("api_keys", "last_used_at", "INTEGER"),
    ("api_keys", "rotated_from", "TEXT"),
    ("api_keys", "rotated_to", "TEXT"),
    // Who a key acts for (see migrations/postgres/0015_release_policies.sql).
    ("api_keys", "sponsor", "TEXT"),
];

/// Data migrations of `state.db`, numbered by `PRAGMA user_version` and
/// applied once each, in order, by [`super::SqliteStore::open`] (the same changes
/// as the PostgreSQL migrations of the same name).
pub(super) const DATA_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "tenant_keys",
        // The release saga is keyed by tenant and releaseId; see
        // migrations/postgres/0004_tenant_keys.sql.
        "UPDATE sagas SET tenant_id = (
         SELECT d.tenant_id FROM saga_history h
         JOIN timeline t ON t.message_id = h.message_id
         JOIN deliveries d ON d.correlation_id = t.correlation_id
         WHERE h.kind = sagas.kind AND h.key = sagas.key
         ORDER BY h.version LIMIT 1)
     WHERE tenant_id IS NULL;
     UPDATE saga_history SET key = (
         SELECT s.tenant_id || '/' || saga_history.key FROM sagas s
         WHERE s.kind = 'release' AND s.key = saga_history.key)
     WHERE kind = 'release' AND instr(key, '/') = 0 AND EXISTS (
         SELECT 1 FROM sagas s WHERE s.kind = 'release' AND s.key = saga_history.key AND s.tenant_id IS NOT NULL);
     UPDATE sagas SET key = tenant_id || '/' || key
     WHERE kind = 'release' AND tenant_id IS NOT NULL AND instr(key, '/') = 0;",
    ),
    (
        2,
        "outbox_purpose",
        // Rows written before the purpose was stored: derived from the
        // conventions of the time (a retry's broker message id ends
        // `.retry-<n>`; a command sent on its own has no source consumer);
        // see migrations/postgres/0005_outbox_purpose.sql.
        "UPDATE outbox SET purpose = CASE
             WHEN broker_message_id LIKE '%.retry-%' THEN 'retry'
             WHEN source_consumer IS NULL THEN 'sent'
             ELSE 'emitted' END;",
    ),
];

/// Adds the [`ADDED_COLUMNS`] a state.db made by an older bosun lacks and
/// applies the [`DATA_MIGRATIONS`] it has not had. In an immediate
/// transaction, so two processes opening the same old file do not both
/// upgrade it.
pub(super) fn upgrade(path: &Path) -> Result<(), StoreError> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for (table, column, definition) in ADDED_COLUMNS {
        let present = {
            let mut statement = tx.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
            let names = statement
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            names.iter().any(|name| name == column)
        };
        if !present {
            tracing::info!(table, column, "adding a column to the state database");
            tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {definition}"))?;
        }
    }
    let applied: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    for (version, name, sql) in DATA_MIGRATIONS.iter().filter(|(version, ..)| *version > applied) {
        tracing::info!(version, name, "migrating the state database");
        tx.execute_batch(sql)?;
        tx.execute_batch(&format!("PRAGMA user_version = {version}"))?;
    }
    tx.commit()?;
    Ok(())
}
