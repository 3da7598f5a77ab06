-- bosun schema version 10: a receive's claim walks one index in delivery
-- order and stops at its limit, whatever the table's statistics say.
-- Applied by `bosun migrate` inside one transaction; never edit a migration
-- that has shipped: add a new one. (Building the index holds writes to
-- bosun_messages for as long as it takes: a queue table is usually small.)
--
-- Before: `ORDER BY sequence` over `(entity, sequence)`. The primary key
-- gives that order too, so the planner could walk it and filter out every
-- other entity's row (a claim on an empty queue behind 100,000 messages of
-- another one read all of them), and on a table whose statistics were
-- taken while it was small (a burst after a quiet spell, until autoanalyze
-- runs) it fetched every ready row of the entity and sorted them. Both cost
-- as much as the backlog.
--
-- Now: messages are delivered in the order they became visible (then by
-- sequence), an order only `bosun_messages_claim` gives, and the claim runs
-- with sorting disabled, so no plan but the ordered walk of that index is
-- left: the cost is that of the rows claimed. (Disabling a node makes the
-- plan's estimated cost huge, which would have PostgreSQL JIT-compile the
-- claim on every call, a third of a second each: JIT is off for it too.)
DROP INDEX bosun_messages_ready;
CREATE INDEX bosun_messages_claim ON bosun_messages (entity, visible_at, sequence) WHERE NOT dead_lettered;

-- Claims up to `p_limit` ready messages of `p_entity` for `p_lock_ms`
-- milliseconds under `p_token`: those delivered `p_max_delivery` times
-- already go to the dead-letter sub-queue instead (only the claimed rows
-- are checked). With `p_consumer`, each row says whether that consumer's
-- idempotency record of the envelope id (the broker id up to its first
-- `.`: `<id>`, `<id>.retry-N`, `<id>.replay-<uuid>`) exists. The claim
-- commits without waiting for its WAL flush (`synchronous_commit` off for
-- this transaction only): a claim lost to a crash is only a redelivery,
-- and the commit that settles the message flushes the WAL past it anyway.
-- Rows come in delivery order.
CREATE FUNCTION bosun_claim(
    p_entity text, p_max_delivery integer, p_limit bigint, p_token uuid, p_lock_ms bigint, p_consumer text
) RETURNS TABLE (
    r_sequence bigint, r_broker_message_id text, r_message_type text, r_body bytea, r_delivery_count integer,
    r_enqueued_at timestamptz, r_locked_until timestamptz, r_handled boolean
) LANGUAGE plpgsql SET enable_sort = off SET jit = off AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    WITH candidates AS MATERIALIZED (
        SELECT m.sequence, m.delivery_count, m.visible_at FROM bosun_messages AS m
        WHERE m.entity = p_entity AND NOT m.dead_lettered AND m.visible_at <= now()
          AND (m.locked_until IS NULL OR m.locked_until <= now())
        ORDER BY m.visible_at, m.sequence
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), exhausted AS (
        UPDATE bosun_messages AS m SET dead_lettered = true, dead_letter_reason = 'MaxDeliveryCountExceeded',
            dead_letter_description = 'message was delivered ' || m.delivery_count || ' times without being completed',
            dead_lettered_at = now(), lock_token = NULL, locked_until = NULL
        FROM candidates AS c
        WHERE m.sequence = c.sequence AND c.delivery_count >= p_max_delivery
        RETURNING m.sequence
    ), claimed AS (
        UPDATE bosun_messages AS m
        SET delivery_count = m.delivery_count + 1, lock_token = p_token,
            locked_until = now() + p_lock_ms * interval '1 millisecond'
        FROM candidates AS c
        WHERE m.sequence = c.sequence AND c.delivery_count < p_max_delivery
        RETURNING m.sequence, m.broker_message_id, m.message_type, m.body, m.delivery_count, m.enqueued_at,
                  m.locked_until, c.visible_at
    )
    SELECT c.sequence, c.broker_message_id, c.message_type, c.body, c.delivery_count, c.enqueued_at,
           c.locked_until,
           CASE WHEN p_consumer IS NULL THEN NULL ELSE EXISTS (
               SELECT 1 FROM bosun_handled AS h
               WHERE h.consumer = p_consumer AND h.message_id = split_part(c.broker_message_id, '.', 1)
           ) END
    FROM claimed AS c
    ORDER BY c.visible_at, c.sequence;
END;
$$;
