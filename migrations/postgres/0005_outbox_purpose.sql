-- bosun schema version 5: an outbox entry says what it is for, in data.
-- `sent`: a command sent on its own (`bosun send`, the HTTP API, the MCP
-- server); `emitted`: a message a consumer emitted while handling one;
-- `retry`: the scheduled copy of a message whose handling failed (already
-- on the timeline as retry-scheduled). Applied by `bosun migrate` inside one
-- transaction; never edit a migration that has shipped: add a new one.

ALTER TABLE bosun_outbox ADD COLUMN purpose text;

-- Rows written before the purpose was stored: derived from the conventions
-- of the time (a retry's broker message id ends `.retry-<n>`; a command
-- sent on its own has no source consumer), so nothing changes for them.
UPDATE bosun_outbox SET purpose = CASE
    WHEN broker_message_id LIKE '%.retry-%' THEN 'retry'
    WHEN source_consumer IS NULL THEN 'sent'
    ELSE 'emitted'
END;

ALTER TABLE bosun_outbox ALTER COLUMN purpose SET NOT NULL;
ALTER TABLE bosun_outbox ADD CONSTRAINT bosun_outbox_purpose CHECK (purpose IN ('sent', 'emitted', 'retry'));
