-- bosun schema version 15: each tenant's release policy document, one row
-- per version (1, then +1 per change), only ever inserted: the rows are the
-- audit trail of who changed a tenant's policy, when and why. A version is
-- stored only over the one its writer read (the primary key refuses a
-- second version N of a tenant), retention never prunes them, and the
-- trigger refuses an update or a delete. And who an API key acts for
-- (`bosun keys create --sponsor`), which approval policies keep from
-- approving what the key requested. Compatible: a new table and a nullable
-- column, which the previous release never reads (its keys have no sponsor). Applied by `bosun migrate` inside one
-- transaction; never edit a migration that has shipped: add a new one.

CREATE TABLE bosun_release_policies (
    tenant_id text NOT NULL,
    version bigint NOT NULL CHECK (version >= 1),
    document jsonb NOT NULL,
    changed_by text NOT NULL,
    changed_at timestamptz NOT NULL,
    reason text,
    PRIMARY KEY (tenant_id, version)
);

CREATE FUNCTION bosun_release_policies_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'release policy versions are append-only: store a new version instead of changing or deleting one';
END;
$$;

CREATE TRIGGER bosun_release_policies_append_only
    BEFORE UPDATE OR DELETE ON bosun_release_policies
    FOR EACH ROW EXECUTE FUNCTION bosun_release_policies_append_only();

ALTER TABLE bosun_api_keys ADD COLUMN sponsor text;
