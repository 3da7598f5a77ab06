-- bosun schema version 17: retention walks two more tables by age, the
-- front door's `Idempotency-Key` records (by when they were claimed, kept
-- as long as consumers' idempotency records) and saga history (by its time,
-- kept as long as delivery timelines, whether the saga finishes or not; the
-- state itself is never pruned for age). An index on each time, so a
-- batch reads only what it deletes. Compatible: the previous release never
-- reads these indexes and writes the tables as before. Applied by
-- `bosun migrate` inside one transaction; never edit a migration that has
-- shipped: add a new one.

CREATE INDEX IF NOT EXISTS bosun_http_idempotency_claimed ON bosun_http_idempotency (claimed_at);
CREATE INDEX IF NOT EXISTS bosun_saga_history_at ON bosun_saga_history (at);
