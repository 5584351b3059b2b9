package groups

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

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

// BenchmarkSnapshot_100k saves and loads the snapshot of a partition
// holding one 100,000-member group on the real PostgreSQL: what a new
// owner of the partition pays before reading the log's tail (seqbench
// keys group_snapshot_save_100k_ms, group_snapshot_load_100k_ms).
func BenchmarkSnapshot_100k(b *testing.B) {
	st := stack.Require(b, "pg")
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := migrate.Up(ctx, pool, ""); err != nil {
		b.Fatal(err)
	}
	store := NewSnapshotStore(pool)
	topic := "b-" + uuid.NewString()[:8] + ".im.sequenced.v1"
	b.Cleanup(func() {
		_, _ = pool.Exec(ctx, `DELETE FROM group_snapshot_sessions WHERE topic = $1`, topic)
		_, _ = pool.Exec(ctx, `DELETE FROM group_snapshots WHERE topic = $1`, topic)
	})
	p := NewPartition(0)
	members := make([]string, 0, 10_000)
	for i := range 100_000 {
		members = append(members, fmt.Sprintf("user-%06d", i))
		if len(members) == cap(members) {
			var u *imv1.Uplink
			if i < 10_000 {
				u = &imv1.Uplink{SessionId: "g-big", SenderUserId: "owner", Command: &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{
					Kind: imv1.SessionKind_SESSION_KIND_GROUP, MemberUserIds: members}}}
			} else {
				u = &imv1.Uplink{SessionId: "g-big", SenderUserId: "owner", Command: &imv1.Uplink_Membership{Membership: &imv1.MembershipChange{
					Op: imv1.MembershipChange_OP_ADD, UserIds: members}}}
			}
			if r := p.Sequence(u, 1); r != nil {
				b.Fatal(r)
			}
			members = make([]string, 0, 10_000)
		}
	}
	if n := len(p.Session("g-big").Members); n != 100_001 {
		b.Fatalf("the group has %d members", n)
	}
	var save, load time.Duration
	for i := 0; b.Loop(); i++ {
		p.MarkDirty([]string{"g-big"})
		start := time.Now()
		if err := store.Save(ctx, topic, 0, int64(i+1), p.TakeDirty()); err != nil {
			b.Fatal(err)
		}
		save += time.Since(start)
		start = time.Now()
		got, _, found, err := store.Load(ctx, topic, 0, 0)
		if err != nil || !found || len(got.Session("g-big").Members) != 100_001 {
			b.Fatalf("load: found %v, err %v", found, err)
		}
		load += time.Since(start)
	}
	b.ReportMetric(float64(save.Milliseconds())/float64(b.N), "save_ms")
	b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load_ms")
}
