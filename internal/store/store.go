// Package store is seqflow's PostgreSQL message store: the projection of
// im.sequenced.v1 and im.receipts.v1 that the persister writes (Writer) and
// that sync, membership checks and "what changed" read (Store). Tables are
// created by internal/migrate (0002_store.sql) in a schema of their own
// choosing; a store_pointer row in the home schema names the live one.
package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Message is one event of a session in its current state: Body and
// ContentType are the latest edit's when EditedSeq > 0; a recalled message
// (RecalledSeq > 0) has no body.
type Message struct {
	SessionID      string
	Seq            int64
	MsgID          int64
	ClientMsgID    string
	SenderUserID   string
	SenderDeviceID string
	Kind           string // message, session_create, membership, edit, recall
	ContentType    string
	Body           []byte
	BodyKeyID      int64    // message, edit: the data key Body is sealed with (keystore); 0: plaintext
	TargetSeq      int64    // edit, recall
	MemberOp       string   // membership, session_create
	MemberIDs      []string // membership, session_create
	SessionKind    string   // session_create
	Title          string   // session_create
	ServerTsMs     int64
	EditedSeq      int64 // seq of the edit now in effect, 0 if none
	RecalledSeq    int64 // seq of the recall, 0 if not recalled
}

// SessionState is what a user's client needs to know about one session to
// decide whether to sync it.
type SessionState struct {
	SessionID string
	Kind      string // direct, group, or "" before the session_create is stored
	Title     string
	// MaxSeq is the highest seq stored for the session (any event kind).
	MaxSeq int64
	// ReadSeq is the user's read cursor, 0 if they never sent a receipt.
	ReadSeq int64
	// JoinedSeq is when the user last joined.
	JoinedSeq int64
	// LastPreview is the latest chat message's preview, at LastPreviewSeq.
	LastPreview    string
	LastPreviewSeq int64
	// LastMsgID and LastTsMs are those of the event at MaxSeq.
	LastMsgID int64
	LastTsMs  int64
	// Unread counts the chat messages of others after the user's read
	// cursor and after they last joined, leaving out recalled ones; edits,
	// recalls, membership and session events never count. Changes fills
	// it.
	Unread int64
	// MemberVersion is the seq of the session's latest membership or
	// governance event: a client whose member list is older syncs it
	// (MemberEvents).
	MemberVersion int64
	// Role is the user's role: owner, admin or member.
	Role string
}

// Store reads the message store. It is safe for concurrent use. Every
// method reads the schema current at the call (see Follow); each call is one
// query, and ctx bounds it.
type Store struct {
	pool   *pgxpool.Pool
	home   string
	schema atomic.Pointer[string]
}

// Open returns a Store over the live schema named by home's store_pointer
// (home itself when the pointer is unset). home "" means "public".
func Open(ctx context.Context, pool *pgxpool.Pool, home string) (*Store, error) {
	if home == "" {
		home = "public"
	}
	schema, err := Resolve(ctx, pool, home)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, home: home}
	s.schema.Store(&schema)
	return s, nil
}

// Schema returns the schema the Store reads now.
func (s *Store) Schema() string { return *s.schema.Load() }

func (s *Store) q() string { return pgx.Identifier{s.Schema()}.Sanitize() }

// Follow keeps the Store on the live schema: it listens for switch-overs
// (NOTIFY seqflow_store) and re-reads the pointer on each, until ctx ends.
// It returns ctx.Err(). Without Follow the Store stays on the schema Open
// found.
func (s *Store) Follow(ctx context.Context) error {
	return Watch(ctx, s.pool, s.home, func(schema string) { s.schema.Store(&schema) })
}

// StoredOffsets returns, per partition of topic, the next offset the store
// holds everything before (partitions it never wrote are absent).
func (s *Store) StoredOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	w := Writer{pool: s.pool}
	w.sql.readOffsets = readOffsetsSQL(s.q())
	return w.StoredOffsets(ctx, topic)
}

