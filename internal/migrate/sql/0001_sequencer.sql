-- Sequencer state: per-session seq segments and snowflake node leases.

-- session_seq holds, per session, the highest seq ever handed out to any
-- sequencer. A sequencer owns the range it renewed exclusively: renewing
-- bumps max_seq atomically, so no range is ever handed out twice.
CREATE TABLE session_seq (
    session_id text        PRIMARY KEY,
    max_seq    bigint      NOT NULL CHECK (max_seq >= 0),
    step       integer     NOT NULL CHECK (step > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- node_lease hands out snowflake node IDs (0..1023), one running instance
-- each. issued_until_ms is the holder's promise (its own clock) that it issues
-- no ID with a later timestamp; the next holder waits until its clock passes
-- it, so even a reused node ID never repeats an ID.
CREATE TABLE node_lease (
    node_id         integer     PRIMARY KEY CHECK (node_id BETWEEN 0 AND 1023),
    holder          text        NOT NULL DEFAULT '',
    expires_at      timestamptz NOT NULL DEFAULT '-infinity',
    issued_until_ms bigint      NOT NULL DEFAULT 0,
    acquired_at     timestamptz
);
INSERT INTO node_lease (node_id) SELECT generate_series(0, 1023);
