package wire

import (
	"net"
	"sync"
	"time"
)

// CoalescingConn is a net.Conn whose writes between Hold and Release are
// gathered in memory and reach the socket as one Write on Release, so a
// writer that has several WebSocket frames queued pays one write(2) for
// all of them. Outside a hold, writes go straight through. Bytes reach the
// socket in the order they were written, so frames stay whole and in
// order as long as the WebSocket library writes each frame under its own
// lock (coder/websocket does); a control frame the library writes from
// another goroutine during a hold (a pong) joins the batch.
//
// The buffer exists only during a hold (it comes from a pool), so an idle
// connection holds none.
type CoalescingConn struct {
	net.Conn

	mu   sync.Mutex
	held bool
	buf  *[]byte
}

// NewCoalescingConn wraps nc.
func NewCoalescingConn(nc net.Conn) *CoalescingConn { return &CoalescingConn{Conn: nc} }

// maxPooledBatch: batch buffers that grew past this are left to the GC
// instead of pinning their size in the pool.
const maxPooledBatch = 256 << 10

var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// Write gathers p during a hold and writes it through otherwise.
func (c *CoalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		*c.buf = append(*c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// Hold starts gathering writes; it does nothing while a hold is on.
func (c *CoalescingConn) Hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		c.held = true
		c.buf = batchPool.Get().(*[]byte)
	}
}

// Buffered is how many bytes the current hold has gathered.
func (c *CoalescingConn) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		return 0
	}
	return len(*c.buf)
}

// Release ends the hold and writes what it gathered with one Write, which
// must finish by deadline (zero: no deadline); the write deadline is
// cleared afterwards. Without a hold it does nothing. An error means the
// socket is broken: the caller closes the connection.
func (c *CoalescingConn) Release(deadline time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		return nil
	}
	c.held = false
	b := c.buf
	c.buf = nil
	var err error
	if len(*b) > 0 {
		if !deadline.IsZero() {
			_ = c.Conn.SetWriteDeadline(deadline)
		}
		_, err = c.Conn.Write(*b)
		if !deadline.IsZero() {
			_ = c.Conn.SetWriteDeadline(time.Time{})
		}
	}
	if cap(*b) <= maxPooledBatch {
		*b = (*b)[:0]
		batchPool.Put(b)
	}
	return err
}
