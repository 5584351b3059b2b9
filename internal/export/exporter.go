package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sync/errgroup"

	"github.com/seqflow/seqflow/internal/eventlog"
)

// Config configures an Exporter. Zero values take the defaults named.
type Config struct {
	// Brokers are the Kafka seed brokers (required).
	Brokers []string
	// Topic is the sequenced log's topic name, with any prefix (required).
	Topic string
	// Group is the consumer group, default "seqflow-export". Two exports
	// to different places need different groups.
	Group string
	// SessionTimeout is the group's session timeout, default 10s: how
	// long the partitions of an exporter that died wait before another
	// member (or its restart) takes them.
	SessionTimeout time.Duration
	// Store receives the files (required).
	Store Store
	// MaxRows is the most events in one file, default 1,000,000.
	MaxRows int
	// MaxAge is how long a file stays open after its first event before
	// it is committed even if not full, default 5m: the most an event
	// waits to become visible (besides the hour boundary, which closes a
	// file too).
	MaxAge time.Duration
	// RowGroupRows is the most events in one Parquet row group, default
	// 65,536: the unit readers parallelize on, and what a file being
	// written holds in memory.
	RowGroupRows int
	// Compression of the columns: "zstd" (default), "snappy" or "none".
	Compression string
	// UntilEnd makes Run commit its open files and return nil once every
	// partition it is assigned has been exported up to the end of the log
	// as it was when Run started (its last stable offset): a batch export.
	// Otherwise Run follows the log until ctx ends.
	UntilEnd bool
	// Log receives the exporter's log lines, default slog.Default().
	Log *slog.Logger
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// DebugRowDelay pauses after each event and DebugCommitDelay between
	// the files' commit and the offset commit; only for fault tests,
	// which kill the exporter in those windows.
	DebugRowDelay, DebugCommitDelay time.Duration
}

