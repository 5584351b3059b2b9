package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Offset is the next offset of a topic partition that a batch covers: the
// schema holds the effect of every record before it once the batch commits.
type Offset struct {
	Topic     string
	Partition int32
	Next      int64
}

// Batch is what one Write stores, in one transaction.
type Batch struct {
	Rows       []Row
	Reads      []ReadCursor
	Deliveries []DeliveryCursor
	Offsets    []Offset
}

// Result says what a committed Write did with each row.
type Result struct {
	Inserted   int
	Duplicates int // exact repeats of stored events, or of events earlier in the batch: no-ops
	Conflicts  []Conflict
}

// Writer writes batches into one schema of the store. It is safe for
// concurrent use by writers of disjoint sessions (a persister's partitions);
// writers racing over the same events (a zombie and its successor) stay
// correct, as every write is idempotent.
type Writer struct {
	pool                    *pgxpool.Pool
	schema                  string
	sql                     writerSQL
	idsTable, messagesTable pgx.Identifier
}

// NewWriter returns a Writer into schema over pool, which must be set up by
// ConfigurePool (NewPool does).
func NewWriter(pool *pgxpool.Pool, schema string) *Writer {
	return &Writer{pool: pool, schema: schema, sql: buildSQL(pgx.Identifier{schema}.Sanitize()),
		idsTable: pgx.Identifier{schema, "message_ids"}, messagesTable: pgx.Identifier{schema, "messages"}}
}

// Schema is the schema w writes into.
func (w *Writer) Schema() string { return w.schema }

// Write stores b in one database transaction. Rows already stored are
// duplicates: no-ops. Rows that clash with stored ones come back as
// Conflicts and change nothing. An edit or recall also updates its target,
// a membership change or session_create the members, every row the
// sessions table, receipts the cursors, all in the same transaction,
// together with b.Offsets.
//
// The fast path (writeDirect) COPYs the rows straight into message_ids and
// messages, expecting all of them to be new, which they are unless the
// batch is a redelivery. The unique indexes still decide: when one refuses
// a row (23505), that transaction is rolled back and the batch written
// again the careful way (writeStaged), which COPYs the rows into a
// per-connection staging table, takes out the conflicts and inserts the
// rest with ON CONFLICT DO NOTHING, so no projection ever sees a conflict.
//
// On error nothing of b is stored. IsPoison(err) means the data itself was
// refused (split the batch to find the record); anything else is worth
// retrying.
func (w *Writer) Write(ctx context.Context, b *Batch) (Result, error) {
	keep, dups, conflicts := dedupeBatch(b.Rows)
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	res, clean, err := w.writeDirect(ctx, conn, b, keep)
	if err == nil && !clean {
		res, err = w.writeStaged(ctx, conn, b, keep)
	}
	if err != nil {
		return Result{}, fmt.Errorf("write batch of %d rows: %w", len(keep), err)
	}
	res.Duplicates += dups
	res.Conflicts = append(res.Conflicts, conflicts...)
	slices.SortFunc(res.Conflicts, func(a, b Conflict) int { return a.Index - b.Index })
	return res, nil
}

// writeDirect is the fast path: one transaction that COPYs the kept rows
// into message_ids (in msg_id order) and messages (in key order), the few
// rows a projection reads (edits, recalls, membership) into the stage, then
// runs the projections in one pipelined round trip. It returns clean false,
// having rolled back, when a unique index refused a row: some row was
// stored before, or clashes with a stored one.
//
// Both COPYs lock their keys in a fixed order, the same as writeStaged's
// inserts, so writers racing over the same rows wait for each other
// instead of deadlocking.
func (w *Writer) writeDirect(ctx context.Context, conn *pgxpool.Conn, b *Batch, keep []int) (res Result, clean bool, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, false, err
	}
	defer func() {
		if !clean {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if len(keep) > 0 {
		order := slices.Clone(keep)
		slices.SortFunc(order, func(i, j int) int { return cmp.Compare(b.Rows[i].MsgID, b.Rows[j].MsgID) })
		if _, err := tx.CopyFrom(ctx, w.idsTable, idColumns, idSource(b.Rows, order)); err != nil {
			if isUniqueViolation(err) {
				return res, false, nil
			}
			return res, false, fmt.Errorf("copy message ids: %w", err)
		}
		slices.SortFunc(order, func(i, j int) int { return compareKey(&b.Rows[i], &b.Rows[j]) })
		if _, err := tx.CopyFrom(ctx, w.messagesTable, messageColumns, messageSource(b.Rows, order)); err != nil {
			if isUniqueViolation(err) {
				return res, false, nil
			}
			return res, false, fmt.Errorf("copy messages: %w", err)
		}
		if proj := projected(b.Rows, keep); len(proj) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"seqflow_stage"}, stageColumns, stageSource(b.Rows, proj)); err != nil {
				return res, false, fmt.Errorf("stage rows: %w", err)
			}
		}
	}
	pb := &pgx.Batch{}
	w.queueProjections(pb, b, keep)
	if pb.Len() > 0 {
		if err := tx.SendBatch(ctx, pb).Close(); err != nil {
			return res, false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, false, err
	}
	res.Inserted = len(keep)
	return res, true, nil
}

