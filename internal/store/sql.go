package store

import "fmt"

// writerSQL is every statement of a write, for one schema.
type writerSQL struct {
	stage, ids, messages, edits, recalls, sessions, editPreview, recallPreview string
	memberAdd, memberRemove, reads, deliveries, offsets, classify, readOffsets string
}

// membershipEvents numbers each (session, user)'s membership events in the
// staged batch in seq order (k), so members are updated one step at a time.
const membershipEvents = `(
	SELECT s.session_id, u.user_id, s.seq, s.member_op,
	       row_number() OVER (PARTITION BY s.session_id, u.user_id ORDER BY s.seq) AS k
	FROM pg_temp.seqflow_stage s CROSS JOIN LATERAL unnest(s.member_ids) AS u(user_id)
	WHERE s.member_ids IS NOT NULL)`

// buildSQL returns the statements for schema q (already quoted). They run
// in this order in one implicit transaction: stage the rows; insert the
// message IDs, dropping from the stage the rows whose ID is taken; insert
// the messages, dropping (and un-inserting the IDs of) the rows whose
// (session, seq) is taken; then, from what is left, which is exactly what is
// new: targets of edits and recalls, sessions, members; then cursors and
// offsets. Rows are inserted in key order, so concurrent writers lock in the
// same order and cannot deadlock.
func buildSQL(q string) writerSQL {
	return writerSQL{
		stage: `INSERT INTO pg_temp.seqflow_stage
SELECT i, sid, seq, mid, cmid, su, sd, kind, ct, body, NULLIF(ts, 0), NULLIF(op, ''),
       CASE WHEN mem = '' THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(mem::jsonb)) END,
       CASE WHEN kind = 'session_create' THEN sk END, CASE WHEN kind = 'session_create' THEN title END,
       sts, gts, lp, lo, CASE WHEN kind IN ('message', 'edit') THEN pv END
FROM unnest($1::int[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[],
            $9::text[], $10::bytea[], $11::bigint[], $12::text[], $13::text[], $14::text[], $15::text[],
            $16::bigint[], $17::bigint[], $18::int[], $19::bigint[], $20::text[])
     AS t(i, sid, seq, mid, cmid, su, sd, kind, ct, body, ts, op, mem, sk, title, sts, gts, lp, lo, pv)`,

		ids: fmt.Sprintf(`WITH ids AS (
	INSERT INTO %[1]s.message_ids (msg_id, session_id, seq)
	SELECT msg_id, session_id, seq FROM pg_temp.seqflow_stage ORDER BY msg_id
	ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id)
DELETE FROM pg_temp.seqflow_stage s WHERE NOT EXISTS (SELECT 1 FROM ids WHERE ids.msg_id = s.msg_id)
RETURNING s.idx`, q),

		messages: fmt.Sprintf(`WITH ins AS (
	INSERT INTO %[1]s.messages (session_id, seq, msg_id, client_msg_id, sender_user_id, sender_device_id, kind,
	       content_type, body, target_seq, member_op, member_ids, session_kind, title, server_ts_ms, gateway_ts_ms,
	       log_partition, log_offset)
	SELECT session_id, seq, msg_id, client_msg_id, sender_user_id, sender_device_id, kind,
	       content_type, body, target_seq, member_op, member_ids, session_kind, title, server_ts_ms, gateway_ts_ms,
	       log_partition, log_offset
	FROM pg_temp.seqflow_stage ORDER BY session_id, seq
	ON CONFLICT (session_id, seq) DO NOTHING RETURNING session_id, seq),
gone AS (
	DELETE FROM pg_temp.seqflow_stage s
	WHERE NOT EXISTS (SELECT 1 FROM ins WHERE ins.session_id = s.session_id AND ins.seq = s.seq)
	RETURNING s.idx, s.msg_id),
undo AS (DELETE FROM %[1]s.message_ids x USING gone WHERE x.msg_id = gone.msg_id)
SELECT idx FROM gone`, q),

		// Only the target's sender may edit or recall it, and only a chat
		// message; the latest edit and the first recall win.
		edits: fmt.Sprintf(`UPDATE %[1]s.messages t
SET edited_content_type = e.content_type, edited_body = e.body, edited_seq = e.seq
FROM (SELECT DISTINCT ON (s.session_id, s.target_seq) s.session_id, s.target_seq, s.seq, s.content_type, s.body
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

		sessions: fmt.Sprintf(`INSERT INTO %[1]s.sessions AS x
	(session_id, kind, title, created_seq, last_seq, last_msg_id, last_ts_ms, last_preview_seq, last_preview)
SELECT l.session_id, COALESCE(c.session_kind, ''), COALESCE(c.title, ''), c.seq,
       l.seq, l.msg_id, l.server_ts_ms, p.seq, COALESCE(p.preview, '')
FROM (SELECT DISTINCT ON (session_id) session_id, seq, msg_id, server_ts_ms
      FROM pg_temp.seqflow_stage ORDER BY session_id, seq DESC) l
LEFT JOIN (SELECT DISTINCT ON (session_id) session_id, seq, preview
           FROM pg_temp.seqflow_stage WHERE kind = 'message' ORDER BY session_id, seq DESC) p USING (session_id)
LEFT JOIN (SELECT DISTINCT ON (session_id) session_id, seq, session_kind, title
           FROM pg_temp.seqflow_stage WHERE kind = 'session_create' ORDER BY session_id, seq) c USING (session_id)
ORDER BY l.session_id
ON CONFLICT (session_id) DO UPDATE SET
	kind = CASE WHEN EXCLUDED.created_seq < COALESCE(x.created_seq, 9223372036854775807) THEN EXCLUDED.kind ELSE x.kind END,
	title = CASE WHEN EXCLUDED.created_seq < COALESCE(x.created_seq, 9223372036854775807) THEN EXCLUDED.title ELSE x.title END,
	created_seq = LEAST(x.created_seq, EXCLUDED.created_seq),
	last_seq = GREATEST(x.last_seq, EXCLUDED.last_seq),
	last_msg_id = CASE WHEN EXCLUDED.last_seq > x.last_seq THEN EXCLUDED.last_msg_id ELSE x.last_msg_id END,
	last_ts_ms = CASE WHEN EXCLUDED.last_seq > x.last_seq THEN EXCLUDED.last_ts_ms ELSE x.last_ts_ms END,
	last_preview_seq = GREATEST(x.last_preview_seq, EXCLUDED.last_preview_seq),
	last_preview = CASE WHEN EXCLUDED.last_preview_seq > COALESCE(x.last_preview_seq, 0) THEN EXCLUDED.last_preview ELSE x.last_preview END`, q),

		editPreview: fmt.Sprintf(`UPDATE %[1]s.sessions x SET last_preview = s.preview
FROM pg_temp.seqflow_stage s
JOIN %[1]s.messages m ON m.session_id = s.session_id AND m.seq = s.target_seq AND m.edited_seq = s.seq
WHERE s.kind = 'edit' AND x.session_id = s.session_id AND x.last_preview_seq = s.target_seq AND m.recalled_seq IS NULL`, q),

		recallPreview: fmt.Sprintf(`UPDATE %[1]s.sessions x SET last_preview = '[recalled]'
FROM pg_temp.seqflow_stage s
JOIN %[1]s.messages m ON m.session_id = s.session_id AND m.seq = s.target_seq AND m.recalled_seq = s.seq
WHERE s.kind = 'recall' AND x.session_id = s.session_id AND x.last_preview_seq = s.target_seq`, q),

		memberAdd: fmt.Sprintf(`INSERT INTO %[1]s.session_members AS m (session_id, user_id, joined_seq)
SELECT session_id, user_id, seq FROM %[2]s z WHERE z.k = $1 AND z.member_op = 'add'
ORDER BY session_id, user_id
ON CONFLICT (session_id, user_id) DO UPDATE SET joined_seq = EXCLUDED.joined_seq, left_seq = NULL
WHERE m.left_seq IS NOT NULL AND m.left_seq < EXCLUDED.joined_seq`, q, membershipEvents),

		memberRemove: fmt.Sprintf(`UPDATE %[1]s.session_members m SET left_seq = z.seq
FROM %[2]s z
WHERE z.k = $1 AND z.member_op = 'remove' AND m.session_id = z.session_id AND m.user_id = z.user_id
  AND m.left_seq IS NULL AND m.joined_seq < z.seq`, q, membershipEvents),

		reads: fmt.Sprintf(`INSERT INTO %[1]s.read_cursors AS c (session_id, user_id, read_seq)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
ON CONFLICT (session_id, user_id) DO UPDATE SET read_seq = EXCLUDED.read_seq, updated_at = now()
WHERE c.read_seq < EXCLUDED.read_seq`, q),

		deliveries: fmt.Sprintf(`INSERT INTO %[1]s.delivery_cursors AS c (session_id, user_id, device_id, delivered_seq)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
ON CONFLICT (session_id, user_id, device_id) DO UPDATE SET delivered_seq = EXCLUDED.delivered_seq, updated_at = now()
WHERE c.delivered_seq < EXCLUDED.delivered_seq`, q),

		offsets: fmt.Sprintf(`INSERT INTO %[1]s.store_offsets AS o (topic, partition, next_offset)
SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[])
ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()
WHERE o.next_offset < EXCLUDED.next_offset`, q),

		classify: fmt.Sprintf(`SELECT r.i, m.msg_id, x.session_id, x.seq
FROM unnest($1::int[], $2::text[], $3::bigint[], $4::bigint[]) AS r(i, sid, seq, mid)
LEFT JOIN %[1]s.messages m ON m.session_id = r.sid AND m.seq = r.seq
LEFT JOIN %[1]s.message_ids x ON x.msg_id = r.mid`, q),

		readOffsets: fmt.Sprintf(`SELECT partition, next_offset FROM %[1]s.store_offsets WHERE topic = $1`, q),
	}
}
