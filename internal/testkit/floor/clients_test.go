package floor

import (
	"testing"
	"time"
)

// TestCollectCounts feeds frames to a run's collector (no server, no
// Kafka): a clean message counts once; a repeat, an event at the wrong
// user, an event seq other than its ACK's and a gap in a session's seqs
// are each counted apart, and a frame of another run is ignored.
func TestCollectCounts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type fr struct {
		user int
		f    frame
	}
	ack := func(user int, id string, seq int64) fr { return fr{user, frame{T: "ack", ID: id, Seq: seq}} }
	ev := func(user int, id string, seq int64) fr {
		return fr{user, frame{T: "event", ID: id, Seq: seq, SentNs: t0.UnixNano()}}
	}
	for _, tc := range []struct {
		name                              string
		frames                            []fr
		acked, delivered, dups, mis, errs int64
	}{
		{"clean", []fr{ack(0, "a", 1), ev(1, "a", 1), ack(1, "b", 2), ev(0, "b", 2)}, 2, 2, 0, 0, 0},
		{"a repeated ACK and event", []fr{ack(0, "a", 1), ack(0, "a", 1), ev(1, "a", 1), ev(1, "a", 1), ack(1, "b", 2), ev(0, "b", 2)}, 2, 2, 2, 0, 0},
		{"an event at the sender", []fr{ack(0, "a", 1), ev(0, "a", 1), ack(1, "b", 2), ev(0, "b", 2)}, 2, 1, 0, 1, 0},
		{"an event with another seq than its ACK's", []fr{ack(0, "a", 1), ev(1, "a", 7), ack(1, "b", 2), ev(0, "b", 2)}, 2, 2, 0, 0, 1},
		{"a gap in the session's seqs", []fr{ack(0, "a", 1), ev(1, "a", 1), ack(1, "b", 3), ev(0, "b", 3)}, 2, 2, 0, 0, 1},
		{"a repeated seq in the session", []fr{ack(0, "a", 1), ev(1, "a", 1), ack(1, "b", 1), ev(0, "b", 1)}, 2, 2, 0, 0, 1},
		{"a frame of another run", []fr{ack(0, "a", 1), ev(1, "a", 1), ack(1, "b", 2), ev(0, "b", 2), ack(0, "r0-old", 9)}, 2, 2, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &collect{msgs: map[string]*sent{
				"a": {at: t0, session: "s", to: 1},
				"b": {at: t0, session: "s", to: 0},
			}}
			for _, x := range tc.frames {
				r.take(x.user, x.f, t0.Add(5*time.Millisecond))
			}
			rep := Report{Sent: 2, Acked: r.acked, Delivered: r.delivered, Duplicates: r.dups, Misrouted: r.misrouted, SeqErrors: r.seqErrors()}
			if rep.Acked != tc.acked || rep.Delivered != tc.delivered || rep.Duplicates != tc.dups || rep.Misrouted != tc.mis || rep.SeqErrors != tc.errs {
				t.Fatalf("got %+v, want acked %d delivered %d duplicates %d misrouted %d seq errors %d", rep, tc.acked, tc.delivered, tc.dups, tc.mis, tc.errs)
			}
			clean := tc.acked == 2 && tc.delivered == 2 && tc.dups+tc.mis+tc.errs == 0
			if (rep.Harmed() == 0) != clean {
				t.Fatalf("Harmed() = %d for %+v", rep.Harmed(), rep)
			}
		})
	}
}
