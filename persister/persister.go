package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/telemetry"
)

const service = "persister"

// Persister consumes im.sequenced.v1 and im.receipts.v1 (read committed)
// into the message store. Each poll batch is written, per writer, in one
// database transaction; dead letters are produced next; the group's offsets
// are committed last, so a committed offset never passes a record whose
// effect (row or dead letter) is not durable.
type Persister struct {
	cfg  Config
	log  *slog.Logger
	reg  *prometheus.Registry
	m    *metrics
	pool *pgxpool.Pool

	mu      sync.Mutex
	schema  string             // the schema being written
	restart context.CancelFunc // ends the current schema's loop
	ready   atomic.Bool
	kcl     atomic.Pointer[kgo.Client] // the live consumer, for /readyz
	member  atomic.Pointer[string]     // the consumer's last group member ID, for the leave at the end
	tracer  trace.Tracer
}

// New builds a persister; it connects to nothing until Run.
func New(cfg Config, log *slog.Logger) *Persister {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return &Persister{cfg: cfg, log: log, reg: reg, m: newMetrics(reg), tracer: telemetry.Tracer(service)}
}

// Run persists until ctx ends and returns ctx.Err(). Database and Kafka
// outages are waited out; a switch-over moves it to the new schema.
func (p *Persister) Run(ctx context.Context) error {
	shutdown, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: service, OTLPEndpoint: p.cfg.OTLPEndpoint})
	if err != nil {
		return err
	}
	defer telemetry.Flush(shutdown, p.log)
	pool, err := store.NewPool(ctx, p.cfg.PGURL, int32(p.cfg.Writers+3))
	if err != nil {
		return err
	}
	defer pool.Close()
	p.pool = pool
	if p.cfg.Migrate {
		if _, err := migrate.Up(ctx, pool, p.cfg.Schema); err != nil {
			return err
		}
	}
	schema, err := store.Resolve(ctx, pool, p.cfg.Schema)
	if err != nil {
		return err
	}
	p.schema = schema
	if p.cfg.StaticMembership {
		defer func() { p.leaveGroup(p.member.Load()) }()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return (&admin.Server{Addr: p.cfg.AdminAddr, Reg: p.reg, Ready: p.readyz, Config: p.cfg.Admin, Log: p.log}).Run(gctx)
	})
	g.Go(func() error { return store.Watch(gctx, pool, p.cfg.Schema, p.follow) })
	g.Go(func() error {
		for {
			p.mu.Lock()
			schema := p.schema
			sctx, cancel := context.WithCancel(gctx)
			p.restart = cancel
			p.mu.Unlock()
			p.log.Info("persisting", "schema", schema, "group", p.cfg.Group, "instance_id", p.cfg.InstanceID)
			err := p.runSchema(sctx, schema)
			cancel()
			if gctx.Err() != nil {
				return gctx.Err()
			}
			if errors.Is(err, errSwitched) || sctx.Err() != nil {
				p.m.switches.Inc()
				continue
			}
			if eventlog.IsFenced(err) {
				// Another live persister has this instance ID: starting
				// again would fence it in turn, and so on.
				return err
			}
			p.log.Error("consumer failed; starting it again", "schema", schema, "err", err)
			if !sleep(gctx, time.Second) {
				return gctx.Err()
			}
		}
	})
	return g.Wait()
}

// leaveGroup takes this static member out of the group once Run ends, so
// its partitions go to the other persisters now rather than after the
// session timeout (see internal/eventlog/static.go).
func (p *Persister) leaveGroup(member *string) {
	if member == nil {
		return
	}
	eventlog.LeaveAfterStop(p.log, p.cfg.Brokers, service, p.cfg.Group, p.cfg.InstanceID, *member)
}

// follow is called with the live schema at every switch-over notice.
func (p *Persister) follow(schema string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if schema == p.schema {
		return
	}
	p.log.Info("store switched; moving to the new schema", "from", p.schema, "to", schema)
	p.schema = schema
	if p.restart != nil {
		p.restart()
	}
}

// readyz is ready when PostgreSQL and Kafka answer and the consumer has
// been assigned partitions.
func (p *Persister) readyz(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	cl := p.kcl.Load()
	if cl == nil {
		return errors.New("kafka: no consumer yet")
	}
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	if !p.ready.Load() {
		return errors.New("no partitions assigned yet")
	}
	return nil
}

