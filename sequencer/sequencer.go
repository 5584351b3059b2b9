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
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/dedup"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/groups"
	"github.com/seqflow/seqflow/internal/msgid"
	"github.com/seqflow/seqflow/internal/peerauth"
	"github.com/seqflow/seqflow/internal/segment"
	"github.com/seqflow/seqflow/internal/telemetry"
	"github.com/seqflow/seqflow/schemas"
)

// Sequencer consumes im.uplink.v1 and emits im.sequenced.v1 exactly once:
// each poll batch is one Kafka transaction that holds the sequenced events,
// duplicate ACKs, dead letters and the consumed offsets.
type Sequencer struct {
	cfg   Config
	log   *slog.Logger
	reg   *prometheus.Registry
	m     *metrics
	pool  *pgxpool.Pool
	store segment.Store

	mu    sync.Mutex
	parts map[int32]*partState // assigned partitions with live state
	// epoch counts revocations per partition, so state rebuilt while the
	// partition was revoked underneath is never installed.
	epoch map[int32]uint64
	ready atomic.Bool
	kcl   atomic.Pointer[kgo.Client] // the live transact session's client, for /readyz
	watch atomic.Pointer[groupWatch] // the live session's coordinator watch

	instanceHeader kgo.RecordHeader
	tracer         trace.Tracer
	acks           *acker // nil: no direct ACKs (Config.DirectAck)
	snaps          *groups.SnapshotStore
}

// partState is what the sequencer holds for one assigned uplink partition.
// It is created on the first batch after assignment and dropped on
// revocation, so a partition that comes back starts from the log and
// PostgreSQL again.
type partState struct {
	book   *segment.Book
	window *dedup.Window
	groups *groups.Partition // governed sessions, as of the last committed batch
	// groupsNext is the offset of im.sequenced.v1 the group state holds
	// for: every committed event before it applied.
	groupsNext int64
	snap       snapshotter
	dropped    atomic.Bool
}

// New builds a sequencer; it connects to nothing until Run.
func New(cfg Config, log *slog.Logger) *Sequencer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	if cfg.PeerKeys != nil {
		peerauth.Report(cfg.PeerKeys, log, reg)
	}
	return &Sequencer{cfg: cfg, log: log, reg: reg, m: newMetrics(reg), parts: map[int32]*partState{}, epoch: map[int32]uint64{},
		instanceHeader: kgo.RecordHeader{Key: schemas.HeaderInstance, Value: []byte(cfg.InstanceID)}, tracer: telemetry.Tracer(service)}
}

// Run sequences until ctx ends. Unrecoverable Kafka transaction errors
// rebuild the transact session (dropping all partition state); a lost node
// lease stops sequencing until a new node ID is leased. Only configuration
// errors and the end of ctx end Run.
func (s *Sequencer) Run(ctx context.Context) error {
	shutdown, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: service, OTLPEndpoint: s.cfg.OTLPEndpoint})
	if err != nil {
		return err
	}
	defer telemetry.Flush(shutdown, s.log)
	pool, err := pgxpool.New(ctx, s.cfg.PGURL)
	if err != nil {
		return fmt.Errorf("connect postgres: %w", err)
	}
	defer pool.Close()
	s.pool = pool
	s.snaps = groups.NewSnapshotStore(pool)
	if s.store == nil {
		s.store = segment.NewPGStore(pool, int64(s.cfg.Step))
	}
	if err := s.checkTopics(ctx); err != nil {
		return err
	}
	if s.cfg.DirectAck && len(s.cfg.RedisAddrs) > 0 {
		if s.cfg.PeerKeys == nil {
			return fmt.Errorf("direct ACKs: %w", peerauth.ErrNoKeys)
		}
		rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: s.cfg.RedisAddrs})
		defer rdb.Close()
		s.acks = newAcker(delivery.NewTCPSender(delivery.NewRedisRegistry(rdb, s.cfg.PeerKeys), s.cfg.PeerKeys, delivery.TCPSenderOptions{Log: s.log}), s.log, s.m)
		defer s.acks.close()
	} else {
		s.log.Info("direct ACKs off: senders get their seqs through the pusher", "direct_ack", s.cfg.DirectAck, "redis", len(s.cfg.RedisAddrs) > 0)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := (&admin.Server{Addr: s.cfg.AdminAddr, Reg: s.reg, Ready: s.readyz, Config: s.cfg.Admin, Log: s.log}).Run(gctx)
		if gctx.Err() == nil {
			s.log.Error("admin server stopped; stopping", "err", err)
		}
		return err
	})
	g.Go(func() error {
		for {
			if err := s.runLeased(gctx); gctx.Err() != nil {
				return gctx.Err()
			} else if isFatal(err) {
				return err
			} else {
				s.log.Error("sequencing stopped; starting over", "err", err)
			}
			select {
			case <-gctx.Done():
				return gctx.Err()
			case <-time.After(time.Second):
			}
		}
	})
	return g.Wait()
}

