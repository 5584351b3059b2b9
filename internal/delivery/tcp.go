package delivery

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// The TCP transport streams frames straight from the pusher to each
// gateway: a 4-byte big-endian length, then a proto-encoded PushBatch. The
// stream is one way; the receiver never writes. Gateways publish their
// listen address in a Registry.

// frameHeader is the length prefix of a frame.
const frameHeader = 4

// TCPSenderOptions tune a TCPSender. Zero values take the defaults.
type TCPSenderOptions struct {
	// MaxFrameBytes bounds one frame, default DefaultMaxFrameBytes.
	MaxFrameBytes int
	// AddrTTL is how long a looked-up address is reused before the
	// registry is asked again, default 2s.
	AddrTTL time.Duration
	// Log receives connection events; default discards.
	Log *slog.Logger
}

// TCPSender keeps one connection per gateway. Send writes under the
// connection's lock with a write deadline from ctx; any write error closes
// the connection (a partial frame would corrupt the stream) and the next
// Send dials again. Safe for concurrent use.
type TCPSender struct {
	reg    Registry
	opts   TCPSenderOptions
	mu     sync.Mutex
	conns  map[string]*tcpConn
	closed bool
}

var _ Sender = (*TCPSender)(nil)

type tcpConn struct {
	gw   string
	addr string
	seen time.Time // when addr was looked up
	// noneUntil: the registry had no entry; do not ask again before.
	noneUntil time.Time
	mu        sync.Mutex
	c         net.Conn
	w         *bufio.Writer
	broken    chan struct{} // closed when the peer hangs up
}

