package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// hardFrameFactor: frames up to this many times MaxFrameBytes are read and
// discarded with a frame_too_large error, the connection staying open;
// larger ones close it (1009 frame_too_large), so nobody streams an endless
// frame. readLoop counts this itself: the WebSocket library's own read
// limit would close with a reason of its own wording.
const hardFrameFactor = 16

// conn is one WebSocket connection of a user's device.
//
// Goroutines: the HTTP handler reads frames (and runs each command up to
// its produce, so one connection's sends keep their order); writeLoop is
// the only writer of frames, and also pings and enforces the idle and
// token deadlines (a ping's wait for its pong runs in a goroutine that
// lives only for that round trip, so an idle connection costs two
// goroutines); one goroutine per in-flight command awaits its seq.
// closeWith asks writeLoop to send a close frame; every goroutine stops
// once the socket is closed.
type conn struct {
	api *api
	ws  *websocket.Conn
	// nc is the socket under ws; writeLoop holds its writes while it
	// drains the queue, so a burst of frames is one write(2).
	nc *wire.CoalescingConn
	id string
	p  auth.Principal
	// platform is the token's platform claim, else the connect's platform
	// parameter, else "".
	platform string

	out      chan outFrame
	closing  chan struct{}
	once     sync.Once
	code     websocket.StatusCode
	reason   string
	why      string
	inflight chan struct{}
	lastSeen atomic.Int64

	// lazy holds receipt frames until the connection's next write, or
	// receiptDelay at most (offerLazy): a busy connection carries them in
	// a write it makes anyway, instead of a write(2) each on the gateway
	// and a read(2) each on the client.
	lazyMu    sync.Mutex
	lazy      [][]byte
	lazyTimer *time.Timer
	lazyWake  chan struct{}

	mu      sync.Mutex
	lastSeq map[string]int64 // per session, the highest seq written
	rc      *receiptBatch
	// unread is the connection's unread counts (unread.go), from its
	// first changes on; nil before.
	unread *unreadCounts
	// recent: what the next changes replays onto the store's counts.
	recent recentNotes
}

func (c *conn) presence() presence.Conn {
	return presence.Conn{UserID: c.p.UserID, DeviceID: c.p.DeviceID, ConnID: c.id, GatewayID: c.api.cfg.GatewayID}
}

// seen is a sighting of c's device for its user's device list.
func (c *conn) seen() presence.Seen {
	return presence.Seen{UserID: c.p.UserID, DeviceID: c.p.DeviceID, Platform: c.platform, IssuedAt: c.p.IssuedAt}
}

// connPlatform is the platform of a connection: the token's claim, which
// the client cannot override, else the "platform" query parameter.
func connPlatform(p auth.Principal, r *http.Request) (string, *apierr.Error) {
	if p.Platform != "" {
		return p.Platform, nil
	}
	v := r.URL.Query().Get("platform")
	if v == "" {
		return "", nil
	}
	if err := auth.ValidPlatform(v); err != nil {
		return "", apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "platform: %v", err)
	}
	return v, nil
}