// Members returns the current members of a session, sorted.
func (s *Store) Members(ctx context.Context, sessionID string) ([]string, error) {
	rows, err := s.pool.Query(ctx, fmt.Sprintf(
		`SELECT user_id FROM %s.session_members WHERE session_id = $1 AND left_seq IS NULL ORDER BY user_id`, s.q()), sessionID)
	if err != nil {
		return nil, fmt.Errorf("query members of %s: %w", sessionID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read members of %s: %w", sessionID, err)
	}
	return out, nil
}

// MembersOf lists the current members of each of sessionIDs in one query,
// as Members does for one: a session without current members (or unknown)
// has no entry.
func (s *Store) MembersOf(ctx context.Context, sessionIDs []string) (map[string][]string, error) {
	rows, err := s.pool.Query(ctx, fmt.Sprintf(
		`SELECT session_id, user_id FROM %s.session_members WHERE session_id = ANY($1) AND left_seq IS NULL ORDER BY session_id, user_id`, s.q()), sessionIDs)
	if err != nil {
		return nil, fmt.Errorf("query members of %d sessions: %w", len(sessionIDs), err)
	}
	out := make(map[string][]string, len(sessionIDs))
	var session, user string
	_, err = pgx.ForEachRow(rows, []any{&session, &user}, func() error {
		out[session] = append(out[session], user)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read members of %d sessions: %w", len(sessionIDs), err)
	}
	return out, nil
}

// Standing is a user's place in a session, as far as the store has read
// the log.
type Standing uint8

const (
	// NotMember: the store holds no membership of the user in the
	// session, so no command of theirs to it can be in the log.
	NotMember Standing = iota
	// FormerMember: the user was a member and left or was removed;
	// commands they sent while a member may be in the log.
	FormerMember
	// CurrentMember: a current member.
	CurrentMember
)

// IsMember reports whether userID is a current member of sessionID.
func (s *Store) IsMember(ctx context.Context, sessionID, userID string) (bool, error) {
	st, err := s.Standing(ctx, sessionID, userID)
	return st == CurrentMember, err
}

// Standing returns userID's standing in sessionID.
func (s *Store) Standing(ctx context.Context, sessionID, userID string) (Standing, error) {
	var current bool
	err := s.pool.QueryRow(ctx, fmt.Sprintf(
		`SELECT left_seq IS NULL FROM %s.session_members WHERE session_id = $1 AND user_id = $2`, s.q()),
		sessionID, userID).Scan(&current)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return NotMember, nil
	case err != nil:
		return NotMember, fmt.Errorf("check membership of %s in %s: %w", userID, sessionID, err)
	case current:
		return CurrentMember, nil
	}
	return FormerMember, nil
}

// MessagesAfter returns up to limit events of sessionID with seq > afterSeq,
// in seq order, in their current state (edits applied, recalled bodies
// withheld). Seqs may have gaps; fewer than limit rows means the store holds
// nothing more yet. limit is clamped to [1, 10000].
func (s *Store) MessagesAfter(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Message, error) {
	return s.messages(ctx, sessionID, "seq > $2 ORDER BY seq", afterSeq, limit)
}

// MemberEvents returns up to limit membership and governance events
// (session_create, membership, group) of sessionID with seq > afterSeq,
// in seq order: what changed the members, their roles and mutes, and the
// group's settings since a member version (member sync).
func (s *Store) MemberEvents(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]Message, error) {
	return s.messages(ctx, sessionID, "seq > $2 AND kind IN ('session_create', 'membership', 'group') ORDER BY seq", afterSeq, limit)
}

// Member is one current member of a session.
type Member struct {
	UserID    string
	Role      string // owner, admin or member
	JoinedSeq int64
}

