package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// connLimits caps what clients hold of the client port: TCP connections
// in all (MaxConns) and per client address (MaxConnsPerIP), and WebSocket
// connections plus HTTP requests in progress per user (MaxConnsPerUser).
//
// The total and a direct client's address are counted when the socket is
// accepted (listener), before a byte is read: a socket over a cap is
// answered 429 "rate_limited" and closed, so it costs a descriptor for at
// most refuseLinger. A client behind a trusted proxy (TrustedProxies) is
// known only from its request's X-Forwarded-For, so its address is
// counted per request, for as long as the request (a WebSocket: the
// connection) lasts (wrap). Users are counted once authenticated
// (admitUser). Every refusal is retryable: the caps bound what one client
// holds at once, not what it may do later.
type connLimits struct {
	max, perIP, perUser int
	sndbuf              int // SO_SNDBUF of accepted sockets; 0: the kernel's
	trusted             []netip.Prefix
	// proxyProto: trusted proxies' sockets start with a PROXY header
	// (proxyproto.go), read within headerTimeout.
	proxyProto    bool
	headerTimeout time.Duration
	m             *metrics
	// refusing bounds the refused sockets being answered at once; past
	// it a refused socket is closed without an answer.
	refusing chan struct{}

	mu    sync.Mutex
	total int
	ips   map[netip.Addr]int
	users map[string]int
}

const (
	// refuseLinger bounds how long a refused socket is kept to read what
	// its client sent before the close, so the answer is not lost to a
	// reset.
	refuseLinger = time.Second
	// maxRefusing bounds the refused sockets answered at once.
	maxRefusing = 256
)

func newConnLimits(cfg Config, m *metrics) *connLimits {
	return &connLimits{max: cfg.MaxConns, perIP: cfg.MaxConnsPerIP, perUser: cfg.MaxConnsPerUser, sndbuf: cfg.SocketSendBuffer, trusted: cfg.TrustedProxies, m: m,
		proxyProto: cfg.ProxyProtocol, headerTimeout: cfg.HTTPReadHeaderTimeout,
		refusing: make(chan struct{}, maxRefusing), ips: map[netip.Addr]int{}, users: map[string]int{}}
}

// trustedProxy reports whether a is one of the trusted proxies.
func (l *connLimits) trustedProxy(a netip.Addr) bool {
	for _, p := range l.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// listener wraps ln so that every accepted socket is counted and released
// when closed.
func (l *connLimits) listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l}
}

type limitListener struct {
	net.Listener
	l *connLimits
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := addrOf(c.RemoteAddr().String())
		perIP := ip.IsValid() && !ll.l.trustedProxy(ip)
		if e := ll.l.admitSocket(ip, perIP); e != nil {
			ll.l.refuse(c, e)
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && ll.l.sndbuf > 0 {
			_ = tc.SetWriteBuffer(ll.l.sndbuf)
		}
		lc := &limitedConn{Conn: c, l: ll.l, ip: ip, perIP: perIP}
		if ll.l.proxyProto && ip.IsValid() && !perIP {
			return &proxyConn{limitedConn: lc, timeout: ll.l.headerTimeout}, nil
		}
		return lc, nil
	}
}

// admitSocket counts a new socket, or says which cap refuses it.
func (l *connLimits) admitSocket(ip netip.Addr, perIP bool) *apierr.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.total >= l.max {
		l.m.connRefusals.WithLabelValues("total").Inc()
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_RATE_LIMITED, "the gateway holds its maximum of %d connections; retry later or elsewhere", l.max)
	}
	if perIP && l.perIP > 0 && l.ips[ip] >= l.perIP {
		l.m.connRefusals.WithLabelValues("ip").Inc()
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_RATE_LIMITED, "at most %d connections per client address", l.perIP)
	}
	l.total++
	if perIP {
		l.ips[ip]++
	}
	l.m.sockets.Inc()
	return nil
}

func (l *connLimits) releaseSocket(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if c.perIP {
		l.releaseIPLocked(c.ip)
	}
	l.m.sockets.Dec()
}

// admitProxied counts c, a trusted proxy's socket, against the client
// address its PROXY header names, or says why not.
func (l *connLimits) admitProxied(c *limitedConn, ip netip.Addr) *apierr.Error {
	if l.perIP <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ips[ip] >= l.perIP {
		l.m.connRefusals.WithLabelValues("ip").Inc()
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_RATE_LIMITED, "at most %d connections per client address", l.perIP)
	}
	l.ips[ip]++
	c.ip, c.perIP = ip, true
	return nil
}

func (l *connLimits) releaseIPLocked(ip netip.Addr) {
	if l.ips[ip]--; l.ips[ip] <= 0 {
		delete(l.ips, ip)
	}
}

