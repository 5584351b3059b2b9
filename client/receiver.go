package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/seqflow/seqflow/internal/wire"
)

// Event is one sequenced event as the app receives it (a pushed event or
// a sync result in its current state); Kind says which.
type Event = wire.Message

// syncer fetches one sync page; the client's implementation retries across
// reconnects, so an error means the fill cannot go on (ctx done, or a
// non-retryable answer such as not_a_member).
type syncer func(ctx context.Context, session string, afterSeq int64) (msgs []wire.Message, hasMore bool, err error)

// receiver turns pushes and sync pages into one ordered stream of events
// for the app: tracker decides, fills run one goroutine per session that
// needs one, and a dispatcher goroutine calls the app's handler one event
// at a time, in the order tracker released them, then records the event
// for the delivered receipts.
type receiver struct {
	tr         *tracker
	sync       syncer
	gapTimeout time.Duration
	// gapWait: how long a gap a push showed may close by pushes already
	// in flight before a fill starts; budget paces sync pages.
	gapWait   time.Duration
	budget    *rate.Limiter
	pollMin   time.Duration
	pollMax   time.Duration
	stats     *counters
	handle    func(Event)
	delivered func(session string, seq int64)

	mu     sync.Mutex
	queue  []Event
	wake   chan struct{}
	fills  sync.WaitGroup
	ctx    context.Context
	closed bool
}

// recovery is how the receiver fills gaps: gapWait and budget (sync
// pages per second, with a burst of twice that) of Options.
type recovery struct {
	gapTimeout, gapWait time.Duration
	pagesPerSecond      float64
}

func newReceiver(tr *tracker, s syncer, rc recovery, stats *counters, handle func(Event), delivered func(string, int64)) *receiver {
	burst := max(int(2*rc.pagesPerSecond), 1)
	return &receiver{
		tr: tr, sync: s, gapTimeout: rc.gapTimeout, gapWait: rc.gapWait, budget: rate.NewLimiter(rate.Limit(rc.pagesPerSecond), burst),
		pollMin: 20 * time.Millisecond, pollMax: 500 * time.Millisecond,
		stats: stats, handle: handle, delivered: delivered, wake: make(chan struct{}, 1),
	}
}

// setSelf records the user's ID (each connection's hello names it).
func (r *receiver) setSelf(user string) {
	r.mu.Lock()
	r.tr.self = user
	r.mu.Unlock()
}

// hold buffers pushes until catchUp: called when a connection opens,
// before its first frame is read.
func (r *receiver) hold() {
	r.mu.Lock()
	r.tr.holding = true
	r.mu.Unlock()
}

func (r *receiver) push(m wire.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.tr.push(m, time.Now())
	if res.duplicate {
		r.stats.DuplicatesDropped.Add(1)
	}
	r.emitLocked(res.deliver)
	if res.startFill {
		r.stats.Gaps.Add(1)
		r.startFillLocked(m.SessionID, r.gapWait)
	}
}

// catchUp applies a connection's changes result and starts the fills it
// calls for; pushes stay buffered until then.
func (r *receiver) catchUp(changes []wire.SessionChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.tr.catchUp(changes, time.Now()) {
		r.startFillLocked(s, 0)
	}
}

// release ends holding without a changes result (the request failed):
// buffered sessions are filled as if each push had shown a gap.
func (r *receiver) release() { r.catchUp(nil) }

// startFillLocked starts a fill of session after wait: a gap a push
// showed is often closed by the pushes behind it (a push path that lagged
// or reordered), and a fill started at once would fetch what they bring.
// The session stays marked filling meanwhile, so its later pushes do not
// start fills of their own.
func (r *receiver) startFillLocked(session string, wait time.Duration) {
	if r.closed || r.ctx == nil {
		r.tr.get(session, 0).filling = false
		return
	}
	ctx := r.ctx
	r.fills.Add(1)
	go func() {
		defer r.fills.Done()
		if wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			r.mu.Lock()
			if ctx.Err() != nil || !r.tr.needsFill(session) {
				r.tr.get(session, 0).filling = false
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
		}
		r.fill(ctx, session)
	}()
}

// fill syncs session from have until tracker says the gap is closed,
// polling with a growing pause while the store lags the pushed events.
func (r *receiver) fill(ctx context.Context, session string) {
	pause := r.pollMin
	for {
		if err := r.paced(ctx); err != nil {
			r.mu.Lock()
			r.tr.get(session, 0).filling = false
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		after := r.tr.fillFrom(session)
		r.mu.Unlock()
		msgs, hasMore, err := r.sync(ctx, session, after)
		r.mu.Lock()
		if err != nil {
			var se *ServerError
			if errors.As(err, &se) {
				r.tr.abandon(session) // e.g. not_a_member: the user left
			} else {
				r.tr.get(session, 0).filling = false // closing; the next client catches up
			}
			r.mu.Unlock()
			return
		}
		r.stats.Synced.Add(int64(len(msgs)))
		res := r.tr.synced(session, msgs, hasMore, time.Now(), r.gapTimeout)
		r.emitLocked(res.deliver)
		if res.gaveUp {
			r.stats.GapTimeouts.Add(1)
		}
		r.mu.Unlock()
		if res.done {
			return
		}
		if hasMore {
			pause = r.pollMin
			continue
		}
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.tr.get(session, 0).filling = false
			r.mu.Unlock()
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, r.pollMax)
	}
}

// paced waits for the budget to allow one more sync page: however many
// sessions need a fill, the client's syncs stay within it (counted in
// Stats.SyncsPaced when a page had to wait).
func (r *receiver) paced(ctx context.Context) error {
	res := r.budget.Reserve()
	d := res.Delay()
	if d == 0 {
		return nil
	}
	r.stats.SyncsPaced.Add(1)
	select {
	case <-ctx.Done():
		res.Cancel()
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (r *receiver) emitLocked(ms []wire.Message) {
	if len(ms) == 0 {
		return
	}
	r.queue = append(r.queue, ms...)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// begin sets the context fills run under; called before any connection.
func (r *receiver) begin(ctx context.Context) {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
}

// run is the dispatcher: it calls the handler for each released event
// until ctx is done, then waits for the fills to stop.
func (r *receiver) run(ctx context.Context) {
	defer func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.fills.Wait()
	}()
	for {
		r.mu.Lock()
		batch := r.queue
		r.queue = nil
		r.mu.Unlock()
		for _, m := range batch {
			if r.handle != nil {
				r.handle(m)
			}
			r.stats.Delivered.Add(1)
			r.delivered(m.SessionID, m.Seq)
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
	}
}

// cursors returns, per session, the highest seq handed to the handler's
// queue (what a restarted client passes as Options.Cursors).
func (r *receiver) cursors() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.tr.sessions))
	for id, s := range r.tr.sessions {
		if s.have > 0 {
			out[id] = s.have
		}
	}
	return out
}
