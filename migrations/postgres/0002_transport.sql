-- bosun schema version 2: the PostgreSQL transport (queues, the events topic's
-- subscriptions, messages with peek-locks, duplicate detection).
-- Applied by `bosun migrate` inside one transaction; never edit a migration
-- that has shipped: add a new one.

CREATE TABLE bosun_queues (
    name text PRIMARY KEY
);

CREATE TABLE bosun_subscriptions (
    topic text NOT NULL,
    name text NOT NULL,
    -- The subscription's filter: the message types it lets through.
    event_types text[] NOT NULL,
    PRIMARY KEY (topic, name)
);

-- One row per message per entity (a queue or a subscription; a send to the
-- topic writes one row per matching subscription). A row is locked by a
-- receive (lock_token, locked_until); an expired lock makes it receivable
-- again. Dead-lettered rows stay, with dead_lettered set: the entity's
-- dead-letter sub-queue.
CREATE TABLE bosun_messages (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entity text NOT NULL,
    broker_message_id text NOT NULL,
    message_type text,
    correlation_id text,
    body bytea NOT NULL,
    enqueued_at timestamptz NOT NULL,
    visible_at timestamptz NOT NULL,
    delivery_count integer NOT NULL DEFAULT 0,
    lock_token uuid,
    locked_until timestamptz,
    dead_lettered boolean NOT NULL DEFAULT false,
    dead_letter_reason text,
    dead_letter_description text,
    dead_lettered_at timestamptz
);
CREATE INDEX bosun_messages_ready ON bosun_messages (entity, sequence) WHERE NOT dead_lettered;
CREATE INDEX bosun_messages_dead ON bosun_messages (entity, sequence) WHERE dead_lettered;

-- Broker message ids seen per destination, for duplicate detection.
CREATE TABLE bosun_duplicates (
    destination text NOT NULL,
    broker_message_id text NOT NULL,
    seen_at timestamptz NOT NULL,
    PRIMARY KEY (destination, broker_message_id)
);
CREATE INDEX bosun_duplicates_seen ON bosun_duplicates (seen_at);

-- Wakes receivers: one notification per entity that got a message it can
-- deliver now, sent when the inserting transaction commits. Scheduled
-- messages are found by the receivers' fallback poll.
CREATE FUNCTION bosun_notify_messages() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('bosun_messages', entity)
    FROM (SELECT DISTINCT entity FROM inserted WHERE visible_at <= now()) AS ready;
    RETURN NULL;
END;
$$;

CREATE TRIGGER bosun_messages_notify
    AFTER INSERT ON bosun_messages
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION bosun_notify_messages();