// serveWS authenticates and upgrades a connection, then serves it.
func (a *api) serveWS(w http.ResponseWriter, r *http.Request) {
	tok := auth.BearerToken(r)
	if tok == "" {
		tok = r.URL.Query().Get("access_token")
	}
	p, err := a.verifier.Verify(tok)
	if err != nil {
		a.m.connects.WithLabelValues("unauthenticated").Inc()
		a.httpError(w, "", apierr.New(auth.Code(err), err.Error()))
		return
	}
	platform, aerr := connPlatform(p, r)
	if aerr != nil {
		a.m.connects.WithLabelValues("bad_handshake").Inc()
		a.httpError(w, "", aerr)
		return
	}
	if aerr := a.devices.signedOut(r.Context(), p); aerr != nil {
		if aerr == errSignedOut {
			a.m.connects.WithLabelValues("signed_out").Inc()
		} else {
			a.m.connects.WithLabelValues("unavailable").Inc()
		}
		a.httpError(w, "", aerr)
		return
	}
	if a.gate.draining() {
		a.httpError(w, "", ErrShuttingDown)
		return
	}
	if a.conns != nil {
		// Counted until this handler returns, which is when the
		// connection is gone.
		if aerr := a.conns.admitUser(r.Context(), p.UserID); aerr != nil {
			a.m.connects.WithLabelValues("rate_limited").Inc()
			w.Header().Set("Retry-After", "1")
			a.httpError(w, "", aerr)
			return
		}
	}
	hj := &coalescingHijacker{ResponseWriter: w}
	ws, err := websocket.Accept(hj, r, &websocket.AcceptOptions{OriginPatterns: a.cfg.OriginPatterns})
	if err != nil {
		a.m.connects.WithLabelValues("bad_handshake").Inc()
		return // Accept answered the client
	}
	ws.SetReadLimit(-1) // readLoop bounds frames (hardFrameFactor)
	c := &conn{api: a, ws: ws, nc: hj.nc, id: "c-" + uuid.Must(uuid.NewV7()).String(), p: p, platform: platform,
		out: make(chan outFrame, a.cfg.ConnQueue), closing: make(chan struct{}), lazyWake: make(chan struct{}, 1),
		inflight: make(chan struct{}, a.cfg.MaxInFlight), lastSeq: map[string]int64{}}
	c.rc = a.receipts.batch(p)
	c.rc.known = c.pushedSeq
	c.touch()
	if !a.hub.add(c) {
		_ = ws.Close(websocket.StatusServiceRestart, "reconnect")
		return
	}
	defer a.hub.done()
	a.m.connects.WithLabelValues("ok").Inc()
	a.m.connections.Inc()
	defer a.m.connections.Dec()

	pctx, cancel := context.WithTimeout(r.Context(), a.cfg.PresenceTTL/3)
	if err := a.presence.Put(pctx, c.presence()); err != nil {
		a.m.presenceErrs.Inc()
		a.log.Warn("register presence; the refresh retries", "conn_id", c.id, "user_id", p.UserID, "err", err)
	}
	cancel()
	c.enqueueJSON(wire.Hello{Op: wire.OpHello, ConnID: c.id, UserID: p.UserID, DeviceID: p.DeviceID, GatewayID: a.cfg.GatewayID,
		Platform: platform, HeartbeatMs: a.cfg.Heartbeat.Milliseconds(), MaxFrameBytes: a.cfg.Limits.MaxFrameBytes})

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.writeLoop() }()
	// Checked again now that c is in the hub: a sign-out whose signal was
	// applied before c was there is found in Redis (its cutoff is written
	// before the signal is sent); one applied later closes c.
	switch aerr := a.devices.signedOut(r.Context(), p); aerr {
	case errSignedOut:
		c.closeWith(closeSignedOut, "signed_out", "signed_out")
	case errSignOutUnknown:
		c.closeWith(websocket.StatusTryAgainLater, "unavailable", "unavailable")
	default:
		a.devices.connected(r.Context(), c)
	}
	c.readLoop()
	c.closeWith(websocket.StatusNormalClosure, "", "client")
	wg.Wait()

	a.hub.remove(c)
	c.rc.stop()
	// Last seen before the presence goes: a device never shows offline
	// with the last seen of its connect.
	a.devices.disconnected(c)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Second)
	if err := a.presence.Remove(rctx, c.presence()); err != nil {
		a.m.presenceErrs.Inc()
		a.log.Warn("remove presence; it expires by itself", "conn_id", c.id, "err", err)
	}
	cancel()
	a.m.closes.WithLabelValues(c.why).Inc()
}

// pushed reports whether an event of session was written to c.
func (c *conn) pushed(session string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.lastSeq[session]
	return ok
}

func (c *conn) touch() { c.lastSeen.Store(time.Now().UnixNano()) }

// closeWith makes writeLoop close the socket with code and reason; the
// first call wins. why labels the close in metrics.
func (c *conn) closeWith(code websocket.StatusCode, reason, why string) {
	c.once.Do(func() {
		c.code, c.reason, c.why = code, reason, why
		close(c.closing)
		if code == closeSlowConsumer && c.nc != nil {
			// The writer may be blocked on a socket its client does not
			// read, which no close frame would reach either: its write
			// ends now instead of at GATEWAY_WRITE_TIMEOUT, and the
			// connection's goroutines and buffers go with it.
			_ = c.nc.SetWriteDeadline(time.Now())
		}
	})
}

