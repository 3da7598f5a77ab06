-- bosun schema version 7: the commit of a handled message is one statement,
-- and no transaction of the hot path sends NOTIFY.
-- Applied by `bosun migrate` inside one transaction; never edit a migration
-- that has shipped: add a new one.
--
-- PostgreSQL serialises the commits of every transaction that notified, on
-- one lock held until its commit record is flushed: with a NOTIFY in each
-- commit, handlers that commit at once wait for each other's WAL flush
-- instead of sharing one. Wake-ups are therefore sent by each process after
-- its commits, batched, by one asynchronous-commit transaction (a lost
-- wake-up only delays a receiver until its fallback poll).
DROP TRIGGER bosun_messages_notify ON bosun_messages;
DROP FUNCTION bosun_notify_messages();

-- Everything a handled message's commit writes, in one call (one round
-- trip, one transaction, one WAL flush):
-- 1. with the PostgreSQL transport (`p_sequence` given), deletes the
--    received message while its lock is held: else 'lock_lost', nothing
--    written;
-- 2. writes the idempotency record: if it was there, 'already_handled' (the
--    message stays deleted, nothing else written);
-- 3. writes the saga, version checked, and its history row: on a version
--    mismatch it raises SQLSTATE BS409 with the stored version as detail, so
--    the whole statement, the delete included, is undone and the message
--    stays locked;
-- 4. writes the handled message's timeline lines;
-- 5. records each outgoing message in the outbox; with `p_enqueue`, also
--    writes it into its queue or the matching subscriptions (duplicate
--    detection on destination and broker message id), records it as
--    dispatched (unless its destination does not exist, which the
--    dispatcher then reports) and writes its `sent`
--    line (after the handled message's lines) when it was written and has
--    one.
-- Returns the outcome and the entities that got a message visible now, for
-- the caller's wake-up after commit.
CREATE FUNCTION bosun_commit(
    p_sequence bigint, p_token uuid, p_enqueue boolean, p_consumer text, p_message_id text, p_message_type text,
    p_saga_kind text, p_saga_key text, p_saga_expected bigint, p_saga_state jsonb, p_saga_tenant text,
    o_path text[], o_kind text[], o_name text[], o_subscription text[], o_broker_id text[], o_type text[],
    o_correlation text[], o_body bytea[], o_scheduled timestamptz[],
    s_correlation text[], s_message_id text[], s_type text[], s_attempt bigint[], s_detail text[], s_at timestamptz,
    t_correlation text[], t_message_id text[], t_type text[], t_consumer text[], t_status text[],
    t_attempt bigint[], t_at timestamptz[], t_detail text[]
) RETURNS TABLE (outcome text, woken text[]) LANGUAGE plpgsql AS $$
DECLARE
    v_woken text[] := '{}';
    v_entities text[];
    v_known boolean;
    v_dispatched boolean;
    v_found bigint;
BEGIN
    IF p_sequence IS NOT NULL THEN
        DELETE FROM bosun_messages
        WHERE sequence = p_sequence AND lock_token = p_token AND locked_until > now() AND NOT dead_lettered;
        IF NOT FOUND THEN
            RETURN QUERY SELECT 'lock_lost'::text, v_woken;
            RETURN;
        END IF;
    END IF;

    INSERT INTO bosun_handled (consumer, message_id, handled_at) VALUES (p_consumer, p_message_id, now())
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'already_handled'::text, v_woken;
        RETURN;
    END IF;

    IF p_saga_kind IS NOT NULL THEN
        IF p_saga_expected = 0 THEN
            INSERT INTO bosun_sagas (kind, key, version, state, created_at, updated_at, tenant_id)
            VALUES (p_saga_kind, p_saga_key, 1, p_saga_state, now(), now(), p_saga_tenant)
            ON CONFLICT DO NOTHING;
        ELSE
            -- The tenant is kept from the first save (one made before
            -- tenants were kept takes the next one's).
            UPDATE bosun_sagas SET version = p_saga_expected + 1, state = p_saga_state, updated_at = now(),
                tenant_id = coalesce(tenant_id, p_saga_tenant)
            WHERE kind = p_saga_kind AND key = p_saga_key AND version = p_saga_expected;
        END IF;
        IF NOT FOUND THEN
            SELECT version INTO v_found FROM bosun_sagas WHERE kind = p_saga_kind AND key = p_saga_key;
            RAISE EXCEPTION 'saga %/% is at version %, not %', p_saga_kind, p_saga_key, coalesce(v_found, 0),
                p_saga_expected
                USING ERRCODE = 'BS409', DETAIL = coalesce(v_found, 0)::text;
        END IF;
        INSERT INTO bosun_saga_history (kind, key, version, message_id, message_type, at)
        VALUES (p_saga_kind, p_saga_key, p_saga_expected + 1, p_message_id, p_message_type, now());
    END IF;

    INSERT INTO bosun_timeline (correlation_id, message_id, message_type, consumer, status, attempt, at, detail)
    SELECT * FROM unnest(t_correlation, t_message_id, t_type, t_consumer, t_status, t_attempt, t_at, t_detail);

    FOR i IN 1 .. coalesce(array_length(o_path, 1), 0) LOOP
        v_known := p_enqueue AND CASE o_kind[i]
            WHEN 'queue' THEN EXISTS (SELECT 1 FROM bosun_queues WHERE name = o_name[i])
            WHEN 'topic' THEN EXISTS (SELECT 1 FROM bosun_subscriptions WHERE topic = o_name[i])
            ELSE EXISTS (SELECT 1 FROM bosun_subscriptions WHERE topic = o_name[i] AND name = o_subscription[i])
        END;
        v_dispatched := v_known;
        IF v_known THEN
            INSERT INTO bosun_duplicates (destination, broker_message_id, seen_at) VALUES (o_path[i], o_broker_id[i], now())
            ON CONFLICT (destination, broker_message_id) DO UPDATE SET seen_at = excluded.seen_at
                WHERE bosun_duplicates.seen_at < now() - interval '7 days';
            IF FOUND THEN
                IF o_kind[i] = 'topic' THEN
                    WITH written AS (
                        INSERT INTO bosun_messages (entity, broker_message_id, message_type, correlation_id, body,
                                                    enqueued_at, visible_at)
                        SELECT s.topic || '/subscriptions/' || s.name, o_broker_id[i], o_type[i], o_correlation[i],
                               o_body[i], now(), coalesce(o_scheduled[i], now())
                        FROM bosun_subscriptions AS s WHERE s.topic = o_name[i] AND o_type[i] = ANY (s.event_types)
                        ORDER BY s.name
                        RETURNING entity, visible_at
                    )
                    SELECT array_agg(entity) FILTER (WHERE visible_at <= now()) INTO v_entities FROM written;
                ELSE
                    INSERT INTO bosun_messages (entity, broker_message_id, message_type, correlation_id, body,
                                                enqueued_at, visible_at)
                    VALUES (o_path[i], o_broker_id[i], o_type[i], o_correlation[i], o_body[i], now(),
                            coalesce(o_scheduled[i], now()))
                    RETURNING CASE WHEN visible_at <= now() THEN ARRAY[entity] END INTO v_entities;
                END IF;
                v_woken := v_woken || coalesce(v_entities, '{}');
                IF s_correlation[i] IS NOT NULL THEN
                    INSERT INTO bosun_timeline (correlation_id, message_id, message_type, consumer, status, attempt,
                                                at, detail)
                    VALUES (s_correlation[i], s_message_id[i], s_type[i], NULL, 'sent', s_attempt[i], s_at,
                            s_detail[i]);
                END IF;
            END IF;
        END IF;
        INSERT INTO bosun_outbox (source_consumer, source_message_id, destination, broker_message_id, message_type,
                                  correlation_id, body, scheduled_at, dispatched_at, purpose)
        VALUES (p_consumer, p_message_id, o_path[i], o_broker_id[i], o_type[i], o_correlation[i], o_body[i],
                o_scheduled[i], CASE WHEN v_dispatched THEN now() END, 'emitted');
    END LOOP;

    RETURN QUERY SELECT 'written'::text, v_woken;
END;
$$;
