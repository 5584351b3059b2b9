package main

import (
	"errors"
	"fmt"

	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// errSwitched ends a schema's consume loop when the store pointer moved.
var errSwitched = errors.New("store pointer moved to another schema")

// poisonError is why one record is dead-lettered instead of stored: it can
// never be stored, so retrying would stall its partition forever.
type poisonError struct {
	Code   imv1.ErrorCode
	Reason string
}

func (e *poisonError) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Reason) }

// undecodable is a record the store cannot represent.
func undecodable(err error) *poisonError {
	var ie *store.InvalidEventError
	if errors.As(err, &ie) {
		return &poisonError{Code: imv1.ErrorCode_ERROR_CODE_UNDECODABLE, Reason: ie.Reason}
	}
	return &poisonError{Code: imv1.ErrorCode_ERROR_CODE_UNDECODABLE, Reason: err.Error()}
}

// constraint is a record PostgreSQL or the store refused: it contradicts a
// stored event, or violates a constraint.
func constraint(reason string) *poisonError {
	return &poisonError{Code: imv1.ErrorCode_ERROR_CODE_CONSTRAINT, Reason: reason}
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