func (c *conn) readLoop() {
	max := c.api.cfg.Limits.MaxFrameBytes
	hard := int64(max) * hardFrameFactor
	for {
		typ, rd, err := c.ws.Reader(context.Background())
		if err != nil {
			return
		}
		c.touch()
		data, err := io.ReadAll(io.LimitReader(rd, int64(max)+1))
		if err != nil {
			return
		}
		if len(data) > max {
			n, err := io.Copy(io.Discard, io.LimitReader(rd, hard-int64(len(data))+1))
			if err != nil {
				return
			}
			if int64(len(data))+n > hard {
				c.closeWith(websocket.StatusMessageTooBig, "frame_too_large", "error")
				return
			}
			c.sendError("", "", apierr.Newf(imv1.ErrorCode_ERROR_CODE_FRAME_TOO_LARGE, "frame over %d bytes", max))
			continue
		}
		if typ != websocket.MessageText {
			c.sendError("", "", apierr.New(imv1.ErrorCode_ERROR_CODE_BAD_FRAME, "binary frames are not supported: send JSON text frames"))
			continue
		}
		f, aerr := wire.Decode(data, c.api.cfg.Limits)
		c.api.m.frames.WithLabelValues(opLabel(f), "ws").Inc()
		if aerr != nil && aerr.Code == imv1.ErrorCode_ERROR_CODE_INVALID_UTF8 && !utf8.Valid(data) {
			// A text frame that is not UTF-8 is not a WebSocket text
			// message at all: RFC 6455 (8.1) fails the connection with
			// 1007. Browsers cannot send one; a client that does has a
			// broken encoder, and anything it sends next is suspect too.
			c.api.m.errors.WithLabelValues(apierr.Name(aerr.Code)).Inc()
			c.closeWith(websocket.StatusInvalidFramePayloadData, "invalid_utf8", "error")
			return
		}
		if aerr != nil {
			var req, cmid string
			if f != nil {
				req, cmid = f.ReqID, f.ClientMsgID
			}
			c.sendError(req, cmid, aerr)
			continue
		}
		c.handle(f)
	}
}

