package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

// Ack is the gateway's final answer to a command: the seq and message ID
// it got, decided once. A retry of the same client_msg_id gets the same
// Ack with Duplicate set.
type Ack struct {
	ClientMsgID string
	SessionID   string
	Seq         int64
	MsgID       string
	// ServerTs is when the sequencer assigned the seq, Unix ms.
	ServerTs  int64
	Duplicate bool
}

// Pending is a command in flight: it is resent with the same client_msg_id
// until the gateway answers it with an ok ACK or a non-retryable error.
type Pending struct {
	// ClientMsgID is generated once (UUIDv7) and reused by every resend.
	ClientMsgID string
	// Posted is when the command entered the window.
	Posted time.Time

	frame     *wire.ClientFrame
	done      chan struct{}
	ack       Ack
	err       error
	recovered bool // read from the outbox, holds no window slot

	// Guarded by sender.mu.
	sentOn   *conn
	sentAt   time.Time
	retryAt  time.Time // after a retryable error: not before
	accepted bool      // answered "accepted": waiting for the seq_notice
	attempts int
	finished bool
}

// Done is closed when the command is answered (or the client closed).
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait blocks until the command is answered or ctx is done. Giving up the
// wait does not withdraw the command: it stays in flight until answered.
func (p *Pending) Wait(ctx context.Context) (Ack, error) {
	select {
	case <-p.done:
		return p.ack, p.err
	case <-ctx.Done():
		return Ack{}, ctx.Err()
	}
}

// Result returns the answer of a finished command (zero values before).
func (p *Pending) Result() (Ack, error) {
	select {
	case <-p.done:
		return p.ack, p.err
	default:
		return Ack{}, nil
	}
}

// sender keeps the window of commands in flight and decides when each is
// (re)sent: at once on the current connection, again on every new
// connection, again when its ACK is overdue, and after a backoff when the
// gateway answered with a retryable error.
type sender struct {
	window          chan struct{}
	ackTimeout      time.Duration
	acceptedTimeout time.Duration
	retry           backoff
	outbox          *outbox
	stats           *counters
	onFinish        func(*Pending)

	// kick wakes the resend loop when a command falls due before the time
	// it sleeps until (wakeLocked): with nothing in flight the loop does
	// not tick (an idle client does not wake up 20 times a second).
	kick  chan struct{}
	scans atomic.Int64 // resend scans run, for tests

	mu sync.Mutex
	// wakeAt is when the resend loop scans next; zero: when a post wakes it.
	wakeAt time.Time
	cur    *conn
	byID   map[string]*Pending // commands not yet answered
	order  []*Pending          // posting order, finished ones removed lazily
	closed bool
}

func newSender(inFlight int, ackTimeout time.Duration, retry backoff, ob *outbox, stats *counters) *sender {
	return &sender{
		window: make(chan struct{}, inFlight), ackTimeout: ackTimeout, retry: retry,
		outbox: ob, stats: stats, byID: map[string]*Pending{}, kick: make(chan struct{}, 1),
	}
}

// post enters f into the window (blocking while the window is full, for
// at most ctx), records it in the outbox and sends it if connected.
func (s *sender) post(ctx context.Context, f *wire.ClientFrame) (*Pending, error) {
	select {
	case s.window <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p := &Pending{ClientMsgID: f.ClientMsgID, Posted: time.Now(), frame: f, done: make(chan struct{})}
	if s.outbox != nil {
		if err := s.outbox.add(f); err != nil {
			<-s.window
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		<-s.window
		return nil, ErrClosed
	}
	if old, ok := s.byID[p.ClientMsgID]; ok && !old.finished {
		<-s.window
		return old, nil
	}
	s.track(p)
	s.stats.Posted.Add(1)
	if s.cur != nil {
		s.sendLocked(p, s.cur, time.Now())
	}
	return p, nil
}

func (s *sender) track(p *Pending) {
	if old, ok := s.byID[p.ClientMsgID]; ok && !old.finished {
		return
	}
	s.byID[p.ClientMsgID] = p
	s.order = append(s.order, p)
	s.wakeLocked(time.Now().Add(s.ackTimeout))
}

// recover adds commands read from the outbox; they hold no window slot.
func (s *sender) recover(frames []*wire.ClientFrame) []*Pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Pending
	for _, f := range frames {
		p := &Pending{ClientMsgID: f.ClientMsgID, Posted: time.Now(), frame: f, done: make(chan struct{}), recovered: true}
		s.track(p)
		out = append(out, s.byID[f.ClientMsgID])
	}
	return out
}

func (s *sender) sendLocked(p *Pending, c *conn, now time.Time) {
	if p.attempts > 0 {
		s.stats.Resent.Add(1)
	}
	p.attempts++
	p.sentOn, p.sentAt, p.retryAt, p.accepted = c, now, time.Time{}, false
	// A full queue or a dead connection is found out by the resend scan.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = c.send(ctx, p.frame)
	cancel()
}

// attach makes c the current connection (nil: none) and resends, in
// posting order, every command not yet answered.
func (s *sender) attach(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = c
	if c == nil {
		return
	}
	now := time.Now()
	for _, p := range s.live() {
		if p.retryAt.After(now) {
			continue
		}
		s.sendLocked(p, c, now)
	}
}

// live compacts order and returns the commands not yet finished.
func (s *sender) live() []*Pending {
	n := 0
	for _, p := range s.order {
		if !p.finished {
			s.order[n] = p
			n++
		}
	}
	clear(s.order[n:])
	s.order = s.order[:n]
	return s.order
}

// resendLoop scans when the earliest command in flight falls due (its
// ACK overdue, its backoff over), and not more often than every; with no
// connection it scans every interval, and with nothing in flight it sleeps
// until a post wakes it. Between those times it does not wake: a client
// sending steadily does not tick 20 times a second.
func (s *sender) resendLoop(ctx context.Context, every time.Duration) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick: // a command falls due before the timer
		case now := <-t.C:
			if next := s.scan(now); !next.IsZero() {
				t.Reset(max(next.Sub(now), every))
				continue
			}
			select { // nothing in flight
			case <-ctx.Done():
				return
			case <-s.kick:
			}
		}
		t.Reset(0)
	}
}