// runLeased leases a snowflake node ID and sequences with it until the
// lease is lost or ctx ends.
func (s *Sequencer) runLeased(ctx context.Context) error {
	lease, err := msgid.Acquire(ctx, s.pool, s.cfg.TransactionalID(), s.cfg.LeaseTTL, msgid.WallClock, s.cfg.MaxClockBackwards, s.log)
	if err != nil {
		return err
	}
	s.log.Info("sequencer starting", "instance_id", s.cfg.InstanceID, "node_id", lease.Gen.Node())
	g, gctx := errgroup.WithContext(ctx)
	// The lease outlives a stop until the sessions are done: the batch a
	// stop interrupted still needs IDs to commit (see stopGrace). A lost
	// lease still ends the sessions at once, through gctx.
	leaseCtx, endLease := context.WithCancel(context.WithoutCancel(gctx))
	defer endLease()
	g.Go(func() error {
		err := lease.Run(leaseCtx)
		if leaseCtx.Err() != nil {
			return nil // released after the sessions ended
		}
		s.log.Error("node lease lost; no more ids with it", "node_id", lease.Gen.Node(), "err", err)
		return err
	})
	g.Go(func() error {
		defer endLease()
		for {
			started := time.Now()
			err := s.runSession(gctx, lease.Gen)
			if gctx.Err() != nil {
				return gctx.Err()
			}
			if isFatal(err) {
				return err
			}
			s.m.sessionsReset.Inc()
			s.log.Error("transact session failed; rebuilding it", "err", err)
			select {
			case <-gctx.Done():
				return gctx.Err()
			case <-time.After(rebuildDelay(time.Since(started))):
			}
		}
	})
	return g.Wait()
}

// rebuildDelay is the pause before a failed transact session is rebuilt,
// given how long it ran: a session that failed after working a while (a
// broker or coordinator fault; its partitions wait for the rebuild) comes
// back after 100ms, one that failed within 10s of its start after a
// second, so a persistent error does not spin.
func rebuildDelay(ran time.Duration) time.Duration {
	if ran >= 10*time.Second {
		return 100 * time.Millisecond
	}
	return time.Second
}

// readyz is ready when PostgreSQL and Kafka answer and the consumer has
// been assigned uplink partitions.
func (s *Sequencer) readyz(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	cl := s.kcl.Load()
	if cl == nil {
		return errors.New("kafka: no transact session yet")
	}
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	if !s.ready.Load() {
		return errors.New("no uplink partitions assigned yet")
	}
	return nil
}