// MemberPage returns up to limit current members of sessionID whose user
// ID sorts after afterUser, in user ID order. limit is clamped to
// [1, 10000].
func (s *Store) MemberPage(ctx context.Context, sessionID, afterUser string, limit int) ([]Member, error) {
	limit = min(max(limit, 1), 10_000)
	rows, err := s.pool.Query(ctx, fmt.Sprintf(
		`SELECT user_id, role, joined_seq FROM %s.session_members
		 WHERE session_id = $1 AND user_id > $2 AND left_seq IS NULL ORDER BY user_id LIMIT $3`, s.q()), sessionID, afterUser, limit)
	if err != nil {
		return nil, fmt.Errorf("query members of %s: %w", sessionID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
		var m Member
		err := r.Scan(&m.UserID, &m.Role, &m.JoinedSeq)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read members of %s: %w", sessionID, err)
	}
	return out, nil
}

// MessagesBefore returns up to limit events of sessionID with seq <
// beforeSeq, newest first, in their current state as MessagesAfter gives
// them. limit is clamped to [1, 10000].
func (s *Store) MessagesBefore(ctx context.Context, sessionID string, beforeSeq int64, limit int) ([]Message, error) {
	return s.messages(ctx, sessionID, "seq < $2 ORDER BY seq DESC", beforeSeq, limit)
}

// messages reads the events of sessionID that where (a condition on $2,
// with its ORDER BY) selects, up to limit.
func (s *Store) messages(ctx context.Context, sessionID, where string, seq int64, limit int) ([]Message, error) {
	limit = min(max(limit, 1), 10_000)
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s.messages WHERE session_id = $1 AND %s LIMIT $3`,
		messageState, s.q(), where), sessionID, seq, limit)
	if err != nil {
		return nil, fmt.Errorf("query messages of %s (%s %d): %w", sessionID, where, seq, err)
	}
	out, err := pgx.CollectRows(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("read messages of %s: %w", sessionID, err)
	}
	return out, nil
}

// messageState selects a message in its current state, for scanMessage.
const messageState = `session_id, seq, msg_id, client_msg_id, sender_user_id, sender_device_id, kind,
	COALESCE(edited_content_type, content_type),
	CASE WHEN recalled_seq IS NOT NULL THEN NULL ELSE COALESCE(edited_body, body) END,
	COALESCE(target_seq, 0), COALESCE(member_op, ''), COALESCE(member_ids, '{}'),
	COALESCE(session_kind, ''), COALESCE(title, ''), server_ts_ms,
	COALESCE(edited_seq, 0), COALESCE(recalled_seq, 0),
	CASE WHEN recalled_seq IS NOT NULL THEN 0 WHEN edited_seq IS NOT NULL THEN COALESCE(edited_body_key_id, 0) ELSE COALESCE(body_key_id, 0) END`

func scanMessage(r pgx.CollectableRow) (Message, error) {
	var m Message
	err := r.Scan(&m.SessionID, &m.Seq, &m.MsgID, &m.ClientMsgID, &m.SenderUserID, &m.SenderDeviceID, &m.Kind,
		&m.ContentType, &m.Body, &m.TargetSeq, &m.MemberOp, &m.MemberIDs, &m.SessionKind, &m.Title, &m.ServerTsMs,
		&m.EditedSeq, &m.RecalledSeq, &m.BodyKeyID)
	return m, err
}

// SessionSeq names one event.
type SessionSeq struct {
	SessionID string
	Seq       int64
}

// MessagesAt returns the events at keys in their current state (as
// MessagesAfter gives them), in no particular order; absent ones are left
// out. At most 10,000 keys.
func (s *Store) MessagesAt(ctx context.Context, keys []SessionSeq) ([]Message, error) {
	if len(keys) > 10_000 {
		return nil, fmt.Errorf("MessagesAt: %d keys, at most 10000", len(keys))
	}
	ids, seqs := make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		ids[i], seqs[i] = k.SessionID, k.Seq
	}
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s.messages
		WHERE (session_id, seq) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))`, messageState, s.q()), ids, seqs)
	if err != nil {
		return nil, fmt.Errorf("query %d messages: %w", len(keys), err)
	}
	out, err := pgx.CollectRows(rows, scanMessage)
	if err != nil {
		return nil, fmt.Errorf("read %d messages: %w", len(keys), err)
	}
	return out, nil
}

