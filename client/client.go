// Package client is the Go SDK of seqflow: it speaks the gateway protocol
// (docs/protocol.md) and does the reliability work of seed 004 once, so
// apps do not each get it wrong: reconnect with backoff and jitter and catch
// up through changes and sync; commands with a client_msg_id fixed once and
// resent until ACKed; per-session seq tracking that drops duplicates and
// fills gaps before later events reach the app; batched delivered receipts;
// and an optional file-backed outbox. See README.md for the guarantees.
package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/wire"
)

// Options configure a Client. Zero values take the defaults named.
type Options struct {
	// URLs of gateways (ws://host:port, wss://, or http(s):// which maps to
	// ws(s)://; the path defaults to /v1/ws). The client uses the first and
	// moves to the next when a connection attempt fails. Required.
	URLs []string
	// Token is the bearer token. A token the gateway refuses (401) makes
	// Run return, since it cannot get better by retrying.
	Token string
	// TokenSource, when set, is asked for a token before every connection
	// attempt (so an expired token can be renewed); it wins over Token.
	TokenSource func(ctx context.Context) (string, error)
	// Platform is this device's platform (ios, android, web, desktop,
	// tablet, cli: [a-z0-9_-], up to 16 bytes), sent on connect for the
	// device list and the gateway's login policy; a platform claim in the
	// token wins over it. Default none.
	Platform string

	// InFlight bounds the commands awaiting their ACK; Post blocks while
	// the window is full. Default 32 (the gateway's own bound is 64).
	InFlight int
	// AckTimeout is how long a command waits for any answer before it is
	// resent with the same client_msg_id. Default 10s.
	AckTimeout time.Duration
	// AcceptedTimeout is how long a command answered "accepted" (durable in
	// Kafka, seq to follow) waits for its seq_notice before it is asked for
	// again with the same client_msg_id, which returns the seq at once if
	// the notice was lost. Default 3s.
	AcceptedTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential pauses
	// between connection attempts and after retryable errors. Defaults
	// 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// DeliveredCount and DeliveredInterval batch the delivered receipts:
	// flushed after this many events or this long, whichever comes first.
	// Defaults 64 and 100ms.
	DeliveredCount    int
	DeliveredInterval time.Duration
	// SyncLimit is the page size of sync requests, 1..200. Default 200.
	SyncLimit int
	// GapTimeout bounds how long later events of a session are held while
	// a gap is filled and the store does not reach them; after it they are
	// handed over past the hole (counted in Stats.GapTimeouts). Default 10s.
	GapTimeout time.Duration
	// GapWait is how long a gap a push showed is given to close by the
	// pushes behind it before a fill syncs it. Default 250ms; negative:
	// fill at once.
	GapWait time.Duration
	// SyncBudget bounds the sync pages the client requests per second
	// for its fills, with a burst of twice that; fills wait for it, none
	// is dropped. Default 10.
	SyncBudget float64
	// ResyncInterval runs changes (and the syncs it calls for) this often
	// while connected, to find events whose push was lost at the end of a
	// session where no later push shows the gap. Default 30s; negative: off.
	ResyncInterval time.Duration
	// RecheckAfter runs changes once more this long after each connection's
	// catch-up: the store lags the log, so the catch-up can miss the last
	// events sent while the client was away, and no push will show them.
	// Default 1s; negative: off.
	RecheckAfter time.Duration
	// RequestTimeout bounds one attempt of a request (sync, changes, read)
	// on one connection. Default 30s.
	RequestTimeout time.Duration
	// WriteTimeout bounds writing one frame; a connection that cannot take
	// a frame for this long is dropped. Default 10s.
	WriteTimeout time.Duration

	// OutboxPath, when set, is a file that keeps commands not yet answered
	// across restarts; New reads it and the commands found are resent with
	// their original client_msg_id (see Recovered). One file per client.
	OutboxPath string
	// Cursors are, per session, the highest seq the app already holds
	// (from Client.Cursors of a previous run): catch-up starts after them.
	Cursors map[string]int64
	// SkipHistory starts sessions the client has no cursor for at their
	// latest seq instead of syncing their history from the first event.
	SkipHistory bool

	// OnEvent receives every event of the user's sessions exactly once, per
	// session in strictly increasing seq, one call at a time from one
	// goroutine. It may block (the client keeps reading; events queue).
	OnEvent func(Event)
	// OnConnect is called after each connection's hello, before catch-up.
	OnConnect func(Hello)
	// OnDisconnect is called when a connection drops, with the reason.
	OnDisconnect func(error)
	// OnFinish is called when a command is answered (ok ACK or final
	// error), recovered ones included, from the reading goroutine: it must
	// not block.
	OnFinish func(*Pending)
	// OnTyping receives the typing indicators of the other members of the
	// user's sessions, from the reading goroutine: it must not block. They
	// are ephemeral (no seq, never synced, may be lost): show one for its
	// ExpiresIn at most unless a newer one comes.
	OnTyping func(Typing)
	// OnReceipt receives the delivery and read cursors of the other
	// members of the user's sessions ("bob has received up to seq 42",
	// "alice has read up to 40"), coalesced by the gateway, from the
	// reading goroutine: it must not block. They are ephemeral and may be
	// lost; SeenBy gives the exact answer for reads.
	OnReceipt func(Receipt)
	// OnUnread receives the user's unread counts as the gateway pushes
	// them: every changes result (asked on each connect, so the counts
	// start there), then the count of a session and the total after each
	// chat message or recall pushed, and after each read on any of the
	// user's devices. It is called from the reading goroutine in the
	// order the frames came, so the last update is the newest: it must
	// not block. An event's counts come when its frame is read, which
	// may be before the event reaches OnEvent (it can wait for a fill).
	OnUnread func(UnreadUpdate)

	// Logger gets connection events at Info and Warn. Default: discard.
	Logger *slog.Logger
	// HTTPClient is used for the WebSocket handshake. Default
	// http.DefaultClient.
	HTTPClient *http.Client
}

