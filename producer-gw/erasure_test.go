package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/erasure"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestErasure: with a KEK, bodies are sealed before they enter Kafka. The
// members read them in plaintext (push, sync, the changes preview) while
// no topic and no table holds one; once the sender's keys are destroyed,
// its bodies come back erased within the gateway's key cache TTL, the
// other member's do not, and the erased user can send nothing more. The
// rest of the erasure passes the group the user owned on, removes them
// through the log with the erasure record, and signs out their device; a
// rebuild from the log then equals the live store.
func TestErasure(t *testing.T) {
	p := newPipeline(t)
	kb := make([]byte, keystore.KeyBytes)
	_, _ = rand.Read(kb)
	kek := base64.StdEncoding.EncodeToString(kb)
	gw := p.gateway(map[string]string{"SEQFLOW_KEK": kek, "SEQFLOW_KEY_CACHE_TTL": "1s"})
	alice, bob := user("alice"), user("bob")
	ca, cb := p.connect(gw, alice, "d1"), p.connect(gw, bob, "d1")
	sid, _ := createGroup(ca, bob)

	// Markers no other test writes: found anywhere, they leaked.
	mark := "secret-" + uuid.NewString()[:12]
	body := func(who string, n int) string { return fmt.Sprintf("%s %s #%d", mark, who, n) }
	send := func(c *client, text string) int64 {
		id := newID()
		c.send(sendFrame(sid, id, text))
		return c.mustAckOK(id).Seq
	}
	a1 := send(ca, body("alice", 1))
	if got := textOf(t, cb.eventOf(sid, a1).Event); got != body("alice", 1) {
		t.Fatalf("bob's push of alice's message: %q", got)
	}
	a2 := send(ca, body("alice", 2))
	b1 := send(cb, body("bob", 1))
	p.waitStored(sid, a2) // an edit's target must be in the store
	eid := newID()
	ca.send(map[string]any{"op": "edit", "client_msg_id": eid, "session_id": sid, "target_seq": a2, "type": "text", "body": body("alice", 22)})
	ca.mustAckOK(eid)
	b2 := send(cb, body("bob", 2))
	p.waitStored(sid, b2)
	rid := newID()
	cb.send(map[string]any{"op": "recall", "client_msg_id": rid, "session_id": sid, "target_seq": b2})
	recall := cb.mustAckOK(rid).Seq
	a3 := send(ca, body("alice", 3))
	p.waitStored(sid, a3)
	var recalledBody []byte
	if err := p.pool.QueryRow(context.Background(), `SELECT body FROM messages WHERE session_id = $1 AND seq = $2`, sid, b2).Scan(&recalledBody); err != nil || recalledBody != nil {
		t.Errorf("the recalled message's row in the store: body %x (%v), want NULL", recalledBody, err)
	}

	page := syncAll(t, cb, sid)
	for seq, want := range map[int64]string{a1: body("alice", 1), a2: body("alice", 22), b1: body("bob", 1), a3: body("alice", 3)} {
		if got := textOf(t, page[seq]); got != want || page[seq].Erased {
			t.Errorf("sync before the erasure, seq %d: %q erased=%v, want %q", seq, got, page[seq].Erased, want)
		}
	}
	if m := page[b2]; !m.Recalled || len(m.Body) != 0 || recall <= b2 {
		t.Errorf("sync of the recalled message: %+v", m)
	}
	if pv := previewOf(t, cb, sid); pv != body("alice", 3) {
		t.Errorf("changes preview before the erasure: %q", pv)
	}

	// Nothing of any body in the log or the store.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leaks := scanForPlaintext(ctx, t, p, mark)
	if len(leaks) > 0 {
		t.Errorf("plaintext bodies found: %v", leaks)
	}

	ks, err := keystore.Open(ctx, p.pool, mustKEK(t, kek), keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Alice's key as the key store holds it (wrapped) and in the clear:
	// after the erasure neither may be found anywhere.
	var wrapped []byte
	if err := p.pool.QueryRow(ctx, `SELECT wrapped FROM seqflow_data_keys WHERE owner_user_id = $1`, alice).Scan(&wrapped); err != nil {
		t.Fatal(err)
	}
	dek, err := mustKEK(t, kek).Unwrap(ctx, wrapped)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(scanFor(ctx, t, p, dek)); n > 0 {
		t.Errorf("alice's data key in the clear found %d times before the erasure", n)
	}
	if where := scanFor(ctx, t, p, wrapped); len(where) != 1 || !strings.Contains(where[0], "seqflow_data_keys") {
		t.Errorf("the scan finds alice's wrapped key in %v, want the key table alone", where)
	}
	e, err := ks.EraseUser(ctx, alice, "test")
	if err != nil || e.KeysDestroyed != 1 {
		t.Fatalf("erase alice: %+v %v, want 1 key destroyed", e, err)
	}
	erasedAt := time.Now()
	deadline := time.Now().Add(10 * time.Second) // the gateway's key cache: 1s
	for {
		page = syncAll(t, cb, sid)
		if page[a1].Erased || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, seq := range []int64{a1, a2, a3} {
		if m := page[seq]; !m.Erased || len(m.Body) != 0 || m.SenderUserID != alice || m.Seq != seq {
			t.Errorf("alice's seq %d after her erasure: %+v, want erased with no body, its place kept", seq, m)
		}
	}
	if m := page[b1]; m.Erased || textOf(t, m) != body("bob", 1) {
		t.Errorf("bob's message after alice's erasure: %+v", m)
	}
	if pv := previewOf(t, cb, sid); pv != "[erased]" {
		t.Errorf("changes preview after the erasure: %q, want [erased]", pv)
	}
	// The gateway's caches hold a key for at most the TTL (1 s) after its
	// last confirmation, which came before the erasure: the opening key
	// may leave before the sealing one, so the send waits for the bound.
	time.Sleep(time.Until(erasedAt.Add(1500 * time.Millisecond)))
	id := newID()
	ca.send(sendFrame(sid, id, "after"))
	if f := ca.ackOf(id); f.Op != wire.OpError || f.Error.Name != "not_permitted" {
		t.Errorf("a send by the erased user answered %+v, want not_permitted", f)
	}
	if n := len(scanForPlaintext(ctx, t, p, mark)); n > 0 {
		t.Errorf("%d plaintext bodies after the erasure", n)
	}
	for what, k := range map[string][]byte{"wrapped": wrapped, "in the clear": dek} {
		if where := scanFor(ctx, t, p, k); len(where) > 0 {
			t.Errorf("alice's data key (%s) found after the erasure: %v", what, where)
		}
	}

	// The whole erasure (the keys are gone already): alice, the group's
	// owner, passes it to bob and leaves through the log with the erasure
	// record, and her device is signed out.
	msgs, err := store.Open(ctx, p.pool, "public")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kgo.NewClient(append(eventlog.ClientOpts(p.st.KafkaBrokers, "gw-test-erasure"), eventlog.ProducerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	rdb := redis.NewClient(&redis.Options{Addr: p.st.RedisAddr})
	defer rdb.Close()
	r, err := erasure.EraseUser(ctx, erasure.Deps{Keys: ks, Store: msgs, Kafka: kc, Topics: p.topics,
		Devices: presence.NewDevices(rdb, 0)}, alice, "dpo-ticket-1")
	if err != nil || !r.Again || r.Sessions != 1 || r.Transfers != 1 || r.DevicesSignedOut != 1 {
		t.Fatalf("erasure: %+v %v, want again, 1 session, 1 transfer, 1 device", r, err)
	}
	transfer := cb.expect("the ownership transfer to bob", func(f frame) bool {
		return f.Op == wire.OpEvent && f.Event.SessionID == sid && f.Event.Kind == wire.KindGroupChange && f.Event.SenderUserID == alice
	})
	leave := cb.expect("alice's leave", func(f frame) bool {
		return f.Op == wire.OpEvent && f.Event.SessionID == sid && f.Event.Kind == wire.KindMembership && f.Event.Action == wire.ActionRemove
	})
	if leave.Event.Seq <= transfer.Event.Seq || len(leave.Event.UserIDs) != 1 || leave.Event.UserIDs[0] != alice {
		t.Errorf("transfer %+v, leave %+v: want the transfer, then alice's removal", transfer.Event, leave.Event)
	}
	p.waitStored(sid, leave.Event.Seq)
	ms, err := msgs.MemberPage(ctx, sid, "", 10)
	if err != nil || len(ms) != 1 || ms[0].UserID != bob || ms[0].Role != "owner" {
		t.Errorf("members after the erasure: %+v %v, want bob, the owner", ms, err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for ca.closeErr() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if err := ca.closeErr(); err == nil || !strings.Contains(err.Error(), "4002") {
		t.Errorf("alice's connection after the erasure: %v, want closed with 4002", err)
	}
	var record *imv1.Erasure
	readAll(ctx, t, p, p.topics.Sequenced, func(rec *kgo.Record) {
		var ev imv1.SequencedEvent
		if proto.Unmarshal(rec.Value, &ev) == nil && ev.SessionId == sid && ev.GetMembership().GetErasure() != nil {
			record = ev.GetMembership().GetErasure()
		}
	})
	if record.GetActor() != "dpo-ticket-1" || record.GetErasedAtMs() != r.ErasedAt.UnixMilli() {
		t.Errorf("the erasure record in the log: %v, want actor dpo-ticket-1 at %d", record, r.ErasedAt.UnixMilli())
	}

	// A rebuild from the log after the erasure: the same rows as the live
	// store (sealed bodies byte for byte, alice's now tombstones), and the
	// log audit passes.
	pool, err := store.NewPool(ctx, p.st.PGURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := "erasure_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	if _, err := rebuild.Replay(ctx, rebuild.ReplayConfig{Brokers: p.st.KafkaBrokers, Topics: p.topics, Pool: pool, Schema: schema}); err != nil {
		t.Fatal(err)
	}
	var differ int
	cols := `seq, msg_id, sender_user_id, kind, content_type, body, body_key_id, edited_body, edited_body_key_id, edited_seq, recalled_seq, target_seq`
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (
		(SELECT %[1]s FROM public.messages WHERE session_id = $1 EXCEPT SELECT %[1]s FROM %[2]s.messages WHERE session_id = $1)
		UNION ALL
		(SELECT %[1]s FROM %[2]s.messages WHERE session_id = $1 EXCEPT SELECT %[1]s FROM public.messages WHERE session_id = $1)) d`,
		cols, schema), sid).Scan(&differ); err != nil {
		t.Fatal(err)
	}
	var live, rebuilt int
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM public.messages WHERE session_id = $1),
		(SELECT count(*) FROM %s.messages WHERE session_id = $1)`, schema), sid).Scan(&live, &rebuilt); err != nil {
		t.Fatal(err)
	}
	if differ != 0 || live != rebuilt || live < 6 {
		t.Errorf("the rebuilt store differs from the live one in %d rows of %s (%d rows live, %d rebuilt)", differ, sid, live, rebuilt)
	}
	l, err := rebuild.ReadLog(ctx, p.st.KafkaBrokers, p.topics.Sequenced, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := rebuild.Compare(ctx, pool, schema, l); err != nil || !rep.Equal() {
		t.Errorf("verify of the rebuilt store: %+v %v", rep, err)
	}
}

func mustKEK(t *testing.T, s string) *keystore.LocalKEK {
	t.Helper()
	k, err := keystore.ParseKEK(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// textOf is a text message's body as a string ("" when it has none).
func textOf(t *testing.T, m wire.Message) string {
	t.Helper()
	if len(m.Body) == 0 {
		return ""
	}
	var s string
	if err := json.Unmarshal(m.Body, &s); err != nil {
		t.Fatalf("body %s is not a JSON string: %v", m.Body, err)
	}
	return s
}

// syncAll is a session's messages by seq, from one sync from the start.
func syncAll(t *testing.T, c *client, sid string) map[int64]wire.Message {
	t.Helper()
	req := newID()
	c.send(map[string]any{"op": "sync", "req_id": req, "session_id": sid, "after_seq": 0, "limit": 100})
	f := c.result(req)
	if f.Op != wire.OpResult {
		t.Fatalf("sync: %+v", f)
	}
	out := map[int64]wire.Message{}
	for _, m := range f.Messages {
		out[m.Seq] = m
	}
	return out
}

func previewOf(t *testing.T, c *client, sid string) string {
	t.Helper()
	req := newID()
	c.send(map[string]any{"op": "changes", "req_id": req})
	for _, s := range c.result(req).Sessions {
		if s.SessionID == sid {
			return s.Preview
		}
	}
	t.Fatalf("changes lists no %s", sid)
	return ""
}

// scanForPlaintext looks for mark, as bytes and as the hex PostgreSQL
// renders bytea in, in every committed record (key, value, headers) of
// the pipeline's topics and in every row of every table of the store's
// schema and the key store; it returns where.
func scanForPlaintext(ctx context.Context, t *testing.T, p *pipeline, mark string) []string {
	t.Helper()
	return scanFor(ctx, t, p, []byte(mark))
}

// scanFor is scanForPlaintext for any bytes: in the tables, bytes that
// are not text are looked for in hex only.
func scanFor(ctx context.Context, t *testing.T, p *pipeline, needle []byte) []string {
	t.Helper()
	mark := string(needle)
	if !utf8.Valid(needle) || bytes.IndexByte(needle, 0) >= 0 {
		mark = hex.EncodeToString(needle) // never text in a row
	}
	var leaks []string
	for _, topic := range []string{p.topics.Uplink, p.topics.Sequenced, p.topics.Duplicates, p.topics.Receipts, p.topics.Offline, p.topics.DeadLetter} {
		readAll(ctx, t, p, topic, func(r *kgo.Record) {
			in := bytes.Contains(r.Value, []byte(mark)) || bytes.Contains(r.Key, []byte(mark))
			for _, h := range r.Headers {
				in = in || bytes.Contains(h.Value, []byte(mark))
			}
			if in {
				leaks = append(leaks, fmt.Sprintf("%s/%d@%d", topic, r.Partition, r.Offset))
			}
		})
	}
	rows, err := p.pool.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	hexMark := hex.EncodeToString(needle)
	for _, tb := range tables {
		var n int
		q := fmt.Sprintf(`SELECT count(*) FROM public.%s x WHERE strpos(x::text, $1) > 0 OR strpos(x::text, $2) > 0`, pgx.Identifier{tb}.Sanitize())
		if err := p.pool.QueryRow(ctx, q, mark, hexMark).Scan(&n); err != nil {
			t.Fatalf("scan %s: %v", tb, err)
		}
		if n > 0 {
			leaks = append(leaks, fmt.Sprintf("table %s: %d rows", tb, n))
		}
	}
	if len(tables) < 5 || !strings.Contains(strings.Join(tables, ","), "messages") {
		t.Fatalf("the scan saw only the tables %v", tables)
	}
	return leaks
}

// TestRetentionExpiresBodies: with one-second key periods, a session's
// retention of one second shreds the bodies of periods that ended before
// it (they come back erased, in their place) and keeps the current one.
func TestRetentionExpiresBodies(t *testing.T) {
	p := newPipeline(t)
	kb := make([]byte, keystore.KeyBytes)
	_, _ = rand.Read(kb)
	kek := base64.StdEncoding.EncodeToString(kb)
	gw := p.gateway(map[string]string{"SEQFLOW_KEK": kek, "SEQFLOW_KEY_PERIOD": "1s", "SEQFLOW_KEY_CACHE_TTL": "1s"})
	alice, bob := user("alice"), user("bob")
	ca := p.connect(gw, alice, "d1")
	sid, _ := createGroup(ca, bob)
	send := func(text string) int64 {
		id := newID()
		ca.send(sendFrame(sid, id, text))
		return ca.mustAckOK(id).Seq
	}
	old := send("old words")
	time.Sleep(2100 * time.Millisecond) // the next period, and one more
	cur := send("new words")
	p.waitStored(sid, cur)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ks, err := keystore.Open(ctx, p.pool, mustKEK(t, kek), keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.SetRetention(ctx, sid, time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := ks.ApplyRetention(ctx); err != nil || n < 1 {
		t.Fatalf("apply retention: %d keys destroyed, %v", n, err)
	}
	var page map[int64]wire.Message
	deadline := time.Now().Add(10 * time.Second)
	for {
		page = syncAll(t, ca, sid)
		if page[old].Erased || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if m := page[old]; !m.Erased || len(m.Body) != 0 {
		t.Errorf("the expired message: %+v, want erased", m)
	}
	if m := page[cur]; m.Erased || textOf(t, m) != "new words" {
		t.Errorf("the current message: %+v", m)
	}
}

// TestErasureLeavesSessionsNotYetStored: a group the user created just
// before the erasure, in the log but not yet in the store (its persister
// is down here), is left too: the erasure waits until the store holds the
// log up to the erasure and lists the user's sessions again, so it
// answers only once every session is left (with ownership passed on).
func TestErasureLeavesSessionsNotYetStored(t *testing.T) {
	p := newPipeline(t)
	kb := make([]byte, keystore.KeyBytes)
	_, _ = rand.Read(kb)
	kek := base64.StdEncoding.EncodeToString(kb)
	gw := p.gateway(map[string]string{"SEQFLOW_KEK": kek})
	alice, bob := user("alice"), user("bob")
	ca := p.connect(gw, alice, "d1")
	stored, seq := createGroup(ca, bob)
	p.waitStored(stored, seq)
	p.procs["persister"].Kill()
	late, _ := createGroup(ca, bob)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ks, err := keystore.Open(ctx, p.pool, mustKEK(t, kek), keystore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := store.Open(ctx, p.pool, "public")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kgo.NewClient(append(eventlog.ClientOpts(p.st.KafkaBrokers, "gw-test-erasure"), eventlog.ProducerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	type outcome struct {
		r   erasure.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := erasure.EraseUser(ctx, erasure.Deps{Keys: ks, Store: msgs, Kafka: kc, Topics: p.topics}, alice, "dpo-ticket-2")
		done <- outcome{r, err}
	}()
	// The first listing (the store holds only the first group) is made
	// while the persister is down; it comes back a few seconds later.
	time.Sleep(2 * time.Second)
	select {
	case o := <-done:
		t.Fatalf("the erasure answered while the store lacked a session of the user: %+v %v", o.r, o.err)
	default:
	}
	if err := p.procs["persister"].Restart(); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || o.r.Sessions != 2 || o.r.Transfers != 2 {
		t.Fatalf("erasure: %+v %v, want 2 sessions left, 2 ownership transfers", o.r, o.err)
	}
	for _, sid := range []string{stored, late} {
		deadline := time.Now().Add(20 * time.Second)
		for {
			in, err := msgs.IsMember(ctx, sid, alice)
			if err != nil {
				t.Fatal(err)
			}
			if !in {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("alice is still a member of %s 20 s after her erasure", sid)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
