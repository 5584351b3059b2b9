package store

import "fmt"

// writerSQL is every statement of a write, for one schema.
type writerSQL struct {
	ids, messages, seqConflicts, idConflicts, edits, recalls, scrub, sessions, editPreview, recallPreview string
	memberAdd, memberRemove, memberRole, reads, deliveries, offsets, readOffsets                          string
}

// membershipEvents numbers each (session, user)'s membership events in the
// staged batch in seq order (k), so members are updated one step at a time.
const membershipEvents = `(
	SELECT s.session_id, u.user_id, s.seq, s.member_op, s.member_ids, s.kind, s.session_kind, s.sender_user_id,
	       row_number() OVER (PARTITION BY s.session_id, u.user_id ORDER BY s.seq) AS k
	FROM pg_temp.seqflow_stage s CROSS JOIN LATERAL unnest(s.member_ids) AS u(user_id)
	WHERE s.member_ids IS NOT NULL)`

// buildSQL returns the statements for schema q (already quoted). The
// careful path of a write (writeStaged) COPYs its rows into the staging
// table, then runs in one transaction: insert the message IDs and the
// messages, each ON CONFLICT DO NOTHING; only when some row was not
// inserted, take the conflicting rows out of the stage (seqConflicts,
// idConflicts) before anything else reads it. Both paths then run the
// projections: the targets of edits and recalls, sessions, members,
// cursors and offsets, reading what they need from the stage. Rows are
// inserted in key order (session IDs bytewise, as the fast path sorts
// them), so concurrent writers lock in the same order and cannot deadlock.
func buildSQL(q string) writerSQL {
	return writerSQL{
		ids: fmt.Sprintf(`INSERT INTO %[1]s.message_ids (msg_id, session_id, seq)
SELECT msg_id, session_id, seq FROM pg_temp.seqflow_stage ORDER BY msg_id
ON CONFLICT (msg_id) DO NOTHING`, q),

		messages: fmt.Sprintf(`INSERT INTO %[1]s.messages (session_id, seq, msg_id, client_msg_id, sender_user_id, sender_device_id,
       kind, content_type, body, target_seq, member_op, member_ids, session_kind, title, server_ts_ms, gateway_ts_ms,
       log_partition, log_offset, body_key_id)
SELECT session_id, seq, msg_id, client_msg_id, sender_user_id, sender_device_id,
       kind, content_type, body, target_seq, member_op, member_ids, session_kind, title, server_ts_ms, gateway_ts_ms,
       log_partition, log_offset, body_key_id
FROM pg_temp.seqflow_stage ORDER BY session_id COLLATE "C", seq
ON CONFLICT (session_id, seq) DO NOTHING`, q),

		// A staged row whose (session, seq) holds another message: its
		// message ID, if it was free, was just inserted for it; undo that.
		seqConflicts: fmt.Sprintf(`WITH c AS (
	DELETE FROM pg_temp.seqflow_stage s USING %[1]s.messages m
	WHERE m.session_id = s.session_id AND m.seq = s.seq AND m.msg_id <> s.msg_id
	RETURNING s.idx, s.session_id, s.seq, s.msg_id, m.msg_id AS held),
u AS (DELETE FROM %[1]s.message_ids x USING c WHERE x.msg_id = c.msg_id AND x.session_id = c.session_id AND x.seq = c.seq)
SELECT idx, held FROM c`, q),

		// A staged row whose message ID belongs to another (session, seq):
		// its message row, if the key was free, was just inserted; undo that.
		idConflicts: fmt.Sprintf(`WITH c AS (
	DELETE FROM pg_temp.seqflow_stage s USING %[1]s.message_ids x
	WHERE x.msg_id = s.msg_id AND (x.session_id <> s.session_id OR x.seq <> s.seq)
	RETURNING s.idx, s.session_id, s.seq, s.msg_id, x.session_id AS hs, x.seq AS hq),
u AS (DELETE FROM %[1]s.messages m USING c WHERE m.session_id = c.session_id AND m.seq = c.seq AND m.msg_id = c.msg_id RETURNING 1)
SELECT idx, hs, hq, (SELECT count(*) FROM u) FROM c`, q),

		// Only the target's sender may edit or recall it, and only a chat
		// message; the latest edit and the first recall win.
		edits: fmt.Sprintf(`UPDATE %[1]s.messages t
SET edited_content_type = e.content_type, edited_body = e.body, edited_body_key_id = e.body_key_id, edited_seq = e.seq
FROM (SELECT DISTINCT ON (s.session_id, s.target_seq) s.session_id, s.target_seq, s.seq, s.content_type, s.body, s.body_key_id
      FROM pg_temp.seqflow_stage s
      JOIN %[1]s.messages m ON m.session_id = s.session_id AND m.seq = s.target_seq
      WHERE s.kind = 'edit' AND m.kind = 'message' AND m.sender_user_id = s.sender_user_id
      ORDER BY s.session_id, s.target_seq, s.seq DESC) e
WHERE t.session_id = e.session_id AND t.seq = e.target_seq AND (t.edited_seq IS NULL OR t.edited_seq < e.seq)`, q),

		recalls: fmt.Sprintf(`UPDATE %[1]s.messages t SET recalled_seq = e.seq
FROM (SELECT DISTINCT ON (s.session_id, s.target_seq) s.session_id, s.target_seq, s.seq
      FROM pg_temp.seqflow_stage s
      JOIN %[1]s.messages m ON m.session_id = s.session_id AND m.seq = s.target_seq
      WHERE s.kind = 'recall' AND m.kind = 'message' AND m.sender_user_id = s.sender_user_id
      ORDER BY s.session_id, s.target_seq, s.seq) e
WHERE t.session_id = e.session_id AND t.seq = e.target_seq AND (t.recalled_seq IS NULL OR t.recalled_seq > e.seq)`, q),

		// A recalled message keeps no body: not its own, not its current
		// edit's, not those of the edit rows aimed at it (whoever sent
		// them), whichever came first in the log; a rebuild ends the same
		// (rebuild.Expected mirrors it).
		scrub: fmt.Sprintf(`WITH t AS (
	SELECT DISTINCT m.session_id, m.seq FROM pg_temp.seqflow_stage s
	JOIN %[1]s.messages m ON m.session_id = s.session_id AND m.seq = s.target_seq
	WHERE s.kind IN ('edit', 'recall') AND m.recalled_seq IS NOT NULL)
UPDATE %[1]s.messages x SET body = NULL, edited_body = NULL
FROM t
WHERE x.session_id = t.session_id AND (x.seq = t.seq OR (x.kind = 'edit' AND x.target_seq = t.seq))
  AND (x.body IS NOT NULL OR x.edited_body IS NOT NULL)`, q),

		// One row per session, aggregated by the writer (sessionsOf).
		sessions: fmt.Sprintf(`INSERT INTO %[1]s.sessions AS x
	(session_id, kind, title, created_seq, last_seq, last_msg_id, last_ts_ms, last_preview_seq, last_preview, member_version)
SELECT sid, kind, title, NULLIF(cs, 0), ls, lm, lt, NULLIF(ps, 0), pv, mv
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::text[], $10::bigint[])
     AS t(sid, kind, title, cs, ls, lm, lt, ps, pv, mv)
ORDER BY sid
ON CONFLICT (session_id) DO UPDATE SET
	kind = CASE WHEN EXCLUDED.created_seq < COALESCE(x.created_seq, 9223372036854775807) THEN EXCLUDED.kind ELSE x.kind END,
	title = CASE WHEN EXCLUDED.created_seq < COALESCE(x.created_seq, 9223372036854775807) THEN EXCLUDED.title ELSE x.title END,
	created_seq = LEAST(x.created_seq, EXCLUDED.created_seq),
	last_seq = GREATEST(x.last_seq, EXCLUDED.last_seq),
	last_msg_id = CASE WHEN EXCLUDED.last_seq > x.last_seq THEN EXCLUDED.last_msg_id ELSE x.last_msg_id END,
	last_ts_ms = CASE WHEN EXCLUDED.last_seq > x.last_seq THEN EXCLUDED.last_ts_ms ELSE x.last_ts_ms END,
	last_preview_seq = GREATEST(x.last_preview_seq, EXCLUDED.last_preview_seq),
	last_preview = CASE WHEN EXCLUDED.last_preview_seq > COALESCE(x.last_preview_seq, 0) THEN EXCLUDED.last_preview ELSE x.last_preview END,
	member_version = GREATEST(x.member_version, EXCLUDED.member_version)`, q),

		editPreview: fmt.Sprintf(`UPDATE %[1]s.sessions x SET last_preview = s.preview
FROM pg_temp.seqflow_stage s
JOIN %[1]s.messages m ON m.session_id = s.session_id AND m.seq = s.target_seq AND m.edited_seq = s.seq
WHERE s.kind = 'edit' AND x.session_id = s.session_id AND x.last_preview_seq = s.target_seq AND m.recalled_seq IS NULL`, q),

		recallPreview: fmt.Sprintf(`UPDATE %[1]s.sessions x SET last_preview = '[recalled]'
FROM pg_temp.seqflow_stage s
JOIN %[1]s.messages m ON m.session_id = s.session_id AND m.seq = s.target_seq AND m.recalled_seq = s.seq
WHERE s.kind = 'recall' AND x.session_id = s.session_id AND x.last_preview_seq = s.target_seq`, q),

		// A group's creator joins as its owner, everyone else as a member.
		memberAdd: fmt.Sprintf(`INSERT INTO %[1]s.session_members AS m (session_id, user_id, joined_seq, role, role_seq)
SELECT session_id, user_id, seq,
       CASE WHEN z.kind = 'session_create' AND z.session_kind IS DISTINCT FROM 'direct' AND z.user_id = z.sender_user_id
            THEN 'owner' ELSE 'member' END, seq
FROM %[2]s z WHERE z.k = $1 AND z.member_op = 'add'
ORDER BY session_id, user_id
ON CONFLICT (session_id, user_id) DO UPDATE SET joined_seq = EXCLUDED.joined_seq, left_seq = NULL,
	role = EXCLUDED.role, role_seq = EXCLUDED.role_seq
WHERE m.left_seq IS NOT NULL AND m.left_seq < EXCLUDED.joined_seq`, q, membershipEvents),

		memberRole: fmt.Sprintf(`UPDATE %[1]s.session_members m
SET role = CASE WHEN z.member_op = 'transfer' THEN CASE WHEN z.user_id = z.member_ids[1] THEN 'owner' ELSE 'admin' END
                ELSE substr(z.member_op, 6) END,
    role_seq = z.seq
FROM %[2]s z
WHERE z.k = $1 AND (z.member_op LIKE 'role:%%' OR z.member_op = 'transfer') AND m.session_id = z.session_id AND m.user_id = z.user_id
  AND m.left_seq IS NULL AND m.role_seq < z.seq`, q, membershipEvents),

		// A member who leaves (or is removed, or erased) loses their read
		// and delivery cursors of the session up to the seq they left at
		// (one above it can only be from after a rejoin, written by a
		// persister whose receipts ran ahead of its events); receipts of
		// a former member, or below a member's joined seq, are not stored
		// (reads, deliveries). So the cursors are the same whichever of
		// the two topics a rebuild or a lagging persister applies first.
		memberRemove: fmt.Sprintf(`WITH gone AS (
	UPDATE %[1]s.session_members m SET left_seq = z.seq
	FROM %[2]s z
	WHERE z.k = $1 AND z.member_op = 'remove' AND m.session_id = z.session_id AND m.user_id = z.user_id
	  AND m.left_seq IS NULL AND m.joined_seq < z.seq
	RETURNING m.session_id, m.user_id, m.left_seq
), reads AS (
	DELETE FROM %[1]s.read_cursors c USING gone g
	WHERE c.session_id = g.session_id AND c.user_id = g.user_id AND c.read_seq <= g.left_seq
)
DELETE FROM %[1]s.delivery_cursors c USING gone g
WHERE c.session_id = g.session_id AND c.user_id = g.user_id AND c.delivered_seq <= g.left_seq`, q, membershipEvents),

		reads: fmt.Sprintf(`INSERT INTO %[1]s.read_cursors AS c (session_id, user_id, read_seq)
SELECT r.session_id, r.user_id, r.seq FROM unnest($1::text[], $2::text[], $3::bigint[]) AS r(session_id, user_id, seq)
WHERE NOT EXISTS (SELECT 1 FROM %[1]s.session_members m WHERE m.session_id = r.session_id AND m.user_id = r.user_id
	AND (m.left_seq IS NOT NULL OR r.seq < m.joined_seq))
ON CONFLICT (session_id, user_id) DO UPDATE SET read_seq = EXCLUDED.read_seq, updated_at = now()
WHERE c.read_seq < EXCLUDED.read_seq`, q),

		deliveries: fmt.Sprintf(`INSERT INTO %[1]s.delivery_cursors AS c (session_id, user_id, device_id, delivered_seq)
SELECT r.session_id, r.user_id, r.device_id, r.seq FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS r(session_id, user_id, device_id, seq)
WHERE NOT EXISTS (SELECT 1 FROM %[1]s.session_members m WHERE m.session_id = r.session_id AND m.user_id = r.user_id
	AND (m.left_seq IS NOT NULL OR r.seq < m.joined_seq))
ON CONFLICT (session_id, user_id, device_id) DO UPDATE SET delivered_seq = EXCLUDED.delivered_seq, updated_at = now()
WHERE c.delivered_seq < EXCLUDED.delivered_seq`, q),

		offsets: fmt.Sprintf(`INSERT INTO %[1]s.store_offsets AS o (topic, partition, next_offset)
SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[])
ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()
WHERE o.next_offset < EXCLUDED.next_offset`, q),

		readOffsets: readOffsetsSQL(q),
	}
}

// readOffsetsSQL reads schema q's stored offsets of a topic ($1).
func readOffsetsSQL(q string) string {
	return fmt.Sprintf(`SELECT partition, next_offset FROM %s.store_offsets WHERE topic = $1`, q)
}
