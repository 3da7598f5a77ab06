-- bosun schema version 14: the fleet. Every `bosun serve` and `bosun api`
-- process on this database says so when it starts and every 30 s after
-- (`seen_at`), with the release it runs, the schema it was built for and
-- the message wire versions it writes and reads, and removes its row when it
-- stops; `bosun fleet` lists the processes seen lately, so an operator
-- knows when every process of an older release is gone (and
-- `BOSUN_COMPAT_VERSION` or a contract step can follow). Compatible (the
-- first migration inside the window): a new table, which the previous
-- release never reads; its processes are simply not listed. Applied by
-- `bosun migrate` inside one transaction; never edit a migration that has
-- shipped: add a new one.

CREATE TABLE bosun_processes (
    id uuid PRIMARY KEY,
    role text NOT NULL,
    release text NOT NULL,
    built_for_schema bigint NOT NULL,
    writes_wire integer NOT NULL,
    reads_wire_from integer NOT NULL,
    reads_wire_to integer NOT NULL,
    host text NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at timestamptz NOT NULL
);
CREATE INDEX bosun_processes_seen ON bosun_processes (seen_at);
