package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// stagingDDL creates the per-connection table a batch is staged in. Rows
// live for one transaction (ON COMMIT DELETE ROWS), so a batch that fails
// leaves nothing behind.
const stagingDDL = `CREATE TEMP TABLE IF NOT EXISTS seqflow_stage (
	idx              integer NOT NULL,
	session_id       text    NOT NULL,
	seq              bigint  NOT NULL,
	msg_id           bigint  NOT NULL,
	client_msg_id    text    NOT NULL,
	sender_user_id   text    NOT NULL,
	sender_device_id text    NOT NULL,
	kind             text    NOT NULL,
	content_type     text    NOT NULL,
	body             bytea,
	target_seq       bigint,
	member_op        text,
	member_ids       text[],
	session_kind     text,
	title            text,
	server_ts_ms     bigint  NOT NULL,
	gateway_ts_ms    bigint  NOT NULL,
	log_partition    integer NOT NULL,
	log_offset       bigint  NOT NULL,
	preview          text,
	body_key_id      bigint
) ON COMMIT DELETE ROWS`

// ConfigurePool makes every connection of cfg able to run Writer batches:
// it creates the staging table on connect (keeping any AfterConnect hook
// already set).
func ConfigurePool(cfg *pgxpool.Config) {
	prev := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if prev != nil {
			if err := prev(ctx, c); err != nil {
				return err
			}
		}
		if _, err := c.Exec(ctx, stagingDDL); err != nil {
			return fmt.Errorf("create staging table: %w", err)
		}
		return nil
	}
}

// NewPool connects a pool for url, set up by ConfigurePool.
func NewPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	return pool, nil
}
