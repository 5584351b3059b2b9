package eventlog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// What a consumer does with an error of a poll, in one place. franz-go
// retries almost everything by itself (a lost coordinator, a leader that
// moved, a broker that is down) and reports it through the poll's errors,
// so a consumer logs those and polls on; only two errors end its consume
// loop, and a poll whose own context ended reported no error at all.

// FencedError says another live member of Group joined with this
// consumer's instance ID (static membership, see static.go): the broker
// fenced the older of the two. Starting again would fence the other in
// turn, and so on, so the service stops and names the setting to fix.
type FencedError struct {
	Service    string // "sequencer", "persister", ...: the setting is <SERVICE>_INSTANCE_ID
	Group      string
	InstanceID string
	Err        error // the poll's error, which wraps kerr.FencedInstanceID
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("another %s joined group %s with %s_INSTANCE_ID=%s (each %s needs an ID of its own): %v",
		e.Service, e.Group, strings.ToUpper(e.Service), e.InstanceID, e.Service, e.Err)
}

func (e *FencedError) Unwrap() error { return e.Err }

// IsFenced reports whether err means another live member of the group
// joined with the same instance ID.
func IsFenced(err error) bool { return errors.Is(err, kerr.FencedInstanceID) }

// IsFatalFetch reports whether an error of a poll must end the consume
// loop rather than be logged and polled past: the client was closed, or
// the consumer was fenced (IsFenced).
func IsFatalFetch(err error) bool {
	return errors.Is(err, kgo.ErrClientClosed) || IsFenced(err)
}

// IsPollDone reports whether an error of a poll is only its own context
// ending: its wait ran out, or the consumer is stopping. It is no fetch
// error.
func IsPollDone(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// FatalFetch goes through the errors of one poll: it skips the poll's own
// context ending (IsPollDone), hands every error the consumer polls past
// to each (which may be nil), and returns the first that must end the
// consume loop (IsFatalFetch), or nil. A caller that returns a fenced
// error wraps it in a *FencedError.
func FatalFetch(fs kgo.Fetches, each func(topic string, partition int32, err error)) error {
	var fatal error
	fs.EachError(func(topic string, partition int32, err error) {
		switch {
		case IsPollDone(err):
		case IsFatalFetch(err):
			if fatal == nil {
				fatal = err
			}
		case each != nil:
			each(topic, partition, err)
		}
	})
	return fatal
}