// handle runs one valid frame. Commands run here up to their produce, so a
// connection's commands reach the log in the order it sent them; their
// ACKs are awaited concurrently.
func (c *conn) handle(f *wire.ClientFrame) {
	a := c.api
	// Every op is charged (api.cost), a cursor of a session this
	// connection was pushed nothing of included.
	if !a.limits.allowN(context.Background(), c.p, a.cost(c.p, f, c.pushed)) {
		c.sendError(f.ReqID, f.ClientMsgID, apierr.New(imv1.ErrorCode_ERROR_CODE_RATE_LIMITED, ""))
		return
	}
	switch {
	case f.Op == wire.OpPing:
		c.enqueueJSON(wire.OK{Op: wire.OpPong, ReqID: f.ReqID})
		return
	case f.Op == wire.OpDelivered:
		c.rc.add(f.Cursors)
		if f.ReqID != "" {
			c.enqueueJSON(wire.OK{Op: wire.OpResult, ReqID: f.ReqID})
		}
		return
	case f.Op == wire.OpTyping:
		// Charged like any op, and bounded per device as well
		// (signals.go): a typing indicator fans out to every member.
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		aerr := a.signals.post(ctx, c.p, f)
		cancel()
		if aerr != nil && f.ReqID != "" {
			c.sendError(f.ReqID, "", aerr)
		} else if f.ReqID != "" {
			c.enqueueJSON(wire.OK{Op: wire.OpResult, ReqID: f.ReqID})
		}
		return
	case f.Op == wire.OpChanges:
		// Over WebSocket, changes also seeds the counts the pushes carry.
		c.beginUnread()
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		res, states, aerr := a.history.changesStates(ctx, c.p, f)
		cancel()
		if aerr != nil {
			c.stopUnread()
			c.sendError(f.ReqID, "", aerr)
			return
		}
		c.answerChanges(res, states)
		return
	case f.Op == wire.OpRead:
		res, seq, aerr := a.read(context.Background(), c.p, f, c.pushedSeq)
		if aerr != nil {
			c.sendError(f.ReqID, "", aerr)
			return
		}
		c.enqueueJSON(res)
		// This device's counts at once; the user's other devices learn the
		// cursor from the read fan-out.
		if seq > 0 {
			c.ownRead(f.SessionID, seq)
		}
		return
	case f.Op == wire.OpSignOut:
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		res, sig, aerr := a.devices.signOut(ctx, c.p, f)
		cancel()
		if aerr != nil {
			c.sendError(f.ReqID, "", aerr)
			return
		}
		c.enqueueJSON(res) // before the close when the device signs itself out
		a.devices.announceSignOut(sig)
		return
	case !isCommand(f.Op):
		res, aerr := a.query(context.Background(), c.p, f)
		if aerr != nil {
			c.sendError(f.ReqID, "", aerr)
			return
		}
		c.enqueueJSON(res)
		return
	}
	select {
	case c.inflight <- struct{}{}:
	default:
		c.sendError(f.ReqID, f.ClientMsgID, apierr.Newf(imv1.ErrorCode_ERROR_CODE_TOO_MANY_IN_FLIGHT, "%d sends await their ACK on this connection", cap(c.inflight)))
		return
	}
	if !a.up.begin() {
		<-c.inflight
		c.sendError(f.ReqID, f.ClientMsgID, ErrShuttingDown)
		return
	}
	up, aerr := a.up.prepare(context.Background(), c.p, f)
	if aerr != nil {
		<-c.inflight
		a.up.done()
		c.sendError(f.ReqID, f.ClientMsgID, aerr)
		return
	}
	pend, produced := a.up.submit(up, f.Traceparent)
	go func() {
		defer a.up.done()
		defer func() { <-c.inflight }()
		ack, aerr := a.up.await(pend, produced, f, func(ack wire.Ack) { c.enqueueJSON(ack) })
		if aerr != nil {
			c.sendError(f.ReqID, f.ClientMsgID, aerr)
			return
		}
		c.enqueueJSON(ack)
	}()
}

func (c *conn) sendError(reqID, clientMsgID string, e *apierr.Error) {
	c.api.m.errors.WithLabelValues(apierr.Name(e.Code)).Inc()
	b := e.Body()
	c.enqueueJSON(wire.ErrorFrame{Op: wire.OpError, ReqID: reqID, ClientMsgID: clientMsgID,
		Error: wire.ErrorBody{Code: b.Code, Name: b.Name, Message: b.Message, Retryable: b.Retryable}})
}

func (c *conn) enqueueJSON(v any) {
	if a, ok := v.(wire.Ack); ok { // the hot frame: no reflection
		c.enqueue(a.AppendJSON(nil))
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		c.api.log.Error("encode frame", "err", err)
		return
	}
	c.enqueue(b)
}

// enqueue queues a frame without blocking. A full queue closes the
// connection: the client reconnects and syncs, which is cheaper for
// everyone than a gateway holding unbounded frames for a stalled reader.
func (c *conn) enqueue(b []byte) bool {
	return c.enqueueFrame(outFrame{b: b})
}

// enqueueFrame is enqueue of a frame that may be lazy.
func (c *conn) enqueueFrame(f outFrame) bool {
	select {
	case <-c.closing:
		return false
	default:
	}
	select {
	case c.out <- f:
		return true
	default:
		c.closeWith(closeSlowConsumer, "slow_consumer: reconnect and sync", "slow_consumer")
		return false
	}
}

// offer queues an ephemeral frame, dropping it when the queue is full: a
// signal that may be lost never closes a connection. It says whether the
// frame was queued.
func (c *conn) offer(b []byte) bool {
	select {
	case <-c.closing:
		return false
	case c.out <- outFrame{b: b}:
		return true
	default:
		return false
	}
}

