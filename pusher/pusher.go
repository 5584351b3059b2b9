package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/groups"
	"github.com/seqflow/seqflow/internal/membership"
	"github.com/seqflow/seqflow/internal/peerauth"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/telemetry"
	"github.com/seqflow/seqflow/schemas"
	"github.com/seqflow/seqflow/schemas/imv1"
)

const service = "pusher"

// Pusher consumes im.sequenced.v1 and im.duplicates.v1 (read_committed, in
// its own consumer group) and pushes every event to the online connections
// of the session's members, one batch per gateway per poll.
type Pusher struct {
	cfg Config
	log *slog.Logger
	reg *prometheus.Registry
	m   *metrics

	// newSender builds the transport; tests may replace it before Run.
	newSender func(rdb redis.UniversalClient) (delivery.Sender, error)
	// kgoOpts are added to the Kafka client's options (tests: a logger).
	kgoOpts []kgo.Opt

	cl       *kgo.Client
	presence presenceReader
	lanes    *lanes
	commit   *committer
	// offlineQ carries each poll's offline notifications to offlineLoop,
	// so the poll loop never waits for the producer's buffer.
	offlineQ chan offlineJob

	snaps *groups.SnapshotStore // nil: no PostgreSQL, replays read whole partitions

	mu          sync.Mutex
	parts       map[int32]*membership.Partition // sequenced partitions with rebuilt membership
	replayAfter map[int32]time.Time             // partitions whose replay failed: not before
	ready       atomic.Bool
	tracer      trace.Tracer
}

// presenceReader is presence.Store or presence.Cache: Lookup returns the
// live connections of users (absent: none), blocking for at most ctx.
type presenceReader interface {
	Lookup(ctx context.Context, users []string) (map[string][]presence.Conn, error)
}

var (
	_ presenceReader = (*presence.Store)(nil)
	_ presenceReader = (*presence.Cache)(nil)
)

// New builds a pusher; it connects to nothing until Run.
func New(cfg Config, log *slog.Logger) *Pusher {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	if cfg.PeerKeys != nil {
		peerauth.Report(cfg.PeerKeys, log, reg)
	}
	p := &Pusher{cfg: cfg, log: log, reg: reg, m: newMetrics(reg),
		parts: map[int32]*membership.Partition{}, replayAfter: map[int32]time.Time{}, tracer: telemetry.Tracer(service)}
	p.newSender = p.defaultSender
	return p
}

func (p *Pusher) defaultSender(rdb redis.UniversalClient) (delivery.Sender, error) {
	keys := p.cfg.PeerKeys
	if keys == nil {
		return nil, peerauth.ErrNoKeys
	}
	redisSender := func() delivery.Sender { return delivery.NewRedisSender(rdb, keys, delivery.RedisSenderOptions{}) }
	tcpSender := func() delivery.Sender {
		return delivery.NewTCPSender(delivery.NewRedisRegistry(rdb, keys), keys, delivery.TCPSenderOptions{Log: p.log})
	}
	switch p.cfg.Transport {
	case "auto":
		return delivery.NewChainSender(tcpSender(), redisSender()), nil
	case "tcp":
		return tcpSender(), nil
	case "redis":
		return redisSender(), nil
	}
	return nil, fmt.Errorf("unknown transport %q", p.cfg.Transport)
}

