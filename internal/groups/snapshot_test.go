package groups

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestSnapshotPlusTailEqualsTheLog drives random commands over several
// groups as a partition's log, saves the changed states now and then
// (TakeDirty, Save) on the real PostgreSQL, and at many points checks that
// the stored snapshot plus the log after its offset replays to the state
// the whole log replays to. A change the dirty tracking missed, or a save
// that stored a state other than its offset's, fails it.
func TestSnapshotPlusTailEqualsTheLog(t *testing.T) {
	st := stack.Require(t, "pg")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrate.Up(ctx, pool, ""); err != nil {
		t.Fatal(err)
	}
	store := NewSnapshotStore(pool)
	topic := "t-" + uuid.NewString()[:8] + ".im.sequenced.v1"

	rng := rand.New(rand.NewPCG(5, 6))
	live := NewPartition(10)
	var log []*imv1.SequencedEvent // offset = index
	sessions := []string{"g-a", "g-b", "g-c", "g-d"}
	for _, sid := range sessions {
		u := up("own", &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP,
			MemberUserIds: []string{"adm", "mem"}}})
		u.SessionId = sid
		if r := live.Sequence(u, 1); r != nil {
			t.Fatal(r)
		}
		log = append(log, eventOf(u, int64(len(log)+1), 1))
	}
	checked, saved := 0, 0
	for i := range 2000 {
		u := randomCommand(rng)
		u.SessionId = sessions[rng.IntN(len(sessions))]
		if live.Sequence(u, int64(1000+i)) == nil {
			log = append(log, eventOf(u, int64(len(log)+1), int64(1000+i)))
		}
		if rng.IntN(40) == 0 {
			if err := store.Save(ctx, topic, 0, int64(len(log)), live.TakeDirty()); err != nil && !errors.Is(err, ErrStaleSnapshot) {
				t.Fatal(err)
			}
			saved++
		}
		if rng.IntN(25) == 0 {
			checked++
			sp, next, found, err := store.Load(ctx, topic, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if !found {
				sp, next = NewPartition(10), 0
			}
			for _, e := range log[next:] {
				sp.Replay(e)
			}
			full := NewPartition(10)
			for _, e := range log {
				full.Replay(e)
			}
			if !reflect.DeepEqual(sp.sessions, full.sessions) {
				t.Fatalf("after %d events: snapshot at %d plus the tail differs from the whole log", len(log), next)
			}
			if !reflect.DeepEqual(live.sessions, full.sessions) {
				t.Fatalf("after %d events: live state differs from the log's", len(log))
			}
		}
	}
	if checked < 20 || saved < 20 || len(log) < 500 {
		t.Fatalf("checked %d times over %d saves and %d events: too little to show anything", checked, saved, len(log))
	}
	// An older save never replaces a newer one.
	if err := store.Save(ctx, topic, 0, 1, map[string]*imv1.GroupState{}); !errors.Is(err, ErrStaleSnapshot) {
		t.Fatalf("a save at offset 1 after later ones: %v, want ErrStaleSnapshot", err)
	}
}
