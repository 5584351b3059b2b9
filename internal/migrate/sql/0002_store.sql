-- Message store: the projection of im.sequenced.v1 (and im.receipts.v1) that
-- the persister writes and sync reads. Every table here can be rebuilt from
-- the log (seqflow replay); nothing in it is the source of truth.

-- messages holds one row per sequenced event of any kind. An edit or recall
-- is its own row and also updates its target's current state (edited_*,
-- recalled_seq) in the same transaction.
--
-- Partitioned by HASH (session_id): every read (sync's "after seq N of
-- session S", the membership and edit lookups) names one session, so it is
-- pruned to one partition and served by that partition's primary key; each
-- partition's indexes stay small enough to cache and vacuum on their own,
-- and writes of a batch spread over all of them. Time partitioning would
-- suit dropping old history, which an IM store does not do, and would force
-- every session's sync to probe every time partition.
CREATE TABLE messages (
    session_id          text    NOT NULL,
    seq                 bigint  NOT NULL CHECK (seq > 0),
    msg_id              bigint  NOT NULL,
    client_msg_id       text    NOT NULL,
    sender_user_id      text    NOT NULL,
    sender_device_id    text    NOT NULL,
    -- kind: message, session_create, membership, edit, recall.
    kind                text    NOT NULL,
    -- content_type and body: the message content; for an edit, the new content.
    content_type        text    NOT NULL DEFAULT '',
    body                bytea,
    -- target_seq: the message an edit or recall applies to.
    target_seq          bigint,
    -- member_op (add / remove) and member_ids: a membership change; a
    -- session_create lists its first members (the sender included) with op add.
    member_op           text,
    member_ids          text[],
    -- session_kind (direct / group) and title: a session_create.
    session_kind        text,
    title               text,
    server_ts_ms        bigint  NOT NULL,
    gateway_ts_ms       bigint  NOT NULL DEFAULT 0,
    -- Current state of a message: the latest edit by its sender, and the
    -- first recall by its sender.
    edited_content_type text,
    edited_body         bytea,
    edited_seq          bigint,
    recalled_seq        bigint,
    -- Where the event is in im.sequenced.v1, for audits.
    log_partition       integer NOT NULL,
    log_offset          bigint  NOT NULL,
    PRIMARY KEY (session_id, seq)
) PARTITION BY HASH (session_id);

DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format('CREATE TABLE messages_p%s PARTITION OF messages FOR VALUES WITH (MODULUS 16, REMAINDER %s)',
                       lpad(i::text, 2, '0'), i);
    END LOOP;
END $$;

-- message_ids makes msg_id unique across the store. A unique index on a
-- hash-partitioned table must contain the partition key, so it cannot say
-- "msg_id is unique" by itself; this narrow side table can, and it answers
-- "where is message M" in one probe. Snowflake IDs grow with time, so its
-- inserts land at the right edge of the B-tree.
CREATE TABLE message_ids (
    msg_id     bigint PRIMARY KEY,
    session_id text   NOT NULL,
    seq        bigint NOT NULL
);

-- sessions is one row per session: what it is and its latest event.
-- last_seq, last_msg_id and last_ts_ms describe the latest event of any kind
-- (what a client must sync up to); last_preview and last_preview_seq the
-- latest chat message (what a session list shows).
CREATE TABLE sessions (
    session_id       text   PRIMARY KEY,
    kind             text   NOT NULL DEFAULT '',
    title            text   NOT NULL DEFAULT '',
    created_seq      bigint,
    last_seq         bigint NOT NULL DEFAULT 0,
    last_msg_id      bigint,
    last_preview     text   NOT NULL DEFAULT '',
    last_preview_seq bigint,
    last_ts_ms       bigint
);

-- session_members: a member is current when left_seq IS NULL. Re-adding a
-- member who left sets joined_seq to the new seq and left_seq to NULL.
CREATE TABLE session_members (
    session_id text   NOT NULL,
    user_id    text   NOT NULL,
    joined_seq bigint NOT NULL,
    left_seq   bigint,
    PRIMARY KEY (session_id, user_id)
);
-- "Which sessions is user U in now" (the gateway's what-changed query).
CREATE INDEX session_members_user_current ON session_members (user_id, session_id) WHERE left_seq IS NULL;

-- Cursors fed by im.receipts.v1; they only move forward.
CREATE TABLE read_cursors (
    session_id text        NOT NULL,
    user_id    text        NOT NULL,
    read_seq   bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, user_id)
);

CREATE TABLE delivery_cursors (
    session_id    text        NOT NULL,
    user_id       text        NOT NULL,
    device_id     text        NOT NULL,
    delivered_seq bigint      NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, user_id, device_id)
);

-- store_offsets records, once the rows before it are committed, the next
-- offset of each topic partition this schema holds everything before. A
-- persister starting on a schema resumes from the lower of this and its
-- group's committed offset, so a schema built by replay (or restored from a
-- backup) continues exactly where it stopped.
CREATE TABLE store_offsets (
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    next_offset bigint      NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);

-- store_pointer, read in the persister's home schema (PERSISTER_SCHEMA),
-- names the schema that holds the live store. No row: the home schema
-- itself. `seqflow replay -switch` sets it and sends NOTIFY seqflow_store.
CREATE TABLE store_pointer (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    schema_name text        NOT NULL,
    switched_at timestamptz NOT NULL DEFAULT now()
);