// Run pushes until ctx ends, then stops polling, waits up to
// ShutdownTimeout for handed-off batches, commits, and returns ctx.Err().
func (p *Pusher) Run(ctx context.Context) error {
	shutdown, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: service, OTLPEndpoint: p.cfg.OTLPEndpoint})
	if err != nil {
		return err
	}
	defer telemetry.Flush(shutdown, p.log)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: p.cfg.RedisAddrs})
	defer rdb.Close()
	if p.cfg.PGURL != "" {
		pool, err := pgxpool.New(ctx, p.cfg.PGURL)
		if err != nil {
			return fmt.Errorf("connect postgres: %w", err)
		}
		defer pool.Close()
		p.snaps = groups.NewSnapshotStore(pool)
	}
	store := presence.New(rdb, time.Minute)
	p.presence = store
	var cache *presence.Cache
	if p.cfg.PresenceCache {
		cache = presence.NewCache(store, presence.CacheOptions{MaxAge: p.cfg.PresenceCacheMaxAge, MaxUsers: p.cfg.PresenceCacheUsers})
		p.presence = cache
		p.m.watchCache(p.reg, cache)
	}
	sender, err := p.newSender(rdb)
	if err != nil {
		return err
	}
	defer sender.Close()

	// Lanes and offline produces outlive ctx by the shutdown drain.
	outCtx, stopOut := context.WithCancel(context.WithoutCancel(ctx))
	defer stopOut()
	p.lanes = newLanes(outCtx, sender, p.cfg, p.m, p.log)
	defer p.lanes.wait()
	p.offlineQ = make(chan offlineJob, p.cfg.MaxInflightPolls)
	var offlineDone sync.WaitGroup
	offlineDone.Go(func() { p.offlineLoop(outCtx) })
	defer offlineDone.Wait()
	defer stopOut()

	opts := append(eventlog.ClientOpts(p.cfg.Brokers, "seqflow-pusher-"+p.cfg.InstanceID), eventlog.ProducerOpts()...)
	opts = append(opts,
		kgo.ConsumerGroup(p.cfg.Group),
		kgo.ConsumeTopics(p.cfg.Topics.Sequenced, p.cfg.Topics.Duplicates),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(p.resetOffset()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(p.cfg.CommitInterval),
		kgo.AutoCommitCallback(p.onCommitted),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.HeartbeatInterval(eventlog.HeartbeatInterval(p.cfg.SessionTimeout)),
		kgo.RebalanceTimeout(p.cfg.RebalanceTimeout),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		kgo.ProducerLinger(5*time.Millisecond),
		// A partition this pusher is given is fetched only once the fetch
		// in flight to its broker returns, and that one waits at the
		// broker up to this long when nothing new came (franz-go's
		// default is 5s): a takeover must not stand still that long
		// (TestTakeoverPushesAtOnce).
		kgo.FetchMaxWait(100*time.Millisecond),
		telemetry.KafkaMetrics(p.reg),
	)
	if p.cfg.StaticMembership {
		opts = append(opts, eventlog.StaticMember(p.cfg.InstanceID))
	}
	opts = append(opts, p.kgoOpts...)
	// The committer exists before the client, whose rebalance callbacks
	// use it; it marks nothing until the first poll.
	p.commit = newCommitter(p.cfg.MaxInflightPolls, p.m, func(o map[string]map[int32]kgo.EpochOffset) { p.cl.MarkCommitOffsets(o) })
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	p.cl = cl
	defer func() {
		member, _ := cl.GroupMetadata()
		cl.Close()
		if p.cfg.StaticMembership {
			p.leaveGroup(member)
		}
	}()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return (&admin.Server{Addr: p.cfg.AdminAddr, Reg: p.reg, Ready: p.readyz(rdb), Config: p.cfg.Admin, Log: p.log}).Run(gctx)
	})
	g.Go(func() error { return p.commit.Run(gctx) })
	if cache != nil {
		g.Go(func() error { return cache.Run(gctx) })
	}
	g.Go(func() error {
		err := p.poll(gctx, outCtx)
		// A poll that returns on a canceled context still holds off
		// rebalances, and leaving the group waits for them.
		cl.AllowRebalance()
		p.shutdown()
		if gctx.Err() == nil {
			p.log.Error("consume loop ended", "err", err)
		}
		return err
	})
	return g.Wait()
}

func (p *Pusher) resetOffset() kgo.Offset {
	if p.cfg.ResetOffset == "start" {
		return kgo.NewOffset().AtStart()
	}
	return kgo.NewOffset().AtEnd()
}

func (p *Pusher) readyz(rdb redis.UniversalClient) admin.ReadyFunc {
	return func(ctx context.Context) error {
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		if err := p.cl.Ping(ctx); err != nil {
			return fmt.Errorf("kafka: %w", err)
		}
		if !p.ready.Load() {
			return ErrNotReady
		}
		return nil
	}
}

// leaveGroup takes this static member out of the group after an orderly
// stop, so its partitions go to the other pushers now rather than after
// the session timeout (see internal/eventlog/static.go).
func (p *Pusher) leaveGroup(member string) {
	eventlog.LeaveAfterStop(p.log, p.cfg.Brokers, service, p.cfg.Group, p.cfg.InstanceID, member)
}

// shutdown waits for handed-off work and commits what it covers.
func (p *Pusher) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownTimeout)
	defer cancel()
	if err := p.commit.drain(ctx); err != nil {
		p.log.Warn("shutdown: batches still in flight; their records will be pushed again by the next owner", "err", err)
	}
	if err := p.cl.CommitMarkedOffsets(ctx); err != nil {
		p.log.Warn("shutdown: commit offsets", "err", err)
	}
}

