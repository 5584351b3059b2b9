package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/testkit/proc"
)

// TestTxnFloorGathersRecords sends one session's messages 10 ms apart to a
// sequencer with SEQUENCER_TXN_FLOOR=400ms and to one with the floor off,
// and counts each one's transactions on its /metrics: with the floor, no
// more than one per 400 ms of sending (plus the first, the one after the
// last 400 ms, and a spare: a record may miss the poll at a boundary); without
// it, more than that (the sequencer commits as often as its loop allows).
// Every message is sequenced exactly once either way (the audit).
func TestTxnFloorGathersRecords(t *testing.T) {
	const floor = 400 * time.Millisecond
	var floored int
	for _, tc := range []struct {
		name  string
		floor time.Duration
	}{{"floor", floor}, {"off", 0}} {
		h := newHarness(t, 1)
		p := h.start("a", "SEQUENCER_TXN_FLOOR="+tc.floor.String(), "SEQUENCER_ADMIN_ADDR="+proc.AnyPort)
		admin := proc.LoggedAddr(t, p, "admin listening", "SEQUENCER_ADMIN_ADDR")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sess := h.session(0)
		if err := h.send(ctx, sess, "warm"); err != nil {
			t.Fatal(err)
		}
		if _, r := h.settle(60 * time.Second); len(r.Lost) != 0 {
			t.Fatalf("%s: the first message was not sequenced: %v", tc.name, r.Lost)
		}
		before := transactions(t, admin)
		began := time.Now()
		for i := range 40 {
			if err := h.send(ctx, sess, fmt.Sprintf("m%02d", i)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		sending := time.Since(began)
		_, r := h.settle(60 * time.Second)
		requireOK(t, r)
		cancel()
		got := transactions(t, admin) - before
		bound := int(sending/floor) + 3
		t.Logf("%s: 40 messages over %s in %d transactions (bound with the floor: %d)", tc.name, sending.Round(time.Millisecond), got, bound)
		switch tc.name {
		case "floor":
			if got > bound {
				t.Fatalf("with a %s floor: %d transactions for 40 messages over %s, want at most %d", floor, got, sending.Round(time.Millisecond), bound)
			}
			floored = got
		case "off":
			if got <= floored {
				t.Fatalf("with the floor off: %d transactions, not more than the %d with it: the test cannot tell them apart", got, floored)
			}
		}
		p.Stop(10 * time.Second)
	}
}

// transactions reads the count of committed batches from the sequencer's
// /metrics (one observation of the "total" batch stage per transaction).
func transactions(t *testing.T, admin string) int {
	t.Helper()
	const series = `seqflow_sequencer_batch_stage_seconds_count{stage="total"} `
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err == nil {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), series); ok {
					resp.Body.Close()
					n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
					if err != nil {
						t.Fatalf("parse %q: %v", sc.Text(), err)
					}
					return int(n)
				}
			}
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s series on http://%s/metrics (last error %v)", strings.TrimSpace(series), admin, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
