package main

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// ticket is one poll batch on its way out. Its offsets may be committed
// once every batch and offline notification it produced was handed to the
// transport or dropped.
type ticket struct {
	offsets map[string]map[int32]kgo.EpochOffset
	pending atomic.Int64
	done    chan struct{}
}

// newTicket returns a ticket held once by its builder; release that hold
// when everything is dispatched.
func newTicket(offsets map[string]map[int32]kgo.EpochOffset) *ticket {
	t := &ticket{offsets: offsets, done: make(chan struct{})}
	t.pending.Store(1)
	return t
}

func (t *ticket) hold() { t.pending.Add(1) }

func (t *ticket) release() {
	if t.pending.Add(-1) == 0 {
		close(t.done)
	}
}

// job is one gateway's batch of one poll.
type job struct {
	b        *imv1.PushBatch
	t        *ticket
	enqueued time.Time
}

// lanes sends each gateway's batches from a goroutine of its own, through a
// bounded queue, so one slow or dead gateway never holds up another, nor
// the partitions. A lane drops rather than waits:
//   - queue_full: the gateway's queue already holds QueueDepth batches;
//   - stale: a batch waited longer than SendTimeout for its turn;
//   - gateway_down: the last Send failed, and the lane is cooling off
//     (200 ms, doubling to 2 s) before it tries the gateway again;
//   - and whatever Send itself reports (delivery.DropReason).
//
// So every job is finished within about 2 × SendTimeout of being queued.
type lanes struct {
	ctx     context.Context // lanes live until it ends
	sender  delivery.Sender
	timeout time.Duration
	depth   int
	idle    time.Duration
	m       *metrics
	log     *slog.Logger
	now     func() time.Time

	mu    sync.Mutex
	byGW  map[string]*lane
	wg    sync.WaitGroup
	ended bool
}

type lane struct {
	gw        string
	q         chan job
	downUntil time.Time
	backoff   time.Duration
	failing   string // reason of the last failure, "" while healthy
}

const (
	minCoolOff = 200 * time.Millisecond
	maxCoolOff = 2 * time.Second
)

func newLanes(ctx context.Context, s delivery.Sender, cfg Config, m *metrics, log *slog.Logger) *lanes {
	return &lanes{ctx: ctx, sender: s, timeout: cfg.SendTimeout, depth: cfg.QueueDepth, idle: cfg.LaneIdle,
		m: m, log: log, now: time.Now, byGW: map[string]*lane{}}
}

// dispatch queues j for its gateway, or drops it; it never blocks.
func (ls *lanes) dispatch(j job) {
	j.enqueued = ls.now()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ended {
		ls.drop(j, "closed")
		return
	}
	l := ls.byGW[j.b.GatewayId]
	if l == nil {
		l = &lane{gw: j.b.GatewayId, q: make(chan job, ls.depth)}
		ls.byGW[l.gw] = l
		ls.m.lanes.Inc()
		ls.wg.Go(func() { ls.run(l) })
	}
	select {
	case l.q <- j:
	default:
		ls.drop(j, "queue_full")
	}
}

func (ls *lanes) drop(j job, reason string) {
	ls.m.droppedBatches.WithLabelValues(reason).Inc()
	ls.m.droppedItems.WithLabelValues(reason).Add(float64(len(j.b.Items)))
	j.t.release()
}

func (ls *lanes) run(l *lane) {
	idle := time.NewTimer(ls.idle)
	defer idle.Stop()
	for {
		select {
		case j := <-l.q:
			ls.send(l, j)
			idle.Reset(ls.idle)
		case <-idle.C:
			ls.mu.Lock()
			if len(l.q) == 0 {
				delete(ls.byGW, l.gw)
				ls.m.lanes.Dec()
				ls.mu.Unlock()
				return
			}
			ls.mu.Unlock()
			idle.Reset(ls.idle)
		case <-ls.ctx.Done():
			ls.mu.Lock()
			ls.ended = true
			delete(ls.byGW, l.gw)
			ls.m.lanes.Dec()
			ls.mu.Unlock()
			for {
				select {
				case j := <-l.q:
					ls.drop(j, "closed")
				default:
					return
				}
			}
		}
	}
}

func (ls *lanes) send(l *lane, j job) {
	now := ls.now()
	switch {
	case now.Before(l.downUntil):
		ls.drop(j, "gateway_down")
		return
	case now.Sub(j.enqueued) > ls.timeout:
		ls.drop(j, "stale")
		return
	}
	ctx, cancel := context.WithTimeout(ls.ctx, ls.timeout)
	j.b.SentTsMs = now.UnixMilli()
	err := ls.sender.Send(ctx, j.b)
	cancel()
	done := ls.now()
	ls.m.sendSeconds.Observe(done.Sub(now).Seconds())
	if err != nil {
		reason := delivery.DropReason(err)
		l.backoff = min(max(2*l.backoff, minCoolOff), maxCoolOff)
		l.downUntil = done.Add(l.backoff)
		if l.failing != reason {
			ls.log.Warn("gateway unreachable; dropping its batches while it is", "gateway_id", l.gw, "reason", reason, "err", err)
		}
		l.failing = reason
		ls.drop(j, reason)
		return
	}
	if l.failing != "" {
		ls.log.Info("gateway reachable again", "gateway_id", l.gw)
	}
	l.failing, l.backoff, l.downUntil = "", 0, time.Time{}
	ls.m.batches.Inc()
	for _, it := range j.b.Items {
		if ev := it.GetEvent(); ev != nil {
			ls.m.pushLatency.Observe(float64(done.UnixMilli()-ev.ServerTsMs) / 1000)
		}
	}
	j.t.release()
}

// wait returns when every lane has ended (after ctx ended).
func (ls *lanes) wait() { ls.wg.Wait() }

// committer marks the offsets of tickets for commit strictly in poll
// order, each once all its work is handed off, so a commit never passes a
// record whose push is still in flight.
type committer struct {
	mark  func(map[string]map[int32]kgo.EpochOffset)
	slots chan struct{}
	m     *metrics

	mu   sync.Mutex
	q    []*ticket
	wake chan struct{}
}

func newCommitter(maxInflight int, m *metrics, mark func(map[string]map[int32]kgo.EpochOffset)) *committer {
	return &committer{mark: mark, slots: make(chan struct{}, maxInflight), m: m, wake: make(chan struct{}, 1)}
}

// add queues t behind earlier tickets; it blocks while maxInflight
// tickets are unfinished.
func (c *committer) add(ctx context.Context, t *ticket) error {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	c.q = append(c.q, t)
	c.m.inflight.Set(float64(len(c.q)))
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// advance marks every finished ticket at the head of the queue and
// returns the first unfinished one, or nil.
func (c *committer) advance() *ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.q) > 0 {
		select {
		case <-c.q[0].done:
			c.mark(c.q[0].offsets)
			c.q[0] = nil
			c.q = c.q[1:]
			<-c.slots
		default:
			c.m.inflight.Set(float64(len(c.q)))
			return c.q[0]
		}
	}
	c.m.inflight.Set(0)
	return nil
}

// Run marks tickets as they finish until ctx ends.
func (c *committer) Run(ctx context.Context) error {
	for {
		var done <-chan struct{}
		if head := c.advance(); head != nil {
			done = head.done
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
		case <-c.wake:
		}
	}
}

// drain marks tickets as they finish until none is left or ctx ends.
func (c *committer) drain(ctx context.Context) error {
	for {
		head := c.advance()
		if head == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-head.done:
		}
	}
}
