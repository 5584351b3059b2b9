package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// freshSchema migrates a new schema of its own for the test and drops it
// afterwards; tests never share store tables.
func freshSchema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	st := stack.Require(t, "pg")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := NewPool(ctx, st.PGURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	schema := "t_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := migrate.Up(ctx, pool, schema); err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	})
	return pool, schema
}

func require[T comparable](t testing.TB, got, want T, what string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func requireNoErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// ev builders: events as the sequencer emits them.
func msgEv(session string, seq int64, sender, text string) *imv1.SequencedEvent {
	return &imv1.SequencedEvent{SessionId: session, Seq: seq, MsgId: msgID(session, seq), ClientMsgId: fmt.Sprintf("c%d", seq),
		SenderUserId: sender, SenderDeviceId: "d1", ServerTsMs: 1000 + seq,
		Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(text)}}}
}

func createEv(session string, seq int64, sender, title string, members ...string) *imv1.SequencedEvent {
	e := msgEv(session, seq, sender, "")
	e.Payload = &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP, Title: title, MemberUserIds: members}}
	return e
}

func memberEv(session string, seq int64, sender string, op imv1.MembershipChange_Op, users ...string) *imv1.SequencedEvent {
	e := msgEv(session, seq, sender, "")
	e.Payload = &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: op, UserIds: users}}
	return e
}

func editEv(session string, seq int64, sender string, target int64, text string) *imv1.SequencedEvent {
	e := msgEv(session, seq, sender, "")
	e.Payload = &imv1.SequencedEvent_Edit{Edit: &imv1.Edit{TargetSeq: target, Content: &imv1.MessageContent{Type: "text", Body: []byte(text)}}}
	return e
}

func recallEv(session string, seq int64, sender string, target int64) *imv1.SequencedEvent {
	e := msgEv(session, seq, sender, "")
	e.Payload = &imv1.SequencedEvent_Recall{Recall: &imv1.Recall{TargetSeq: target}}
	return e
}

// msgID makes distinct IDs per (session, seq) in a test.
func msgID(session string, seq int64) int64 {
	var h int64 = 1469598103
	for _, c := range session {
		h = h*31 + int64(c)
	}
	return (h&0xffffff)<<24 | seq
}

func rowsOf(t testing.TB, evs ...*imv1.SequencedEvent) []Row {
	t.Helper()
	out := make([]Row, len(evs))
	for i, e := range evs {
		r, err := RowOf(e, 0, int64(i))
		requireNoErr(t, err)
		out[i] = r
	}
	return out
}