// Hello is what a gateway says about a new connection.
type Hello struct {
	ConnID, UserID, DeviceID, GatewayID string
	URL                                 string
}

// Content is a message body with its type: "text" (Body is a JSON
// string), "image", "file" or "custom" (Body is a JSON object).
type Content struct {
	Type string
	Body json.RawMessage
}

// Text is a text message.
func Text(s string) Content {
	b, _ := json.Marshal(s)
	return Content{Type: wire.TypeText, Body: b}
}

// Stats are the client's counters since New.
type Stats struct {
	Connects          int64 // connections opened
	Posted            int64 // commands posted
	Resent            int64 // command frames sent again (reconnect, ACK timeout, retryable error)
	RetryableErrors   int64 // retryable error frames answering commands
	Accepted          int64 // "accepted" ACKs (durable, seq to follow as a seq_notice)
	DuplicateAcks     int64 // ACKs of a retry that had a seq already
	Delivered         int64 // events handed to OnEvent
	DuplicatesDropped int64 // pushed events dropped as already held
	Gaps              int64 // pushes that started a fill
	GapTimeouts       int64 // fills that gave up waiting for the store
	Synced            int64 // events received in sync pages
	SyncPages         int64 // sync pages requested by fills
	SyncsPaced        int64 // sync pages of fills that waited for SyncBudget
}

type counters struct {
	Connects, Posted, Resent, RetryableErrors, DuplicateAcks, Accepted atomic.Int64
	Delivered, DuplicatesDropped, Gaps, GapTimeouts, Synced            atomic.Int64
	SyncPages, SyncsPaced                                              atomic.Int64
}

// Client is one user's device connected to seqflow. Its methods are safe
// for concurrent use; they work while Run runs (commands posted before a
// connection exists are sent once one does).
type Client struct {
	opts  Options
	urls  []string
	log   *slog.Logger
	retry backoff
	st    counters

	snd       *sender
	rcv       *receiver
	rcp       *receipts
	ob        *outbox
	recovered []*Pending

	mu        sync.Mutex
	cur       *conn
	connected chan struct{} // closed while cur != nil
	userID    string
	caughtUp  chan struct{} // a connection finished its catch-up
	ran       bool
	stopped   chan struct{}
}

