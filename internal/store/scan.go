package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ScanRows calls fn with every row of schema's messages table as it was
// written (the Row of its event, without later edits or recalls), in no
// particular order. It reads in one query; fn must not block for long.
func ScanRows(ctx context.Context, pool *pgxpool.Pool, schema string, fn func(Row) error) error {
	rows, err := pool.Query(ctx, fmt.Sprintf(`
		SELECT session_id, seq, msg_id, client_msg_id, sender_user_id, sender_device_id, kind, content_type, body,
		       COALESCE(target_seq, 0), COALESCE(member_op, ''), member_ids, COALESCE(session_kind, ''), COALESCE(title, ''),
		       server_ts_ms, gateway_ts_ms, log_partition, log_offset, COALESCE(body_key_id, 0)
		FROM %s.messages`, pgx.Identifier{schema}.Sanitize()))
	if err != nil {
		return fmt.Errorf("scan messages of %s: %w", schema, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.SessionID, &r.Seq, &r.MsgID, &r.ClientMsgID, &r.SenderUserID, &r.SenderDeviceID, &r.Kind,
			&r.ContentType, &r.Body, &r.TargetSeq, &r.MemberOp, &r.MemberIDs, &r.SessionKind, &r.Title,
			&r.ServerTsMs, &r.GatewayTsMs, &r.Partition, &r.Offset, &r.BodyKeyID); err != nil {
			return fmt.Errorf("scan messages of %s: %w", schema, err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("scan messages of %s: %w", schema, err)
	}
	return nil
}