func (c *Config) setDefaults() error {
	if len(c.Brokers) == 0 || c.Topic == "" || c.Store == nil {
		return errors.New("export config: Brokers, Topic and Store are required")
	}
	if c.Group == "" {
		c.Group = "seqflow-export"
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.MaxRows <= 0 {
		c.MaxRows = 1_000_000
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 5 * time.Minute
	}
	if c.RowGroupRows <= 0 {
		c.RowGroupRows = 64 * 1024
	}
	if c.Compression == "" {
		c.Compression = "zstd"
	}
	if _, ok := codecs[c.Compression]; !ok {
		return fmt.Errorf("export config: compression %q: want zstd, snappy or none", c.Compression)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

var codecs = map[string]compress.Codec{
	"zstd":   &zstd.Codec{Level: zstd.SpeedFastest},
	"snappy": &snappy.Codec{},
	"none":   &uncompressed.Codec{},
}

// Exporter consumes the sequenced log on its own consumer group and
// writes it to a Store as Parquet files; see the package doc for the
// commit protocol.
type Exporter struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	mu    sync.Mutex // the partitions; held while events are written and in the group callbacks
	parts map[int32]*partition

	events atomic.Int64 // events in committed files, since New
	files  atomic.Int64
	first  atomic.Int64 // unix nanoseconds of the first event read, 0 before
	last   atomic.Int64 // and of the last
}

// New validates cfg, applies its defaults and builds an exporter; it
// connects to nothing until Run.
func New(cfg Config) (*Exporter, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Exporter{cfg: cfg, log: cfg.Log, m: newMetrics(cfg.Registerer), parts: map[int32]*partition{}}, nil
}

// Stats are an exporter's totals since New.
type Stats struct {
	// Events and Files committed.
	Events, Files int64
	// Busy is the time from the first event read to the last.
	Busy time.Duration
}

// Stats returns the exporter's totals so far.
func (e *Exporter) Stats() Stats {
	s := Stats{Events: e.events.Load(), Files: e.files.Load()}
	if first := e.first.Load(); first != 0 {
		s.Busy = time.Duration(e.last.Load() - first)
	}
	return s
}

// Run exports until ctx ends (it then commits its open files, under a
// deadline, and returns ctx.Err()) or, with UntilEnd, until it has
// exported the log up to its end (it returns nil). A file or store error ends it with that error:
// nothing is lost, since a restart resumes from the files.
func (e *Exporter) Run(ctx context.Context) error {
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(e.cfg.Brokers, "seqflow-export"),
		kgo.ConsumerGroup(e.cfg.Group),
		kgo.ConsumeTopics(e.cfg.Topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers tell where a partition stands even when its
		// last records are markers: UntilEnd needs that. write skips them.
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(e.cfg.SessionTimeout),
		kgo.HeartbeatInterval(eventlog.HeartbeatInterval(e.cfg.SessionTimeout)),
		kgo.FetchMaxBytes(64<<20),
		kgo.AdjustFetchOffsetsFn(func(actx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return offs, e.resume(actx, offs[e.cfg.Topic])
		}),
		kgo.OnPartitionsRevoked(func(rctx context.Context, cl *kgo.Client, m map[string][]int32) {
			e.release(rctx, cl, m[e.cfg.Topic], true)
		}),
		kgo.OnPartitionsLost(func(rctx context.Context, cl *kgo.Client, m map[string][]int32) {
			e.release(rctx, cl, m[e.cfg.Topic], false)
		}),
	)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	// Leaving the group waits for a rebalance the loop may be blocking.
	defer cl.AllowRebalance()
	var ends map[int32]logRange
	if e.cfg.UntilEnd {
		if ends, err = logEnds(ctx, cl, e.cfg.Topic); err != nil {
			return err
		}
	}
	for {
		if err := e.round(ctx, cl); err != nil {
			if ctx.Err() == nil {
				e.abortAll()
				return err
			}
			break
		}
		cl.AllowRebalance()
		if ends != nil && e.caughtUp(ends) {
			e.log.Info("exported up to the end of the log; committing open files")
			return e.finishAll(ctx, cl)
		}
	}
	// Stopping: what was read is committed rather than read again.
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.finishAll(fctx, cl); err != nil {
		e.log.Warn("commit open files at stop", "err", err)
	}
	return ctx.Err()
}

// offsetCommitTimeout bounds an offset commit; one that fails only costs
// a restart the group's view of the lag, never a duplicate.
const offsetCommitTimeout = 10 * time.Second

// pollWait bounds a poll, so that files reach MaxAge while no events come.
const pollWait = time.Second

// round polls once, writes what came, commits the files that are done and
// then their offsets.
func (e *Exporter) round(ctx context.Context, cl *kgo.Client) error {
	pctx, cancel := context.WithTimeout(ctx, pollWait)
	fs := cl.PollRecords(pctx, 100_000)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := eventlog.FatalFetch(fs, func(topic string, part int32, err error) {
		e.m.fetchErrors.Inc()
		e.log.Warn("fetch error", "topic", topic, "partition", part, "err", err)
	}); err != nil {
		return fmt.Errorf("poll %s: %w", e.cfg.Topic, err)
	}
	batches := map[int32][]*kgo.Record{}
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if n := len(fp.Records); n > 0 {
			batches[fp.Partition] = append(batches[fp.Partition], fp.Records...)
			e.m.lag.WithLabelValues(strconv.Itoa(int(fp.Partition))).Set(float64(max(fp.HighWatermark-fp.Records[n-1].Offset-1, 0)))
		}
	})
	if len(batches) > 0 {
		now := time.Now().UnixNano()
		e.first.CompareAndSwap(0, now)
		e.last.Store(now)
	}
	// What was polled is written and committed even if ctx ends meanwhile:
	// a file cut off halfway would be read again, its commit half done.
	wctx := context.WithoutCancel(ctx)
	e.mu.Lock()
	err := e.writeAll(wctx, batches)
	if err == nil {
		err = e.finishAged(wctx)
	}
	done := e.takeDone()
	e.mu.Unlock()
	if err != nil {
		return err
	}
	e.commitOffsets(wctx, cl, done)
	return nil
}

