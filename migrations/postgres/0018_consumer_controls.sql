-- bosun schema version 18: the log of consumer pauses and resumes, one row
-- per operator action (who paused or resumed which consumer, when, through
-- which door and why), only ever inserted; what is paused now is each
-- consumer's latest row, which every replica reads every few seconds.
-- Retention never prunes it. Compatible: a new table, which the previous
-- release never reads. Applied by `bosun migrate` inside one transaction;
-- never edit a migration that has shipped: add a new one.

CREATE TABLE bosun_consumer_controls (
    sequence bigserial PRIMARY KEY,
    consumer text NOT NULL,
    action text NOT NULL CHECK (action IN ('pause', 'resume')),
    by text NOT NULL,
    door text NOT NULL,
    reason text,
    at timestamptz NOT NULL
);

CREATE INDEX bosun_consumer_controls_latest ON bosun_consumer_controls (consumer, sequence DESC);