// Changes returns the state of every session userID is a current member of,
// ordered by session ID. A client compares MaxSeq with what it holds and
// syncs the sessions that moved.
func (s *Store) Changes(ctx context.Context, userID string) ([]SessionState, error) {
	q := s.q()
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`
		SELECT m.session_id, COALESCE(x.kind, ''), COALESCE(x.title, ''), COALESCE(x.last_seq, 0),
		       COALESCE(r.read_seq, 0), m.joined_seq, COALESCE(x.last_preview, ''), COALESCE(x.last_preview_seq, 0),
		       COALESCE(x.last_msg_id, 0), COALESCE(x.last_ts_ms, 0), COALESCE(x.member_version, 0), m.role,
		       (SELECT count(*) FROM %[1]s.messages u
		        WHERE u.session_id = m.session_id AND u.seq > GREATEST(COALESCE(r.read_seq, 0), m.joined_seq)
		          AND u.kind = 'message' AND u.sender_user_id <> m.user_id AND u.recalled_seq IS NULL)
		FROM %[1]s.session_members m
		LEFT JOIN %[1]s.sessions x ON x.session_id = m.session_id
		LEFT JOIN %[1]s.read_cursors r ON r.session_id = m.session_id AND r.user_id = m.user_id
		WHERE m.user_id = $1 AND m.left_seq IS NULL
		ORDER BY m.session_id`, q), userID)
	if err != nil {
		return nil, fmt.Errorf("query sessions of %s: %w", userID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SessionState, error) {
		var st SessionState
		err := r.Scan(&st.SessionID, &st.Kind, &st.Title, &st.MaxSeq, &st.ReadSeq, &st.JoinedSeq,
			&st.LastPreview, &st.LastPreviewSeq, &st.LastMsgID, &st.LastTsMs, &st.MemberVersion, &st.Role, &st.Unread)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("read sessions of %s: %w", userID, err)
	}
	return out, nil
}

// UnreadAfter counts what Changes counts as unread for userID in one
// session if their read cursor were after: the chat messages of others
// with a seq above after, left out recalled ones. upTo is the highest seq
// the store held for the session when it counted (0 for none), so a
// caller that saw events beyond it adds their messages itself.
func (s *Store) UnreadAfter(ctx context.Context, sessionID, userID string, after int64) (n, upTo int64, err error) {
	q := s.q()
	err = s.pool.QueryRow(ctx, fmt.Sprintf(`
		SELECT (SELECT count(*) FROM %[1]s.messages u
		        WHERE u.session_id = $1 AND u.seq > $3 AND u.kind = 'message'
		          AND u.sender_user_id <> $2 AND u.recalled_seq IS NULL),
		       COALESCE((SELECT last_seq FROM %[1]s.sessions WHERE session_id = $1), 0)`, q),
		sessionID, userID, after).Scan(&n, &upTo)
	if err != nil {
		return 0, 0, fmt.Errorf("count unread of %s in %s: %w", userID, sessionID, err)
	}
	return n, upTo, nil
}

// SeenBy says who of a session's current members has read it up to seq
// (read cursor >= seq), leaving out the sender of seq: their count, the
// session's member count, and their user IDs, sorted, when the session
// has at most listUpTo members (nil above).
func (s *Store) SeenBy(ctx context.Context, sessionID string, seq int64, listUpTo int) (users []string, count, members int64, err error) {
	return s.SeenByExcept(ctx, sessionID, seq, listUpTo, nil)
}

// SeenByExcept is SeenBy leaving hidden out of users and count (members
// still counts them): the users who turned read receipts off.
func (s *Store) SeenByExcept(ctx context.Context, sessionID string, seq int64, listUpTo int, hidden []string) (users []string, count, members int64, err error) {
	q := s.q()
	if hidden == nil {
		hidden = []string{}
	}
	err = s.pool.QueryRow(ctx, fmt.Sprintf(`
		WITH cur AS (
			SELECT m.user_id, COALESCE(r.read_seq, 0) AS read_seq
			FROM %[1]s.session_members m
			LEFT JOIN %[1]s.read_cursors r ON r.session_id = m.session_id AND r.user_id = m.user_id
			WHERE m.session_id = $1 AND m.left_seq IS NULL),
		sender AS (SELECT sender_user_id FROM %[1]s.messages WHERE session_id = $1 AND seq = $2),
		seen AS (SELECT user_id, read_seq >= $2 AND user_id IS DISTINCT FROM (SELECT sender_user_id FROM sender)
		                AND NOT user_id = ANY($4::text[]) AS seen FROM cur)
		SELECT count(*) FILTER (WHERE seen), count(*),
		       CASE WHEN count(*) <= $3 THEN COALESCE(array_agg(user_id ORDER BY user_id) FILTER (WHERE seen), '{}') END
		FROM seen`, q), sessionID, seq, listUpTo, hidden).Scan(&count, &members, &users)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("query who has seen %s/%d: %w", sessionID, seq, err)
	}
	return users, count, members, nil
}

