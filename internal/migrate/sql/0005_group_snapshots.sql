-- Group state snapshots (internal/groups): the sequencer that owns a
-- partition of im.sequenced.v1 writes, now and then, the state of the
-- groups whose state changed, with the offset it holds for. A new owner of
-- the partition (and a pusher rebuilding membership) loads the snapshot
-- and reads only the log from next_offset, instead of the partition's
-- whole history. Derived data: deleting these rows only makes the next
-- restore read the whole partition.

-- group_snapshots: per topic partition, the offset the stored states hold
-- up to (every event before next_offset applied, none after).
CREATE TABLE group_snapshots (
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    next_offset bigint      NOT NULL,
    sessions    integer     NOT NULL,
    taken_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);

-- group_snapshot_sessions: one governed session's state
-- (seqflow.im.v1.GroupState, protobuf).
CREATE TABLE group_snapshot_sessions (
    topic      text    NOT NULL,
    partition  integer NOT NULL,
    session_id text    NOT NULL,
    state      bytea   NOT NULL,
    PRIMARY KEY (topic, partition, session_id)
);
