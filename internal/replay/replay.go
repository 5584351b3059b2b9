// Package replay copies a range of the committed sequenced log into a
// replay topic, <prefix>im.replay.NAME.v1, for rebuilds and other
// consumers that need a fixed part of the log: the same keys, partition
// numbers and headers as the source records, each matching event exactly
// once, in source order per partition, and an end-of-replay marker
// (imv1.ReplayEnd) as the last record of every partition. Source reads a
// complete replay topic back as the log it copies, for rebuild.Replay
// (`seqflow replay -from-replay-topic`).
//
// # Exactly once
//
// The replay topic is its own resume point. Every copied record carries
// its source offset (header seqflow-replay-source-offset) and its ordinal
// in its partition (seqflow-replay-count), and is written in a Kafka
// transaction under a transactional ID that belongs to the replay
// (TransactionalID). A replayer first initializes that ID, which fences
// every older replayer of the same replay and aborts the transaction it
// left open (a kill -9 leaves one), and only then reads the last committed
// record of each partition: it goes on at the source offset after it.
// A transaction commits its records, and with them the new resume point,
// or neither, so after any crash each partition holds a prefix of its
// matching events, each once, and the next run continues right after it.
//
// The alternative, a consumer group whose offsets are committed in the
// same transaction, is exactly once too, but keeps the resume point in a
// second place (group offsets can expire or be reset apart from the topic)
// and adds a group membership; the topic's tail needs neither. The price
// is that a filtered replay re-reads, after a crash, the source records
// between its last copied event and where it was.
//
// # Where a replay is defined
//
// Topic configs cannot hold a range, and a definition record at the head
// of the replay topic would be one more thing every consumer skips. The
// definitions live in a compacted topic of their own,
// <prefix>im.replays.v1 (one partition, key = name, value
// imv1.ReplayDefinition): the request as given and the offsets it resolved
// to at creation. Resuming copies that range, however much the log grew
// since.
//
// # The end marker
//
// The last record of every partition of a replay topic is a
// imv1.ReplayEnd, written in the transaction that copies the partition's
// last events (or a later one): no key, headers seqflow-event-type =
// "replay_end", seqflow-schema = "seqflow.im.v1.ReplayEnd". It names the
// source partition, the range [from, to) and how many events precede it.
// A consumer that reads a partition up to its marker has every event of
// the range.
//
// # Throttle
//
// Config.Rate caps the source records read per second, matching or not:
// reading is what a replay shares with the live consumers (broker CPU,
// disk, page cache), so a filtered replay is throttled by what it scans.
// DefaultRate is the command's default; docs/operations.md says how it
// was chosen.
package replay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Headers a replayer adds to each copied event, after the source's own.
const (
	// HeaderSourceOffset is the event's offset in its source partition.
	HeaderSourceOffset = "seqflow-replay-source-offset"
	// HeaderCount is the event's ordinal in its replay partition, from 1;
	// on the end marker, the number of events before it.
	HeaderCount = "seqflow-replay-count"
)

// The end marker's seqflow-event-type and seqflow-schema headers.
const (
	EventTypeEnd = "replay_end"
	SchemaEnd    = "seqflow.im.v1.ReplayEnd"
)

// producerName is the seqflow-producer header of the end markers.
const producerName = "seqflow-replay"

// DefaultRate is the default cap of `seqflow replay-topic`, in source
// records a second. Chosen by what a replayed event costs the broker the
// live pipeline shares, measured on the project's 2-core box: about 5 ms
// of broker CPU per 1,000 events (a read_committed fetch and a
// transactional write), against about 280 ms per 1,000 live messages end
// to end. At 10,000 a second a replay adds about 0.05 of a core to the
// broker, under a tenth of what it spends on 2,000 live messages a second,
// and the replayer itself about 0.04; uncapped, a copy takes whatever the
// box has (replay_topic_events_per_s, docs/benchmarks.md). What a replay
// at this rate does to the live ACK latency is e2e_ack_p99_replay_ratio
// there.
const DefaultRate = 10000

