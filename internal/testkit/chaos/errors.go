package chaos

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotRecovered says a probe round did not complete within
// Options.MaxRecovery after a fault: the pipeline did not heal in time.
var ErrNotRecovered = errors.New("not recovered within the limit")

// FailedError is returned by Run's callers (seqflow chaos) when a run
// completed but found harm, a fault that did not recover, or too few
// faults. The report says the same, with the details.
type FailedError struct {
	Failures []string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("chaos run failed: %s", strings.Join(e.Failures, "; "))
}

// SetupError says the suite could not bring the pipeline up (or down): no
// fault was judged, so nothing is known about the guarantees. Retrying
// can help when the machine was only slow.
type SetupError struct {
	Step string
	Err  error
}

func (e *SetupError) Error() string { return fmt.Sprintf("chaos setup: %s: %v", e.Step, e.Err) }
func (e *SetupError) Unwrap() error { return e.Err }
