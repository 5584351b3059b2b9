package main

import (
	"errors"

	"github.com/seqflow/seqflow/internal/deadletter"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// How the persister's errors are handled:
//
//   - A record the store can never hold is a *deadletter.Error
//     (undecodable, constraint): it goes to the dead-letter topic, and the
//     group's offset passes it only once Kafka acknowledged that.
//   - A write PostgreSQL refuses for its data (store.IsPoison) is split
//     until the record at fault is found, which becomes a constraint.
//   - Every other write error is retried with backoff until it succeeds
//     (retryClass names it for logs and metrics): no record is skipped.
//   - Fetch errors are counted, logged and polled past; a fatal one
//     (eventlog.IsFatalFetch) ends the consumer, which starts again,
//     unless it was fenced (*eventlog.FencedError), which stops Run.

// errSwitched ends a schema's consume loop when the store pointer moved.
var errSwitched = errors.New("store pointer moved to another schema")

// undecodable is a record the store cannot represent. Like constraint,
// it is a *deadletter.Error: the record can never be stored, so retrying
// would stall its partition forever; it is dead-lettered instead.
func undecodable(err error) *deadletter.Error {
	var ie *store.InvalidEventError
	if errors.As(err, &ie) {
		return &deadletter.Error{Code: imv1.ErrorCode_ERROR_CODE_UNDECODABLE, Reason: ie.Reason}
	}
	return &deadletter.Error{Code: imv1.ErrorCode_ERROR_CODE_UNDECODABLE, Reason: err.Error()}
}

// constraint is a record PostgreSQL or the store refused: it contradicts a
// stored event, or violates a constraint (store.IsPoison).
func constraint(reason string) *deadletter.Error {
	return &deadletter.Error{Code: imv1.ErrorCode_ERROR_CODE_CONSTRAINT, Reason: reason}
}

// retryClass names a failed write for logs and metrics: "transient" for an
// outage worth waiting out, "error" for anything else (also retried: no
// record is ever skipped, but a person should look).
func retryClass(err error) string {
	if store.IsTransient(err) {
		return "transient"
	}
	return "error"
}
