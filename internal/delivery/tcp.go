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

	"github.com/seqflow/seqflow/internal/peerauth"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// The TCP transport streams frames straight from the pusher to each
// gateway: after a mutual handshake (auth.go), a 4-byte big-endian length,
// a proto-encoded PushBatch and its MAC. After the handshake the stream is
// one way; the receiver never writes. Gateways publish their listen
// address, signed, in a Registry.

// frameHeader is the length prefix of a frame.
const frameHeader = 4

// TCPSenderOptions tune a TCPSender. Zero values take the defaults.
type TCPSenderOptions struct {
	// MaxFrameBytes bounds one frame, default DefaultMaxFrameBytes.
	MaxFrameBytes int
	// AddrTTL is how long a looked-up address is reused before the
	// registry is asked again, default 2s.
	AddrTTL time.Duration
	// HandshakeTimeout bounds the handshake with a gateway, default
	// DefaultHandshakeTimeout (and ctx, when it ends sooner).
	HandshakeTimeout time.Duration
	// MaxIdle: a connection unused this long is closed and dialed again
	// before the next Send, default 60s, so it is not written to at the
	// moment the gateway's idle timeout (default 2m) closes it.
	MaxIdle time.Duration
	// Log receives connection events; default discards.
	Log *slog.Logger
}

// TCPSender keeps one connection per gateway. Send writes under the
// connection's lock with a write deadline from ctx; any write error closes
// the connection (a partial frame would corrupt the stream) and the next
// Send dials again. Safe for concurrent use.
type TCPSender struct {
	reg    Registry
	keys   *peerauth.Keyring
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
	mac       *frameMAC
	used      time.Time     // last write
	broken    chan struct{} // closed when the peer hangs up
}