func (p *Pusher) onCommitted(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err == nil && resp != nil {
		for _, t := range resp.Topics {
			for _, part := range t.Partitions {
				if perr := kerr.ErrorForCode(part.ErrorCode); perr != nil && err == nil {
					err = fmt.Errorf("%s/%d: %w", t.Topic, part.Partition, perr)
				}
			}
		}
	}
	if err != nil {
		p.m.commits.WithLabelValues("error").Inc()
		p.log.Warn("commit offsets", "err", err)
		return
	}
	p.m.commits.WithLabelValues("ok").Inc()
}

func (p *Pusher) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	p.ready.Store(true)
	for t, ps := range assigned {
		p.log.Info("partitions assigned", "topic", t, "partitions", ps)
	}
}

// onRevoked commits what was handed off before the partitions go, and
// forgets their membership: a partition that comes back is replayed again.
func (p *Pusher) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	dctx, cancel := context.WithTimeout(ctx, p.cfg.ShutdownTimeout)
	defer cancel()
	if err := p.commit.drain(dctx); err != nil {
		p.log.Warn("revoke: batches still in flight; the next owner pushes their records again", "err", err)
	}
	if err := cl.CommitMarkedOffsets(dctx); err != nil {
		p.log.Warn("revoke: commit offsets", "err", err)
	}
	p.forget(revoked)
}

func (p *Pusher) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) { p.forget(lost) }

func (p *Pusher) forget(parts map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t, ps := range parts {
		for _, part := range ps {
			if t == p.cfg.Topics.Sequenced {
				delete(p.parts, part)
				delete(p.replayAfter, part)
			}
			p.m.lag.DeleteLabelValues(t, strconv.Itoa(int(part)))
		}
		p.log.Info("partitions released", "topic", t, "partitions", ps)
	}
}

// poll is the consume loop: poll, route, hand off, queue the ticket for
// commit, allow rebalances, repeat.
func (p *Pusher) poll(ctx, outCtx context.Context) error {
	for {
		fetches := p.cl.PollRecords(ctx, p.cfg.MaxPollRecords)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fatal error
		fetches.EachError(func(t string, part int32, err error) {
			if IsFatal(err) {
				fatal = err
				return
			}
			p.log.Warn("fetch error", "topic", t, "partition", part, "err", err)
		})
		if eventlog.IsFenced(fatal) {
			return fmt.Errorf("another pusher joined group %s with PUSHER_INSTANCE_ID=%s (each pusher needs an ID of its own): %w", p.cfg.Group, p.cfg.InstanceID, fatal)
		}
		if fatal != nil {
			return fatal
		}
		if fetches.NumRecords() > 0 {
			t := p.handle(ctx, outCtx, fetches)
			if err := p.commit.add(ctx, t); err != nil {
				return err
			}
		}
		p.cl.AllowRebalance()
	}
}