// checkTopics verifies that uplink and sequenced topics have the same
// partition count: events go to the partition number of their uplink.
func (s *Sequencer) checkTopics(ctx context.Context) error {
	cl, err := kgo.NewClient(eventlog.ClientOpts(s.cfg.Brokers, "seqflow-sequencer-admin")...)
	if err != nil {
		return fmt.Errorf("kafka admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	up, err := eventlog.Partitions(ctx, adm, s.cfg.Topics.Uplink)
	if err != nil {
		return err
	}
	for _, t := range []string{s.cfg.Topics.Sequenced, s.cfg.Topics.Duplicates} {
		n, err := eventlog.Partitions(ctx, adm, t)
		if err != nil {
			return err
		}
		if n != up {
			return &eventlog.PartitionMismatchError{Topic: t, Want: up, Got: n}
		}
	}
	return nil
}

// onRevoked drops the state of revoked partitions before they are
// released, and gives their unused segment tails back to PostgreSQL: a
// partition that comes back (here or elsewhere) renews from PostgreSQL and
// rebuilds its dedup window from the log, and an orderly move leaves no gap.
// With BlockRebalanceOnPoll a revoke runs only between transactions, so no
// unused seq can still be in use.
func (s *Sequencer) onRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	var unused []segment.Grant
	for _, st := range s.drop(revoked[s.cfg.Topics.Uplink], "partition released") {
		unused = append(unused, st.book.Unused()...)
	}
	if len(unused) == 0 || s.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := s.store.Release(ctx, unused)
	if err != nil {
		s.log.Warn("give unused segments back", "sessions", len(unused), "err", err)
		return
	}
	s.m.released.Add(float64(n))
}

// onLost drops the state of lost partitions (a session timeout, a fenced
// instance): another owner may already hold them, so nothing is given back.
func (s *Sequencer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.drop(lost[s.cfg.Topics.Uplink], "partition lost")
}

func (s *Sequencer) drop(parts []int32, why string) []*partState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*partState
	for _, p := range parts {
		s.epoch[p]++
		if st := s.parts[p]; st != nil {
			st.dropped.Store(true)
			delete(s.parts, p)
			out = append(out, st)
		}
		s.m.lag.DeleteLabelValues(strconv.Itoa(int(p)))
		s.log.Info(why, "partition", p)
	}
	return out
}

func (s *Sequencer) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	s.ready.Store(true)
	for _, p := range assigned[s.cfg.Topics.Uplink] {
		s.log.Info("partition assigned", "partition", p)
	}
}

func (s *Sequencer) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, st := range s.parts {
		s.epoch[p]++
		st.dropped.Store(true)
		delete(s.parts, p)
	}
}

// runSession runs one GroupTransactSession until ctx ends or the session
// fails beyond recovery.
func (s *Sequencer) runSession(ctx context.Context, gen *msgid.Generator) error {
	defer s.dropAll()
	defer s.ready.Store(false)
	watch := newGroupWatch(time.Now())
	s.watch.Store(watch)
	opts := append(eventlog.ClientOpts(s.cfg.Brokers, "seqflow-sequencer-"+s.cfg.InstanceID),
		kgo.TransactionalID(s.cfg.TransactionalID()),
		kgo.TransactionTimeout(s.cfg.TxnTimeout),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		eventlog.Compression(),
		kgo.ProducerLinger(0),
		kgo.ConsumerGroup(s.cfg.Group),
		kgo.ConsumeTopics(s.cfg.Topics.Uplink),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		kgo.HeartbeatInterval(eventlog.HeartbeatInterval(s.cfg.SessionTimeout)),
		kgo.RebalanceTimeout(s.cfg.RebalanceTimeout),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
		kgo.FetchMaxWait(100*time.Millisecond),
		telemetry.KafkaMetrics(s.reg),
		kgo.WithHooks(watch),
	)
	opts = append(opts, batchProducerOpts(s.cfg.MaxPollRecords)...)
	if s.cfg.StaticMembership {
		opts = append(opts, eventlog.StaticMember(s.cfg.InstanceID))
	}
	if s.cfg.KafkaDebug {
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelDebug, eventlog.DebugLogPrefix)))
	}
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return fmt.Errorf("create transact session: %w", err)
	}
	s.kcl.Store(sess.Client())
	// Initialise the producer ID now, not at the first produce: under the
	// same transactional ID, that bumps the epoch and aborts whatever a
	// crashed predecessor (or this instance's previous session) left open,
	// which the dedup window's rebuild would otherwise wait out (its wait
	// for the last stable offset) for up to the transaction timeout.
	pctx, pcancel := context.WithTimeout(ctx, s.cfg.SessionTimeout)
	if _, _, err := sess.Client().ProducerID(pctx); err != nil && ctx.Err() == nil {
		s.log.Warn("initialising the producer ID; it is tried again at the first produce", "err", err)
	}
	pcancel()
	defer func() {
		s.kcl.Store(nil)
		// A poll that returned records blocks rebalances (and so leaving
		// the group) until allowed again.
		sess.AllowRebalance()
		member, _ := sess.Client().GroupMetadata()
		sess.Close()
		// Only an orderly stop leaves: a session rebuilt after an error
		// rejoins under the same ID and gets its partitions straight back.
		if s.cfg.StaticMembership && ctx.Err() != nil {
			s.leaveGroup(member)
		}
	}()
	// The batches run under work, not ctx: a stop lets the one in flight
	// end (see stopGrace) instead of leaving its transaction open.
	work, stopWork := stopGrace(ctx, s.cfg.TxnTimeout)
	defer stopWork()
	var lastPolled time.Time // the last transaction's poll (SEQUENCER_TXN_FLOOR)
	for {
		fetches, polled := s.poll(ctx, sess, lastPolled)
		if fetches.NumRecords() > 0 {
			lastPolled = polled
		}
		if ctx.Err() != nil {
			s.log.Info("stopped with its last batch ended")
			return ctx.Err()
		}
		if err := eventlog.FatalFetch(fetches, func(t string, p int32, err error) {
			s.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
		}); err != nil {
			if eventlog.IsFenced(err) {
				err = &eventlog.FencedError{Service: service, Group: s.cfg.Group, InstanceID: s.cfg.InstanceID, Err: err}
			}
			return err
		}
		if fetches.NumRecords() == 0 {
			sess.AllowRebalance()
			s.idleSnapshots()
			continue
		}
		fetches.EachRecord(func(r *kgo.Record) { s.m.uplinkWait.Observe(max(0, polled.Sub(r.Timestamp).Seconds())) })
		if err := s.transact(work, sess, gen, fetches, polled); err != nil {
			if ctx.Err() != nil {
				s.log.Warn("stopped before its last batch ended; the broker aborts its transaction after the transaction timeout",
					"err", err, "txn_timeout", s.cfg.TxnTimeout)
			}
			return err
		}
		sess.AllowRebalance()
	}
}