// writeStaged is the careful path: it stages every kept row, inserts them
// with ON CONFLICT DO NOTHING and, when some row was not inserted, takes
// the rows that conflict with the store out of the stage (and undoes their
// inserts) before the projections read it. What stays is new or an exact
// repeat, and the projections are idempotent for repeats.
func (w *Writer) writeStaged(ctx context.Context, conn *pgxpool.Conn, b *Batch, keep []int) (res Result, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	n := int64(len(keep))
	if n > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"seqflow_stage"}, stageColumns, stageSource(b.Rows, keep)); err != nil {
			return res, fmt.Errorf("stage rows: %w", err)
		}
		var ids, msgs int64
		pb := &pgx.Batch{}
		pb.Queue(w.sql.ids).Exec(func(ct pgconn.CommandTag) error { ids = ct.RowsAffected(); return nil })
		pb.Queue(w.sql.messages).Exec(func(ct pgconn.CommandTag) error { msgs = ct.RowsAffected(); return nil })
		if err := tx.SendBatch(ctx, pb).Close(); err != nil {
			return res, err
		}
		if ids < n || msgs < n {
			if res, err = w.takeOutConflicts(ctx, tx, b.Rows, msgs); err != nil {
				return res, err
			}
			keep = without(keep, res.Conflicts)
		} else {
			res.Inserted = int(msgs)
		}
	}
	pb := &pgx.Batch{}
	w.queueProjections(pb, b, keep)
	if pb.Len() > 0 {
		if err := tx.SendBatch(ctx, pb).Close(); err != nil {
			return res, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, err
	}
	committed = true
	return res, nil
}

// takeOutConflicts removes from the stage (and undoes the inserts of) the
// rows whose (session, seq) holds another message or whose msg_id belongs
// to another (session, seq). What stays is new or an exact repeat, and the
// projections are idempotent for repeats.
func (w *Writer) takeOutConflicts(ctx context.Context, tx pgx.Tx, rows []Row, msgs int64) (Result, error) {
	var res Result
	pb := &pgx.Batch{}
	pb.Queue(w.sql.seqConflicts).Query(func(qr pgx.Rows) error {
		for qr.Next() {
			var i int32
			var held int64
			if err := qr.Scan(&i, &held); err != nil {
				return err
			}
			r := rows[i]
			res.Conflicts = append(res.Conflicts, Conflict{int(i), fmt.Sprintf("seq %d of session %s already holds msg_id %d, not %d", r.Seq, r.SessionID, held, r.MsgID)})
		}
		return qr.Err()
	})
	var undone int64
	pb.Queue(w.sql.idConflicts).Query(func(qr pgx.Rows) error {
		for qr.Next() {
			var i int32
			var hs string
			var hq, u int64
			if err := qr.Scan(&i, &hs, &hq, &u); err != nil {
				return err
			}
			undone = u
			r := rows[i]
			res.Conflicts = append(res.Conflicts, Conflict{int(i), fmt.Sprintf("msg_id %d already belongs to session %s seq %d, not %s seq %d", r.MsgID, hs, hq, r.SessionID, r.Seq)})
		}
		return qr.Err()
	})
	var staged int64
	pb.Queue(`SELECT count(*) FROM pg_temp.seqflow_stage`).QueryRow(func(r pgx.Row) error { return r.Scan(&staged) })
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		return res, fmt.Errorf("take out conflicts: %w", err)
	}
	res.Inserted = int(msgs - undone)
	res.Duplicates = int(staged) - res.Inserted
	return res, nil
}

