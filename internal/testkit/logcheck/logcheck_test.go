package logcheck

import (
	"strings"
	"testing"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestCheckFindsEveryViolation feeds Check hand-made logs, each breaking
// one guarantee, and expects exactly that finding: the audit that the
// sequencer's tests rely on can fail.
func TestCheckFindsEveryViolation(t *testing.T) {
	sent := []Sent{{SessionID: "s", ClientMsgIDs: []string{"a", "b", "c"}}}
	ev := func(seq int64, c string, up int64) Event {
		return Event{SessionID: "s", Seq: seq, MsgID: seq * 10, ClientMsgID: c, UplinkOffset: up}
	}
	good := []Event{ev(1, "a", 0), ev(2, "b", 1), ev(3, "c", 2)}
	tests := []struct {
		name   string
		events []Event
		dups   []*imv1.DuplicateAck
		want   string // substring of the report naming the finding
	}{
		{"ok", good, []*imv1.DuplicateAck{{SessionId: "s", ClientMsgId: "a", Seq: 1, MsgId: 10}}, ""},
		{"reused", []Event{ev(1, "a", 0), ev(1, "b", 1), ev(3, "c", 2)}, nil, "seq_reused=1"},
		{"regression", []Event{ev(1, "a", 0), ev(3, "b", 1), ev(2, "c", 2)}, nil, "seq_regressions=1"},
		{"gap", []Event{ev(1, "a", 0), ev(2, "b", 1), ev(30, "c", 2)}, nil, "exceeds one segment step"},
		{"duplicated", []Event{ev(1, "a", 0), ev(2, "b", 1), ev(3, "b", 2), ev(4, "c", 3)}, nil, "duplicated=1"},
		{"order", []Event{ev(1, "b", 0), ev(2, "a", 1), ev(3, "c", 2)}, nil, "order_violations=1"},
		{"lost", good[:2], nil, "lost=1"},
		{"bad dup ack", good, []*imv1.DuplicateAck{{SessionId: "s", ClientMsgId: "a", Seq: 2, MsgId: 20}}, "bad_duplicate_acks=1"},
		{"unexpected", append(good, ev(4, "zzz", 3)), nil, "unexpected=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(&Log{Events: tt.events, Duplicates: tt.dups}, sent, 10)
			if tt.want == "" {
				if !r.OK() {
					t.Fatalf("want OK, got\n%s", r)
				}
				return
			}
			if r.OK() || !strings.Contains(r.String(), tt.want) {
				t.Fatalf("want %q in a failing report, got OK=%v\n%s", tt.want, r.OK(), r)
			}
		})
	}
}
