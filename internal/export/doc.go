// Package export writes the sequenced log (im.sequenced.v1) as Parquet
// files that DuckDB, Spark or Trino query in place: one row per event,
// hive-style paths by the UTC date and hour of server_ts_ms, to a local
// directory or an S3-compatible bucket. `seqflow export` runs it; the
// columns, layout and operation are in docs/export.md.
//
// # Files
//
// A file holds the events of one Kafka partition from one offset to
// another, all of the same hour, and its name says which:
//
//	date=2026-12-04/hour=17/part-p003-o000000000120-o000000004500.parquet
//
// A partition's events are written in log order, and a file is closed when
// it has MaxRows events, when it has been open MaxAge, or when the next
// event falls in another hour (server_ts_ms grows along a partition, up to
// the clock skew between two sequencer instances, so that happens about
// once an hour). The offset ranges of one partition's files never overlap,
// and the gaps between them hold no event: only transaction markers and
// aborted records, which a read_committed consumer does not see.
//
// # Commit protocol
//
// A file is written under a temporary name (Dir: a hidden file in _tmp;
// S3: a local spool file), then committed: Dir fsyncs it, renames it to
// its name (atomic) and fsyncs the directory; S3 sends it in one PUT,
// which makes the object visible whole or not at all. Only after that are
// the group's offsets committed, to the offset after the file. So a
// reader never sees a part of a file, and a kill -9 at any moment leaves
// at worst an unfinished temporary file (invisible, swept at the next
// start) and a group offset behind the files.
//
// # Resume: the files are the source of truth
//
// When it is assigned a partition, the exporter lists the store and
// resumes the partition at the offset after the highest last offset in its
// files' names, whatever the group committed; the group's offset is used
// only for a partition that has no file yet (and, with none, the log's
// start). A crash between a file's commit and the offset commit therefore
// costs nothing, where resuming from the group would export those events a
// second time, in a second file. The group is a convenience: it spreads
// partitions over several exporters and shows lag in `seqflow lag`.
// A manifest was the other way; it would be a second thing to keep in
// step with the files, which on S3 means a conditional update of one hot
// object per commit, and it would still have to be checked against them.
// The price of listing is one List of the store per assignment.
//
// No duplicate appears as long as one writer exports a partition at a
// time, which the consumer group provides. A member that stalled past the
// group's session timeout and wakes up could still commit one file its
// successor also writes; the exporter reports such overlapping files in
// its log at the next assignment (names with overlapping ranges of one
// partition), and the events in them are the same records, told apart by
// kafka_partition and kafka_offset.
package export