// handle routes one poll batch and hands it off; the returned ticket
// finishes when every batch and notification is handed off or dropped.
func (p *Pusher) handle(ctx, outCtx context.Context, fetches kgo.Fetches) *ticket {
	p.m.pollRecords.Observe(float64(fetches.NumRecords()))
	// One span per poll batch (routing and handoff), linked to the events'
	// traces; each PushItem carries its event's traceparent on to the
	// gateway, whose delivery span is its child.
	ctx, span := telemetry.StartBatch(ctx, p.tracer, "pusher.batch", fetches.EachRecord)
	defer span.End()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	var seqParts []kgo.FetchTopicPartition
	var dups []answer
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		last := fp.Records[len(fp.Records)-1]
		if offsets[fp.Topic] == nil {
			offsets[fp.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[fp.Topic][fp.Partition] = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
		p.m.lag.WithLabelValues(fp.Topic, strconv.Itoa(int(fp.Partition))).Set(float64(max(0, fp.HighWatermark-last.Offset-1)))
		switch fp.Topic {
		case p.cfg.Topics.Sequenced:
			seqParts = append(seqParts, fp)
		case p.cfg.Topics.Duplicates:
			for _, r := range fp.Records {
				if eventlog.Header(r, schemas.HeaderEventType) == "refusal" {
					var rf imv1.Refusal
					if err := proto.Unmarshal(r.Value, &rf); err != nil || rf.SenderUserId == "" {
						p.m.events.WithLabelValues("undecodable").Inc()
						continue
					}
					p.m.events.WithLabelValues("refusal").Inc()
					dups = append(dups, refusalAnswer(&rf))
					continue
				}
				var d imv1.DuplicateAck
				if err := proto.Unmarshal(r.Value, &d); err != nil || d.SenderUserId == "" {
					p.m.events.WithLabelValues("undecodable").Inc()
					continue
				}
				p.m.events.WithLabelValues("duplicate").Inc()
				dups = append(dups, duplicateAnswer(&d))
			}
		}
	})
	t := newTicket(offsets)
	defer t.release()

	events := p.route(ctx, seqParts)
	lctx, cancel := context.WithTimeout(ctx, p.cfg.PresenceTimeout)
	start := time.Now()
	online, err := p.lookup(lctx, users(events, dups))
	cancel()
	p.m.presenceSecs.Observe(time.Since(start).Seconds())
	if err != nil {
		p.log.Warn("presence lookup failed; dropping this poll's pushes", "err", err, "events", len(events), "duplicates", len(dups))
		p.m.droppedItems.WithLabelValues("presence_error").Add(float64(len(events) + len(dups)))
		return t
	}
	pl, skipped := buildPlan(events, dups, online, planOpts{offline: p.cfg.Offline, offlineMaxMembers: p.cfg.OfflineMaxMembers})
	for _, f := range pl.fanout {
		p.m.fanoutMembers.Observe(float64(f.members))
		p.m.fanoutConns.Observe(float64(f.conns))
		p.m.fanoutGateways.Observe(float64(f.gateways))
	}
	p.m.offline.WithLabelValues("skipped_large").Add(float64(skipped))
	for _, b := range pl.batches {
		t.hold()
		p.lanes.dispatch(job{b: b, t: t})
	}
	if len(pl.offline) > 0 {
		t.hold()
		select {
		case p.offlineQ <- offlineJob{t: t, notes: pl.offline}:
		case <-outCtx.Done():
			p.m.offline.WithLabelValues("failed").Add(float64(len(pl.offline)))
			t.release()
		}
	}
	return t
}

// offlineJob is one poll's offline notifications; t is held until they
// are all handed to the producer (each then holds t until acknowledged).
type offlineJob struct {
	t     *ticket
	notes []offlineNote
}

// offlineLoop produces the offline notifications of each poll, in poll
// order, until ctx ends. A produce blocks while the client's buffer is
// full (a 10,000-member group's message is 9,000 records); that wait is
// here, not in the poll loop, and polls stay bounded by
// MaxInflightPolls because their tickets finish only when Kafka has
// acknowledged every notification.
func (p *Pusher) offlineLoop(ctx context.Context) {
	for {
		select {
		case j := <-p.offlineQ:
			for _, n := range j.notes {
				p.produceOffline(ctx, j.t, n)
			}
			j.t.release()
		case <-ctx.Done():
			return
		}
	}
}

// route decodes each sequenced record and resolves its recipients from the
// partition's membership, rebuilding it from the log first when the
// partition is new to this pusher.
func (p *Pusher) route(ctx context.Context, parts []kgo.FetchTopicPartition) []routed {
	polled := time.Now().UnixMilli()
	p.ensureMembership(ctx, parts)
	var out []routed
	for _, fp := range parts {
		p.mu.Lock()
		mp := p.parts[fp.Partition]
		p.mu.Unlock()
		for _, r := range fp.Records {
			var ev imv1.SequencedEvent
			if err := proto.Unmarshal(r.Value, &ev); err != nil || ev.SessionId == "" {
				p.m.events.WithLabelValues("undecodable").Inc()
				continue
			}
			p.m.events.WithLabelValues(kind(&ev)).Inc()
			p.m.readLatency.Observe(float64(max(0, polled-ev.ServerTsMs)) / 1000)
			rt := routed{ev: &ev, traceparent: eventlog.Header(r, schemas.HeaderTraceparent)}
			if mp == nil {
				p.m.droppedItems.WithLabelValues("membership_unavailable").Inc()
				rt.recipients = []string{ev.SenderUserId}
			} else {
				res := mp.Apply(&ev)
				if !res.Known {
					p.m.unknownSession.Inc()
				}
				rt.recipients = res.Recipients
			}
			out = append(out, rt)
		}
	}
	return out
}