// New validates opts, applies defaults and opens the outbox.
func New(opts Options) (*Client, error) {
	var errs []error
	if len(opts.URLs) == 0 {
		errs = append(errs, errors.New("URLs: at least one gateway URL is required"))
	}
	urls := make([]string, 0, len(opts.URLs))
	for _, u := range opts.URLs {
		w, err := wsURL(u)
		if err != nil {
			errs = append(errs, err)
		}
		urls = append(urls, w)
	}
	if opts.Token == "" && opts.TokenSource == nil {
		errs = append(errs, ErrNoToken)
	}
	if opts.Platform != "" {
		if err := auth.ValidPlatform(opts.Platform); err != nil {
			errs = append(errs, fmt.Errorf("Platform %q: %w", opts.Platform, err))
		}
	}
	def := func(d *time.Duration, v time.Duration, name string) {
		if *d == 0 {
			*d = v
		} else if *d < 0 {
			errs = append(errs, fmt.Errorf("%s: %v is negative", name, *d))
		}
	}
	if opts.InFlight == 0 {
		opts.InFlight = 32
	}
	if opts.InFlight < 0 || opts.InFlight > 10_000 {
		errs = append(errs, fmt.Errorf("InFlight: %d not in 1..10000", opts.InFlight))
	}
	if opts.DeliveredCount == 0 {
		opts.DeliveredCount = 64
	}
	if opts.DeliveredCount < 0 {
		errs = append(errs, fmt.Errorf("DeliveredCount: %d is negative", opts.DeliveredCount))
	}
	if opts.SyncLimit == 0 {
		opts.SyncLimit = 200
	}
	if opts.SyncLimit < 1 || opts.SyncLimit > 200 {
		errs = append(errs, fmt.Errorf("SyncLimit: %d not in 1..200", opts.SyncLimit))
	}
	def(&opts.AckTimeout, 10*time.Second, "AckTimeout")
	def(&opts.AcceptedTimeout, 3*time.Second, "AcceptedTimeout")
	def(&opts.MinBackoff, 100*time.Millisecond, "MinBackoff")
	def(&opts.MaxBackoff, 5*time.Second, "MaxBackoff")
	def(&opts.DeliveredInterval, 100*time.Millisecond, "DeliveredInterval")
	def(&opts.GapTimeout, 10*time.Second, "GapTimeout")
	def(&opts.RequestTimeout, 30*time.Second, "RequestTimeout")
	def(&opts.WriteTimeout, 10*time.Second, "WriteTimeout")
	if opts.GapWait == 0 {
		opts.GapWait = 250 * time.Millisecond
	}
	switch {
	case opts.SyncBudget == 0:
		opts.SyncBudget = 10
	case opts.SyncBudget < 0:
		errs = append(errs, fmt.Errorf("SyncBudget: %v, want a positive number of pages per second", opts.SyncBudget))
	}
	if opts.ResyncInterval == 0 {
		opts.ResyncInterval = 30 * time.Second
	}
	if opts.RecheckAfter == 0 {
		opts.RecheckAfter = time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		errs = append(errs, fmt.Errorf("MaxBackoff %v is below MinBackoff %v", opts.MaxBackoff, opts.MinBackoff))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("client options: %w", errors.Join(errs...))
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = http.DefaultClient
	}
	c := &Client{opts: opts, urls: urls, log: opts.Logger, retry: backoff{opts.MinBackoff, opts.MaxBackoff},
		connected: make(chan struct{}), stopped: make(chan struct{}), caughtUp: make(chan struct{}, 1)}
	var pending []*wire.ClientFrame
	if opts.OutboxPath != "" {
		ob, p, err := openOutbox(opts.OutboxPath)
		if err != nil {
			return nil, err
		}
		c.ob, pending = ob, p
	}
	c.snd = newSender(opts.InFlight, opts.AckTimeout, c.retry, c.ob, &c.st)
	c.snd.acceptedTimeout = opts.AcceptedTimeout
	c.snd.onFinish = opts.OnFinish
	c.recovered = c.snd.recover(pending)
	c.rcp = newReceipts(opts.DeliveredCount, opts.DeliveredInterval, c.writeDelivered)
	c.rcv = newReceiver(newTracker(opts.Cursors, opts.SkipHistory), c.syncPage,
		recovery{gapTimeout: opts.GapTimeout, gapWait: max(opts.GapWait, 0), pagesPerSecond: opts.SyncBudget}, &c.st, opts.OnEvent, c.rcp.add)
	return c, nil
}

func wsURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("URL %q: %w", s, err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("URL %q: scheme must be ws, wss, http or https", s)
	}
	if u.Host == "" {
		return "", fmt.Errorf("URL %q: no host", s)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/ws"
	}
	return u.String(), nil
}

// Recovered returns the commands read from the outbox by New; they are
// resent once Run connects. Wait on them to learn their ACKs.
func (c *Client) Recovered() []*Pending { return c.recovered }

