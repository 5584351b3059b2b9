package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoStagingTable means the pool's connections were not set up by
// ConfigurePool: the writer stages every batch in a per-connection
// temporary table that ConfigurePool creates on connect.
var ErrNoStagingTable = errors.New("store: connection has no staging table; build the pool with store.NewPool or store.ConfigurePool")

// InvalidEventError says a decoded record cannot become a row: a field the
// store needs is missing or out of range, or text PostgreSQL cannot hold
// (invalid UTF-8, NUL). Consumers dead-letter such records.
type InvalidEventError struct {
	Reason string
}

func (e *InvalidEventError) Error() string { return "invalid event: " + e.Reason }

func invalid(format string, args ...any) *InvalidEventError {
	return &InvalidEventError{Reason: fmt.Sprintf(format, args...)}
}

// Conflict is an event the store refused because it contradicts what the
// store already holds: its (session, seq) belongs to another message, or its
// message ID to another (session, seq). An exact repeat of a stored event is
// a duplicate, never a conflict.
type Conflict struct {
	Index  int // index into Batch.Rows
	Reason string
}

// IsPoison reports whether err is PostgreSQL refusing the data itself
// (SQLSTATE class 22 data exception or 23 integrity constraint violation):
// retrying the same rows cannot help, so the writer's caller splits the
// batch to find the record and dead-letters it.
func IsPoison(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) < 2 {
		return false
	}
	return pe.Code[:2] == "22" || pe.Code[:2] == "23"
}

// IsTransient reports whether err is a failure that retrying later can
// cure: a lost or refused connection, a server shutting down or starting,
// serialization failures and deadlocks, resource exhaustion, timeouts.
// Callers retry everything that is not poison anyway (no record is ever
// skipped); this tells an outage, logged as a warning, from a bug, logged
// as an error.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) < 2:
			return false
		case pe.Code[:2] == "08", pe.Code[:2] == "53", pe.Code[:2] == "57", pe.Code[:2] == "58":
			return true // connection, resources, operator intervention (shutdown, cancel), system
		case pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03":
			return true // serialization failure, deadlock, lock not available
		}
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}
