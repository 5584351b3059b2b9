// Package load is seqflow's load generator as a library: N users connected
// through the SDK to one or more gateways, M direct and group sessions, a
// target message rate (or as fast as the in-flight windows allow) for a
// duration, then a report of what was sent, acknowledged, delivered, lost,
// duplicated and out of order, with exact latency percentiles for
// send→ACK and send→deliver. With Options.Governance the groups' members
// change while it sends (governance.go), and what the groups' rules refuse
// is counted apart from what was lost. `seqflow load` is a thin CLI over
// Run; the chaos and benchmark suites call Run directly.
package load

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/auth"
)

// Options describe a load run. Zero values take the defaults named.
type Options struct {
	// Gateways are WebSocket URLs (ws://host:port); users are spread over
	// them round robin. Default ws://127.0.0.1:8080.
	Gateways []string
	// Secret is the gateways' HS256 secret (GATEWAY_JWT_HS256_SECRET), used
	// to mint one token per user. Required.
	Secret string
	// Users is the number of users, each one client (device "load").
	// Default 10.
	Users int
	// Sessions is the number of sessions. Default 5.
	Sessions int
	// GroupShare is the fraction of sessions that are groups, 0..1; the
	// rest are direct sessions of distinct pairs. Default (0) 0.5; a
	// negative value means direct sessions only.
	GroupShare float64
	// GroupSize is the members per group, creator included, 2..Users.
	// Default min(5, Users).
	GroupSize int
	// Rate is the target of messages per second over all users; 0 sends
	// as fast as the in-flight windows allow. Default 0.
	Rate float64
	// Duration of the send phase. Default 10s.
	Duration time.Duration
	// BodyBytes is the size of each text body. Default 100.
	BodyBytes int
	// Drain bounds the wait, after the send phase, for outstanding ACKs
	// and deliveries. Default 10s.
	Drain time.Duration
	// InFlight is each client's window of commands awaiting their ACK.
	// Default 32.
	InFlight int
	// DeliveredInterval is each client's window for delivered receipts
	// (client.Options.DeliveredInterval). Default (0): the SDK's.
	DeliveredInterval time.Duration
	// UserPrefix names the users (<prefix>-u0001...); default a random
	// "ld<hex>" so runs never share sessions.
	UserPrefix string
	// Governance, when > 0, runs a governance actor per group for the send
	// phase: every Governance (jittered ±50%) the group's owner, or now and
	// then an admin, adds or removes a member, sets a role, mutes or
	// unmutes a member or the whole group, or a member leaves or rejoins
	// by the group's invite code (governance.go). Members keep sending
	// whatever their mutes: what the rules refuse is Report.Refused, not
	// failed, and deliveries follow the members each message's seq had.
	// Default 0: groups keep their first members.
	Governance time.Duration
	// Timeline keeps, for every acked message, when it was scheduled and
	// how long its ACK took (Report.Timeline), to see how latency moves
	// over the run. Default false.
	Timeline bool
	// Progress, when set, gets a one-line progress bar redrawn with \r.
	Progress io.Writer
	// Logger gets the clients' connection events. Default: discard.
	Logger *slog.Logger
}