// Run connects, reconnects with backoff and jitter, and serves until ctx
// is done, then returns ctx.Err(). It returns early only when the token is
// refused and there is no TokenSource to get another, when the device is
// signed out (ErrSignedOut), or when the login policy replaced the
// connection with a newer one (ErrReplaced). Commands still in
// flight then fail with ErrClosed (the outbox keeps them). Run may be
// called once.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.ran {
		c.mu.Unlock()
		return errors.New("client: Run called twice")
	}
	c.ran = true
	c.mu.Unlock()
	defer close(c.stopped)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.rcv.begin(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.rcv.run(ctx) })
	wg.Go(func() { c.rcp.run(ctx) })
	wg.Go(func() { c.resendLoop(ctx) })
	wg.Go(func() { c.resyncLoop(ctx) })
	err := c.connectLoop(ctx)
	cancel()
	wg.Wait()
	c.snd.close()
	if c.ob != nil {
		_ = c.ob.close()
	}
	return err
}

func (c *Client) connectLoop(ctx context.Context) error {
	attempt, i := 0, 0
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		u := c.urls[i%len(c.urls)]
		cn, err := c.dial(ctx, u)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if IsAuth(err) && c.opts.TokenSource == nil {
				return err
			}
			c.log.Warn("connect to gateway", "url", u, "attempt", attempt, "err", err)
			i++
		} else {
			began := time.Now()
			err = c.serve(ctx, cn, u)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.log.Info("connection lost", "url", u, "gateway_id", cn.hello.GatewayID, "err", err)
			if c.opts.OnDisconnect != nil {
				c.opts.OnDisconnect(err)
			}
			if end := closeReason(err); end != nil {
				// Reconnecting cannot help: the token is dead, or it
				// would close the newer connection in turn.
				return end
			}
			if time.Since(began) > 10*time.Second {
				attempt = 0
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.retry.delay(attempt)):
		}
		attempt++
	}
}

func (c *Client) dial(ctx context.Context, u string) (*conn, error) {
	tok := c.opts.Token
	if c.opts.TokenSource != nil {
		var err error
		if tok, err = c.opts.TokenSource(ctx); err != nil {
			return nil, fmt.Errorf("get token: %w", err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	return dialConn(dctx, withPlatform(u, c.opts.Platform), tok, c.opts.HTTPClient, c.opts.WriteTimeout)
}

// serve runs one connection: pushes are held until the changes result
// has set every session's catch-up target, commands in flight are resent,
// dirty delivered cursors are flushed.
func (c *Client) serve(ctx context.Context, cn *conn, u string) error {
	c.st.Connects.Add(1)
	c.rcv.hold()
	stop := context.AfterFunc(ctx, cn.close)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- cn.run(c.onFrame) }()

	c.mu.Lock()
	c.cur, c.userID = cn, cn.hello.UserID
	close(c.connected)
	c.mu.Unlock()
	c.rcv.setSelf(cn.hello.UserID)
	c.log.Info("connected", "url", u, "gateway_id", cn.hello.GatewayID, "conn_id", cn.hello.ConnID)
	if c.opts.OnConnect != nil {
		c.opts.OnConnect(Hello{ConnID: cn.hello.ConnID, UserID: cn.hello.UserID, DeviceID: cn.hello.DeviceID, GatewayID: cn.hello.GatewayID, URL: u})
	}
	c.snd.attach(cn)
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	r, err := cn.request(rctx, &wire.ClientFrame{Op: wire.OpChanges})
	cancel()
	if err != nil {
		c.log.Warn("catch-up changes", "err", err)
		c.rcv.release()
	} else {
		c.rcv.catchUp(r.Sessions)
	}
	c.rcp.retry()
	select {
	case c.caughtUp <- struct{}{}:
	default:
	}

	err = <-errc
	c.mu.Lock()
	c.cur = nil
	c.connected = make(chan struct{})
	c.mu.Unlock()
	c.snd.attach(nil)
	return err
}

// onFrame handles every frame that answers no request, and changes
// results (the unread counts' seed).
func (c *Client) onFrame(f serverFrame) {
	switch f.Op {
	case wire.OpEvent:
		c.onUnread(&f)
		c.rcv.push(*f.Event)
	case wire.OpUnread, wire.OpResult:
		c.onUnread(&f)
	case wire.OpTyping:
		if c.opts.OnTyping != nil && f.SessionID != "" && f.UserID != "" {
			c.opts.OnTyping(Typing{SessionID: f.SessionID, UserID: f.UserID, DeviceID: f.DeviceID,
				Active: f.Active, ExpiresIn: time.Duration(f.ExpiresInMs) * time.Millisecond})
		}
	case wire.OpReceipt:
		if c.opts.OnReceipt != nil && f.SessionID != "" && f.UserID != "" && f.Seq > 0 {
			c.opts.OnReceipt(Receipt{SessionID: f.SessionID, UserID: f.UserID, Kind: f.Kind, Seq: f.Seq})
		}
	case wire.OpAck, wire.OpSeqNotice, wire.OpError:
		if f.ClientMsgID != "" {
			c.snd.onFrame(f)
		} else if f.Op == wire.OpError {
			c.log.Warn("gateway error", "code", f.Error.Code, "name", f.Error.Name, "message", f.Error.Message)
		}
	}
}

func (c *Client) onUnread(f *serverFrame) {
	if c.opts.OnUnread == nil {
		return
	}
	if u, ok := unreadUpdate(f); ok {
		c.opts.OnUnread(u)
	}
}

// resendInterval is how often the commands in flight are checked for a
// resend.
const resendInterval = 50 * time.Millisecond

func (c *Client) resendLoop(ctx context.Context) { c.snd.resendLoop(ctx, resendInterval) }

func (c *Client) resyncLoop(ctx context.Context) {
	var tick <-chan time.Time
	if c.opts.ResyncInterval > 0 {
		t := time.NewTicker(c.opts.ResyncInterval)
		defer t.Stop()
		tick = t.C
	}
	var recheck <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.caughtUp:
			if c.opts.RecheckAfter > 0 {
				recheck = time.After(c.opts.RecheckAfter)
			}
			continue
		case <-tick:
		case <-recheck:
			recheck = nil
		}
		if err := c.Resync(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("resync", "err", err)
		}
	}
}

