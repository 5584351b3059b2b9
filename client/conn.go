package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/seqflow/seqflow/internal/wire"
)

// conn is one WebSocket connection to a gateway. Frames are written in the
// order they are queued, by one writer goroutine; one reader goroutine
// routes answers to requests (by req_id) and hands everything else to the
// client. The connection is dead once ctx is done; cause tells why.
type conn struct {
	ws *websocket.Conn
	// nc is the socket under ws when the dial went through our wrapper
	// (nil with a custom transport): writeLoop holds its writes while it
	// drains the queue, so a burst of frames is one write(2).
	nc    *wire.CoalescingConn
	hello serverFrame
	ctx   context.Context
	kill  context.CancelCauseFunc

	out          chan []byte
	writeTimeout time.Duration

	mu      sync.Mutex
	waiters map[string]chan serverFrame
	nextReq uint64
}

func dialConn(ctx context.Context, url, token string, hc *http.Client, writeTimeout time.Duration) (*conn, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	hc, nc := coalescingClient(hc)
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h, HTTPClient: hc})
	if t, ok := hc.Transport.(*http.Transport); ok && err != nil {
		defer t.CloseIdleConnections() // a refused handshake's keep-alive connection: this transport is not reused
	}
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != 0 {
			he := &HandshakeError{Status: resp.StatusCode}
			if resp.Body != nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
				var ef struct {
					Error *wire.ErrorBody `json:"error"`
				}
				if json.Unmarshal(b, &ef) == nil && ef.Error != nil {
					he.Err = serverError(ef.Error, "")
				}
			}
			return nil, he
		}
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	ws.SetReadLimit(maxServerFrame)
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, b, err := ws.Read(hctx)
	if err != nil {
		_ = ws.CloseNow()
		return nil, fmt.Errorf("read hello: %w", err)
	}
	hello, err := decodeFrame(b)
	if err != nil || hello.Op != wire.OpHello {
		_ = ws.CloseNow()
		return nil, fmt.Errorf("first frame is not hello: %.200s", b)
	}
	cctx, kill := context.WithCancelCause(context.Background())
	return &conn{
		ws: ws, nc: *nc, hello: hello, ctx: cctx, kill: kill,
		out: make(chan []byte, 1024), writeTimeout: writeTimeout,
		waiters: map[string]chan serverFrame{},
	}, nil
}

// run reads and writes until the connection dies, calling handle for every
// frame that answers no request. It returns why the connection died.
func (c *conn) run(handle func(serverFrame)) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.writeLoop()
	}()
	go func() {
		defer wg.Done()
		c.heartbeat()
	}()
	err := c.readLoop(handle)
	c.kill(err)
	_ = c.ws.CloseNow()
	wg.Wait()
	c.mu.Lock()
	for id, w := range c.waiters {
		close(w)
		delete(c.waiters, id)
	}
	c.mu.Unlock()
	return context.Cause(c.ctx)
}

func (c *conn) readLoop(handle func(serverFrame)) error {
	for {
		_, b, err := c.ws.Read(c.ctx)
		if err != nil {
			if cause := context.Cause(c.ctx); cause != nil {
				return cause
			}
			return fmt.Errorf("read: %w", err)
		}
		f, err := decodeFrame(b)
		if err != nil {
			return err
		}
		if f.ReqID != "" {
			c.mu.Lock()
			w, ok := c.waiters[f.ReqID]
			delete(c.waiters, f.ReqID)
			c.mu.Unlock()
			if ok {
				if f.Op == wire.OpResult && f.TotalUnread != nil {
					// A changes result also seeds the unread counts: it
					// goes to handle too, in frame order with the counted
					// pushes around it.
					handle(f)
				}
				w <- f
				continue
			}
		}
		handle(f)
	}
}