// outFrame is a queued frame. A lazy one is not a reason to write on its
// own: writeLoop holds it, in its place in the queue, until the next
// frame that is, or echoDelay. Lazy is the sending connection's own copy
// of its message, which its ACK already answered (conn.deliver).
type outFrame struct {
	b    []byte
	lazy bool
}

const (
	// receiptDelay bounds how long a receipt frame waits for another
	// frame to share its write with (docs/protocol.md, "Receipts").
	receiptDelay = 100 * time.Millisecond
	// echoDelay bounds how long the sending connection's copy of its own
	// message waits for another frame to share its write with
	// (docs/protocol.md, "Sending").
	echoDelay = 100 * time.Millisecond
	// maxHeld bounds the lazy frames writeLoop holds; one more is written
	// with them at once.
	maxHeld = 64
	// maxLazy bounds the receipt frames waiting on one connection; past
	// it they are dropped, like any ephemeral frame of a full queue.
	maxLazy = 256
)

// offerLazy queues an ephemeral frame to go out with the connection's next
// write, or within receiptDelay when there is none. It says whether the
// frame was queued.
func (c *conn) offerLazy(b []byte) bool {
	select {
	case <-c.closing:
		return false
	default:
	}
	c.lazyMu.Lock()
	defer c.lazyMu.Unlock()
	if len(c.lazy) >= maxLazy {
		return false
	}
	c.lazy = append(c.lazy, b)
	if len(c.lazy) == 1 {
		if c.lazyTimer == nil {
			c.lazyTimer = time.AfterFunc(receiptDelay, func() {
				select {
				case c.lazyWake <- struct{}{}:
				default:
				}
			})
		} else {
			c.lazyTimer.Reset(receiptDelay)
		}
	}
	return true
}

// takeLazy returns the frames offerLazy holds and empties it.
func (c *conn) takeLazy() [][]byte {
	c.lazyMu.Lock()
	defer c.lazyMu.Unlock()
	if len(c.lazy) == 0 {
		return nil
	}
	b := c.lazy
	c.lazy = nil
	c.lazyTimer.Stop()
	return b
}

// pushedSeq is the last seq of session pushed to this connection, 0 for
// none.
func (c *conn) pushedSeq(session string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastSeq[session]
}

// deliver writes a pushed event unless the connection already got a later
// (or the same) seq of the session: what a device receives is strictly
// increasing per session; anything it misses it finds by sync. now is
// when the event arrived (one clock read per event, not per recipient).
// echo says the event is a message this connection's device sent: its
// ACK carried the seq already, so the frame is lazy (outFrame).
func (c *conn) deliver(now time.Time, session string, seq int64, frame []byte, echo bool, note func() unreadNote) string {
	c.mu.Lock()
	if seq <= c.lastSeq[session] {
		c.mu.Unlock()
		return "dropped_order"
	}
	c.lastSeq[session] = seq
	c.recent.add(now, pendingNote{session: session, note: note()})
	if c.unread == nil {
		c.mu.Unlock()
		if !c.enqueueFrame(outFrame{b: frame, lazy: echo}) {
			return "dropped_closed"
		}
		return "delivered"
	}
	// Counted: queued under the lock, so the counts a client reads only
	// ever come in the order they were taken.
	defer c.mu.Unlock()
	if attach, unread, total := c.unread.event(session, note()); attach {
		frame = wire.AppendUnread(make([]byte, 0, len(frame)+48), frame, unread, total)
	}
	if !c.enqueueFrame(outFrame{b: frame, lazy: echo}) {
		return "dropped_closed"
	}
	return "delivered"
}

// beginUnread starts (or restarts) the connection's unread counts: call
// it before reading the store's counts, then seedUnread.
func (c *conn) beginUnread() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unread == nil {
		c.unread = newUnreadCounts(c.p.UserID)
	}
	c.unread.begin(c.recent.since(time.Now()))
}

// stopUnread ends the counts after a failed changes: the connection
// counts nothing until its next one.
func (c *conn) stopUnread() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unread = nil
}

