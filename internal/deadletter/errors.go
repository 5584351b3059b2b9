package deadletter

import (
	"fmt"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Error says why a record can never be processed: a retry would fail the
// same way and stall its partition for good, so the consumer dead-letters
// the record (Record) and moves on. It is the one error a consumer answers
// with a dead letter; every other error is retried, and no offset passes
// the record meanwhile.
type Error struct {
	Code   imv1.ErrorCode // from the registry, errors.proto
	Reason string         // what was wrong, in words a person can act on
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Reason) }

// Errorf is an Error with code and a reason formatted as by fmt.Sprintf.
func Errorf(code imv1.ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Reason: fmt.Sprintf(format, args...)}
}
