package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// gatedStore answers Changes with states, once the test lets it (each
// call sends on asked, then waits on release); the rest of historyStore
// is not used.
type gatedStore struct {
	historyStore
	asked, release chan struct{}
	states         func() []store.SessionState
}

func (s *gatedStore) Changes(ctx context.Context, _ string) ([]store.SessionState, error) {
	if s.asked != nil {
		s.asked <- struct{}{}
		<-s.release
	}
	return s.states(), nil
}

type allMembers struct{}

func (allMembers) IsMember(context.Context, string, string) (bool, error) { return true, nil }
func (allMembers) mayReceive(string, string, int64) bool                  { return true }

// countingConn is alice's connection with no socket: frames stay in out,
// the store is st.
func countingConn(t *testing.T, st historyStore) *conn {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	m := newMetrics(prometheus.NewRegistry())
	cfg := Config{RatePerUser: 1 << 20, RateBurst: 1 << 20}
	a := &api{cfg: cfg, limits: newLimiter(nil, cfg, log, m, time.Now), history: newHistory(st, allMembers{}, nil, log),
		recounter: newRecounter(nil, log, m), log: log, m: m}
	return &conn{api: a, p: auth.Principal{UserID: "alice", DeviceID: "phone"}, out: make(chan outFrame, 4096),
		closing: make(chan struct{}), lastSeq: map[string]int64{}}
}

// appCounts is what an app holds after applying, in arrival order, every
// frame with counts (as docs/protocol.md's Node example and the SDK's
// OnUnread do): a changes result replaces everything, an event or an
// unread frame sets its session and the total.
type appCounts struct {
	sessions map[string]int64
	total    int64
	frames   []string
}