// coalescingClient returns a copy of hc whose transport wraps the socket
// it dials in a CoalescingConn, and where that conn will be once dialed.
// A transport that is not an *http.Transport is used as it is (nil conn).
func coalescingClient(hc *http.Client) (*http.Client, **wire.CoalescingConn) {
	nc := new(*wire.CoalescingConn)
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	ht, ok := rt.(*http.Transport)
	if !ok {
		return hc, nc
	}
	t := ht.Clone()
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		*nc = wire.NewCoalescingConn(c)
		return *nc, nil
	}
	cp := *hc
	cp.Transport = t
	return &cp, nc
}

// maxBatchBytes bounds one coalesced write; the loop goes on with the
// rest of the queue in the next one.
const maxBatchBytes = 64 << 10

func (c *conn) writeLoop() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case b := <-c.out:
			if err := c.writeBatch(b); err != nil {
				c.kill(fmt.Errorf("write: %w", err))
				_ = c.ws.CloseNow()
				return
			}
		}
	}
}

// writeBatch writes b and whatever else is queued, in queue order, with
// one write(2) when the socket is ours to hold.
func (c *conn) writeBatch(b []byte) error {
	if c.nc == nil {
		ctx, cancel := context.WithTimeout(c.ctx, c.writeTimeout)
		defer cancel()
		return c.ws.Write(ctx, websocket.MessageText, b)
	}
	c.nc.Hold()
	for {
		// Held writes only fill memory, so they need no deadline; the
		// release's write has one.
		if err := c.ws.Write(context.Background(), websocket.MessageText, b); err != nil {
			_ = c.nc.Release(time.Time{})
			return err
		}
		if c.nc.Buffered() >= maxBatchBytes {
			break
		}
		select {
		case b = <-c.out:
			continue
		default:
		}
		break
	}
	return c.nc.Release(time.Now().Add(c.writeTimeout))
}

// heartbeat pings every heartbeat_ms and kills the connection when a pong
// does not come back within two heartbeats (docs/protocol.md: a client
// that hears nothing for two heartbeats should reconnect).
func (c *conn) heartbeat() {
	every := time.Duration(c.hello.HeartbeatMs) * time.Millisecond
	if every <= 0 {
		every = 15 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(c.ctx, 2*every)
			_, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpPing})
			cancel()
			if err != nil && c.ctx.Err() == nil {
				c.kill(fmt.Errorf("no pong within %v: %w", 2*every, err))
				_ = c.ws.CloseNow()
				return
			}
		}
	}
}

// send queues a frame; frames go out in queue order. It blocks only when
// 1024 frames are queued (the network is slower than the caller).
func (c *conn) send(ctx context.Context, f *wire.ClientFrame) error {
	b, err := f.AppendJSON(nil)
	if err != nil {
		return fmt.Errorf("encode %s frame: %w", f.Op, err)
	}
	select {
	case c.out <- b:
		return nil
	case <-c.ctx.Done():
		return ErrConnectionLost
	case <-ctx.Done():
		return ctx.Err()
	}
}

// request sends f with a fresh req_id and waits for the frame answering it.
// An error frame is returned as *ServerError.
func (c *conn) request(ctx context.Context, f *wire.ClientFrame) (serverFrame, error) {
	w := make(chan serverFrame, 1)
	c.mu.Lock()
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		return serverFrame{}, ErrConnectionLost
	}
	c.nextReq++
	id := "q" + strconv.FormatUint(c.nextReq, 36)
	c.waiters[id] = w
	c.mu.Unlock()
	g := *f
	g.ReqID = id
	forget := func() {
		c.mu.Lock()
		delete(c.waiters, id)
		c.mu.Unlock()
	}
	if err := c.send(ctx, &g); err != nil {
		forget()
		return serverFrame{}, err
	}
	select {
	case r, ok := <-w:
		if !ok {
			return serverFrame{}, ErrConnectionLost
		}
		if r.Op == wire.OpError {
			return r, serverError(r.Error, r.ClientMsgID)
		}
		return r, nil
	case <-ctx.Done():
		forget()
		return serverFrame{}, ctx.Err()
	}
}

func (c *conn) close() {
	c.kill(errors.New("closed by client"))
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
}
