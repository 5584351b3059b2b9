package main

import (
	"fmt"
	"strings"
)

// LagError says `seqflow lag -max-lag N` found partitions above N, or
// partitions whose lag could not be computed.
type LagError struct {
	MaxLag     int64
	Partitions []string
}

func (e *LagError) Error() string {
	what := "in error"
	if e.MaxLag >= 0 {
		what = fmt.Sprintf("in error or above -max-lag %d", e.MaxLag)
	}
	return fmt.Sprintf("%d partitions %s:\n  %s", len(e.Partitions), what, strings.Join(e.Partitions, "\n  "))
}

// TopicProblemsError lists what `seqflow topics` found different from the
// definitions in internal/eventlog.
type TopicProblemsError struct{ Problems []string }

func (e *TopicProblemsError) Error() string {
	return fmt.Sprintf("%d topic problems:\n  %s", len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// NoDeadLetterError says there is no committed dead letter at an offset:
// it is out of the partition's range, or it is a transaction marker or an
// aborted record (the sequencer writes dead letters in transactions).
type NoDeadLetterError struct {
	Topic      string
	Partition  int32
	Offset     int64
	Start, End int64 // the partition's start and last stable offset
}

func (e *NoDeadLetterError) Error() string {
	return fmt.Sprintf("no committed dead letter at %s/%d/%d (committed range [%d, %d))", e.Topic, e.Partition, e.Offset, e.Start, e.End)
}

// RedriveRefusedError says a dead letter must not be re-produced where it
// came from, and why.
type RedriveRefusedError struct {
	OriginalTopic string
	Why           string
}

func (e *RedriveRefusedError) Error() string {
	return fmt.Sprintf("refusing to redrive to %s: %s", e.OriginalTopic, e.Why)
}
