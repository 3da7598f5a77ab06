-- bosun schema version 18: operators' live control. The log of consumer
-- pauses and resumes, one row
-- per operator action (who paused or resumed which consumer, when, through
-- which door and why), only ever inserted; what is paused now is each
-- consumer's latest row, which every replica reads every few seconds.
-- Retention never prunes it. And acknowledged failure groups, one row per
-- (scope: a tenant or `*`, fingerprint), replaced by a new acknowledgement. Compatible: a new table, which the previous
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

CREATE TABLE bosun_failure_group_acks (
    scope text NOT NULL,
    fingerprint text NOT NULL,
    by text NOT NULL,
    door text NOT NULL,
    note text,
    at timestamptz NOT NULL,
    PRIMARY KEY (scope, fingerprint)
);