// NewTCPSender returns a sender that finds gateways in reg.
func NewTCPSender(reg Registry, opts TCPSenderOptions) *TCPSender {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if opts.AddrTTL <= 0 {
		opts.AddrTTL = 2 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &TCPSender{reg: reg, opts: opts, conns: map[string]*tcpConn{}}
}

// Send writes b's frames to its gateway's connection, dialing it first when
// there is none. It returns ErrNoReceiver when the gateway is not
// registered or refuses the connection, and ctx's error when the write does
// not finish in time (the gateway is not reading).
func (s *TCPSender) Send(ctx context.Context, b *imv1.PushBatch) error {
	gw := b.GetGatewayId()
	if gw == "" {
		return &SendError{Err: errors.New("batch has no gateway_id")}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return &SendError{GatewayID: gw, Err: ErrClosed}
	}
	tc := s.conns[gw]
	if tc == nil {
		tc = &tcpConn{gw: gw}
		s.conns[gw] = tc
	}
	s.mu.Unlock()

	tc.mu.Lock()
	defer tc.mu.Unlock()
	if err := s.ensure(ctx, tc); err != nil {
		return &SendError{GatewayID: gw, Err: err}
	}
	// Encoded only once a receiver is known: behind a ChainSender, a
	// gateway without a TCP receiver would otherwise cost every batch an
	// encoding for nothing before the next transport encodes it again.
	frames, err := encodeBatch(b, s.opts.MaxFrameBytes)
	if err != nil {
		return &SendError{GatewayID: gw, Err: err}
	}
	c := tc.c
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	} else {
		_ = c.SetWriteDeadline(time.Time{})
	}
	// A cancel (not only a deadline) must interrupt a blocked write too.
	stop := context.AfterFunc(ctx, func() { _ = c.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var hdr [frameHeader]byte
	for _, f := range frames {
		binary.BigEndian.PutUint32(hdr[:], uint32(len(f)))
		if _, err = tc.w.Write(hdr[:]); err == nil {
			_, err = tc.w.Write(f)
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = tc.w.Flush()
	}
	if err != nil {
		tc.reset()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return &SendError{GatewayID: gw, Err: err}
	}
	return nil
}

// ensure gives tc a live connection: it drops one whose peer hung up and
// dials the registered address when there is none.
func (s *TCPSender) ensure(ctx context.Context, tc *tcpConn) error {
	if tc.c != nil {
		select {
		case <-tc.broken:
			// The gateway hung up: it stopped, or this was a stale
			// address now another gateway's. Ask the registry again.
			tc.reset()
			tc.addr = ""
		default:
			return nil
		}
	}
	if tc.addr == "" || time.Since(tc.seen) > s.opts.AddrTTL {
		// A gateway that is not registered is remembered for a quarter of
		// AddrTTL, so a fallback transport is not slowed by a registry
		// round trip per batch.
		if time.Now().Before(tc.noneUntil) {
			return ErrNoReceiver
		}
		addr, err := s.reg.Lookup(ctx, tc.gw)
		if err != nil {
			tc.addr = ""
			if errors.Is(err, ErrNoReceiver) {
				tc.noneUntil = time.Now().Add(s.opts.AddrTTL / 4)
			}
			return err
		}
		tc.addr, tc.seen = addr, time.Now()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", tc.addr)
	if err != nil {
		tc.addr = "" // ask the registry again next time
		if errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%w: %v", ErrNoReceiver, err)
		}
		return err
	}
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.SetNoDelay(true)
	}
	tc.c, tc.w, tc.broken = c, bufio.NewWriterSize(c, 64<<10), make(chan struct{})
	broken := tc.broken
	go func() {
		// The receiver never writes: any read result means it hung up.
		_, _ = c.Read(make([]byte, 1))
		close(broken)
	}()
	s.opts.Log.Debug("connected to gateway", "gateway_id", tc.gw, "addr", tc.addr)
	return nil
}

func (tc *tcpConn) reset() {
	if tc.c != nil {
		_ = tc.c.Close() // ends the hang-up watcher too
	}
	tc.c, tc.w = nil, nil
}

// Close closes every connection; later Sends fail with ErrClosed.
func (s *TCPSender) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[string]*tcpConn{}
	s.mu.Unlock()
	for _, tc := range conns {
		tc.mu.Lock()
		tc.reset()
		tc.mu.Unlock()
	}
	return nil
}

// TCPReceiverOptions tune a TCPReceiver. Zero values take the defaults.
type TCPReceiverOptions struct {
	// ListenAddr is where to listen, default "127.0.0.1:0" (a free port).
	ListenAddr string
	// AdvertiseAddr is the address registered for senders, default the
	// listener's address.
	AdvertiseAddr string
	// TTL of the registry entry, refreshed every TTL/3, default 15s.
	TTL time.Duration
	// MaxFrameBytes bounds one incoming frame, default
	// DefaultMaxFrameBytes; a larger frame closes the connection.
	MaxFrameBytes int
	// Log receives bad frames and connection errors; default discards.
	Log *slog.Logger
	// OnBadBatch, when set, is called for every frame that fails to decode.
	OnBadBatch func(err error)
	// OnRegistered, when set, is called once the listener is up and its
	// address is in the registry (senders can find it from then on).
	OnRegistered func(addr string)
}

// TCPReceiver listens for pusher connections and registers its address.
type TCPReceiver struct {
	reg  Registry
	opts TCPReceiverOptions
}

var _ Receiver = (*TCPReceiver)(nil)

// NewTCPReceiver returns a receiver that registers itself in reg.
func NewTCPReceiver(reg Registry, opts TCPReceiverOptions) *TCPReceiver {
	if opts.ListenAddr == "" {
		opts.ListenAddr = "127.0.0.1:0"
	}
	if opts.TTL <= 0 {
		opts.TTL = 15 * time.Second
	}
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &TCPReceiver{reg: reg, opts: opts}
}

// Receive listens, registers, and calls h for every batch addressed to
// gatewayID until ctx ends; then it deregisters, closes every connection
// and returns ctx.Err(). h is called by one goroutine at a time; batches of
// one sender connection arrive in order.
func (r *TCPReceiver) Receive(ctx context.Context, gatewayID string, h Handler) error {
	if gatewayID == "" {
		return errors.New("receive push batches: empty gateway id")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", r.opts.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen for push streams: %w", err)
	}
	addr := r.opts.AdvertiseAddr
	if addr == "" {
		addr = ln.Addr().String()
	}
	if err := r.reg.Register(ctx, gatewayID, addr, r.opts.TTL); err != nil {
		ln.Close()
		return err
	}
	if r.opts.OnRegistered != nil {
		r.opts.OnRegistered(addr)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // serializes h
		cmu   sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	wg.Go(func() {
		t := time.NewTicker(r.opts.TTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := r.reg.Register(ctx, gatewayID, addr, r.opts.TTL); err != nil && ctx.Err() == nil {
					r.opts.Log.Warn("refresh push registration", "gateway_id", gatewayID, "err", err)
				}
			}
		}
	})
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		cmu.Lock()
		for c := range conns {
			c.Close()
		}
		cmu.Unlock()
	})
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				r.opts.Log.Error("accept push stream", "gateway_id", gatewayID, "err", err)
			}
			break
		}
		cmu.Lock()
		if ctx.Err() != nil {
			cmu.Unlock()
			c.Close()
			break
		}
		conns[c] = struct{}{}
		cmu.Unlock()
		wg.Go(func() {
			defer func() {
				cmu.Lock()
				delete(conns, c)
				cmu.Unlock()
				c.Close()
			}()
			err := readFrames(bufio.NewReaderSize(c, 64<<10), r.opts.MaxFrameBytes, func(frame []byte) error {
				b, err := decodeBatch(frame, gatewayID)
				if err != nil {
					r.opts.Log.Warn("skipping push frame", "gateway_id", gatewayID, "err", err)
					if r.opts.OnBadBatch != nil {
						r.opts.OnBadBatch(err)
					}
					if errors.Is(err, errWrongGateway) {
						return err // a stale address: hang up so the sender looks again
					}
					return nil
				}
				mu.Lock()
				h(b)
				mu.Unlock()
				return nil
			})
			if err != nil && ctx.Err() == nil {
				r.opts.Log.Warn("push stream ended", "gateway_id", gatewayID, "remote", c.RemoteAddr().String(), "err", err)
			}
		})
	}
	ln.Close()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	_ = r.reg.Deregister(dctx, gatewayID, addr)
	cancel()
	stop()
	cmu.Lock()
	for c := range conns {
		c.Close()
	}
	cmu.Unlock()
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("push stream listener closed")
}

// readFrames calls fn with each frame read from rd until it ends or fn
// returns an error, which it returns. A frame longer than max ends the
// stream with an error: the sender is not ours or is broken, and nothing
// after it can be trusted.
func readFrames(rd io.Reader, max int, fn func(frame []byte) error) error {
	var hdr [frameHeader]byte
	buf := make([]byte, 0, 4096)
	for {
		if _, err := io.ReadFull(rd, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read frame header: %w", err)
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n > max {
			return fmt.Errorf("%w: frame of %d bytes, limit %d", ErrBadBatch, n, max)
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(rd, buf); err != nil {
			return fmt.Errorf("read frame of %d bytes: %w", n, err)
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
}