// stopGrace returns the context of the batches. It is cancelled grace
// after ctx is, not at once: a batch that a stop interrupted, with its
// records produced and its transaction open, would otherwise fail to end
// it, and an open transaction holds back the last stable offset of its
// partitions (and every read_committed reader of them: the next owner's
// dedup-window rebuild, the persister, the pusher) until the broker aborts
// it at the transaction timeout. With the grace, the batch commits, its
// senders get their seqs, and the loop stops at its next poll. The grace
// is the transaction timeout: past it the broker aborts the transaction
// anyway, so waiting longer gains nothing.
func stopGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// A grace timer still running after release only cancels again.
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return work, func() { stop(); cancel() }
}

// leaveGroup takes this static member out of the group after an orderly
// stop, so its partitions go to the other sequencers now rather than after
// the session timeout (see internal/eventlog/static.go).
func (s *Sequencer) leaveGroup(member string) {
	eventlog.LeaveAfterStop(s.log, s.cfg.Brokers, service, s.cfg.Group, s.cfg.InstanceID, member)
}

// poll returns the next batch and when it was complete
// (eventlog.TxnPoll: the buffered fetch merged with the next, then the
// transaction floor). With snapshots on, an idle poll returns after the
// interval, so the changes of the last batches are saved (idleSnapshots)
// even when no other batch follows them.
func (s *Sequencer) poll(ctx context.Context, sess *kgo.GroupTransactSession, prev time.Time) (kgo.Fetches, time.Time) {
	first, cancel := ctx, context.CancelFunc(func() {})
	if s.snaps != nil && s.cfg.GroupSnapshotInterval > 0 {
		first, cancel = context.WithTimeout(ctx, s.cfg.GroupSnapshotInterval)
	}
	defer cancel()
	return s.txnPoll().Poll(ctx, first, sess, prev)
}

// txnPoll is the sequencer's way of taking a batch, from its settings.
func (s *Sequencer) txnPoll() eventlog.TxnPoll {
	return eventlog.TxnPoll{MaxRecords: s.cfg.MaxPollRecords, MergeWait: s.cfg.MergeWait, Floor: s.cfg.TxnFloor,
		OnMerge: func(merged bool) {
			if merged {
				s.m.merges.WithLabelValues("merged").Inc()
			} else {
				s.m.merges.WithLabelValues("none").Inc()
			}
		}}
}

