package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/store"
)

// lookups is the message store as the uplink reads it (commandStore): the
// store package's Session, plus the two lookups the gateway needs beyond
// it, against the same tables (internal/migrate/sql/0002_store.sql), in
// the schema the Store follows.
type lookups struct {
	pool *pgxpool.Pool
	*store.Store
}

// target is what edit and recall check about the message they change.
type target struct {
	sender     string
	kind       string
	serverTsMs int64
	recalled   bool
}

// target returns the event at (session, seq), false when the store does
// not hold it (yet).
func (l lookups) target(ctx context.Context, session string, seq int64) (target, bool, error) {
	var t target
	err := l.pool.QueryRow(ctx, fmt.Sprintf(`SELECT sender_user_id, kind, server_ts_ms, recalled_seq IS NOT NULL
		FROM %s.messages WHERE session_id = $1 AND seq = $2`, pgx.Identifier{l.Schema()}.Sanitize()), session, seq).
		Scan(&t.sender, &t.kind, &t.serverTsMs, &t.recalled)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, false, nil
	}
	if err != nil {
		return t, false, fmt.Errorf("look up %s seq %d: %w", session, seq, err)
	}
	return t, true, nil
}

// creation is who created a session, with which client message.
type creation struct {
	sender, clientMsgID string
}

// creation returns the session_create of session, false when the store
// holds none.
func (l lookups) creation(ctx context.Context, session string) (creation, bool, error) {
	var c creation
	err := l.pool.QueryRow(ctx, fmt.Sprintf(`SELECT sender_user_id, client_msg_id FROM %s.messages
		WHERE session_id = $1 AND kind = 'session_create' ORDER BY seq LIMIT 1`, pgx.Identifier{l.Schema()}.Sanitize()), session).
		Scan(&c.sender, &c.clientMsgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("look up creation of %s: %w", session, err)
	}
	return c, true, nil
}

var _ commandStore = lookups{}

// sharesSession returns which of others share a current session with
// user: whose presence user may see. One index probe of
// session_members_user_current per session of each of others.
func (l lookups) sharesSession(ctx context.Context, user string, others []string) (map[string]bool, error) {
	rows, err := l.pool.Query(ctx, fmt.Sprintf(`SELECT DISTINCT o.user_id FROM %[1]s.session_members o
		WHERE o.user_id = ANY($2) AND o.left_seq IS NULL AND EXISTS (
			SELECT 1 FROM %[1]s.session_members me
			WHERE me.session_id = o.session_id AND me.user_id = $1 AND me.left_seq IS NULL)`,
		pgx.Identifier{l.Schema()}.Sanitize()), user, others)
	if err != nil {
		return nil, fmt.Errorf("look up shared sessions of %s: %w", user, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up shared sessions of %s: %w", user, err)
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

var _ visibility = lookups{}
