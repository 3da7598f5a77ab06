-- bosun schema version 12: handled messages that settle at the same time
-- commit in one transaction.
-- Applied by `bosun migrate` inside one transaction; never edit a migration
-- that has shipped: add a new one.
--
-- Before: every handled message was its own `bosun_commit` call, so its own
-- round trip, its own bind of 34 parameters (most of them empty arrays),
-- its own transaction and commit record. Under load the server's CPU went
-- to that per-call overhead, not to the rows.
--
-- Now the commits waiting while others are in flight go in one call: each
-- message is one element of the `m_` arrays; its outgoing messages and its
-- timeline lines are consecutive elements of the `o_`/`s_` and `t_` arrays,
-- up to `m_outbox_end[i]` and `m_timeline_end[i]` (1-based, inclusive; the
-- previous message's end + 1 is where they start). Each message is exactly
-- what one `bosun_commit` call would have written, in the order given, so
-- a later message sees an earlier one's idempotency record (a duplicate in
-- the same batch is `already_handled`). A message with a saga is written
-- in a subtransaction: a version mismatch (BS409) rolls back that message
-- only and is returned as `saga_conflict` with the stored version, the
-- message staying locked. Any other error rolls the whole call back; the
-- caller then commits each message alone, so one message's failure is
-- never another's.
CREATE FUNCTION bosun_commit_many(
    p_enqueue boolean, m_sequence bigint[], m_token uuid[], m_consumer text[], m_message_id text[],
    m_message_type text[], m_saga_kind text[], m_saga_key text[], m_saga_expected bigint[], m_saga_state jsonb[],
    m_saga_tenant text[], m_outbox_end integer[], m_timeline_end integer[],
    o_path text[], o_kind text[], o_name text[], o_subscription text[], o_broker_id text[], o_type text[],
    o_correlation text[], o_body bytea[], o_scheduled timestamptz[],
    s_correlation text[], s_message_id text[], s_type text[], s_attempt bigint[], s_detail text[], s_at timestamptz,
    t_correlation text[], t_message_id text[], t_type text[], t_consumer text[], t_status text[],
    t_attempt bigint[], t_at timestamptz[], t_detail text[]
) RETURNS TABLE (outcome text, woken text[], found_version bigint) LANGUAGE plpgsql AS $$
DECLARE
    v_outcome text;
    v_woken text[];
    v_found bigint;
    v_detail text;
    o_from integer := 1;
    o_to integer;
    t_from integer := 1;
    t_to integer;
BEGIN
    FOR i IN 1 .. coalesce(array_length(m_sequence, 1), 0) LOOP
        o_to := m_outbox_end[i];
        t_to := m_timeline_end[i];
        v_found := NULL;
        IF m_saga_kind[i] IS NULL THEN
            SELECT c.outcome, c.woken INTO v_outcome, v_woken FROM bosun_commit(
                m_sequence[i], m_token[i], p_enqueue, m_consumer[i], m_message_id[i], m_message_type[i],
                NULL, NULL, NULL, NULL, NULL,
                o_path[o_from:o_to], o_kind[o_from:o_to], o_name[o_from:o_to], o_subscription[o_from:o_to],
                o_broker_id[o_from:o_to], o_type[o_from:o_to], o_correlation[o_from:o_to], o_body[o_from:o_to],
                o_scheduled[o_from:o_to], s_correlation[o_from:o_to], s_message_id[o_from:o_to],
                s_type[o_from:o_to], s_attempt[o_from:o_to], s_detail[o_from:o_to], s_at,
                t_correlation[t_from:t_to], t_message_id[t_from:t_to], t_type[t_from:t_to],
                t_consumer[t_from:t_to], t_status[t_from:t_to], t_attempt[t_from:t_to], t_at[t_from:t_to],
                t_detail[t_from:t_to]) AS c;
        ELSE
            BEGIN
                SELECT c.outcome, c.woken INTO v_outcome, v_woken FROM bosun_commit(
                    m_sequence[i], m_token[i], p_enqueue, m_consumer[i], m_message_id[i], m_message_type[i],
                    m_saga_kind[i], m_saga_key[i], m_saga_expected[i], m_saga_state[i], m_saga_tenant[i],
                    o_path[o_from:o_to], o_kind[o_from:o_to], o_name[o_from:o_to], o_subscription[o_from:o_to],
                    o_broker_id[o_from:o_to], o_type[o_from:o_to], o_correlation[o_from:o_to],
                    o_body[o_from:o_to], o_scheduled[o_from:o_to], s_correlation[o_from:o_to],
                    s_message_id[o_from:o_to], s_type[o_from:o_to], s_attempt[o_from:o_to],
                    s_detail[o_from:o_to], s_at,
                    t_correlation[t_from:t_to], t_message_id[t_from:t_to], t_type[t_from:t_to],
                    t_consumer[t_from:t_to], t_status[t_from:t_to], t_attempt[t_from:t_to], t_at[t_from:t_to],
                    t_detail[t_from:t_to]) AS c;
            EXCEPTION WHEN SQLSTATE 'BS409' THEN
                GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
                v_outcome := 'saga_conflict';
                v_woken := '{}';
                v_found := v_detail::bigint;
            END;
        END IF;
        outcome := v_outcome;
        woken := v_woken;
        found_version := v_found;
        RETURN NEXT;
        o_from := o_to + 1;
        t_from := t_to + 1;
    END LOOP;
END;
$$;
