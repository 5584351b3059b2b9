package main

import (
	"errors"
	"fmt"

	"github.com/seqflow/seqflow/internal/eventlog"
)

// How the sequencer's errors are handled, from the narrowest scope out:
//
//   - A record that can never be sequenced is no error of the sequencer's:
//     decodeUplink says why with a *deadletter.Error, and the record goes
//     to the dead-letter topic in the batch's transaction.
//   - A batch that fails (PostgreSQL, producing, a partition revoked or a
//     session split over partitions below) aborts its transaction; its
//     seqs are given back and its records polled again.
//   - Other fetch errors are logged and polled past (franz-go retries
//     them); a fatal one (eventlog.IsFatalFetch) or a transaction whose
//     outcome is unknown ends the transact session, which is rebuilt; a
//     lost node lease ends the sessions, and the lease is taken again.
//   - Only isFatal errors stop the sequencer.

// errCoordinatorSilent ends a transaction whose group coordinator has not
// answered for endSilence; the session is rebuilt.
var errCoordinatorSilent = errors.New("group coordinator silent for half a session timeout; outcome unknown")

// SplitSessionError says one batch holds a session's uplinks in two
// partitions. Partitioning by session makes that impossible but while the
// uplink topic's partition count changes; the batch is aborted rather
// than serve one session from two segment books, and tried again.
type SplitSessionError struct {
	SessionID  string
	Partitions [2]int32
}

func (e *SplitSessionError) Error() string {
	return fmt.Sprintf("session %s appears in uplink partitions %d and %d; was the partition count changed without draining?",
		e.SessionID, e.Partitions[0], e.Partitions[1])
}

// RevokedError says a partition was revoked while its dedup window was
// being rebuilt: the window is dropped with the batch, which is aborted,
// and the partition's new owner rebuilds its own.
type RevokedError struct {
	Partition int32
}

func (e *RevokedError) Error() string {
	return fmt.Sprintf("partition %d was revoked while its dedup window was rebuilt", e.Partition)
}

// isFatal reports whether err must stop the sequencer instead of having
// its session or lease started again: another live sequencer joined the
// group with this one's instance ID (an *eventlog.FencedError). Starting
// again would fence that one in turn, and so on.
func isFatal(err error) bool { return eventlog.IsFenced(err) }