// waitConn returns the current connection, waiting for one.
func (c *Client) waitConn(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		cn, ch := c.cur, c.connected
		c.mu.Unlock()
		if cn != nil && cn.ctx.Err() == nil {
			return cn, nil
		}
		select {
		case <-ch:
		case <-c.stopped:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if cn != nil {
			// cur is dead but not yet replaced: wait for serve to notice.
			select {
			case <-cn.ctx.Done():
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// request sends f on the current connection and waits for its answer,
// retrying on the next connection after a lost one and after retryable
// errors, until ctx is done.
func (c *Client) request(ctx context.Context, f *wire.ClientFrame) (serverFrame, error) {
	for attempt := 0; ; attempt++ {
		cn, err := c.waitConn(ctx)
		if err != nil {
			return serverFrame{}, err
		}
		rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
		r, err := cn.request(rctx, f)
		cancel()
		var se *ServerError
		switch {
		case err == nil:
			return r, nil
		case ctx.Err() != nil:
			return serverFrame{}, ctx.Err()
		case errors.As(err, &se) && !se.Retryable:
			return r, err
		}
		select {
		case <-ctx.Done():
			return serverFrame{}, ctx.Err()
		case <-time.After(c.retry.delay(attempt)):
		}
	}
}

func (c *Client) syncPage(ctx context.Context, session string, after int64) ([]wire.Message, bool, error) {
	c.st.SyncPages.Add(1)
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpSync, SessionID: session, AfterSeq: after, Limit: c.opts.SyncLimit})
	return r.Messages, r.HasMore, err
}

func (c *Client) writeDelivered(ctx context.Context, cursors []wire.Cursor) error {
	c.mu.Lock()
	cn := c.cur
	c.mu.Unlock()
	if cn == nil {
		return ErrConnectionLost
	}
	return cn.send(ctx, &wire.ClientFrame{Op: wire.OpDelivered, Cursors: cursors})
}

// post enters a command into the in-flight window (blocking while it is
// full, for at most ctx) and returns at once; the command is resent with
// the same client_msg_id until the gateway answers it.
func (c *Client) post(ctx context.Context, f *wire.ClientFrame) (*Pending, error) {
	select {
	case <-c.stopped:
		return nil, ErrClosed
	default:
	}
	if f.ClientMsgID == "" {
		f.ClientMsgID = NewMessageID()
	}
	return c.snd.post(ctx, f)
}

// NewMessageID returns a fresh client_msg_id, a UUIDv7.
func NewMessageID() string { return uuid.Must(uuid.NewV7()).String() }

// PostWithID is Post with a client_msg_id the caller chose (from
// NewMessageID, and kept by the caller), for apps that record the ID
// before the message leaves. Posting an ID already in flight is a no-op
// that returns the command in flight.
func (c *Client) PostWithID(ctx context.Context, clientMsgID, session string, m Content) (*Pending, error) {
	if clientMsgID == "" {
		return nil, errors.New("PostWithID: empty client_msg_id")
	}
	return c.post(ctx, &wire.ClientFrame{Op: wire.OpSend, ClientMsgID: clientMsgID, SessionID: session, Type: m.Type, Body: m.Body, ClientTs: time.Now().UnixMilli()})
}

// Post sends a message to session without waiting for its ACK: it enters
// the in-flight window (blocking while the window is full, for at most
// ctx) and is resent with the same client_msg_id until the gateway answers
// it. Wait on the result for the ACK.
func (c *Client) Post(ctx context.Context, session string, m Content) (*Pending, error) {
	return c.post(ctx, &wire.ClientFrame{Op: wire.OpSend, SessionID: session, Type: m.Type, Body: m.Body, ClientTs: time.Now().UnixMilli()})
}

// Send sends a message and waits for its ACK (ctx bounds the wait only).
func (c *Client) Send(ctx context.Context, session string, m Content) (Ack, error) {
	return c.wait(ctx)(c.Post(ctx, session, m))
}

func (c *Client) wait(ctx context.Context) func(*Pending, error) (Ack, error) {
	return func(p *Pending, err error) (Ack, error) {
		if err != nil {
			return Ack{}, err
		}
		return p.Wait(ctx)
	}
}

// Edit replaces the content of the user's own message at targetSeq.
func (c *Client) Edit(ctx context.Context, session string, targetSeq int64, m Content) (Ack, error) {
	return c.wait(ctx)(c.post(ctx, &wire.ClientFrame{Op: wire.OpEdit, SessionID: session, TargetSeq: targetSeq, Type: m.Type, Body: m.Body}))
}

// Recall withdraws the user's own message at targetSeq.
func (c *Client) Recall(ctx context.Context, session string, targetSeq int64) (Ack, error) {
	return c.wait(ctx)(c.post(ctx, &wire.ClientFrame{Op: wire.OpRecall, SessionID: session, TargetSeq: targetSeq}))
}

// CreateGroup creates a group of the user and members; the Ack carries
// the new session ID. A resend of the create yields the same session.
func (c *Client) CreateGroup(ctx context.Context, title string, members ...string) (Ack, error) {
	return c.wait(ctx)(c.post(ctx, &wire.ClientFrame{Op: wire.OpCreateSession, Kind: wire.KindGroup, Title: title, MemberUserIDs: members}))
}

// OpenDirect returns the direct session of the user and peer, creating it
// when it does not exist yet.
func (c *Client) OpenDirect(ctx context.Context, peer string) (string, error) {
	a, err := c.wait(ctx)(c.post(ctx, &wire.ClientFrame{Op: wire.OpCreateSession, Kind: wire.KindDirect, PeerUserID: peer}))
	var se *ServerError
	if errors.As(err, &se) && se.Name == "session_exists" {
		me, uerr := c.UserID(ctx)
		if uerr != nil {
			return "", uerr
		}
		return DirectSessionID(me, peer), nil
	}
	return a.SessionID, err
}

// AddMembers and RemoveMembers change a group's members.
func (c *Client) AddMembers(ctx context.Context, session string, users ...string) (Ack, error) {
	return c.wait(ctx)(c.post(ctx, &wire.ClientFrame{Op: wire.OpMembers, SessionID: session, Action: wire.ActionAdd, UserIDs: users}))
}

// RemoveMembers removes users from a group (kicks them). Who may remove
// whom is the group's rules (docs/protocol.md, "Groups"): a refusal is a
// *ServerError such as not_permitted.
func (c *Client) RemoveMembers(ctx context.Context, session string, users ...string) (Ack, error) {
	return c.wait(ctx)(c.post(ctx, &wire.ClientFrame{Op: wire.OpMembers, SessionID: session, Action: wire.ActionRemove, UserIDs: users}))
}

// Leave removes the user from a group (the owner cannot: transfer
// ownership or dissolve first).
func (c *Client) Leave(ctx context.Context, session string) (Ack, error) {
	return c.wait(ctx)(c.post(ctx, &wire.ClientFrame{Op: wire.OpMembers, SessionID: session, Action: wire.ActionLeave}))
}

// group sends one governance command and waits for its ACK.
func (c *Client) group(ctx context.Context, session string, f wire.ClientFrame) (Ack, error) {
	f.Op, f.SessionID = wire.OpGroup, session
	return c.wait(ctx)(c.post(ctx, &f))
}

// Join joins a group whose join rule is open, or with its invite code
// (inviteCode "" otherwise).
func (c *Client) Join(ctx context.Context, session, inviteCode string) (Ack, error) {
	return c.group(ctx, session, wire.ClientFrame{Action: wire.ActionJoin, InviteCode: inviteCode})
}

// SetRole makes a member an admin (wire.RoleAdmin) or a plain member
// (wire.RoleMember); the owner only.
func (c *Client) SetRole(ctx context.Context, session, user, role string) (Ack, error) {
	return c.group(ctx, session, wire.ClientFrame{Action: wire.ActionSetRole, UserID: user, Role: role})
}

// TransferOwnership makes a member the owner; the caller becomes an admin.
func (c *Client) TransferOwnership(ctx context.Context, session, user string) (Ack, error) {
	return c.group(ctx, session, wire.ClientFrame{Action: wire.ActionTransfer, UserID: user})
}

// Mute stops a member from sending until until (the zero time lifts it).
func (c *Client) Mute(ctx context.Context, session, user string, until time.Time) (Ack, error) {
	var ms int64
	if !until.IsZero() {
		ms = until.UnixMilli()
	}
	return c.group(ctx, session, wire.ClientFrame{Action: wire.ActionMute, UserID: user, MutedUntilMs: ms})
}

// MuteAll mutes (or unmutes) every plain member; admins still speak.
func (c *Client) MuteAll(ctx context.Context, session string, muted bool) (Ack, error) {
	return c.group(ctx, session, wire.ClientFrame{Action: wire.ActionMuteAll, Muted: &muted})
}

// EditGroup changes the settings that are set in s.
func (c *Client) EditGroup(ctx context.Context, session string, s wire.GroupSettings) (Ack, error) {
	return c.group(ctx, session, wire.ClientFrame{Action: wire.ActionEdit, Settings: &s})
}

// Dissolve ends a group (the owner only); later commands to it are
// refused with group_dissolved.
func (c *Client) Dissolve(ctx context.Context, session string) (Ack, error) {
	return c.group(ctx, session, wire.ClientFrame{Action: wire.ActionDissolve})
}

// MemberList returns one page of a group's current members, after
// afterUser in user ID order; more says another page follows. version is
// the group's member version when read.
func (c *Client) MemberList(ctx context.Context, session, afterUser string, limit int) (members []wire.MemberInfo, more bool, version int64, _ error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpMemberList, SessionID: session, AfterUserID: afterUser, Limit: limit})
	if err != nil {
		return nil, false, 0, err
	}
	if len(r.Members) > 0 {
		if err := json.Unmarshal(r.Members, &members); err != nil {
			return nil, false, 0, fmt.Errorf("%w: member_list members: %v", errBadFrame, err)
		}
	}
	return members, r.HasMore, r.MemberVersion, nil
}

