-- bosun schema version 1: the stores (idempotency, sagas, outbox, attempts,
-- dead letters, delivery timeline).
-- Applied by `bosun migrate` inside one transaction; never edit a migration
-- that has shipped: add a new one.

CREATE TABLE bosun_handled (
    consumer text NOT NULL,
    message_id text NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

CREATE TABLE bosun_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source_consumer text,
    source_message_id text,
    destination text NOT NULL,
    broker_message_id text NOT NULL,
    message_type text,
    correlation_id text,
    body bytea NOT NULL,
    scheduled_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    claimed_until timestamptz,
    dispatched_at timestamptz
);
CREATE INDEX bosun_outbox_pending ON bosun_outbox (id) WHERE dispatched_at IS NULL;
CREATE INDEX bosun_outbox_correlation ON bosun_outbox (correlation_id, id);

CREATE TABLE bosun_sagas (
    kind text NOT NULL,
    key text NOT NULL,
    version bigint NOT NULL,
    state jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (kind, key)
);
CREATE INDEX bosun_sagas_updated ON bosun_sagas (updated_at DESC);

CREATE TABLE bosun_saga_history (
    kind text NOT NULL,
    key text NOT NULL,
    version bigint NOT NULL,
    message_id text NOT NULL,
    message_type text NOT NULL,
    at timestamptz NOT NULL,
    PRIMARY KEY (kind, key, version)
);

CREATE TABLE bosun_attempts (
    consumer text NOT NULL,
    received_broker_message_id text NOT NULL,
    message_id text NOT NULL,
    attempt bigint NOT NULL,
    at timestamptz NOT NULL,
    error_chain jsonb NOT NULL,
    PRIMARY KEY (consumer, received_broker_message_id)
);
CREATE INDEX bosun_attempts_message ON bosun_attempts (consumer, message_id, at);

CREATE TABLE bosun_dead_letters (
    id uuid PRIMARY KEY,
    consumer text,
    entity text NOT NULL,
    transport_sequence bigint,
    broker_message_id text NOT NULL,
    message_id text,
    message_type text,
    correlation_id text,
    tenant_id text,
    body bytea NOT NULL,
    reason text NOT NULL,
    description text NOT NULL,
    error_chain jsonb NOT NULL,
    attempts jsonb NOT NULL,
    dead_lettered_at timestamptz NOT NULL,
    origin text NOT NULL,
    replays jsonb NOT NULL DEFAULT '[]'
);
-- One record per transport message (a redelivered dead-lettering is ignored).
CREATE UNIQUE INDEX bosun_dead_letters_transport ON bosun_dead_letters (entity, transport_sequence);
CREATE INDEX bosun_dead_letters_recent ON bosun_dead_letters (dead_lettered_at DESC, id DESC);

CREATE TABLE bosun_timeline (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    correlation_id text NOT NULL,
    message_id text NOT NULL,
    message_type text NOT NULL,
    consumer text,
    status text NOT NULL,
    attempt bigint NOT NULL,
    at timestamptz NOT NULL,
    detail text
);
CREATE INDEX bosun_timeline_correlation ON bosun_timeline (correlation_id, id);