// refuse answers a socket over a cap with an HTTP 429 carrying the error
// frame, then closes it. The answer needs no request: an HTTP client reads
// it as the response to what it sent, a WebSocket client as a failed
// handshake.
func (l *connLimits) refuse(c net.Conn, e *apierr.Error) {
	select {
	case l.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseLinger))
		if l.answer(c, e) != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		// Closing with unread input would reset the connection, and the
		// client could lose the answer.
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// answer writes e as an HTTP response on c, before any request was read.
func (l *connLimits) answer(c net.Conn, e *apierr.Error) error {
	b := e.Body()
	body, _ := json.Marshal(wire.ErrorFrame{Op: wire.OpError,
		Error: wire.ErrorBody{Code: b.Code, Name: b.Name, Message: b.Message, Retryable: b.Retryable}})
	_ = c.SetWriteDeadline(time.Now().Add(refuseLinger))
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s\n",
		e.HTTPStatus(), http.StatusText(e.HTTPStatus()), len(body)+1, body)
	return err
}

// limitedConn is an accepted socket; its Close releases its count once.
type limitedConn struct {
	net.Conn
	l     *connLimits
	ip    netip.Addr
	perIP bool
	once  sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.releaseSocket(c) })
	return err
}

// CloseWrite lets net/http half-close the socket as it does a TCP one.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// held is what a request counts against the caps; wrap releases it when
// the request ends.
type held struct {
	ip   netip.Addr // valid: counted per address here (a proxied client)
	user string     // counted per user
}

type heldKey struct{}

// wrap counts each request of a client behind a trusted proxy against its
// address for as long as the request lasts, and releases what admitUser
// counted when it ends.
func (l *connLimits) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := &held{}
		if ip, proxied := l.clientAddr(r); proxied && l.perIP > 0 {
			if e := l.admitIP(ip); e != nil {
				writeRefusal(w, e)
				return
			}
			h.ip = ip
		}
		defer l.release(h)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), heldKey{}, h)))
	})
}

func (l *connLimits) admitIP(ip netip.Addr) *apierr.Error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ips[ip] >= l.perIP {
		l.m.connRefusals.WithLabelValues("ip").Inc()
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_RATE_LIMITED, "at most %d connections per client address", l.perIP)
	}
	l.ips[ip]++
	return nil
}

// admitUser counts the request of ctx (wrap's) against user, once; the
// count goes when the request ends. A request that did not pass wrap is
// not counted.
func (l *connLimits) admitUser(ctx context.Context, user string) *apierr.Error {
	h, _ := ctx.Value(heldKey{}).(*held)
	if h == nil || h.user != "" || l.perUser <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.users[user] >= l.perUser {
		l.m.connRefusals.WithLabelValues("user").Inc()
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_RATE_LIMITED, "at most %d connections and requests in progress per user on this gateway", l.perUser)
	}
	l.users[user]++
	h.user = user
	return nil
}

func (l *connLimits) release(h *held) {
	if !h.ip.IsValid() && h.user == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if h.ip.IsValid() {
		l.releaseIPLocked(h.ip)
	}
	if h.user != "" {
		if l.users[h.user]--; l.users[h.user] <= 0 {
			delete(l.users, h.user)
		}
	}
}

// clientAddr is the address of r's client: the socket's, unless the
// socket is a trusted proxy's; then the right-most address of
// X-Forwarded-For that is not a trusted proxy's (each proxy appends the
// address it heard from, so what is left of the last untrusted hop may be
// forged), or the last proxy's when all are trusted. proxied says the
// socket was a trusted proxy's.
func (l *connLimits) clientAddr(r *http.Request) (addr netip.Addr, proxied bool) {
	peer := addrOf(r.RemoteAddr)
	if !peer.IsValid() || !l.trustedProxy(peer) {
		return peer, false
	}
	addr = peer
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a := addrOf(strings.TrimSpace(hops[i]))
		if !a.IsValid() {
			break // not an address a proxy of ours wrote
		}
		addr = a
		if !l.trustedProxy(a) {
			break
		}
	}
	return addr, true
}

// addrOf parses "ip", "ip:port" or "[ip]:port"; invalid when it is none.
func addrOf(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}

// writeRefusal answers a request refused by a cap.
func writeRefusal(w http.ResponseWriter, e *apierr.Error) {
	b := e.Body()
	w.Header().Set("Retry-After", "1")
	// Closed, not kept alive: net/http would first read what is left of
	// the body, and a client trickling it would hold the answer back.
	w.Header().Set("Connection", "close")
	writeJSON(w, e.HTTPStatus(), wire.ErrorFrame{Op: wire.OpError,
		Error: wire.ErrorBody{Code: b.Code, Name: b.Name, Message: b.Message, Retryable: b.Retryable}})
}
