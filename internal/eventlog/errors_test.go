package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
)

func TestFetchErrorClasses(t *testing.T) {
	groupErr := &kgo.ErrGroupSession{Err: errors.New("unable to dial: connection refused")}
	cases := []struct {
		name        string
		err         error
		fatal, done bool
	}{
		{"client closed", kgo.ErrClientClosed, true, false},
		{"fenced", fmt.Errorf("heartbeat: %w", kerr.FencedInstanceID), true, false},
		{"fenced in a group session error", &kgo.ErrGroupSession{Err: kerr.FencedInstanceID}, true, false},
		{"lost coordinator", groupErr, false, false},
		{"not coordinator", kerr.NotCoordinator, false, false},
		{"unknown topic", kerr.UnknownTopicOrPartition, false, false},
		{"the poll's wait ran out", context.DeadlineExceeded, false, true},
		{"stopping", context.Canceled, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := eventlog.IsFatalFetch(c.err); got != c.fatal {
				t.Errorf("IsFatalFetch = %v, want %v", got, c.fatal)
			}
			if got := eventlog.IsPollDone(c.err); got != c.done {
				t.Errorf("IsPollDone = %v, want %v", got, c.done)
			}
			var passed []error
			fatal := eventlog.FatalFetch(kgo.NewErrFetch(c.err), func(_ string, _ int32, err error) { passed = append(passed, err) })
			switch {
			case c.fatal && (fatal != c.err || len(passed) > 0):
				t.Errorf("FatalFetch returned %v and passed on %v; want it returned, nothing passed on", fatal, passed)
			case c.done && (fatal != nil || len(passed) > 0):
				t.Errorf("FatalFetch returned %v and passed on %v; want it skipped", fatal, passed)
			case !c.fatal && !c.done && (fatal != nil || len(passed) != 1 || passed[0] != c.err):
				t.Errorf("FatalFetch returned %v and passed on %v; want it passed on", fatal, passed)
			}
		})
	}
}

// TestFatalFetchPassesOnTheRestOfThePoll: a fatal error does not hide the
// other errors of its poll from the consumer's log and metrics, and the
// first fatal one is returned.
func TestFatalFetchPassesOnTheRestOfThePoll(t *testing.T) {
	fenced := fmt.Errorf("join: %w", kerr.FencedInstanceID)
	fs := append(append(append(kgo.NewErrFetch(kerr.NotLeaderForPartition), kgo.NewErrFetch(fenced)...),
		kgo.NewErrFetch(kgo.ErrClientClosed)...), kgo.NewErrFetch(context.DeadlineExceeded)...)
	n := 0
	if err := eventlog.FatalFetch(fs, func(string, int32, error) { n++ }); err != fenced {
		t.Fatalf("FatalFetch = %v, want the first fatal error %v", err, fenced)
	}
	if n != 1 {
		t.Fatalf("%d errors passed on, want 1 (the lost leader)", n)
	}
	if err := eventlog.FatalFetch(kgo.NewErrFetch(kerr.NotLeaderForPartition), nil); err != nil {
		t.Fatalf("FatalFetch without a callback = %v, want nil", err)
	}
}

func TestFencedErrorNamesTheSetting(t *testing.T) {
	cause := fmt.Errorf("heartbeat: %w", kerr.FencedInstanceID)
	err := error(&eventlog.FencedError{Service: "persister", Group: "g1", InstanceID: "p-1", Err: cause})
	want := "another persister joined group g1 with PERSISTER_INSTANCE_ID=p-1 (each persister needs an ID of its own): " + cause.Error()
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if !eventlog.IsFenced(err) || !errors.Is(err, cause) {
		t.Error("a FencedError does not unwrap to its cause")
	}
}