func (o *Options) defaults() error {
	if len(o.Gateways) == 0 {
		o.Gateways = []string{"ws://127.0.0.1:8080"}
	}
	if o.Users == 0 {
		o.Users = 10
	}
	if o.Sessions == 0 {
		o.Sessions = 5
	}
	switch {
	case o.GroupShare == 0:
		o.GroupShare = 0.5
	case o.GroupShare < 0:
		o.GroupShare = 0
	}
	if o.GroupSize == 0 {
		o.GroupSize = min(5, o.Users)
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.BodyBytes == 0 {
		o.BodyBytes = 100
	}
	if o.Drain == 0 {
		o.Drain = 10 * time.Second
	}
	if o.InFlight == 0 {
		o.InFlight = 32
	}
	if o.UserPrefix == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		o.UserPrefix = "ld" + hex.EncodeToString(b)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if o.Secret == "" {
		errs = append(errs, errors.New("Secret: the gateways' HS256 secret is required"))
	}
	if o.Users < 2 {
		errs = append(errs, fmt.Errorf("Users: %d, need at least 2", o.Users))
	}
	if o.Sessions < 1 {
		errs = append(errs, fmt.Errorf("Sessions: %d, need at least 1", o.Sessions))
	}
	if o.GroupShare > 1 {
		errs = append(errs, fmt.Errorf("GroupShare: %v not in 0..1", o.GroupShare))
	}
	if o.GroupSize < 2 || o.GroupSize > o.Users || o.GroupSize > 500 {
		errs = append(errs, fmt.Errorf("GroupSize: %d not in 2..min(Users, 500)", o.GroupSize))
	}
	if direct := o.Sessions - o.groups(); direct > o.Users*(o.Users-1)/2 {
		errs = append(errs, fmt.Errorf("Sessions: %d direct sessions need more than %d users", direct, o.Users))
	}
	if o.Rate < 0 {
		errs = append(errs, fmt.Errorf("Rate: %v is negative", o.Rate))
	}
	if o.Duration < 0 || o.Drain < 0 {
		errs = append(errs, errors.New("Duration and Drain must not be negative"))
	}
	if o.BodyBytes < 1 || o.BodyBytes > 16<<10 {
		errs = append(errs, fmt.Errorf("BodyBytes: %d not in 1..16384", o.BodyBytes))
	}
	if o.InFlight < 1 {
		errs = append(errs, fmt.Errorf("InFlight: %d, need at least 1", o.InFlight))
	}
	if o.Governance < 0 || (o.Governance > 0 && o.Governance < 10*time.Millisecond) {
		errs = append(errs, fmt.Errorf("Governance: %s, want 0 (off) or at least 10ms", o.Governance))
	}
	if len(errs) > 0 {
		return fmt.Errorf("load options: %w", errors.Join(errs...))
	}
	return nil
}

func (o *Options) groups() int { return int(float64(o.Sessions)*o.GroupShare + 0.5) }

// session is one session of the run.
type session struct {
	id      string
	direct  bool
	members []int // user indexes at its creation, the creator first
	// governed: its members change during the run (Options.Governance);
	// gov holds what the run knows of those changes.
	governed bool
	gov      *govState
	// acked: its acked messages; undelivered: their (message, recipient)
	// pairs not delivered yet, this session's share of run.undelivered.
	acked       []*sent
	undelivered int64
}

// sent is one message posted by the run.
type sent struct {
	at       time.Time
	sender   int
	session  *session
	acked    bool
	refused  bool  // the group's rules refused it
	seq      int64 // from the ACK
	eventSeq int64 // from the first event carrying it
	// expect: the recipients once acked, the members at its seq but the
	// sender, as far as the run knows the session's member history.
	expect []int
	// deliveredTo: users (index) other than the sender that received it;
	// deliveredMs: how long after at each got it.
	deliveredTo map[int]bool
	deliveredMs map[int]float64
}

// run is the state of one Run.
type run struct {
	o       Options
	users   []string
	clients []*client.Client
	byUser  map[string]int

	mu        sync.Mutex
	sessions  map[string]*session
	msgs      map[string]*sent // client_msg_id → message
	ackMs     []float64
	timeline  []TimelinePoint
	minutes   []ClientMinute
	lastSeq   []map[string]int64 // per recipient: session → last seq handed over
	created   map[string]map[int]bool
	errs      map[string]int64
	refusedBy map[string]int64 // sends the rules refused, by error name
	refused   [][2]string      // their (session_id, client_msg_id)
	of        [][]*session     // per user: the sessions it sends to
	govOps    map[string]*GovernanceOp
	govWG     sync.WaitGroup
	scheduled int64 // messages handed to a user's sender
	posted    int64
	acked     int64
	failed    int64
	delivered int64
	dups      int64
	ooo       int64
	late      int64 // found only by the final sync
	lost      int64
	// missedRemoved: acked before a recipient's removal, never handed to
	// it, and no longer in its reach (it is not a member now).
	missedRemoved int64
	// undelivered counts the (acked message, recipient) pairs not yet
	// delivered: what missingLocked would list, kept as the ACKs and
	// events come so that drain need not scan every message on each wake.
	undelivered int64
	wake        chan struct{}
}

// Run executes a load run and returns its report. ctx cancels it (the
// report then covers what happened so far, with the error).
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.defaults(); err != nil {
		return Report{}, err
	}
	signer, err := auth.NewHS256Signer([]byte(o.Secret))
	if err != nil {
		return Report{}, fmt.Errorf("token signer: %w", err)
	}
	r := &run{o: o, byUser: map[string]int{}, sessions: map[string]*session{}, msgs: map[string]*sent{},
		created: map[string]map[int]bool{}, errs: map[string]int64{}, refusedBy: map[string]int64{},
		govOps: map[string]*GovernanceOp{}, wake: make(chan struct{}, 1)}
	ttl := o.Duration + o.Drain + 10*time.Minute
	cctx, stopClients := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	runErrs := make(chan error, o.Users)
	defer func() {
		stopClients()
		r.govWG.Wait()
		wg.Wait()
	}()
	for i := range o.Users {
		u := fmt.Sprintf("%s-u%04d", o.UserPrefix, i+1)
		r.users = append(r.users, u)
		r.byUser[u] = i
		r.lastSeq = append(r.lastSeq, map[string]int64{})
		tok, err := signer.Mint(u, "load", ttl)
		if err != nil {
			return Report{}, fmt.Errorf("mint token: %w", err)
		}
		i := i
		c, err := client.New(client.Options{
			URLs: []string{o.Gateways[i%len(o.Gateways)]}, Token: tok, InFlight: o.InFlight, SkipHistory: true,
			DeliveredInterval: o.DeliveredInterval,
			OnEvent:           func(e client.Event) { r.onEvent(i, e) }, OnFinish: r.onFinish, Logger: o.Logger.With("user_id", u),
		})
		if err != nil {
			return Report{}, err
		}
		r.clients = append(r.clients, c)
		wg.Go(func() {
			if err := c.Run(cctx); err != nil && !errors.Is(err, context.Canceled) {
				runErrs <- fmt.Errorf("client %s: %w", u, err)
			}
		})
	}
	if err := r.setup(ctx, runErrs); err != nil {
		return Report{}, err
	}
	began := time.Now()
	mctx, stopMinutes := context.WithCancel(ctx)
	minutesDone := make(chan []ClientMinute, 1)
	go func() { minutesDone <- r.clientMinutes(mctx, began) }()
	r.send(ctx)
	sendSecs := time.Since(began).Seconds()
	stopMinutes()
	r.minutes = <-minutesDone
	r.drain(ctx)
	r.govWG.Wait() // an operation in flight at the end has its answer
	r.settleHistory(ctx)
	r.verify(ctx)
	rep := r.report(sendSecs)
	if r.o.Progress != nil {
		fmt.Fprintln(r.o.Progress)
	}
	select {
	case err := <-runErrs:
		return rep, err
	default:
	}
	return rep, ctx.Err()
}