// NewTCPSender returns a sender that finds gateways in reg and proves
// itself with, and demands of each gateway, a key of keys.
func NewTCPSender(reg Registry, keys *peerauth.Keyring, opts TCPSenderOptions) *TCPSender {
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if opts.AddrTTL <= 0 {
		opts.AddrTTL = 2 * time.Second
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.MaxIdle <= 0 {
		opts.MaxIdle = time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &TCPSender{reg: reg, keys: keys, opts: opts, conns: map[string]*tcpConn{}}
}

// Send writes b's frames to its gateway's connection, dialing it first when
// there is none. It returns ErrNoReceiver when the gateway is not
// registered or refuses the connection, ErrPeerAuth when the registry
// entry is not signed or the listener cannot prove it is the gateway
// holding a key of the ring (nothing is written to it), and ctx's error
// when the write does not finish in time (the gateway is not reading).
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
			if _, err = tc.w.Write(f); err == nil {
				_, err = tc.w.Write(tc.mac.next(f))
			}
		}
		if err != nil {
			break
		}
	}
	tc.used = time.Now()
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
			if time.Since(tc.used) < s.opts.MaxIdle {
				return nil
			}
			tc.reset() // idle: the gateway may be closing it right now
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
			if errors.Is(err, ErrPeerAuth) {
				s.opts.Log.Warn("refusing a push registry entry", "gateway_id", tc.gw, "err", err)
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
	dl := time.Now().Add(s.opts.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	mac, err := clientHandshake(c, s.keys, tc.gw)
	stop()
	if err != nil {
		_ = c.Close()
		// Look the gateway up again: at once after a stale entry, else not
		// before a quarter of AddrTTL, or a listener that fails the
		// handshake (or never answers it) would cost every batch a dial
		// and a wait before the fallback.
		tc.addr = ""
		if !errors.Is(err, errStaleAddress) {
			tc.noneUntil = time.Now().Add(s.opts.AddrTTL / 4)
		}
		if errors.Is(err, ErrPeerAuth) {
			s.opts.Log.Warn("refusing to push to a listener that failed the handshake", "gateway_id", tc.gw, "err", err)
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return err
	}
	_ = c.SetDeadline(time.Time{})
	tc.c, tc.w, tc.mac, tc.used, tc.broken = c, bufio.NewWriterSize(c, 64<<10), mac, time.Now(), make(chan struct{})
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
	tc.c, tc.w, tc.mac = nil, nil, nil
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
	// HandshakeTimeout: a connection that has not completed the handshake
	// this long after it was accepted is closed, default
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout: a connection on which no complete frame arrived for
	// this long is closed, default 2m (senders redial after 1m unused, see
	// TCPSenderOptions.MaxIdle).
	IdleTimeout time.Duration
	// MaxConns caps the connections held open at once, default 256 (a
	// sender process holds one per gateway it reaches); MaxHandshakes caps
	// those still in their handshake, default 32, so strangers cannot
	// crowd out authenticated senders. A connection over a cap is closed
	// at once.
	MaxConns, MaxHandshakes int
	// Log receives bad frames and connection errors; default discards.
	Log *slog.Logger
	// OnBadBatch, when set, is called for every authenticated frame that
	// fails to decode.
	OnBadBatch func(err error)
	// OnRejected, when set, is told of every connection refused (its
	// handshake failed, a frame's MAC did not verify, it idled or a cap
	// was reached); the connection is closed.
	OnRejected RejectFunc
	// OnRegistered, when set, is called once the listener is up and its
	// address is in the registry (senders can find it from then on).
	OnRegistered func(addr string)
}

// TCPReceiver listens for pusher connections and registers its address.
type TCPReceiver struct {
	reg  Registry
	keys *peerauth.Keyring
	opts TCPReceiverOptions
}

var _ Receiver = (*TCPReceiver)(nil)

// NewTCPReceiver returns a receiver that registers itself in reg and
// accepts only senders proving a key of keys.
func NewTCPReceiver(reg Registry, keys *peerauth.Keyring, opts TCPReceiverOptions) *TCPReceiver {
	if opts.ListenAddr == "" {
		opts.ListenAddr = "127.0.0.1:0"
	}
	if opts.TTL <= 0 {
		opts.TTL = 15 * time.Second
	}
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 256
	}
	if opts.MaxHandshakes <= 0 {
		opts.MaxHandshakes = 32
	}
	opts.MaxHandshakes = min(opts.MaxHandshakes, opts.MaxConns)
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &TCPReceiver{reg: reg, keys: keys, opts: opts}
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
		wg      sync.WaitGroup
		mu      sync.Mutex // serializes h
		cmu     sync.Mutex
		conns   = map[net.Conn]struct{}{}
		shaking int // connections in their handshake, under cmu
	)
	rejected := func(c net.Conn, err error) {
		reason := rejectReason(err)
		r.opts.Log.Warn("refusing a push connection", "gateway_id", gatewayID, "remote", c.RemoteAddr().String(), "reason", reason, "err", err)
		if r.opts.OnRejected != nil {
			r.opts.OnRejected(reason, err)
		}
	}
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
		if len(conns) >= r.opts.MaxConns || shaking >= r.opts.MaxHandshakes {
			n, hs := len(conns), shaking
			cmu.Unlock()
			// Counted before the close: whoever sees the close sees the count.
			rejected(c, reject(RejectConnLimit, "%d connections open (cap %d), %d in handshake (cap %d)", n, r.opts.MaxConns, hs, r.opts.MaxHandshakes))
			c.Close()
			continue
		}
		conns[c] = struct{}{}
		shaking++
		cmu.Unlock()
		wg.Go(func() {
			shook := false
			defer func() {
				cmu.Lock()
				delete(conns, c)
				if !shook {
					shaking--
				}
				cmu.Unlock()
				c.Close()
			}()
			br := bufio.NewReaderSize(c, 64<<10)
			_ = c.SetDeadline(time.Now().Add(r.opts.HandshakeTimeout))
			mac, err := serverHandshake(struct {
				io.Reader
				io.Writer
			}{br, c}, r.keys, gatewayID)
			cmu.Lock()
			shaking--
			shook = true
			cmu.Unlock()
			if err != nil {
				if ctx.Err() == nil {
					rejected(c, err)
				}
				return
			}
			_ = c.SetWriteDeadline(time.Time{})
			idle := func() { _ = c.SetReadDeadline(time.Now().Add(r.opts.IdleTimeout)) }
			err = readFrames(br, r.opts.MaxFrameBytes, mac, idle, func(frame []byte) error {
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
			switch {
			case err == nil || ctx.Err() != nil:
			case rejectReason(err) != "":
				rejected(c, err)
			default:
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

// readFrames calls fn with each frame read from rd whose MAC verifies,
// until the stream ends or fn returns an error, which it returns. Before
// each frame it calls idle, which sets the read deadline the whole frame
// must arrive by. A frame longer than max, a MAC that does not verify and
// a frame that does not arrive in time end the stream with a refusal
// (rejectError): the sender is not ours or is broken, and nothing after it
// can be trusted.
func readFrames(rd io.Reader, max int, mac *frameMAC, idle func(), fn func(frame []byte) error) error {
	var hdr [frameHeader]byte
	var tag [MACSize]byte
	buf := make([]byte, 0, 4096)
	timedOut := func(err error) bool {
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}
	for {
		idle()
		if _, err := io.ReadFull(rd, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if timedOut(err) {
				return reject(RejectIdle, "no frame within the idle timeout: %v", err)
			}
			return fmt.Errorf("read frame header: %w", err)
		}
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if n > max {
			return reject(RejectOversize, "frame of %d bytes, limit %d", n, max)
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		_, err := io.ReadFull(rd, buf)
		if err == nil {
			_, err = io.ReadFull(rd, tag[:])
		}
		if err != nil {
			if timedOut(err) {
				return reject(RejectIdle, "frame of %d bytes not complete within the idle timeout: %v", n, err)
			}
			return fmt.Errorf("read frame of %d bytes: %w", n, err)
		}
		if !peerauth.Equal(tag[:], mac.next(buf)) {
			return reject(RejectBadMAC, "frame %d's MAC does not verify", mac.ctr-1)
		}
		if err := fn(buf); err != nil {
			return err
		}
	}
}