// transact runs one batch, polled at polled, as one transaction. It
// returns an error only when the session must be rebuilt.
func (s *Sequencer) transact(ctx context.Context, sess *kgo.GroupTransactSession, gen *msgid.Generator, fetches kgo.Fetches, polled time.Time) error {
	// One span per transaction, linked to the uplinks' traces: a span per
	// record would cost more than the sequencing. The records' traceparent
	// headers are copied unchanged onto their events.
	ctx, span := telemetry.StartBatch(ctx, s.tracer, "sequencer.batch", fetches.EachRecord)
	defer span.End()
	span.SetAttributes(attribute.Int("records", fetches.NumRecords()))
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	b, err := s.prepare(ctx, fetches)
	if err == nil {
		err = b.assign(ctx, s, gen)
	}
	built := time.Now()
	var produceErr error
	if err == nil {
		produceErr = b.produce(ctx, sess)
	}
	var topUp <-chan topUpResult
	if err == nil && produceErr == nil {
		topUp = s.startTopUp(ctx, b)
		if s.cfg.CommitDelay > 0 {
			time.Sleep(s.cfg.CommitDelay)
		}
	}
	want := kgo.TryCommit
	if err != nil || produceErr != nil {
		want = kgo.TryAbort
	}
	start := time.Now()
	// End must not hang on a dead coordinator: past the deadline of
	// endContext (transaction timeout + session timeout, or at once when
	// the group coordinator has been silent for half a session timeout, see
	// groupWatch) the outcome counts as unknown and the session is rebuilt.
	endCtx, endCancel, silent := endContext(ctx, s.watch.Load(), s.cfg.TxnTimeout, s.cfg.SessionTimeout, endSilence(s.cfg.SessionTimeout))
	committed, endErr := sess.End(endCtx, want)
	end := time.Now()
	endCancel()
	if endErr != nil && silent() {
		endErr = errCoordinatorSilent
	}
	result := "aborted"
	if committed {
		result = "committed"
	}
	s.m.txnSeconds.WithLabelValues(result).Observe(end.Sub(start).Seconds())
	span.SetAttributes(attribute.String("result", result))
	if topUp != nil {
		b.installTopUp(s, <-topUp)
	}
	switch {
	case endErr != nil:
		// The outcome is unknown: nothing held in memory can be trusted.
		return fmt.Errorf("end transaction: %w", endErr)
	case committed:
		b.commit(s)
		if s.acks != nil {
			b.ended = end
			s.acks.committed(b)
		}
		s.m.stageSeconds.WithLabelValues("prepare").Observe(built.Sub(polled).Seconds())
		s.m.stageSeconds.WithLabelValues("produce").Observe(start.Sub(built).Seconds())
		s.m.stageSeconds.WithLabelValues("commit").Observe(end.Sub(start).Seconds())
		s.m.stageSeconds.WithLabelValues("total").Observe(end.Sub(polled).Seconds())
		return nil
	default:
		b.rewind()
		if err == nil {
			err = produceErr
		}
		if err != nil {
			s.log.Warn("batch aborted; records will be retried", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		} else {
			s.log.Info("batch aborted by a rebalance; records will be retried by their owner")
		}
		return nil
	}
}

// state returns the live state of partition p, creating it (and rebuilding
// its dedup window from the sequenced log) on first use after assignment.
func (s *Sequencer) state(ctx context.Context, p int32) (*partState, error) {
	s.mu.Lock()
	st, epoch := s.parts[p], s.epoch[p]
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	start := time.Now()
	w, last, n, lso, err := s.restoreWindow(ctx, p)
	if err != nil {
		return nil, err
	}
	s.log.Info("dedup window rebuilt", "partition", p, "entries", n, "elapsed", time.Since(start).Round(time.Millisecond))
	gstart := time.Now()
	gp, gst, fromSnapshot, err := s.restoreGroups(ctx, p, lso)
	if err != nil {
		return nil, err
	}
	s.m.groupRestoreSecs.WithLabelValues(strconv.FormatBool(fromSnapshot)).Observe(time.Since(gstart).Seconds())
	s.m.restores.Inc()
	s.m.restoreSecs.Observe(time.Since(start).Seconds())
	s.log.Info("group state rebuilt", "partition", p, "sessions", gp.Sessions(), "from_snapshot", fromSnapshot, "records", gst.Records,
		"from", gst.From, "until", gst.Until, "elapsed", time.Since(gstart).Round(time.Millisecond))
	st = &partState{book: segment.NewBook(int64(s.cfg.Step), 0), window: w, groups: gp, groupsNext: lso}
	st.snap.last = time.Now()
	st.book.Resume(last)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch[p] != epoch {
		return nil, &RevokedError{Partition: p}
	}
	s.parts[p] = st
	return st, nil
}
