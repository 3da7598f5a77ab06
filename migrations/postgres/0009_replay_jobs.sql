-- bosun schema version 9: bulk replay jobs, stored. A job keeps what was
-- asked (filter or ids, rate, who asked), its progress, the runner holding
-- it by a lease, and who paused, resumed or cancelled it; each dead letter
-- of the job is an item with the replay id it is sent under, fixed when the
-- job is made, so a job resumed after its process died replays nothing
-- twice. Applied by `bosun migrate` inside one transaction; never edit a
-- migration that has shipped: add a new one.

CREATE TABLE bosun_replay_jobs (
    id uuid PRIMARY KEY,
    tenant_id text NOT NULL,
    requested_by text NOT NULL,
    source text NOT NULL,
    principal text NOT NULL,
    request jsonb NOT NULL,
    rate double precision,
    status text NOT NULL,
    total bigint NOT NULL,
    replayed bigint NOT NULL,
    failed bigint NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    finished_at timestamptz,
    lease_owner text,
    lease_until timestamptz,
    controls jsonb NOT NULL
);
CREATE INDEX bosun_replay_jobs_runnable ON bosun_replay_jobs (status, created_at);
CREATE INDEX bosun_replay_jobs_tenant ON bosun_replay_jobs (tenant_id, created_at);
-- Retention deletes ended jobs by when they ended.
CREATE INDEX bosun_replay_jobs_ended ON bosun_replay_jobs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE bosun_replay_job_items (
    job_id uuid NOT NULL REFERENCES bosun_replay_jobs (id) ON DELETE CASCADE,
    position integer NOT NULL,
    dead_letter_id uuid NOT NULL,
    replay_id uuid NOT NULL,
    state text NOT NULL,
    error text,
    at timestamptz,
    PRIMARY KEY (job_id, position)
);