func (a *appCounts) apply(t *testing.T, b []byte) {
	t.Helper()
	var f struct {
		Op          string               `json:"op"`
		SessionID   string               `json:"session_id"`
		Event       *wire.Message        `json:"event"`
		Sessions    []wire.SessionChange `json:"sessions"`
		Unread      *int64               `json:"unread"`
		TotalUnread *int64               `json:"total_unread"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	a.frames = append(a.frames, string(b))
	switch {
	case f.TotalUnread == nil:
	case f.Op == wire.OpResult:
		a.sessions = map[string]int64{}
		for _, s := range f.Sessions {
			if s.Unread > 0 {
				a.sessions[s.SessionID] = s.Unread
			}
		}
		a.total = *f.TotalUnread
	case f.Op == wire.OpEvent && f.Unread != nil:
		a.set(f.Event.SessionID, *f.Unread, *f.TotalUnread)
	case f.Op == wire.OpUnread && f.Unread != nil:
		a.set(f.SessionID, *f.Unread, *f.TotalUnread)
	}
}

func (a *appCounts) set(session string, n, total int64) {
	if a.sessions == nil {
		a.sessions = map[string]int64{}
	}
	delete(a.sessions, session)
	if n > 0 {
		a.sessions[session] = n
	}
	a.total = total
}

// drain applies every queued frame.
func (a *appCounts) drain(t *testing.T, c *conn) {
	t.Helper()
	for {
		select {
		case f := <-c.out:
			a.apply(t, f.b)
		default:
			return
		}
	}
}

// gatewayCounts is c's counts, sessions with none left out.
func gatewayCounts(c *conn) (map[string]int64, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]int64{}
	for id, s := range c.unread.sessions {
		if s.unread() > 0 {
			m[id] = s.unread()
		}
	}
	return m, c.unread.total
}

// pushFrame delivers ev to c as the downlink does.
func pushFrame(t *testing.T, c *conn, ev *imv1.SequencedEvent) {
	t.Helper()
	b, err := (&wire.EventFrame{Op: wire.OpEvent, Event: wire.FromEvent(ev)}).AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.deliver(time.Now(), ev.SessionId, ev.Seq, b, false, func() unreadNote { return noteOf(ev) }); got != "delivered" {
		t.Fatalf("deliver %s/%d: %s", ev.SessionId, ev.Seq, got)
	}
}

// TestUnreadChangesWhileSeeding: what the connection writes and learns
// while its changes is being answered — messages the store did not hold
// yet, a read of the user's on another device, a session joined, a
// session left — is in the counts the changes result carries, or in a
// frame after it, so an app applying the frames in order ends with the
// gateway's counts, and those are the right ones.
func TestUnreadChangesWhileSeeding(t *testing.T) {
	// The store: s1 2 unread (read up to 3 of 5), s2 3 (read up to 7 of
	// 10), s4 2 (read up to 2 of 4).
	states := []store.SessionState{
		{SessionID: "s1", MaxSeq: 5, ReadSeq: 3, JoinedSeq: 1, Unread: 2},
		{SessionID: "s2", MaxSeq: 10, ReadSeq: 7, JoinedSeq: 1, Unread: 3},
		{SessionID: "s4", MaxSeq: 4, ReadSeq: 2, JoinedSeq: 1, Unread: 2},
	}
	opRemove := imv1.MembershipChange_OP_REMOVE
	for _, c := range []struct {
		name    string
		during  func(t *testing.T, c *conn)
		want    map[string]int64
		wantTot int64
		// readFrame: the session whose read the last frame, an unread
		// frame after the result, tells.
		readFrame string
	}{
		{
			name: "messages the store did not hold yet",
			during: func(t *testing.T, c *conn) {
				pushFrame(t, c, uMsg("s1", 6, "bob"))
				pushFrame(t, c, uMsg("s1", 7, "bob"))
			},
			want:    map[string]int64{"s1": 4, "s2": 3, "s4": 2},
			wantTot: 9,
		},
		{
			name:      "a read on another device",
			during:    func(t *testing.T, c *conn) { c.ownRead("s2", 10) },
			want:      map[string]int64{"s1": 2, "s4": 2},
			wantTot:   4,
			readFrame: "s2",
		},
		{
			name: "a read, then a message",
			during: func(t *testing.T, c *conn) {
				c.ownRead("s2", 10)
				pushFrame(t, c, uMsg("s2", 11, "carol"))
			},
			want:      map[string]int64{"s1": 2, "s2": 1, "s4": 2},
			wantTot:   5,
			readFrame: "s2",
		},
		{
			name: "a session joined, with a message",
			during: func(t *testing.T, c *conn) {
				pushFrame(t, c, uCreate("s9", 1, "bob", "alice"))
				pushFrame(t, c, uMsg("s9", 2, "bob"))
			},
			want:    map[string]int64{"s1": 2, "s2": 3, "s4": 2, "s9": 1},
			wantTot: 8,
		},
		{
			name:    "a session left",
			during:  func(t *testing.T, c *conn) { pushFrame(t, c, uMember("s4", 5, "bob", opRemove, "alice")) },
			want:    map[string]int64{"s1": 2, "s2": 3},
			wantTot: 5,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &gatedStore{asked: make(chan struct{}), release: make(chan struct{}), states: func() []store.SessionState { return states }}
			cn := countingConn(t, st)
			done := make(chan struct{})
			go func() { defer close(done); cn.handle(&wire.ClientFrame{Op: wire.OpChanges, ReqID: "c1"}) }()
			<-st.asked
			c.during(t, cn)
			close(st.release)
			<-done
			var app appCounts
			app.drain(t, cn)
			gw, gwTot := gatewayCounts(cn)
			if !maps.Equal(gw, c.want) || gwTot != c.wantTot {
				t.Errorf("gateway: %v total %d, want %v total %d", gw, gwTot, c.want, c.wantTot)
			}
			if !maps.Equal(app.sessions, c.want) || app.total != c.wantTot {
				t.Errorf("app: %v total %d, want %v total %d; frames:\n%q", app.sessions, app.total, c.want, c.wantTot, app.frames)
			}
			if c.readFrame != "" {
				var last wire.UnreadFrame
				if n := len(app.frames); n < 2 || json.Unmarshal([]byte(app.frames[n-1]), &last) != nil ||
					last.Op != wire.OpUnread || last.SessionID != c.readFrame || !strings.Contains(app.frames[n-2], `"op":"result"`) {
					t.Errorf("want the result, then an unread frame of %s; frames:\n%q", c.readFrame, app.frames)
				}
			}
		})
	}
}