// queueProjections queues everything after the inserts: targets of edits
// and recalls, sessions, members (in as many ordered steps as one batch
// has membership events for one (session, user)), cursors, offsets.
func (w *Writer) queueProjections(pb *pgx.Batch, b *Batch, keep []int) {
	if len(keep) > 0 {
		kinds := map[string]bool{}
		for _, i := range keep {
			kinds[b.Rows[i].Kind] = true
		}
		if kinds[KindEdit] {
			pb.Queue(w.sql.edits)
		}
		if kinds[KindRecall] {
			pb.Queue(w.sql.recalls)
		}
		if kinds[KindEdit] || kinds[KindRecall] {
			pb.Queue(w.sql.scrub)
		}
		pb.Queue(w.sql.sessions, sessionsOf(b.Rows, keep)...)
		if kinds[KindEdit] {
			pb.Queue(w.sql.editPreview)
		}
		if kinds[KindRecall] {
			pb.Queue(w.sql.recallPreview)
		}
		for k := 1; k <= memberLayers(b.Rows, keep); k++ {
			pb.Queue(w.sql.memberAdd, k)
			pb.Queue(w.sql.memberRemove, k)
			pb.Queue(w.sql.memberRole, k)
		}
	}
	if len(b.Reads) > 0 {
		sid, uid, seq := latestReads(b.Reads)
		pb.Queue(w.sql.reads, sid, uid, seq)
	}
	if len(b.Deliveries) > 0 {
		sid, uid, did, seq := latestDeliveries(b.Deliveries)
		pb.Queue(w.sql.deliveries, sid, uid, did, seq)
	}
	if len(b.Offsets) > 0 {
		t, p, n := highestOffsets(b.Offsets)
		pb.Queue(w.sql.offsets, t, p, n)
	}
}

// without returns keep less the conflicting rows.
func without(keep []int, cs []Conflict) []int {
	out := make([]int, 0, len(keep))
	bad := make(map[int]bool, len(cs))
	for _, c := range cs {
		bad[c.Index] = true
	}
	for _, i := range keep {
		if !bad[i] {
			out = append(out, i)
		}
	}
	return out
}

// sessionsOf aggregates the kept rows per session, in session order: the
// first session_create, the latest event, the latest chat message, the
// latest membership or governance event (the member version).
func sessionsOf(rows []Row, keep []int) []any {
	type agg struct {
		create, last, preview int
		members               int64
	}
	by := map[string]*agg{}
	var ids []string
	for _, i := range keep {
		r := &rows[i]
		a := by[r.SessionID]
		if a == nil {
			a = &agg{create: -1, last: i, preview: -1}
			by[r.SessionID] = a
			ids = append(ids, r.SessionID)
		}
		if r.Seq > rows[a.last].Seq {
			a.last = i
		}
		if r.Kind == KindSessionCreate && (a.create < 0 || r.Seq < rows[a.create].Seq) {
			a.create = i
		}
		if r.Kind == KindMessage && (a.preview < 0 || r.Seq > rows[a.preview].Seq) {
			a.preview = i
		}
		if r.Kind == KindSessionCreate || r.Kind == KindMembership || r.Kind == KindGroup {
			a.members = max(a.members, r.Seq)
		}
	}
	slices.Sort(ids)
	n := len(ids)
	kind, title, pv := make([]string, n), make([]string, n), make([]string, n)
	cs, ls, lm, lt, ps, mv := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for j, id := range ids {
		a := by[id]
		if a.create >= 0 {
			c := &rows[a.create]
			kind[j], title[j], cs[j] = c.SessionKind, c.Title, c.Seq
		}
		l := &rows[a.last]
		ls[j], lm[j], lt[j], mv[j] = l.Seq, l.MsgID, l.ServerTsMs, a.members
		if a.preview >= 0 {
			p := &rows[a.preview]
			ps[j], pv[j] = p.Seq, previewOf(p.ContentType, p.Body, p.BodyKeyID)
		}
	}
	return []any{ids, kind, title, cs, ls, lm, lt, ps, pv, mv}
}

type rowKey struct {
	session string
	seq     int64
}

