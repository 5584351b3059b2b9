package main

import (
	"errors"
	"fmt"
)

// ErrNoResult means a benchmark's output lacked the line or metric asked
// for: the benchmark failed or was renamed.
var ErrNoResult = errors.New("no benchmark result")

// PhaseError is a phase that failed; the run goes on with the next phase
// and the report marks the phase's figures as not measured.
type PhaseError struct {
	Phase string
	Err   error
}

func (e *PhaseError) Error() string { return fmt.Sprintf("phase %s: %v", e.Phase, e.Err) }

func (e *PhaseError) Unwrap() error { return e.Err }

// ServiceError is a service process that exited or never got ready.
type ServiceError struct {
	Service string
	Log     string // its log file
	Err     error
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("service %s (log %s): %v", e.Service, e.Log, e.Err)
}

func (e *ServiceError) Unwrap() error { return e.Err }
