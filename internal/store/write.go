package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
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
	pool   *pgxpool.Pool
	schema string
	sql    writerSQL
}

// NewWriter returns a Writer into schema over pool, which must be set up by
// ConfigurePool (NewPool does).
func NewWriter(pool *pgxpool.Pool, schema string) *Writer {
	return &Writer{pool: pool, schema: schema, sql: buildSQL(pgx.Identifier{schema}.Sanitize())}
}

// Schema is the schema w writes into.
func (w *Writer) Schema() string { return w.schema }

// Write stores b in one database transaction and one network round trip
// (plus one when some rows were refused, to tell duplicates from
// conflicts). Rows already stored are duplicates: no-ops. Rows that clash
// with stored ones come back as Conflicts and change nothing. An edit or
// recall also updates its target, a membership change or session_create the
// members, every row the sessions table, receipts the cursors, all in the
// same transaction, together with b.Offsets.
//
// On error nothing of b is stored. IsPoison(err) means the data itself was
// refused (split the batch to find the record); anything else is worth
// retrying.
func (w *Writer) Write(ctx context.Context, b *Batch) (Result, error) {
	var res Result
	keep, dups, conflicts := dedupeBatch(b.Rows)
	res.Duplicates, res.Conflicts = dups, conflicts
	pb := &pgx.Batch{}
	var rejected []int32
	if len(keep) > 0 {
		queueRows(pb, w.sql, b.Rows, keep)
		collect := func(rows pgx.Rows) error {
			for rows.Next() {
				var i int32
				if err := rows.Scan(&i); err != nil {
					return err
				}
				rejected = append(rejected, i)
			}
			return rows.Err()
		}
		pb.Queue(w.sql.ids).Query(collect)
		pb.Queue(w.sql.messages).Query(collect)
		kinds := map[string]bool{}
		layers := memberLayers(b.Rows, keep)
		for _, i := range keep {
			kinds[b.Rows[i].Kind] = true
		}
		if kinds[KindEdit] {
			pb.Queue(w.sql.edits)
		}
		if kinds[KindRecall] {
			pb.Queue(w.sql.recalls)
		}
		pb.Queue(w.sql.sessions)
		if kinds[KindEdit] {
			pb.Queue(w.sql.editPreview)
		}
		if kinds[KindRecall] {
			pb.Queue(w.sql.recallPreview)
		}
		for k := 1; k <= layers; k++ {
			pb.Queue(w.sql.memberAdd, k)
			pb.Queue(w.sql.memberRemove, k)
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
	if pb.Len() == 0 {
		return res, nil
	}
	// No explicit BEGIN: a pipelined batch runs as one implicit transaction
	// that commits at its end, or not at all.
	if err := w.pool.SendBatch(ctx, pb).Close(); err != nil {
		return Result{}, fmt.Errorf("write batch of %d rows: %w", len(keep), err)
	}
	res.Inserted = len(keep) - len(rejected)
	if len(rejected) == 0 {
		return res, nil
	}
	more, err := w.classify(ctx, b.Rows, rejected)
	if err != nil {
		return res, err
	}
	res.Duplicates += len(rejected) - len(more)
	res.Conflicts = append(res.Conflicts, more...)
	slices.SortFunc(res.Conflicts, func(a, b Conflict) int { return a.Index - b.Index })
	return res, nil
}

// ErrRaced means a row was refused because a concurrent transaction held
// its key, and that transaction did not commit: the row is not stored. The
// batch must be written again.
var ErrRaced = errors.New("store: a concurrent writer held a row and rolled back; write the batch again")

// classify tells the refused rows' duplicates from conflicts, reading what
// the store holds now (after the batch committed).
func (w *Writer) classify(ctx context.Context, rows []Row, rejected []int32) ([]Conflict, error) {
	sid := make([]string, len(rejected))
	seq := make([]int64, len(rejected))
	mid := make([]int64, len(rejected))
	for j, i := range rejected {
		sid[j], seq[j], mid[j] = rows[i].SessionID, rows[i].Seq, rows[i].MsgID
	}
	res, err := w.pool.Query(ctx, w.sql.classify, rejected, sid, seq, mid)
	if err != nil {
		return nil, fmt.Errorf("classify refused rows: %w", err)
	}
	type held struct {
		i            int32
		atKey, idSeq *int64
		idSession    *string
	}
	hs, err := pgx.CollectRows(res, func(r pgx.CollectableRow) (held, error) {
		var h held
		err := r.Scan(&h.i, &h.atKey, &h.idSession, &h.idSeq)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("classify refused rows: %w", err)
	}
	var out []Conflict
	for _, h := range hs {
		r := rows[h.i]
		switch {
		case h.atKey != nil && *h.atKey == r.MsgID:
			// an exact repeat: a duplicate
		case h.atKey != nil:
			out = append(out, Conflict{int(h.i), fmt.Sprintf("seq %d of session %s already holds msg_id %d, not %d", r.Seq, r.SessionID, *h.atKey, r.MsgID)})
		case h.idSession != nil:
			out = append(out, Conflict{int(h.i), fmt.Sprintf("msg_id %d already belongs to session %s seq %d, not %s seq %d", r.MsgID, *h.idSession, *h.idSeq, r.SessionID, r.Seq)})
		default:
			return nil, ErrRaced
		}
	}
	return out, nil
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

func queueRows(pb *pgx.Batch, s writerSQL, rows []Row, keep []int) {
	n := len(keep)
	var (
		idx, part                   = make([]int32, n), make([]int32, n)
		sid, cmid, su, sd, kind, ct = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		op, mem, sk, title, pv      = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seq, mid, ts, sts, gts, lo  = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		body                        = make([][]byte, n)
	)
	for j, i := range keep {
		r := &rows[i]
		idx[j], sid[j], seq[j], mid[j], cmid[j], su[j], sd[j] = int32(i), r.SessionID, r.Seq, r.MsgID, r.ClientMsgID, r.SenderUserID, r.SenderDeviceID
		kind[j], ct[j], body[j], ts[j], op[j] = r.Kind, r.ContentType, r.Body, r.TargetSeq, r.MemberOp
		if r.MemberIDs != nil {
			b, _ := json.Marshal(r.MemberIDs)
			mem[j] = string(b)
		}
		sk[j], title[j], sts[j], gts[j], part[j], lo[j] = r.SessionKind, r.Title, r.ServerTsMs, r.GatewayTsMs, r.Partition, r.Offset
		if r.Kind == KindMessage || r.Kind == KindEdit {
			pv[j] = Preview(r.ContentType, r.Body)
		}
	}
	pb.Queue(s.stage, idx, sid, seq, mid, cmid, su, sd, kind, ct, body, ts, op, mem, sk, title, sts, gts, part, lo, pv)
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
