package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The store package answers sync, changes and membership; these are the two
// lookups the gateway needs beyond it, against the same tables
// (internal/migrate/sql/0002_store.sql).

// target is what edit and recall check about the message they change.
type target struct {
	sender     string
	kind       string
	serverTsMs int64
	recalled   bool
}

// lookupTarget returns the event at (session, seq), false when the store
// does not hold it (yet).
func lookupTarget(ctx context.Context, pool *pgxpool.Pool, schema, session string, seq int64) (target, bool, error) {
	var t target
	err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT sender_user_id, kind, server_ts_ms, recalled_seq IS NOT NULL
		FROM %s.messages WHERE session_id = $1 AND seq = $2`, pgx.Identifier{schema}.Sanitize()), session, seq).
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

// lookupCreation returns the session_create of session, false when the
// store holds none.
func lookupCreation(ctx context.Context, pool *pgxpool.Pool, schema, session string) (creation, bool, error) {
	var c creation
	err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT sender_user_id, client_msg_id FROM %s.messages
		WHERE session_id = $1 AND kind = 'session_create' ORDER BY seq LIMIT 1`, pgx.Identifier{schema}.Sanitize()), session).
		Scan(&c.sender, &c.clientMsgID)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("look up creation of %s: %w", session, err)
	}
	return c, true, nil
}
