-- bosun schema version 3: the front door (deliveries, API keys, HTTP
-- idempotency keys) and the tenant of each saga.
-- Applied by `bosun migrate` inside one transaction; never edit a migration
-- that has shipped: add a new one.

-- The tenant that started the saga (kept from its first save; none for
-- sagas saved before version 3).
ALTER TABLE bosun_sagas ADD COLUMN tenant_id text;

CREATE INDEX bosun_dead_letters_tenant ON bosun_dead_letters (tenant_id, dead_lettered_at DESC, id DESC);

-- How each delivery started: the first command of a correlation id.
CREATE TABLE bosun_deliveries (
    correlation_id text PRIMARY KEY,
    -- Tie-breaker for deliveries started at the same instant: insertion order.
    seq bigint GENERATED ALWAYS AS IDENTITY,
    tenant_id text NOT NULL,
    started_by text NOT NULL,
    message_type text NOT NULL,
    message_id text NOT NULL,
    started_at timestamptz NOT NULL
);
CREATE INDEX bosun_deliveries_recent ON bosun_deliveries (started_at DESC, seq DESC);
CREATE INDEX bosun_deliveries_tenant ON bosun_deliveries (tenant_id, started_at DESC, seq DESC);

-- API keys: only a hash of the secret.
CREATE TABLE bosun_api_keys (
    id text PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    tenant_id text NOT NULL,
    scopes jsonb NOT NULL,
    secret_hash text NOT NULL,
    description text,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);

-- Idempotency-Key of HTTP requests, per tenant. A row without status is in
-- progress (claim_id names the claim, so a stale claim is taken over once);
-- with status it holds the answer to replay.
CREATE TABLE bosun_http_idempotency (
    tenant_id text NOT NULL,
    key text NOT NULL,
    request_hash text NOT NULL,
    claim_id uuid NOT NULL,
    claimed_at timestamptz NOT NULL,
    status integer,
    response jsonb,
    completed_at timestamptz,
    PRIMARY KEY (tenant_id, key)
);