// dedupeBatch keeps the first of each (session, seq) and msg_id in the batch:
// a later exact repeat is a duplicate, a later different event a conflict.
func dedupeBatch(rows []Row) (keep []int, dups int, conflicts []Conflict) {
	byKey := make(map[rowKey]int, len(rows))
	byID := make(map[int64]int, len(rows))
	keep = make([]int, 0, len(rows))
	for i, r := range rows {
		k := rowKey{r.SessionID, r.Seq}
		if j, ok := byKey[k]; ok {
			if rows[j].MsgID == r.MsgID {
				dups++
			} else {
				conflicts = append(conflicts, Conflict{i, fmt.Sprintf("seq %d of session %s is msg_id %d earlier in the log, not %d", r.Seq, r.SessionID, rows[j].MsgID, r.MsgID)})
			}
			continue
		}
		if j, ok := byID[r.MsgID]; ok {
			conflicts = append(conflicts, Conflict{i, fmt.Sprintf("msg_id %d is session %s seq %d earlier in the log, not %s seq %d", r.MsgID, rows[j].SessionID, rows[j].Seq, r.SessionID, r.Seq)})
			continue
		}
		byKey[k], byID[r.MsgID] = i, i
		keep = append(keep, i)
	}
	return keep, dups, conflicts
}

// memberLayers is how many membership events name one (session, user) at
// most: the members are updated in that many ordered steps, so that a
// remove and a re-add in one batch apply in seq order.
func memberLayers(rows []Row, keep []int) int {
	type su struct{ s, u string }
	n := map[su]int{}
	most := 0
	for _, i := range keep {
		for _, u := range rows[i].MemberIDs {
			k := su{rows[i].SessionID, u}
			n[k]++
			most = max(most, n[k])
		}
	}
	return most
}

var stageColumns = []string{"idx", "session_id", "seq", "msg_id", "client_msg_id", "sender_user_id", "sender_device_id",
	"kind", "content_type", "body", "target_seq", "member_op", "member_ids", "session_kind", "title", "server_ts_ms",
	"gateway_ts_ms", "log_partition", "log_offset", "preview", "body_key_id"}

// stageSource feeds the kept rows to COPY, NULL where a column does not
// apply to the row's kind.
func stageSource(rows []Row, keep []int) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(keep), func(j int) ([]any, error) {
		r := &rows[keep[j]]
		v := []any{int32(keep[j]), r.SessionID, r.Seq, r.MsgID, r.ClientMsgID, r.SenderUserID, r.SenderDeviceID,
			r.Kind, r.ContentType, r.Body, nil, nil, nil, nil, nil, r.ServerTsMs, r.GatewayTsMs, r.Partition, r.Offset, nil, nil}
		if r.BodyKeyID != 0 {
			v[20] = r.BodyKeyID
		}
		if r.TargetSeq != 0 {
			v[10] = r.TargetSeq
		}
		if r.MemberOp != "" {
			v[11] = r.MemberOp
		}
		if r.MemberIDs != nil {
			v[12] = r.MemberIDs
		}
		if r.Kind == KindSessionCreate {
			v[13], v[14] = r.SessionKind, r.Title
		}
		if r.Kind == KindMessage || r.Kind == KindEdit {
			v[19] = previewOf(r.ContentType, r.Body, r.BodyKeyID)
		}
		return v, nil
	})
}

var idColumns = []string{"msg_id", "session_id", "seq"}

// idSource feeds message_ids the rows at order.
func idSource(rows []Row, order []int) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(order), func(j int) ([]any, error) {
		r := &rows[order[j]]
		return []any{r.MsgID, r.SessionID, r.Seq}, nil
	})
}

var messageColumns = []string{"session_id", "seq", "msg_id", "client_msg_id", "sender_user_id", "sender_device_id",
	"kind", "content_type", "body", "target_seq", "member_op", "member_ids", "session_kind", "title", "server_ts_ms",
	"gateway_ts_ms", "log_partition", "log_offset", "body_key_id"}

// messageSource feeds messages the rows at order, NULL where a column does
// not apply to the row's kind (as stageSource does).
func messageSource(rows []Row, order []int) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(order), func(j int) ([]any, error) {
		r := &rows[order[j]]
		v := []any{r.SessionID, r.Seq, r.MsgID, r.ClientMsgID, r.SenderUserID, r.SenderDeviceID,
			r.Kind, r.ContentType, r.Body, nil, nil, nil, nil, nil, r.ServerTsMs, r.GatewayTsMs, r.Partition, r.Offset, nil}
		if r.BodyKeyID != 0 {
			v[18] = r.BodyKeyID
		}
		if r.TargetSeq != 0 {
			v[9] = r.TargetSeq
		}
		if r.MemberOp != "" {
			v[10] = r.MemberOp
		}
		if r.MemberIDs != nil {
			v[11] = r.MemberIDs
		}
		if r.Kind == KindSessionCreate {
			v[12], v[13] = r.SessionKind, r.Title
		}
		return v, nil
	})
}