// runSchema consumes into one schema until ctx ends.
func (p *Persister) runSchema(ctx context.Context, schema string) error {
	w := store.NewWriter(p.pool, schema)
	t := p.cfg.Topics
	opts := append(eventlog.ClientOpts(p.cfg.Brokers, "seqflow-persister-"+p.cfg.InstanceID), eventlog.ProducerOpts()...)
	opts = append(opts,
		kgo.RecordPartitioner(kgo.ManualPartitioner()), // dead letters go to partition 0
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.ConsumeTopics(t.Sequenced, t.Receipts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.HeartbeatInterval(eventlog.HeartbeatInterval(p.cfg.SessionTimeout)),
		kgo.RebalanceTimeout(p.cfg.RebalanceTimeout),
		kgo.FetchMaxWait(p.cfg.fetchMaxWait()),
		kgo.FetchMinBytes(p.cfg.fetchMinBytes()),
		kgo.AdjustFetchOffsetsFn(func(actx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			return p.resumeOffsets(actx, w, offs)
		}),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			p.ready.Store(true)
			p.log.Info("partitions assigned", "schema", schema, "sequenced", m[t.Sequenced], "receipts", m[t.Receipts])
		}),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onRevoked),
		telemetry.KafkaMetrics(p.reg),
	)
	if p.cfg.StaticMembership {
		// A switch-over's next client rejoins under the same ID and gets
		// the same partitions back, its offsets from the new schema.
		opts = append(opts, eventlog.StaticMember(p.cfg.InstanceID))
	}
	if p.cfg.KafkaDebug {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, eventlog.DebugLogPrefix)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	p.kcl.Store(cl)
	defer cl.Close()
	defer func() {
		if m, _ := cl.GroupMetadata(); m != "" {
			p.member.Store(&m)
		}
	}()
	defer p.ready.Store(false)
	defer p.kcl.Store(nil)
	// Leaving the group waits for a rebalance the poll loop may be blocking.
	defer cl.AllowRebalance()
	for {
		recs, errored, err := p.poll(ctx, cl)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			if err := p.process(ctx, w, cl, recs); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return err
			}
		}
		// Every poll that returned something, records or only errors,
		// blocks the group's rebalances until this: a group error (the
		// coordinator's broker died) is such a poll, and the rejoin that
		// follows waits for it (issue 8).
		cl.AllowRebalance()
		if errored && len(recs) == 0 && !sleep(ctx, p.cfg.RetryMin) {
			return ctx.Err()
		}
	}
}

func (p *Persister) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	for topic, parts := range m {
		for _, part := range parts {
			p.m.lag.DeleteLabelValues(topic, strconv.Itoa(int(part)))
		}
		if len(parts) > 0 {
			p.log.Info("partitions released", "topic", topic, "partitions", parts)
		}
	}
}

// resumeOffsets starts each assigned partition at the lower of the group's
// committed offset and the schema's stored offset: the schema may be behind
// the group (it was built by replay, or restored), and the group behind the
// schema (a crash between the database commit and the offset commit, where
// dead letters may not have been produced yet). Rewriting what is stored is
// a no-op; a partition the schema never saw starts at offset 0.
func (p *Persister) resumeOffsets(ctx context.Context, w *store.Writer, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	for topic, parts := range offs {
		var stored map[int32]int64
		err := retry(ctx, p.cfg.RetryMin, p.cfg.RetryMax, 10, func() error {
			var err error
			stored, err = w.StoredOffsets(ctx, topic)
			return err
		})
		if err != nil {
			return nil, err
		}
		for part, o := range parts {
			at := stored[part] // 0 when the schema never saw the partition
			if committed := o.EpochOffset().Offset; committed >= 0 && committed < at {
				at = committed
			}
			parts[part] = kgo.NewOffset().At(at).WithEpoch(-1)
			p.log.Info("resuming partition", "topic", topic, "partition", part, "offset", at,
				"group_offset", o.EpochOffset().Offset, "stored_offset", stored[part])
		}
	}
	return offs, nil
}

// poller is the part of *kgo.Client that poll uses.
type poller interface {
	PollRecords(ctx context.Context, maxPollRecords int) kgo.Fetches
}

var _ poller = (*kgo.Client)(nil)

// poll returns up to BatchMax records: it waits for a first record, then
// at most BatchWait for more. It returns early, with errored set and
// possibly no records, after a poll that reported errors: with
// BlockRebalanceOnPoll such a poll blocks rebalances, and polling on
// without AllowRebalance would keep a group that lost its coordinator from
// ever rejoining.
func (p *Persister) poll(ctx context.Context, cl poller) (recs []*kgo.Record, errored bool, err error) {
	var deadline time.Time
	for len(recs) < p.cfg.BatchMax && !errored {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			pctx, cancel = context.WithTimeout(ctx, left)
		}
		fs := cl.PollRecords(pctx, p.cfg.BatchMax-len(recs))
		cancel()
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		if err := eventlog.FatalFetch(fs, func(topic string, part int32, err error) {
			errored = true
			p.m.fetchErrors.Inc()
			p.log.Warn("fetch error", "topic", topic, "partition", part, "err", err)
		}); err != nil {
			if eventlog.IsFenced(err) {
				err = &eventlog.FencedError{Service: service, Group: p.cfg.Group, InstanceID: p.cfg.InstanceID, Err: err}
			}
			return nil, false, err
		}
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if n := len(fp.Records); n > 0 {
				recs = append(recs, fp.Records...)
				lag := fp.HighWatermark - fp.Records[n-1].Offset - 1
				p.m.lag.WithLabelValues(fp.Topic, strconv.Itoa(int(fp.Partition))).Set(float64(max(lag, 0)))
			}
		})
		if len(recs) > 0 && deadline.IsZero() {
			if p.cfg.BatchWait == 0 {
				break
			}
			deadline = time.Now().Add(p.cfg.BatchWait)
		}
	}
	return recs, errored, nil
}

// retry runs f until it succeeds, ctx ends, or (tries > 0) it failed tries
// times, sleeping with exponential backoff between attempts.
func retry(ctx context.Context, lo, hi time.Duration, tries int, f func() error) error {
	wait := lo
	for n := 1; ; n++ {
		err := f()
		if err == nil {
			return nil
		}
		if tries > 0 && n >= tries {
			return err
		}
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
		wait = min(2*wait, hi)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
