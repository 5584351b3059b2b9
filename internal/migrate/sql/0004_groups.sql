-- Group governance in the store (internal/groups decides it; the persister
-- projects it): each current member's role, and each session's member
-- version, the seq of its latest membership or governance event, which
-- `changes` returns so a client knows when to sync its member list.

-- role: owner, admin or member; role_seq: the seq of the event that set
-- it (the projection applies an event only when it is newer).
ALTER TABLE session_members ADD COLUMN role text NOT NULL DEFAULT 'member';
ALTER TABLE session_members ADD COLUMN role_seq bigint NOT NULL DEFAULT 0;

ALTER TABLE sessions ADD COLUMN member_version bigint NOT NULL DEFAULT 0;

-- "Membership and governance events of session S after seq V" (member
-- sync) without scanning the session's chat messages.
CREATE INDEX messages_member_events ON messages (session_id, seq)
    WHERE kind IN ('session_create', 'membership', 'group');

-- Groups created before roles existed: their creator owns them.
UPDATE session_members m SET role = 'owner', role_seq = c.seq
FROM messages c
WHERE c.kind = 'session_create' AND c.session_kind IS DISTINCT FROM 'direct'
  AND c.session_id = m.session_id AND c.sender_user_id = m.user_id AND m.joined_seq = c.seq;

UPDATE sessions s SET member_version = v.seq
FROM (SELECT session_id, max(seq) AS seq FROM messages
      WHERE kind IN ('session_create', 'membership', 'group') GROUP BY session_id) v
WHERE v.session_id = s.session_id;
