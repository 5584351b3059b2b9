package main

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
)

// ErrNotReady is /readyz's answer before any partition is assigned.
var ErrNotReady = errors.New("no partitions assigned yet")

// ReplayError says a partition's membership could not be rebuilt from the
// log. It is retryable: the pusher routes that partition's events to their
// senders only (counted as dropped, reason membership_unavailable) and
// tries the replay again on a later poll.
type ReplayError struct {
	Topic     string
	Partition int32
	Err       error
}

func (e *ReplayError) Error() string {
	return fmt.Sprintf("replay membership of %s/%d: %v", e.Topic, e.Partition, e.Err)
}

func (e *ReplayError) Unwrap() error { return e.Err }

// IsFatal reports whether a fetch error must end Run rather than be logged
// and survived: a closed Kafka client, or a group setting the broker
// refuses (which no retry heals). Everything on the push path is dropped
// and counted instead, since clients recover by sync.
func IsFatal(err error) bool {
	return errors.Is(err, kgo.ErrClientClosed) || errors.Is(err, kerr.InvalidSessionTimeout) ||
		errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.InvalidGroupID) || eventlog.IsFenced(err)
}