// scan resends what is overdue: not sent on the current connection, ACK
// missing for ackTimeout, or a retryable error's backoff elapsed. It
// returns when the next command falls due (with no connection, now: a new
// connection resends them all, see attach), zero when none is in flight,
// and sets wakeAt to it.
func (s *sender) scan(now time.Time) time.Time {
	s.scans.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakeAt = time.Time{}
	if len(s.byID) == 0 {
		return s.wakeAt
	}
	c := s.cur
	if c == nil || c.ctx.Err() != nil {
		s.wakeAt = now
		return s.wakeAt
	}
	for _, p := range s.live() {
		due := s.due(p, c)
		if !now.Before(due) {
			s.sendLocked(p, c, now)
			due = s.due(p, c)
		}
		if s.wakeAt.IsZero() || due.Before(s.wakeAt) {
			s.wakeAt = due
		}
	}
	return s.wakeAt
}

// due is when p is resent on c: after its backoff, at once when it was
// not sent on c, else when its ACK is overdue.
func (s *sender) due(p *Pending, c *conn) time.Time {
	switch {
	case !p.retryAt.IsZero():
		return p.retryAt
	case p.sentOn != c:
		return time.Time{}
	case p.accepted:
		return p.sentAt.Add(min(s.ackTimeout, s.acceptedTimeout))
	}
	return p.sentAt.Add(s.ackTimeout)
}

// wakeLocked wakes the resend loop when t is before the time it sleeps
// until (or it sleeps until a post); s.mu is held.
func (s *sender) wakeLocked(t time.Time) {
	if s.wakeAt.IsZero() || t.Before(s.wakeAt) {
		s.wakeAt = t
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// onFrame handles an ack, seq_notice or error that names a client_msg_id.
func (s *sender) onFrame(f serverFrame) {
	s.mu.Lock()
	p, ok := s.byID[f.ClientMsgID]
	if !ok || p.finished {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	switch {
	case f.Op == wire.OpError && f.Error.Retryable:
		s.stats.RetryableErrors.Add(1)
		p.retryAt = now.Add(s.retry.delay(p.attempts - 1))
		s.wakeLocked(p.retryAt)
		s.mu.Unlock()
		return
	case f.Op == wire.OpError:
		s.finishLocked(p, Ack{}, serverError(f.Error, f.ClientMsgID))
	case f.Status == wire.StatusAccepted:
		// Durable in Kafka; the seq follows as a seq_notice. Ask again
		// after acceptedTimeout in case the notice is lost.
		p.sentAt, p.accepted = now, true
		s.stats.Accepted.Add(1)
		s.mu.Unlock()
		return
	case f.Status == wire.StatusRefused && f.Error != nil:
		// The group's rules refused it after an "accepted" (a seq_notice).
		s.finishLocked(p, Ack{}, serverError(f.Error, f.ClientMsgID))
	case f.Status == wire.StatusOK:
		s.finishLocked(p, Ack{ClientMsgID: f.ClientMsgID, SessionID: f.SessionID, Seq: f.Seq, MsgID: f.MsgID,
			ServerTs: f.ServerTs, Duplicate: f.Duplicate}, nil)
	default:
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.completed(p)
}

func (s *sender) finishLocked(p *Pending, a Ack, err error) {
	p.finished, p.ack, p.err = true, a, err
	delete(s.byID, p.ClientMsgID)
	if err == nil && a.Duplicate {
		s.stats.DuplicateAcks.Add(1)
	}
}

// completed runs outside the lock: outbox, window slot, waiters.
func (s *sender) completed(p *Pending) {
	if s.outbox != nil {
		_ = s.outbox.done(p.ClientMsgID) // a lost "done" costs one duplicate resend
	}
	if !p.recovered {
		<-s.window
	}
	close(p.done)
	if s.onFinish != nil {
		s.onFinish(p)
	}
}

// close fails every command still in flight with ErrClosed; the outbox
// keeps them for the next client.
func (s *sender) close() {
	s.mu.Lock()
	s.closed = true
	var left []*Pending
	for _, p := range s.live() {
		p.finished, p.err = true, ErrClosed
		left = append(left, p)
	}
	clear(s.byID)
	s.mu.Unlock()
	for _, p := range left {
		if !p.recovered {
			<-s.window
		}
		close(p.done)
	}
}
