-- bosun schema version 6: retention. Rows past their retention are deleted
-- in small batches by age (`Store::prune`, `Transport::prune_duplicates`);
-- these indexes let each batch find its oldest rows without a scan.
-- Applied by `bosun migrate` inside one transaction; never edit a migration
-- that has shipped: add a new one.

CREATE INDEX bosun_handled_age ON bosun_handled (handled_at);
CREATE INDEX bosun_attempts_age ON bosun_attempts (at);
-- Sent entries only: unsent ones are never pruned.
CREATE INDEX bosun_outbox_sent_age ON bosun_outbox (dispatched_at) WHERE dispatched_at IS NOT NULL;
CREATE INDEX bosun_timeline_age ON bosun_timeline (at);
-- A delivery with a dead letter keeps its timeline while the dead letter exists.
CREATE INDEX bosun_dead_letters_correlation ON bosun_dead_letters (correlation_id);
CREATE INDEX bosun_sagas_age ON bosun_sagas (kind, updated_at);