// MemberChanges returns what changed in a group's members after since (a
// member version; 0: everything), one change per user, and the version
// this brings the caller to; more says to ask again from it.
func (c *Client) MemberChanges(ctx context.Context, session string, since int64, limit int) (changes []wire.MemberChange, version int64, more bool, _ error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpMemberChanges, SessionID: session, SinceVersion: since, Limit: limit})
	return r.Changes, r.MemberVersion, r.HasMore, err
}

// Sync returns a page of session's events after afterSeq, in their current
// state, straight from the gateway (the app's event stream is not touched).
// more says newer events follow the page.
func (c *Client) Sync(ctx context.Context, session string, afterSeq int64, limit int) (_ []Event, more bool, _ error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpSync, SessionID: session, AfterSeq: afterSeq, Limit: limit})
	return r.Messages, r.HasMore, err
}

// SyncBefore returns a page of session's events before beforeSeq, newest
// first, for scrolling back through history; more says older events
// precede the page (sync again before its last seq).
func (c *Client) SyncBefore(ctx context.Context, session string, beforeSeq int64, limit int) (_ []Event, more bool, _ error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpSync, SessionID: session, BeforeSeq: beforeSeq, Limit: limit})
	return r.Messages, r.HasMore, err
}

// SyncAround returns a page of session's events around seq, in seq order,
// to jump to a message: the event at seq (or the first after it) and up to
// (limit-1)/2 older ones. moreBefore and moreAfter say older events precede
// and newer ones follow the page.
func (c *Client) SyncAround(ctx context.Context, session string, seq int64, limit int) (_ []Event, moreBefore, moreAfter bool, _ error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpSync, SessionID: session, AroundSeq: seq, Limit: limit})
	return r.Messages, r.HasMoreBefore, r.HasMore, err
}

