package rebuild

import (
	"reflect"
	"testing"

	"github.com/seqflow/seqflow/internal/store"
)

func TestTaken(t *testing.T) {
	row := func(session string, seq int64, kind, op string, users ...string) store.Row {
		return store.Row{SessionID: session, Seq: seq, Kind: kind, MemberOp: op, MemberIDs: users}
	}
	rows := []store.Row{
		// d-1: mallory joined before any create, then bob was added too.
		row("d-1", 1, store.KindGroup, store.OpAdd, "mallory"),
		row("d-1", 2, store.KindMembership, store.OpAdd, "bob", "mallory"),
		row("d-1", 3, store.KindMessage, ""),
		// g-ok: created first; later adds are the rules' business.
		row("g-ok", 1, store.KindSessionCreate, store.OpAdd, "alice", "bob"),
		row("g-ok", 2, store.KindMembership, store.OpAdd, "carol"),
		// d-2: taken, then reclaimed, then created by its pair.
		row("d-2", 1, store.KindGroup, store.OpAdd, "mallory"),
		row("d-2", 2, store.KindMembership, store.OpRemove, "mallory"),
		row("d-2", 3, store.KindSessionCreate, store.OpAdd, "alice", "bob"),
		// t-1: a tool's messages only.
		row("t-1", 1, store.KindMessage, ""),
		// d-3: a role change without members is not a taking.
		row("d-3", 1, store.KindGroup, "role:admin", "x"),
	}
	got := Taken(rows)
	want := []TakenSession{{SessionID: "d-1", FirstSeq: 1, Users: []string{"bob", "mallory"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Taken = %+v, want %+v", got, want)
	}
}
