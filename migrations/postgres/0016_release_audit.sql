-- bosun schema version 16: each tenant's release audit log, one row per
-- decision (who requested, approved, refused, overrode, promoted or
-- deployed what, when, through which door and why), only ever inserted.
-- The key is the tenant and the entry's id (the id of the message that
-- carried the decision), so recording a decision again stores nothing;
-- `sequence` numbers a tenant's entries 1, 2, 3 ... in the order they were
-- appended (an append holds a transaction-scoped advisory lock on its
-- tenant while it reads the last sequence and inserts, so appends to one
-- tenant commit in sequence order and a reader paging by sequence misses
-- nothing). Retention never prunes the log, and the trigger refuses an
-- update or a delete. Compatible: a new table, which the previous release
-- never reads. Applied by `bosun migrate` inside one transaction; never
-- edit a migration that has shipped: add a new one.

CREATE TABLE bosun_release_audit (
    tenant_id text NOT NULL,
    sequence bigint NOT NULL CHECK (sequence >= 1),
    id text NOT NULL,
    at timestamptz NOT NULL,
    action text NOT NULL,
    release_id text,
    environment text,
    by text,
    door text,
    reason text,
    detail jsonb NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, sequence)
);

CREATE INDEX bosun_release_audit_at ON bosun_release_audit (tenant_id, at);
CREATE INDEX bosun_release_audit_release ON bosun_release_audit (tenant_id, release_id, sequence);

CREATE FUNCTION bosun_release_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'release audit entries are append-only: they are never changed or deleted';
END;
$$;

CREATE TRIGGER bosun_release_audit_append_only
    BEFORE UPDATE OR DELETE ON bosun_release_audit
    FOR EACH ROW EXECUTE FUNCTION bosun_release_audit_append_only();