// Changes returns every session of the user with its max_seq, read_seq and
// unread count (the total is their sum).
func (c *Client) Changes(ctx context.Context) ([]wire.SessionChange, error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpChanges})
	return r.Sessions, err
}

// Receipt is another member's delivery or read cursor (Options.OnReceipt).
type Receipt struct {
	SessionID, UserID string
	// Kind is "delivered" (on any of the user's devices) or "read".
	Kind string
	Seq  int64
}

// SeenBy returns who of the session's current members has read it up to
// seq, the sender of seq left out: their user IDs (sessions of up to 500
// members; nil above), their count and the member count.
func (c *Client) SeenBy(ctx context.Context, session string, seq int64) (users []string, count, members int64, _ error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpSeenBy, SessionID: session, Seq: seq})
	if err != nil {
		return nil, 0, 0, err
	}
	if len(r.Members) > 0 {
		if err := json.Unmarshal(r.Members, &members); err != nil {
			return nil, 0, 0, fmt.Errorf("%w: seen_by members: %v", errBadFrame, err)
		}
	}
	return r.Users, r.Count, members, nil
}

// Typing is another member's typing indicator (Options.OnTyping).
type Typing struct {
	SessionID, UserID, DeviceID string
	// Active: typing; false: stopped.
	Active bool
	// ExpiresIn is how long to show it unless a newer one comes.
	ExpiresIn time.Duration
}