// setup creates the sessions and waits until every member holds the
// session's first event, or a cursor of the session: then its gateway
// knows the membership. (Under SkipHistory a client whose catch-up finds
// the new session before its first event arrives starts the session at
// its latest seq, and that event is never handed over; setup used to wait
// its 60 s out for it.)
func (r *run) setup(ctx context.Context, runErrs chan error) error {
	o := r.o
	rnd := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 7))
	nGroups := o.groups()
	pairs := map[[2]int]bool{}
	var plan []*session
	for i := range o.Sessions {
		if i < nGroups {
			m := rnd.Perm(o.Users)[:o.GroupSize]
			plan = append(plan, &session{members: m})
			continue
		}
		for {
			a, b := rnd.IntN(o.Users), rnd.IntN(o.Users)
			if a == b || pairs[[2]int{min(a, b), max(a, b)}] {
				continue
			}
			pairs[[2]int{min(a, b), max(a, b)}] = true
			plan = append(plan, &session{direct: true, members: []int{a, b}})
			break
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	sem := make(chan struct{}, 16)
	errc := make(chan error, len(plan))
	var wg sync.WaitGroup
	for _, s := range plan {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c := r.clients[s.members[0]]
			var err error
			if s.direct {
				s.id, err = c.OpenDirect(sctx, r.users[s.members[1]])
			} else {
				var names []string
				for _, m := range s.members[1:] {
					names = append(names, r.users[m])
				}
				var a client.Ack
				a, err = c.CreateGroup(sctx, "load", names...)
				s.id = a.SessionID
			}
			if err != nil {
				errc <- fmt.Errorf("create session for %s: %w", r.users[s.members[0]], err)
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	r.mu.Lock()
	for _, s := range plan {
		r.sessions[s.id] = s
		if !s.direct && o.Governance > 0 {
			s.governed, s.gov = true, newGovState(s.members)
		}
	}
	r.mu.Unlock()
	for {
		ready := 0
		for _, s := range plan {
			if r.membersHold(s) {
				ready++
			}
		}
		if ready == len(plan) {
			return nil
		}
		select {
		case err := <-runErrs:
			return err
		case <-sctx.Done():
			return fmt.Errorf("sessions ready: %d of %d within 60s: %w", ready, len(plan), sctx.Err())
		case <-r.wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// membersHold says whether every member of s was handed its
// session_create or holds a cursor of it.
func (r *run) membersHold(s *session) bool {
	var missing []int
	r.mu.Lock()
	for _, m := range s.members {
		if !r.created[s.id][m] {
			missing = append(missing, m)
		}
	}
	r.mu.Unlock()
	for _, m := range missing {
		if r.clients[m].Cursors()[s.id] < 1 {
			return false
		}
	}
	return true
}

func (r *run) body(n int64) client.Content {
	head := fmt.Sprintf("load %d ", n)
	if len(head) >= r.o.BodyBytes {
		return client.Text(head[:r.o.BodyBytes])
	}
	return client.Text(head + strings.Repeat("x", r.o.BodyBytes-len(head)))
}

// send runs the send phase: paced over all users at Rate, or one loop
// per user as fast as its window allows. A user sends to the sessions it
// is a member of as far as the run knows (r.of), so a member removed from
// a group stops sending to it once the removal is known, and one added
// starts; what it sent in between is the rules' to refuse.
func (r *run) send(ctx context.Context) {
	o := r.o
	sctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	r.mu.Lock()
	r.of = make([][]*session, o.Users)
	ids := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var governed []*session
	for _, id := range ids {
		s := r.sessions[id]
		for _, m := range s.members {
			r.of[m] = append(r.of[m], s)
		}
		if s.governed {
			governed = append(governed, s)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	stopBar := r.progress(sctx, time.Now())
	defer stopBar()
	for i, s := range governed {
		r.govWG.Go(func() { r.govern(sctx, ctx, s, uint64(i)) })
	}
	// pick returns a session of u's to send to, nil when u has none now.
	pick := func(u int, rnd *mrand.Rand) *session {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.of[u]) == 0 {
			return nil
		}
		return r.of[u][rnd.IntN(len(r.of[u]))]
	}
	post := func(u int, s *session, at time.Time, n int64) {
		id := client.NewMessageID()
		r.mu.Lock()
		r.msgs[id] = &sent{at: at, sender: u, session: s}
		r.scheduled++
		r.mu.Unlock()
		if _, err := r.clients[u].PostWithID(sctx, id, s.id, r.body(n)); err != nil {
			r.mu.Lock()
			delete(r.msgs, id)
			r.errs["window_full_at_end"]++ // the window stayed full until the phase ended
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		r.posted++
		r.mu.Unlock()
	}
	if o.Rate > 0 {
		// One pacer; a worker per user so a full window delays only that
		// user. Latency counts from the scheduled time, so a stalled user
		// does not hide its wait (no coordinated omission).
		queues := make([]chan time.Time, o.Users)
		for u := range queues {
			queues[u] = make(chan time.Time, 4096)
			wg.Go(func() {
				rnd := mrand.New(mrand.NewPCG(uint64(u), 11))
				var n int64
				for at := range queues[u] {
					n++
					if s := pick(u, rnd); s != nil {
						post(u, s, at, n)
						continue
					}
					// Removed from every session it had, for now.
					r.mu.Lock()
					r.scheduled++
					r.errs["sender_in_no_session"]++
					r.mu.Unlock()
				}
			})
		}
		defer func() {
			for _, q := range queues {
				close(q)
			}
		}()
		var senders []int
		for u := range r.of {
			if len(r.of[u]) > 0 {
				senders = append(senders, u)
			}
		}
		rnd := mrand.New(mrand.NewPCG(3, 5))
		interval := time.Duration(float64(time.Second) / o.Rate)
		next := time.Now()
		for {
			if d := time.Until(next); d > 0 {
				select {
				case <-sctx.Done():
					return
				case <-time.After(d):
				}
			} else if sctx.Err() != nil {
				return
			}
			if len(governed) > 0 {
				// Members come and go: the senders are who is in a
				// session now.
				r.mu.Lock()
				senders = senders[:0]
				for u := range r.of {
					if len(r.of[u]) > 0 {
						senders = append(senders, u)
					}
				}
				r.mu.Unlock()
			}
			if len(senders) == 0 { // an owner stays in its group: cannot be
				r.mu.Lock()
				r.scheduled++
				r.errs["sender_in_no_session"]++
				r.mu.Unlock()
				next = next.Add(interval)
				continue
			}
			u := senders[rnd.IntN(len(senders))]
			select {
			case queues[u] <- next:
			default:
				r.mu.Lock()
				r.scheduled++
				r.errs["generator_queue_full"]++
				r.mu.Unlock()
			}
			next = next.Add(interval)
		}
	}
	for u := range r.of {
		if len(r.of[u]) == 0 && len(governed) == 0 {
			continue
		}
		wg.Go(func() {
			rnd := mrand.New(mrand.NewPCG(uint64(u), 13))
			var n int64
			for sctx.Err() == nil {
				n++
				s := pick(u, rnd)
				if s == nil {
					// Out of every session for now: wait for an add.
					select {
					case <-sctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				post(u, s, time.Now(), n)
			}
		})
	}
}

// clientMinutes sums the clients' recovery counters at each minute of the
// send phase until ctx ends, and returns each minute's increase.
func (r *run) clientMinutes(ctx context.Context, began time.Time) []ClientMinute {
	sum := func() (c ClientMinute) {
		for _, cl := range r.clients {
			st := cl.Stats()
			c.GapFills += st.Gaps
			c.SyncPages += st.SyncPages
			c.Synced += st.Synced
			c.Reconnects += max(st.Connects-1, 0)
		}
		return c
	}
	var out []ClientMinute
	prev := sum()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			if time.Since(began) > time.Second {
				out = append(out, prev.since(sum(), i))
			}
			return out
		case <-t.C:
			now := sum()
			out = append(out, prev.since(now, i))
			prev = now
		}
	}
}

// onFinish records a command's answer (called from the client's reader).
func (r *run) onFinish(p *client.Pending) {
	ack, err := p.Result()
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.msgs[p.ClientMsgID]
	if m == nil {
		return // a setup or governance command
	}
	if err != nil {
		var se *client.ServerError
		switch {
		case errors.As(err, &se) && IsRuleRefusal(se):
			// Not lost: the rules decided it, and nothing of it is in the
			// log (the chaos suite checks that against the log).
			m.refused = true
			r.refusedBy[se.Name]++
			r.refused = append(r.refused, [2]string{m.session.id, p.ClientMsgID})
		case se != nil:
			r.failed++
			r.errs[se.Name]++
		default:
			r.failed++
			r.errs["client_closed"]++
		}
		r.signal()
		return
	}
	r.ackLocked(m, ack.Seq)
	if m.eventSeq != 0 && m.eventSeq != ack.Seq {
		r.dups++
	}
	r.acked++
	r.ackMs = append(r.ackMs, ms(time.Since(m.at)))
	if r.o.Timeline {
		r.timeline = append(r.timeline, TimelinePoint{At: m.at, AckMs: r.ackMs[len(r.ackMs)-1]})
	}
	r.signal()
}

// IsRuleRefusal says whether err is a command refused by a group's rules
// (or the gateway's membership check): final, and nothing of it is
// sequenced. A retry with another client_msg_id may pass once the state
// changes; it is not a failure of the pipeline.
func IsRuleRefusal(err *client.ServerError) bool {
	if err.Retryable {
		return false
	}
	switch err.Name {
	case "not_a_member", "muted", "not_permitted", "group_dissolved", "group_full":
		return true
	}
	return false
}

// onEvent records what recipient u's app was handed.
func (r *run) onEvent(u int, e client.Event) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.sessions[e.SessionID]; s != nil && s.governed {
		r.observeLocked(s, u, e)
	}
	if e.Kind == "session_create" {
		if r.created[e.SessionID] == nil {
			r.created[e.SessionID] = map[int]bool{}
		}
		r.created[e.SessionID][u] = true
		r.signal()
	}
	last := r.lastSeq[u][e.SessionID]
	switch {
	case e.Seq == last:
		r.dups++
		return
	case e.Seq < last:
		r.ooo++
		return
	}
	r.lastSeq[u][e.SessionID] = e.Seq
	if e.Kind != "message" {
		return
	}
	m := r.msgs[e.ClientMsgID]
	if m != nil {
		// The same client message under two seqs would be a duplicate made
		// by the pipeline, not by the push path.
		if m.eventSeq == 0 {
			m.eventSeq = e.Seq
		} else if m.eventSeq != e.Seq {
			r.dups++
			return
		}
	}
	if m == nil || u == m.sender {
		return
	}
	if m.deliveredTo == nil {
		m.deliveredTo, m.deliveredMs = map[int]bool{}, map[int]float64{}
	}
	if m.deliveredTo[u] {
		r.dups++
		return
	}
	m.deliveredTo[u] = true
	if m.acked && slices.Contains(m.expect, u) {
		r.undelivered--
		m.session.undelivered--
	}
	r.delivered++
	m.deliveredMs[u] = ms(now.Sub(m.at))
	r.signal()
}

func (r *run) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ackLocked marks m acked with seq; its recipients that have not had it
// yet become undelivered.
func (r *run) ackLocked(m *sent, seq int64) {
	m.acked, m.seq = true, seq
	s := m.session
	s.acked = append(s.acked, m)
	m.expect = r.recipientsLocked(s, seq, m.sender)
	for _, u := range m.expect {
		if !m.deliveredTo[u] {
			r.undelivered++
			s.undelivered++
		}
	}
}

// recipientsLocked returns the members of s at seq but sender: its
// first members, or for a governed group the members after every change
// known before seq.
func (r *run) recipientsLocked(s *session, seq int64, sender int) []int {
	members := s.members
	if s.governed {
		members = s.gov.membersBefore(seq)
	}
	out := make([]int, 0, len(members))
	for _, u := range members {
		if u != sender {
			out = append(out, u)
		}
	}
	return out
}

// missingLocked returns, per recipient and session, the acked messages not
// yet delivered.
func (r *run) missingLocked() map[[2]string][]string {
	missing := map[[2]string][]string{}
	for id, m := range r.msgs {
		if !m.acked {
			continue
		}
		for _, u := range m.expect {
			if !m.deliveredTo[u] {
				k := [2]string{r.users[u], m.session.id}
				missing[k] = append(missing[k], id)
			}
		}
	}
	return missing
}

// drain waits for outstanding ACKs and deliveries, at most Drain. It does
// not wait for recipients removed from a group since: they can no longer
// fill a gap by sync, and verify counts what they miss apart.
func (r *run) drain(ctx context.Context) {
	dctx, cancel := context.WithTimeout(ctx, r.o.Drain)
	defer cancel()
	stopBar := r.progress(dctx, time.Now())
	defer stopBar()
	for {
		r.mu.Lock()
		undelivered, open := r.undelivered, r.posted-r.acked-r.failed-int64(len(r.refused))
		if undelivered > 0 && open == 0 {
			undelivered -= r.beyondReachLocked()
		}
		r.mu.Unlock()
		if undelivered == 0 && open == 0 {
			return
		}
		select {
		case <-dctx.Done():
			return
		case <-r.wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// beyondReachLocked counts the undelivered pairs of governed groups whose
// recipient is not a member any more.
func (r *run) beyondReachLocked() (n int64) {
	for _, s := range r.sessions {
		if !s.governed || s.undelivered == 0 {
			continue
		}
		now := s.gov.current()
		for _, m := range s.acked {
			for _, u := range m.expect {
				if !m.deliveredTo[u] && !slices.Contains(now, u) {
					n++
				}
			}
		}
	}
	return n
}

// verify looks for every acked message still missing at a recipient: a
// resync of that recipient first (its SDK then delivers what the store
// has), then a direct sync of the session. What sync returns is late, not
// lost; what it does not return is lost. A recipient no longer a member
// of a governed group may not sync it (sync is for members): what it
// missed before its removal is counted apart (missedBeforeRemoval).
func (r *run) verify(ctx context.Context) {
	r.mu.Lock()
	missing := r.missingLocked()
	r.mu.Unlock()
	if len(missing) == 0 {
		return
	}
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	resynced := map[string]bool{}
	for k := range missing {
		if !resynced[k[0]] {
			resynced[k[0]] = true
			_ = r.clients[r.byUser[k[0]]].Resync(vctx)
		}
	}
	time.Sleep(2 * time.Second)
	r.mu.Lock()
	missing = r.missingLocked()
	r.mu.Unlock()
	for k, ids := range missing {
		r.mu.Lock()
		s, u := r.sessions[k[1]], r.byUser[k[0]]
		gone := s.governed && !s.gov.isMember(u)
		if gone {
			r.missedRemoved += int64(len(ids))
		}
		r.mu.Unlock()
		if gone {
			continue
		}
		found := map[string]bool{}
		after := int64(0)
		for {
			evs, more, err := r.clients[r.byUser[k[0]]].Sync(vctx, k[1], after, 200)
			if err != nil {
				r.mu.Lock()
				r.errs["verify_sync_failed"]++
				r.mu.Unlock()
				break
			}
			for _, e := range evs {
				found[e.ClientMsgID] = true
				after = e.Seq
			}
			if !more || len(evs) == 0 {
				break
			}
		}
		r.mu.Lock()
		for _, id := range ids {
			if found[id] {
				r.late++
			} else {
				r.lost++
			}
		}
		r.mu.Unlock()
	}
}
