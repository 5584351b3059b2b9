package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// scriptedPoller is an in-process stand-in for the Kafka client's
// PollRecords (a unit test, no broker): it returns its script in order,
// then one record per call.
type scriptedPoller struct {
	script []kgo.Fetches
	calls  int
	next   int64
}

func (s *scriptedPoller) PollRecords(context.Context, int) kgo.Fetches {
	s.calls++
	if s.calls <= len(s.script) {
		return s.script[s.calls-1]
	}
	return recordsFetch(s.next + int64(s.calls))
}

func recordsFetch(offsets ...int64) kgo.Fetches {
	var recs []*kgo.Record
	for _, o := range offsets {
		recs = append(recs, &kgo.Record{Topic: "seq", Partition: 0, Offset: o})
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "seq", Partitions: []kgo.FetchPartition{
		{Partition: 0, HighWatermark: offsets[len(offsets)-1] + 1, Records: recs}}}}}}
}

// TestPollReturnsAfterErrors: a poll that reported an error (a group that
// lost its coordinator injects one) ends the batch at once, records or not,
// so that the loop allows the rebalance the group's rejoin waits for
// (issue 8); timeouts of the batch window are not errors.
func TestPollReturnsAfterErrors(t *testing.T) {
	groupErr := kgo.NewErrFetch(&kgo.ErrGroupSession{Err: errors.New("unable to dial: connection refused")})
	for _, c := range []struct {
		name        string
		wait        time.Duration
		script      []kgo.Fetches
		wantRecs    int
		wantErrored bool
		wantCalls   int
		wantFatal   error
	}{
		{"group error alone", time.Hour, []kgo.Fetches{groupErr}, 0, true, 1, nil},
		{"records, then a group error in the batch window", time.Hour, []kgo.Fetches{recordsFetch(0, 1), groupErr}, 2, true, 2, nil},
		{"records and an error in one poll", time.Hour, []kgo.Fetches{append(recordsFetch(0), groupErr...)}, 1, true, 1, nil},
		{"a timed-out poll is no error", time.Hour, []kgo.Fetches{recordsFetch(0), kgo.NewErrFetch(context.DeadlineExceeded)}, 4, false, 5, nil},
		{"no batch window", 0, []kgo.Fetches{recordsFetch(0, 1, 2)}, 3, false, 1, nil},
		{"client closed", time.Hour, []kgo.Fetches{kgo.NewErrFetch(kgo.ErrClientClosed)}, 0, false, 1, kgo.ErrClientClosed},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := New(Config{BatchMax: 4, BatchWait: c.wait}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			sp := &scriptedPoller{script: c.script, next: 100}
			recs, errored, err := p.poll(context.Background(), sp)
			if !errors.Is(err, c.wantFatal) {
				t.Fatalf("err %v, want %v", err, c.wantFatal)
			}
			if len(recs) != c.wantRecs || errored != c.wantErrored || sp.calls != c.wantCalls {
				t.Fatalf("got %d records, errored %v after %d polls; want %d, %v after %d",
					len(recs), errored, sp.calls, c.wantRecs, c.wantErrored, c.wantCalls)
			}
		})
	}
}