// replay rebuilds partition's membership up to until: from the group
// snapshot when one holds for an offset at or before until, else from the
// partition's start.
func (p *Pusher) replay(ctx context.Context, topic string, partition int32, until int64) (*membership.Partition, membership.ReplayStats, bool, error) {
	opts := eventlog.ClientOpts(p.cfg.Brokers, "seqflow-pusher-replay")
	if p.snaps != nil {
		gp, next, found, err := p.snaps.Load(ctx, topic, partition, 0)
		switch {
		case err != nil:
			p.log.Warn("group snapshot unreadable; membership replays the partition's start", "partition", partition, "err", err)
		case found && next <= until:
			mp, st, err := membership.ReplayFrom(ctx, opts, topic, partition, membership.FromGroups(gp), next, until, 0)
			return mp, st, true, err
		}
	}
	mp, st, err := membership.Replay(ctx, opts, topic, partition, until, 0)
	return mp, st, false, err
}

// ensureMembership replays, in parallel, every partition of parts that has
// no membership yet, up to the partition's first record in this poll.
func (p *Pusher) ensureMembership(ctx context.Context, parts []kgo.FetchTopicPartition) {
	var wg sync.WaitGroup
	now := time.Now()
	for _, fp := range parts {
		p.mu.Lock()
		_, have := p.parts[fp.Partition]
		wait := now.Before(p.replayAfter[fp.Partition])
		p.mu.Unlock()
		if have || wait {
			continue
		}
		wg.Go(func() {
			start := time.Now()
			until := fp.Records[0].Offset
			mp, st, fromSnapshot, err := p.replay(ctx, fp.Topic, fp.Partition, until)
			p.mu.Lock()
			defer p.mu.Unlock()
			if err != nil {
				p.replayAfter[fp.Partition] = time.Now().Add(time.Second)
				if ctx.Err() == nil {
					p.log.Error("membership replay failed; this partition's events reach only their senders until it succeeds",
						"err", &ReplayError{Topic: fp.Topic, Partition: fp.Partition, Err: err})
				}
				return
			}
			p.parts[fp.Partition] = mp
			delete(p.replayAfter, fp.Partition)
			p.m.replays.Inc()
			p.m.replaySeconds.Observe(time.Since(start).Seconds())
			p.m.replayRecords.Add(float64(st.Records))
			p.log.Info("membership rebuilt from the log", "partition", fp.Partition, "offset", until, "from_snapshot", fromSnapshot,
				"records", st.Records, "sessions", mp.Sessions(), "elapsed", time.Since(start).Round(time.Millisecond))
		})
	}
	wg.Wait()
}

// lookup reads the presence of users in chunks, four at a time; through
// the cache, in one call (its hits cost no round trip, and splitting them
// only adds goroutines to a busy CPU).
func (p *Pusher) lookup(ctx context.Context, users []string) (map[string][]presence.Conn, error) {
	out := map[string][]presence.Conn{}
	if _, cached := p.presence.(*presence.Cache); cached || len(users) <= p.cfg.PresenceChunk {
		return p.presence.Lookup(ctx, users)
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := 0; i < len(users); i += p.cfg.PresenceChunk {
		chunk := users[i:min(i+p.cfg.PresenceChunk, len(users))]
		g.Go(func() error {
			got, err := p.presence.Lookup(gctx, chunk)
			if err != nil {
				return err
			}
			mu.Lock()
			for u, cs := range got {
				out[u] = cs
			}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

func (p *Pusher) produceOffline(ctx context.Context, t *ticket, n offlineNote) {
	v, err := proto.Marshal(n.n)
	if err != nil {
		p.m.offline.WithLabelValues("failed").Inc()
		return
	}
	t.hold()
	p.cl.Produce(ctx, &kgo.Record{
		Topic: p.cfg.Topics.Offline, Key: []byte(n.n.RecipientUserId), Value: v,
		Headers: eventlog.Headers("offline", "seqflow.im.v1.OfflineNotification", service, n.traceparent),
	}, func(_ *kgo.Record, err error) {
		if err != nil {
			p.m.offline.WithLabelValues("failed").Inc()
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("produce offline notification", "session_id", n.n.SessionId, "seq", n.n.Seq, "err", err)
			}
		} else {
			p.m.offline.WithLabelValues("produced").Inc()
		}
		t.release()
	})
}

func kind(ev *imv1.SequencedEvent) string {
	switch ev.Payload.(type) {
	case *imv1.SequencedEvent_Message:
		return "message"
	case *imv1.SequencedEvent_SessionCreate:
		return "session_create"
	case *imv1.SequencedEvent_Membership:
		return "membership"
	case *imv1.SequencedEvent_Edit:
		return "edit"
	case *imv1.SequencedEvent_Recall:
		return "recall"
	}
	return "unknown"
}
