-- bosun schema version 8: the trace of each delivery. The first command's
-- producer span context is kept with the delivery, so a command that joins
-- the delivery later (an approval, a follow-up commit) without a trace of
-- its own continues the delivery's trace, and `deliveries show` names it.
-- Applied by `bosun migrate` inside one transaction; never edit a migration
-- that has shipped: add a new one.

ALTER TABLE bosun_deliveries ADD COLUMN traceparent text, ADD COLUMN tracestate text;