// compareKey orders rows by (session_id, seq), session IDs bytewise: the
// order of the messages key under COLLATE "C", which writeStaged inserts in.
func compareKey(a, b *Row) int {
	if c := strings.Compare(a.SessionID, b.SessionID); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}

// projected is the kept rows a projection reads from the stage: edits and
// recalls (their targets, the previews) and rows naming members
// (membership changes, session_create).
func projected(rows []Row, keep []int) []int {
	var out []int
	for _, i := range keep {
		if r := &rows[i]; r.Kind == KindEdit || r.Kind == KindRecall || r.MemberIDs != nil {
			out = append(out, i)
		}
	}
	return out
}

// isUniqueViolation reports whether err is a unique index refusing a row.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func latestReads(rs []ReadCursor) ([]string, []string, []int64) {
	type k struct{ s, u string }
	best := map[k]int64{}
	var order []k
	for _, r := range rs {
		key := k{r.SessionID, r.UserID}
		if v, ok := best[key]; !ok || r.ReadSeq > v {
			if !ok {
				order = append(order, key)
			}
			best[key] = r.ReadSeq
		}
	}
	slices.SortFunc(order, func(a, b k) int { return strings.Compare(a.s+"\x00"+a.u, b.s+"\x00"+b.u) })
	sid, uid, seq := make([]string, len(order)), make([]string, len(order)), make([]int64, len(order))
	for i, key := range order {
		sid[i], uid[i], seq[i] = key.s, key.u, best[key]
	}
	return sid, uid, seq
}

func latestDeliveries(ds []DeliveryCursor) ([]string, []string, []string, []int64) {
	type k struct{ s, u, d string }
	best := map[k]int64{}
	var order []k
	for _, d := range ds {
		key := k{d.SessionID, d.UserID, d.DeviceID}
		if v, ok := best[key]; !ok || d.DeliveredSeq > v {
			if !ok {
				order = append(order, key)
			}
			best[key] = d.DeliveredSeq
		}
	}
	slices.SortFunc(order, func(a, b k) int {
		return strings.Compare(a.s+"\x00"+a.u+"\x00"+a.d, b.s+"\x00"+b.u+"\x00"+b.d)
	})
	sid, uid, did, seq := make([]string, len(order)), make([]string, len(order)), make([]string, len(order)), make([]int64, len(order))
	for i, key := range order {
		sid[i], uid[i], did[i], seq[i] = key.s, key.u, key.d, best[key]
	}
	return sid, uid, did, seq
}

func highestOffsets(os []Offset) ([]string, []int32, []int64) {
	type k struct {
		t string
		p int32
	}
	best := map[k]int64{}
	var order []k
	for _, o := range os {
		key := k{o.Topic, o.Partition}
		if v, ok := best[key]; !ok || o.Next > v {
			if !ok {
				order = append(order, key)
			}
			best[key] = o.Next
		}
	}
	// In key order, so writers racing over the same partitions cannot deadlock.
	slices.SortFunc(order, func(a, b k) int {
		if c := strings.Compare(a.t, b.t); c != 0 {
			return c
		}
		return int(a.p - b.p)
	})
	t, p, n := make([]string, len(order)), make([]int32, len(order)), make([]int64, len(order))
	for i, key := range order {
		t[i], p[i], n[i] = key.t, key.p, best[key]
	}
	return t, p, n
}

// StoredOffsets returns the next offset per partition of topic that the
// schema holds everything before (partitions never written are absent).
func (w *Writer) StoredOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	rows, err := w.pool.Query(ctx, w.sql.readOffsets, topic)
	if err != nil {
		return nil, fmt.Errorf("read stored offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var p int32
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&p, &n}, func() error { out[p] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("read stored offsets of %s: %w", topic, err)
	}
	return out, nil
}

// HasStagingTable reports whether a connection of the pool can run batches.
func (w *Writer) HasStagingTable(ctx context.Context) error {
	var ok bool
	if err := w.pool.QueryRow(ctx, `SELECT to_regclass('pg_temp.seqflow_stage') IS NOT NULL`).Scan(&ok); err != nil {
		return fmt.Errorf("check staging table: %w", err)
	}
	if !ok {
		return ErrNoStagingTable
	}
	return nil
}