// answerChanges seeds the counts with the store's states res was made
// from, replays what the connection saw meanwhile, and queues res with
// the counts that result, all under c.mu: no event frame with counts can
// be queued between the seed and res, so a client applying frames in
// order ends with the connection's counts. The reads replayed follow res,
// each with the counts as they now stand (or a recount).
func (c *conn) answerChanges(res wire.ChangesResult, states []store.SessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reads := c.unread.seed(states)
	c.unread.answer(&res, c.lastSeq)
	c.enqueueJSON(res)
	for _, r := range reads {
		if r.recount {
			c.api.recounter.post(c, r.session, r.seq)
			continue
		}
		c.enqueueUnread(r.session, r.seq, c.unread.sessions[r.session].unread(), c.unread.total)
	}
}

// ownRead moves a session's counts to the user's read cursor seq (a read
// on any of their devices) and tells the client, or asks the store to
// count again when the seed's range may stay partly unread.
func (c *conn) ownRead(session string, seq int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recent.add(time.Now(), pendingNote{session: session, read: seq})
	if c.unread == nil {
		return
	}
	changed, recount, unread, total := c.unread.read(session, seq)
	switch {
	case recount:
		c.api.recounter.post(c, session, seq)
	case changed:
		c.enqueueUnread(session, seq, unread, total)
	}
}

// recounted takes a recount's answer (recounter).
func (c *conn) recounted(session string, cursor, n, upTo int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unread == nil {
		return
	}
	if ok, unread, total := c.unread.recounted(session, cursor, n, upTo); ok {
		c.enqueueUnread(session, cursor, unread, total)
	}
}

// enqueueUnread queues an unread frame; c.mu is held.
func (c *conn) enqueueUnread(session string, readSeq, unread, total int64) {
	c.enqueueJSON(wire.UnreadFrame{Op: wire.OpUnread, SessionID: session, ReadSeq: readSeq, Unread: unread, TotalUnread: total})
}

// writeLoop writes queued frames, pings every Heartbeat and closes the
// connection when nothing arrived for IdleTimeout or when its token
// expires. Each wake-up drains what is queued (up to maxBatchBytes) into
// one write(2): frames go out whole and in queue order. Lazy frames wait
// in held, in their place in that order, for the next frame that is not
// lazy, for a receipt's wake-up or for echoDelay.
func (c *conn) writeLoop() {
	var pings sync.WaitGroup
	defer pings.Wait()
	var pinging atomic.Bool
	t := time.NewTicker(c.api.cfg.Heartbeat)
	defer t.Stop()
	var expiry <-chan time.Time
	if !c.p.ExpiresAt.IsZero() {
		et := time.NewTimer(time.Until(c.p.ExpiresAt))
		defer et.Stop()
		expiry = et.C
	}
	var (
		held      [][]byte
		heldTimer *time.Timer
		heldDue   <-chan time.Time // heldTimer's channel while held waits
	)
	defer func() {
		if heldTimer != nil {
			heldTimer.Stop()
		}
	}()
	write := func(b []byte) bool {
		err := c.writeBatch(held, b)
		if heldDue != nil {
			heldTimer.Stop()
		}
		clear(held)
		held, heldDue = held[:0], nil
		if err != nil {
			c.closeWith(websocket.StatusInternalError, "", "error")
			_ = c.ws.CloseNow()
			return false
		}
		return true
	}
	for {
		select {
		case f := <-c.out:
			if f.lazy && len(held) < maxHeld {
				if len(held) == 0 {
					if heldTimer == nil {
						heldTimer = time.NewTimer(echoDelay)
					} else {
						heldTimer.Reset(echoDelay)
					}
					heldDue = heldTimer.C
				}
				held = append(held, f.b)
				continue
			}
			if !write(f.b) {
				return
			}
		case <-heldDue:
			if !write(nil) {
				return
			}
		case <-c.lazyWake:
			if !write(nil) {
				return
			}
		case <-c.closing:
			if c.code != closeSlowConsumer && c.writeBatch(held, nil) == nil {
				c.flush()
			}
			if err := c.ws.Close(c.code, c.reason); err != nil {
				_ = c.ws.CloseNow()
			}
			return
		case <-expiry:
			c.closeWith(closeTokenExpired, "token_expired", "token_expired")
		case <-t.C:
			if time.Since(time.Unix(0, c.lastSeen.Load())) > c.api.cfg.IdleTimeout {
				c.closeWith(closeIdle, "idle_timeout", "idle")
				continue
			}
			if !pinging.CompareAndSwap(false, true) {
				continue // the last ping still awaits its pong
			}
			pings.Add(1)
			go func() {
				defer pings.Done()
				defer pinging.Store(false)
				c.ping()
			}()
		}
	}
}