// Config says which replay a Replayer runs, and how fast.
type Config struct {
	Brokers []string
	Prefix  string // topic prefix (SEQFLOW_TOPIC_PREFIX)
	Name    string
	// Rate caps the source records read a second, copied or not; 0: no
	// cap.
	Rate float64
	// TxnRecords caps the records of one transaction; default 5000.
	TxnRecords int
	// TxnInterval caps how long one transaction stays open; default
	// 500ms. Consumers of the replay topic see its records once it
	// commits.
	TxnInterval time.Duration
	// Progress, when set, is called after every committed transaction.
	Progress func(Progress)
	// Log gets the attempts' failures and the resume points; default:
	// discarded.
	Log *slog.Logger
}

// Progress is how far a replay run is.
type Progress struct {
	Read, Total      int64 // source offsets read, and in the whole range
	Events           int64 // events in the replay topic (committed)
	RunEvents        int64 // of those, copied by this run
	Done, Partitions int   // partitions with their end marker, partitions
	Elapsed          time.Duration
}

// Rate is the events a second this run copied.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.RunEvents) / p.Elapsed.Seconds()
}

// Replayer copies one replay's range into its topic.
type Replayer struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and applies the defaults.
func New(cfg Config) (*Replayer, error) {
	if len(cfg.Brokers) == 0 {
		return nil, fmt.Errorf("replay: no Kafka brokers")
	}
	if err := CheckName(cfg.Name); err != nil {
		return nil, err
	}
	if cfg.Rate < 0 {
		return nil, fmt.Errorf("replay: rate %v: must be >= 0 (0: no cap)", cfg.Rate)
	}
	if cfg.TxnRecords <= 0 {
		cfg.TxnRecords = 5000
	}
	if cfg.TxnInterval <= 0 {
		cfg.TxnInterval = 500 * time.Millisecond
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Replayer{cfg: cfg, log: log}, nil
}

// maxFailures is how many attempts in a row may fail without copying
// anything before Run gives up.
const maxFailures = 5

// Run copies what is left of the replay and returns its final status, or
// the error that stopped it: ctx's, a fence (another replayer of the same
// replay started, IsFenced), a missing or inconsistent replay, or an
// error that maxFailures attempts in a row could not get past. Each
// attempt starts from the replay topic's committed tail, so a failed one
// costs time, never a duplicate.
func (r *Replayer) Run(ctx context.Context) (*Status, error) {
	defs, err := OpenDefinitions(r.cfg.Brokers, r.cfg.Prefix)
	if err != nil {
		return nil, err
	}
	def, err := defs.Get(ctx, r.cfg.Name)
	defs.Close()
	if err != nil {
		return nil, err
	}
	run := &runState{start: time.Now()}
	fails := 0
	for {
		before := run.events
		st, err := r.attempt(ctx, def, run)
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !IsRetryable(err) {
			return nil, err
		}
		if run.events > before {
			fails = 0
		}
		if fails++; fails >= maxFailures {
			return nil, fmt.Errorf("replay %s: %d attempts in a row failed: %w", r.cfg.Name, fails, err)
		}
		wait := min(500*time.Millisecond<<(fails-1), 8*time.Second)
		r.log.Warn("replay attempt failed; resuming from the committed tail", "replay", r.cfg.Name, "err", err, "failures", fails, "wait", wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// runState is what a run keeps across attempts.
type runState struct {
	start  time.Time
	events int64 // events committed by this run
}

// part is the state of one partition within an attempt.
type part struct {
	PartitionStatus
	ending bool // its end marker is in the open transaction
}

// attempt fences older replayers, reads the resume points and copies
// until every partition has its marker.
func (r *Replayer) attempt(ctx context.Context, def *imv1.ReplayDefinition, run *runState) (*Status, error) {
	prod, err := kgo.NewClient(append(eventlog.ClientOpts(r.cfg.Brokers, "seqflow-replay"), append(eventlog.ProducerOpts(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(TransactionalID(r.cfg.Prefix, r.cfg.Name)),
		kgo.TransactionTimeout(30*time.Second),
	)...)...)
	if err != nil {
		return nil, fmt.Errorf("create Kafka client: %w", err)
	}
	defer prod.Close()
	// Initializing the transactional ID fences the replayer before this
	// one and aborts its open transaction; only then is the tail final.
	if _, _, err := prod.ProducerID(ctx); err != nil {
		return nil, fmt.Errorf("initialize transactional ID %s: %w", TransactionalID(r.cfg.Prefix, r.cfg.Name), err)
	}
	st, err := ReadStatus(ctx, r.cfg.Brokers, def)
	if err != nil {
		return nil, err
	}
	parts := map[int32]*part{}
	consume := map[int32]kgo.Offset{}
	for _, ps := range st.Partitions {
		parts[ps.Partition] = &part{PartitionStatus: ps}
		if !ps.Done && ps.Next < ps.To {
			consume[ps.Partition] = kgo.NewOffset().At(ps.Next)
		}
	}
	read, total := st.Offsets()
	r.log.Info("replay resumes", "replay", r.cfg.Name, "events", st.Events(), "done_partitions", st.DoneCount(),
		"partitions", len(st.Partitions), "offsets_read", read, "offsets_total", total)
	if st.Done() {
		return st, nil
	}
	var cons *kgo.Client
	if len(consume) > 0 {
		cons, err = kgo.NewClient(append(eventlog.ClientOpts(r.cfg.Brokers, "seqflow-replay"),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
			kgo.ConsumeResetOffset(kgo.NoResetOffset()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{def.GetSourceTopic(): consume}),
		)...)
		if err != nil {
			return nil, fmt.Errorf("create Kafka client: %w", err)
		}
		defer cons.Close()
	}
	c := &copier{r: r, def: def, prod: prod, cons: cons, parts: parts, filter: newFilter(def.GetRequest()),
		pace: newPacer(r.cfg.Rate, time.Now())}
	for !c.allDone() {
		if err := c.transaction(ctx, run); err != nil {
			c.abort()
			return nil, err
		}
	}
	if err := waitVisible(ctx, kadm.NewClient(prod), def.GetReplayTopic()); err != nil {
		return nil, err
	}
	out := &Status{Def: def}
	for _, rg := range def.GetRanges() {
		out.Partitions = append(out.Partitions, parts[rg.GetPartition()].PartitionStatus)
	}
	return out, nil
}

// waitVisible waits until read_committed readers of topic see everything
// written to it: a commit returns once the transaction coordinator has
// decided, and the markers reach the partitions a moment later. Until
// they do, a reader (and ReadStatus) stops before the last transaction,
// so "complete" would not yet mean "readable".
func waitVisible(ctx context.Context, adm *kadm.Client, topic string) error {
	for {
		ends, err := listed(adm.ListEndOffsets(ctx, topic))
		if err != nil {
			return err
		}
		stable, err := listed(adm.ListCommittedOffsets(ctx, topic))
		if err != nil {
			return err
		}
		visible := true
		for p, e := range ends {
			if stable[p] < e {
				visible = false
			}
		}
		if visible {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// copier is one attempt's copy loop.
type copier struct {
	r      *Replayer
	def    *imv1.ReplayDefinition
	prod   *kgo.Client // transactional
	cons   *kgo.Client // the source, read committed; nil when nothing is left to read
	parts  map[int32]*part
	filter *filter
	pace   *pacer

	inTxn bool
	mu    sync.Mutex
	perr  error // the first failed produce of the open transaction
}

func (c *copier) allDone() bool {
	for _, p := range c.parts {
		if !p.Done {
			return false
		}
	}
	return true
}

// transaction copies up to TxnRecords records, or for up to TxnInterval,
// in one transaction, and commits it.
func (c *copier) transaction(ctx context.Context, run *runState) error {
	if err := c.prod.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	c.inTxn, c.perr = true, nil
	begun := time.Now()
	n, copied := 0, int64(0)
	produce := func(rec *kgo.Record) {
		n++
		c.prod.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				c.mu.Lock()
				if c.perr == nil {
					c.perr = err
				}
				c.mu.Unlock()
			}
		})
	}
	var encErr error
	finish := func(p *part) {
		if p.ending {
			return
		}
		rec, err := c.endRecord(p)
		if err != nil {
			encErr = err
			return
		}
		p.ending = true
		produce(rec)
		if c.cons != nil {
			c.cons.PauseFetchPartitions(map[string][]int32{c.def.GetSourceTopic(): {p.Partition}})
		}
	}
	for _, p := range c.parts {
		if !p.Done && p.Next >= p.To {
			finish(p)
		}
	}
	for c.cons != nil && n < c.r.cfg.TxnRecords && !c.allEnding() && encErr == nil {
		left := c.r.cfg.TxnInterval - time.Since(begun)
		if left <= 0 {
			break
		}
		allowed, wait := c.pace.budget(time.Now(), c.r.cfg.TxnRecords-n)
		if allowed == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(wait, left)):
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, left)
		fs := c.cons.PollRecords(pctx, allowed)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !eventlog.IsPollDone(err) {
				ferr = fmt.Errorf("read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		read := 0
		fs.EachRecord(func(rec *kgo.Record) {
			p := c.parts[rec.Partition]
			if p == nil || p.Done || p.ending {
				return
			}
			if rec.Offset >= p.To { // the record at To-1 was aborted: skipped
				finish(p)
				return
			}
			if !rec.Attrs.IsControl() {
				read++
				if c.filter.match(rec) {
					p.Events++
					copied++
					produce(copyOf(rec, c.def.GetReplayTopic(), p.Events))
				}
			}
			p.Next = rec.Offset + 1
			if rec.Offset >= p.To-1 {
				finish(p)
			}
		})
		c.pace.spend(read)
	}
	if encErr != nil {
		return encErr
	}
	if err := c.prod.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	c.mu.Lock()
	perr := c.perr
	c.mu.Unlock()
	if perr != nil {
		return fmt.Errorf("produce to %s: %w", c.def.GetReplayTopic(), perr)
	}
	if err := c.prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	c.inTxn = false
	for _, p := range c.parts {
		if p.ending {
			p.Done, p.ending, p.Next = true, false, p.To
		}
	}
	run.events += copied
	if c.r.cfg.Progress != nil {
		pr := Progress{RunEvents: run.events, Partitions: len(c.parts), Elapsed: time.Since(run.start)}
		for _, p := range c.parts {
			pr.Read += p.Next - p.From
			pr.Total += p.To - p.From
			pr.Events += p.Events
			if p.Done {
				pr.Done++
			}
		}
		c.r.cfg.Progress(pr)
	}
	return nil
}

func (c *copier) allEnding() bool {
	for _, p := range c.parts {
		if !p.Done && !p.ending {
			return false
		}
	}
	return true
}

// abort ends an open transaction without committing. It may fail (the
// broker is gone, the context ended): the next attempt's initialization
// aborts it then.
func (c *copier) abort() {
	if !c.inTxn {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.prod.AbortBufferedRecords(ctx); err == nil {
		_ = c.prod.EndTransaction(ctx, kgo.TryAbort)
	}
	c.inTxn = false
}

// copyOf is the copy of a source record: the same key, value, headers
// and partition number, plus the replay headers.
func copyOf(src *kgo.Record, topic string, count int64) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(src.Headers)+2)
	h = append(h, src.Headers...)
	h = append(h,
		kgo.RecordHeader{Key: HeaderSourceOffset, Value: strconv.AppendInt(nil, src.Offset, 10)},
		kgo.RecordHeader{Key: HeaderCount, Value: strconv.AppendInt(nil, count, 10)})
	return &kgo.Record{Topic: topic, Partition: src.Partition, Key: src.Key, Value: src.Value, Headers: h, Timestamp: src.Timestamp}
}

// endRecord is the end marker of p.
func (c *copier) endRecord(p *part) (*kgo.Record, error) {
	v, err := proto.Marshal(&imv1.ReplayEnd{
		Replay: c.def.GetName(), SourceTopic: c.def.GetSourceTopic(), SourcePartition: p.Partition,
		FromOffset: p.From, ToOffset: p.To, Events: p.Events, Request: c.def.GetRequest(),
		CompletedTsMs: time.Now().UnixMilli(),
	})
	if err != nil {
		return nil, fmt.Errorf("encode end marker: %w", err)
	}
	h := append(eventlog.Headers(EventTypeEnd, SchemaEnd, producerName, ""),
		kgo.RecordHeader{Key: HeaderCount, Value: strconv.AppendInt(nil, p.Events, 10)})
	return &kgo.Record{Topic: c.def.GetReplayTopic(), Partition: p.Partition, Value: v, Headers: h}, nil
}