// LastSeqs returns the last seq the store holds of each of sessionIDs;
// a session it does not hold is absent.
func (s *Store) LastSeqs(ctx context.Context, sessionIDs []string) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT session_id, last_seq FROM %s.sessions WHERE session_id = ANY($1)`, s.q()), sessionIDs)
	if err != nil {
		return nil, fmt.Errorf("query last seqs: %w", err)
	}
	out := make(map[string]int64, len(sessionIDs))
	var (
		id   string
		last int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &last}, func() error {
		out[id] = last
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("query last seqs: %w", err)
	}
	return out, nil
}

// Session returns one session's state as seen by userID (ReadSeq and
// JoinedSeq are userID's; 0 when not a member), and false when the store
// has no such session.
func (s *Store) Session(ctx context.Context, sessionID, userID string) (SessionState, bool, error) {
	q := s.q()
	st := SessionState{SessionID: sessionID}
	err := s.pool.QueryRow(ctx, fmt.Sprintf(`
		SELECT x.kind, x.title, x.last_seq, COALESCE(r.read_seq, 0), COALESCE(m.joined_seq, 0), x.last_preview,
		       COALESCE(x.last_preview_seq, 0), COALESCE(x.last_msg_id, 0), COALESCE(x.last_ts_ms, 0), x.member_version, COALESCE(m.role, '')
		FROM %[1]s.sessions x
		LEFT JOIN %[1]s.session_members m ON m.session_id = x.session_id AND m.user_id = $2 AND m.left_seq IS NULL
		LEFT JOIN %[1]s.read_cursors r ON r.session_id = x.session_id AND r.user_id = $2
		WHERE x.session_id = $1`, q), sessionID, userID).Scan(
		&st.Kind, &st.Title, &st.MaxSeq, &st.ReadSeq, &st.JoinedSeq, &st.LastPreview, &st.LastPreviewSeq, &st.LastMsgID, &st.LastTsMs,
		&st.MemberVersion, &st.Role)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("query session %s: %w", sessionID, err)
	}
	return st, true, nil
}

// NotifyChannel is the PostgreSQL channel a switch-over notifies.
const NotifyChannel = "seqflow_store"

// Resolve returns the live schema: home's store_pointer, or home when the
// pointer is unset.
func Resolve(ctx context.Context, pool *pgxpool.Pool, home string) (string, error) {
	var schema string
	err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT schema_name FROM %s.store_pointer`, pgx.Identifier{home}.Sanitize())).Scan(&schema)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return home, nil
	case err != nil:
		return "", fmt.Errorf("read store pointer in schema %s (migrated?): %w", home, err)
	}
	return schema, nil
}

// Switch points home's store_pointer at schema and notifies every follower
// (Store.Follow, the persister) in the same transaction.
func Switch(ctx context.Context, pool *pgxpool.Pool, home, schema string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.store_pointer (schema_name) VALUES ($1)
			ON CONFLICT (singleton) DO UPDATE SET schema_name = EXCLUDED.schema_name, switched_at = now()`,
			pgx.Identifier{home}.Sanitize()), schema); err != nil {
			return fmt.Errorf("set store pointer: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, schema); err != nil {
			return fmt.Errorf("notify switch-over: %w", err)
		}
		return nil
	})
}

// Watch calls fn with the live schema each time a switch-over is notified
// (and once at start), until ctx ends; it returns ctx.Err(). A lost
// listening connection is re-established after a pause, and the pointer is
// re-read then, so a switch made meanwhile is not missed. fn runs on Watch's
// goroutine and must not block for long.
func Watch(ctx context.Context, pool *pgxpool.Pool, home string, fn func(schema string)) error {
	for {
		err := watchOnce(ctx, pool, home, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = err // a lost connection; the pointer is read again after reconnecting
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func watchOnce(ctx context.Context, pool *pgxpool.Pool, home string, fn func(string)) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return err
	}
	// The listening connection must not go back to the pool still listening.
	defer func() {
		if !conn.Conn().IsClosed() {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN "+NotifyChannel)
		}
	}()
	for {
		schema, err := Resolve(ctx, pool, home)
		if err != nil {
			return err
		}
		fn(schema)
		var n *pgconn.Notification
		if n, err = conn.Conn().WaitForNotification(ctx); err != nil {
			return err
		}
		_ = n
	}
}