// writeAll writes each partition's records, the partitions in parallel.
func (e *Exporter) writeAll(ctx context.Context, batches map[int32][]*kgo.Record) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for part, recs := range batches {
		p := e.parts[part]
		if p == nil {
			// Not set up by resume: should not happen, but where the
			// files end must be known before anything is written.
			prog, err := e.progress(ctx)
			if err == nil {
				err = e.resumeLocked(ctx, prog, map[int32]kgo.Offset{part: kgo.NewOffset().AtStart()})
			}
			if err != nil {
				return err
			}
			p = e.parts[part]
		}
		g.Go(func() error { return e.write(gctx, p, recs) })
	}
	return g.Wait()
}

// finishAged commits the files open for MaxAge or longer.
func (e *Exporter) finishAged(ctx context.Context) error {
	for _, p := range e.parts {
		if p.cur != nil && time.Since(p.cur.opened) >= e.cfg.MaxAge {
			if err := e.finish(ctx, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// finishAll commits every open file and the offsets after them.
func (e *Exporter) finishAll(ctx context.Context, cl *kgo.Client) error {
	e.mu.Lock()
	var err error
	for _, p := range e.parts {
		if p.cur != nil {
			if err = e.finish(ctx, p); err != nil {
				break
			}
		}
	}
	done := e.takeDone()
	e.mu.Unlock()
	e.commitOffsets(ctx, cl, done)
	return err
}

// abortAll drops the open files after an error.
func (e *Exporter) abortAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.parts {
		p.abort(e.log)
	}
}

// takeDone returns, and forgets, the offsets after each partition's files
// committed since the last call.
func (e *Exporter) takeDone() map[int32]int64 {
	done := map[int32]int64{}
	for id, p := range e.parts {
		if p.done > p.reported {
			done[id] = p.done
			p.reported = p.done
		}
	}
	return done
}

// commitOffsets commits the group's offsets after files that are
// committed. It is called without e.mu: a commit waits for a rebalance in
// progress, whose callbacks take e.mu. A failed commit is only logged:
// the files, not the group, say where a restart resumes.
func (e *Exporter) commitOffsets(ctx context.Context, cl *kgo.Client, done map[int32]int64) {
	if len(done) == 0 {
		return
	}
	if d := e.cfg.DebugCommitDelay; d > 0 {
		e.log.Info("files committed; offset commit delayed (debug)", "delay", d, "offsets", done)
		time.Sleep(d)
	}
	offs := map[int32]kgo.EpochOffset{}
	for part, next := range done {
		offs[part] = kgo.EpochOffset{Epoch: -1, Offset: next}
	}
	ctx, cancel := context.WithTimeout(ctx, offsetCommitTimeout)
	defer cancel()
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{e.cfg.Topic: offs},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err == nil {
				err = commitErr(resp)
			}
			if err != nil {
				e.m.offsetErrors.Inc()
				e.log.Warn("offset commit failed; the files say where to resume", "offsets", done, "err", err)
			}
		})
}

// resume is called on assignment with the offsets the group committed:
// it lists the store and moves each assigned partition to the offset after
// its last file, sweeps what uploads of those partitions left behind, and
// sets up their writers. A partition with no file keeps the group's offset
// (or, with none, the start of the log). See the package doc.
func (e *Exporter) resume(ctx context.Context, offs map[int32]kgo.Offset) error {
	if len(offs) == 0 {
		return nil
	}
	prog, err := e.progress(ctx)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resumeLocked(ctx, prog, offs)
}

// progress lists the store.
func (e *Exporter) progress(ctx context.Context) (Progress, error) {
	var names []string
	if err := e.cfg.Store.List(ctx, func(n string) error { names = append(names, n); return nil }); err != nil {
		return Progress{}, fmt.Errorf("list the export to resume: %w", err)
	}
	prog := ProgressOf(names)
	for _, f := range prog.Overlaps {
		e.log.Error("files overlap: events in this file are in another one too (two exporters wrote this partition?)",
			"file", f.Path())
	}
	return prog, nil
}

// resumeLocked sets up the partitions of offs from prog; e.mu is held.
func (e *Exporter) resumeLocked(ctx context.Context, prog Progress, offs map[int32]kgo.Offset) error {
	for part, o := range offs {
		if err := e.cfg.Store.Sweep(ctx, partTag(part)); err != nil {
			return fmt.Errorf("sweep partition %d: %w", part, err)
		}
		group := o.EpochOffset().Offset
		next, ok := prog.Next[part]
		if ok {
			offs[part] = kgo.NewOffset().At(next).WithEpoch(-1)
		} else {
			next = max(group, 0) // the group's offset, or the start (-2)
		}
		e.log.Info("resuming partition", "partition", part, "offset", next, "from_files", ok, "group_offset", group)
		p := e.parts[part]
		if p == nil {
			p = &partition{id: part, w: e.newWriter()}
			e.parts[part] = p
		}
		p.abort(e.log)
		p.next = next
		p.done, p.reported = next, next
	}
	return nil
}

// release is called when partitions are taken from this member: revoked
// (in an orderly rebalance, still owned during the call) partitions get
// their open files and offsets committed; lost ones (the member fell out of
// the group, another may own them already) get theirs dropped.
func (e *Exporter) release(ctx context.Context, cl *kgo.Client, parts []int32, revoked bool) {
	e.mu.Lock()
	var err error
	for _, part := range parts {
		p := e.parts[part]
		if p == nil {
			continue
		}
		if revoked && p.cur != nil && err == nil {
			err = e.finish(ctx, p)
		}
		p.abort(e.log)
		e.m.lag.DeleteLabelValues(strconv.Itoa(int(part)))
	}
	done := e.takeDone()
	for _, part := range parts {
		delete(e.parts, part)
	}
	e.mu.Unlock()
	if err != nil {
		e.log.Warn("commit open file at revoke; the next owner exports its events again", "err", err)
	}
	e.commitOffsets(ctx, cl, done)
	if len(parts) > 0 {
		e.log.Info("partitions released", "partitions", parts, "revoked", revoked)
	}
}

func (e *Exporter) newWriter() *parquet.GenericWriter[Row] {
	return parquet.NewGenericWriter[Row](nil,
		parquet.Compression(codecs[e.cfg.Compression]),
		parquet.MaxRowsPerRowGroup(int64(e.cfg.RowGroupRows)),
		parquet.CreatedBy("seqflow export", "", ""),
	)
}

func commitErr(resp *kmsg.OffsetCommitResponse) error {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("partition %d: %w", p.Partition, err)
			}
		}
	}
	return nil
}

// logRange is a partition's first offset and last stable offset.
type logRange struct{ start, end int64 }

// logEnds lists where each partition of topic starts and ends now, for
// UntilEnd.
func logEnds(ctx context.Context, cl *kgo.Client, topic string) (map[int32]logRange, error) {
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	// ListCommittedOffsets is a read_committed ListOffsets: the last
	// stable offset, past which a read_committed consumer reads nothing.
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	out := map[int32]logRange{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, o.Partition)
		out[o.Partition] = logRange{start: s.Offset, end: o.Offset}
	})
	return out, nil
}

// caughtUp reports whether every assigned partition has been read up to
// its end in ends.
func (e *Exporter) caughtUp(ends map[int32]logRange) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.parts) == 0 {
		return false // not assigned yet
	}
	for id, p := range e.parts {
		if r := ends[id]; p.next < r.end && r.start < r.end {
			return false
		}
	}
	return true
}