// SetTyping tells the session's other members that the user is typing
// (active) or stopped. Repeat an active one every few seconds while the
// user types: each shows for a few seconds only. It is sent once, on the
// current connection, never resent: a lost indicator is not worth a late
// one. Errors: not_a_member, rate_limited (more than 2 a second per
// device), or the connection's.
func (c *Client) SetTyping(ctx context.Context, session string, active bool) error {
	cn, err := c.waitConn(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	_, err = cn.request(rctx, &wire.ClientFrame{Op: wire.OpTyping, SessionID: session, Active: active})
	return err
}

// MarkRead sends a read receipt; it returns once the receipt is durable.
func (c *Client) MarkRead(ctx context.Context, session string, seq int64) error {
	_, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpRead, SessionID: session, Seq: seq})
	return err
}

// Resync runs changes now and starts the syncs it calls for, as a
// reconnect would; the events they find reach OnEvent in order.
func (c *Client) Resync(ctx context.Context) error {
	ch, err := c.Changes(ctx)
	if err != nil {
		return err
	}
	c.rcv.catchUp(ch)
	return nil
}

// Cursors returns, per session, the highest seq released to OnEvent: pass
// it as Options.Cursors to a later client to resume there.
func (c *Client) Cursors() map[string]int64 { return c.rcv.cursors() }

// UserID returns the user's ID as the gateway knows it (waits for a
// connection the first time).
func (c *Client) UserID(ctx context.Context) (string, error) {
	c.mu.Lock()
	id := c.userID
	c.mu.Unlock()
	if id != "" {
		return id, nil
	}
	cn, err := c.waitConn(ctx)
	if err != nil {
		return "", err
	}
	return cn.hello.UserID, nil
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	s := &c.st
	return Stats{
		Connects: s.Connects.Load(), Posted: s.Posted.Load(), Resent: s.Resent.Load(),
		RetryableErrors: s.RetryableErrors.Load(), Accepted: s.Accepted.Load(), DuplicateAcks: s.DuplicateAcks.Load(),
		Delivered: s.Delivered.Load(), DuplicatesDropped: s.DuplicatesDropped.Load(),
		Gaps: s.Gaps.Load(), GapTimeouts: s.GapTimeouts.Load(), Synced: s.Synced.Load(),
		SyncPages: s.SyncPages.Load(), SyncsPaced: s.SyncsPaced.Load(),
	}
}

// DirectSessionID is the deterministic ID of the direct session of a and
// b (docs/protocol.md, "Sessions and members").
func DirectSessionID(a, b string) string {
	if b < a {
		a, b = b, a
	}
	h := sha256.Sum256([]byte("direct\x00" + a + "\x00" + b))
	return "d-" + hex.EncodeToString(h[:16])
}
