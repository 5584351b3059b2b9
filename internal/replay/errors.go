package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrNotFound means no replay of that name is defined (under this topic
// prefix).
var ErrNotFound = errors.New("no such replay")

// InvalidNameError says a replay name cannot be part of a topic name.
type InvalidNameError struct{ Name string }

func (e *InvalidNameError) Error() string {
	return fmt.Sprintf("invalid replay name %q: use 1-%d letters, digits, '-' or '_'", e.Name, maxNameLen)
}

// DefinitionMismatchError says a replay of that name exists with another
// range: create with the same flags resumes it, delete it to define it
// anew.
type DefinitionMismatchError struct {
	Name       string
	Have, Want string // the two requests, in words
}

func (e *DefinitionMismatchError) Error() string {
	return fmt.Sprintf("replay %s exists with another range (%s; asked: %s): resume it, or delete it first", e.Name, e.Have, e.Want)
}

// NotDoneError says a replay topic is not complete yet: some partitions
// have no end-of-replay marker.
type NotDoneError struct {
	Name       string
	Done, Of   int // partitions with a marker, partitions
	EventsLeft int64
}

func (e *NotDoneError) Error() string {
	return fmt.Sprintf("replay %s is not complete (%d of %d partitions have their end marker): resume it first", e.Name, e.Done, e.Of)
}

// InconsistentError says the replay topic holds something its definition
// cannot explain: a record outside the range, a gap in the copy count (a
// retention that deleted copied records), a partition count that differs.
// The replay cannot be resumed or read as complete; delete and create it.
type InconsistentError struct {
	Topic     string
	Partition int32
	Offset    int64
	Why       string
}

func (e *InconsistentError) Error() string {
	return fmt.Sprintf("replay topic %s/%d at offset %d: %s", e.Topic, e.Partition, e.Offset, e.Why)
}

// IsFenced reports whether err means another replayer of the same replay
// initialized its transactional ID after this one: this one must stop, the
// other carries on.
func IsFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// IsRetryable reports whether a new attempt of the replayer may get past
// err: everything except a stop (the context), a fence, a missing or
// mismatched definition and an inconsistent replay topic. A new attempt
// starts from the replay topic's committed tail, so it never copies
// anything twice.
func IsRetryable(err error) bool {
	var inc *InconsistentError
	var mis *DefinitionMismatchError
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		IsFenced(err), errors.Is(err, ErrNotFound), errors.As(err, &inc), errors.As(err, &mis):
		return false
	}
	return true
}