// ping sends a ping and touches the connection when its pong comes back
// within a heartbeat; without one, the idle deadline decides.
func (c *conn) ping() {
	ctx, cancel := context.WithTimeout(context.Background(), c.api.cfg.Heartbeat)
	defer cancel()
	if c.ws.Ping(ctx) == nil {
		c.touch()
	}
}

// maxBatchBytes bounds one coalesced write; the loop goes on with the
// rest of the queue in the next one.
const maxBatchBytes = 64 << 10

// writeBatch writes held, then b (nil: none), then whatever else is
// queued, with one write(2).
func (c *conn) writeBatch(held [][]byte, b []byte) error {
	if c.nc == nil { // the hijacked socket is not ours to hold
		for _, f := range held {
			if err := c.write(f); err != nil {
				return err
			}
		}
		if b != nil {
			if err := c.write(b); err != nil {
				return err
			}
		}
		for _, f := range c.takeLazy() {
			if err := c.write(f); err != nil {
				return err
			}
		}
		return nil
	}
	c.nc.Hold()
	// Held writes only fill memory, so they need no deadline; the
	// release's write has one.
	for _, f := range held {
		if err := c.ws.Write(context.Background(), websocket.MessageText, f); err != nil {
			_ = c.nc.Release(time.Time{})
			return err
		}
	}
	for b != nil {
		if err := c.ws.Write(context.Background(), websocket.MessageText, b); err != nil {
			_ = c.nc.Release(time.Time{})
			return err
		}
		if c.nc.Buffered() >= maxBatchBytes {
			break
		}
		select {
		case f := <-c.out:
			b = f.b
		default:
			b = nil
		}
	}
	// The receipts waiting for a write go out with this one.
	for _, f := range c.takeLazy() {
		if err := c.ws.Write(context.Background(), websocket.MessageText, f); err != nil {
			_ = c.nc.Release(time.Time{})
			return err
		}
	}
	return c.nc.Release(time.Now().Add(c.api.cfg.WriteTimeout))
}

// flush writes what is queued, so ACKs produced before a close reach the
// client.
func (c *conn) flush() {
	for {
		select {
		case f := <-c.out:
			if c.writeBatch(nil, f.b) != nil {
				return
			}
		default:
			return
		}
	}
}

func (c *conn) write(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.api.cfg.WriteTimeout)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// coalescingHijacker hands websocket.Accept the hijacked socket wrapped in
// a CoalescingConn; net/http's write buffer (which the server connection
// keeps anyway) now writes to it.
type coalescingHijacker struct {
	http.ResponseWriter
	nc *wire.CoalescingConn
}

func (h *coalescingHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil { // the 101 response, if net/http left it there
		_ = nc.Close()
		return nil, nil, fmt.Errorf("flush handshake: %w", err)
	}
	h.nc = wire.NewCoalescingConn(nc)
	brw.Writer.Reset(h.nc)
	return h.nc, brw, nil
}

func opLabel(f *wire.ClientFrame) string {
	if f == nil {
		return "invalid"
	}
	switch f.Op {
	case wire.OpSend, wire.OpEdit, wire.OpRecall, wire.OpCreateSession, wire.OpMembers, wire.OpGroup, wire.OpSync,
		wire.OpChanges, wire.OpRead, wire.OpDelivered, wire.OpPing, wire.OpTyping, wire.OpSeenBy, wire.OpMemberList, wire.OpMemberChanges,
		wire.OpDevices, wire.OpSignOut, wire.OpPresence, wire.OpSettings:
		return f.Op
	}
	return "unknown"
}
