package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The PROXY protocol (HAProxy's, versions 1 and 2) carries the client's
// address from an L4 proxy or load balancer in front of the gateway
// (GATEWAY_PROXY_PROTOCOL). It is read only from sockets of
// GATEWAY_TRUSTED_PROXIES, which must then send it; anyone else's would
// be believed as readily as a forged X-Forwarded-For, so from them it is
// not read (and fails as HTTP).

// proxyV2Sig opens a version 2 header.
var proxyV2Sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// maxProxyV1 bounds a version 1 header, CRLF included (the spec's 107).
const maxProxyV1 = 107

// errNoProxyHeader: a trusted proxy's socket did not start with one.
var errNoProxyHeader = errors.New("no PROXY protocol header")

// readProxyHeader reads a PROXY header from br and returns the client
// address it names; invalid (a LOCAL or UNKNOWN header) means the socket's
// own.
func readProxyHeader(br *bufio.Reader) (netip.Addr, error) {
	head, err := br.Peek(len(proxyV2Sig))
	if err == nil && bytes.Equal(head, proxyV2Sig) {
		return readProxyV2(br)
	}
	if len(head) < 6 || string(head[:6]) != "PROXY " {
		if err != nil && len(head) < 6 {
			return netip.Addr{}, err
		}
		return netip.Addr{}, errNoProxyHeader
	}
	var line []byte
	for len(line) < maxProxyV1 {
		b, err := br.ReadByte()
		if err != nil {
			return netip.Addr{}, err
		}
		line = append(line, b)
		if b == '\n' {
			break
		}
	}
	s, ok := strings.CutSuffix(string(line), "\r\n")
	if !ok {
		return netip.Addr{}, fmt.Errorf("PROXY v1 header not ended by CRLF within %d bytes", maxProxyV1)
	}
	f := strings.Split(s, " ")
	switch {
	case len(f) >= 2 && f[1] == "UNKNOWN":
		return netip.Addr{}, nil
	case len(f) != 6 || (f[1] != "TCP4" && f[1] != "TCP6"):
		return netip.Addr{}, fmt.Errorf("PROXY v1 header %q: want PROXY TCP4|TCP6 src dst sport dport", s)
	}
	a, err := netip.ParseAddr(f[2])
	if err != nil || (f[1] == "TCP4") != a.Is4() {
		return netip.Addr{}, fmt.Errorf("PROXY v1 source %q: not a %s address", f[2], f[1])
	}
	if _, err := strconv.ParseUint(f[4], 10, 16); err != nil {
		return netip.Addr{}, fmt.Errorf("PROXY v1 source port %q", f[4])
	}
	return a, nil
}

func readProxyV2(br *bufio.Reader) (netip.Addr, error) {
	var h [16]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return netip.Addr{}, err
	}
	if h[12]>>4 != 2 {
		return netip.Addr{}, fmt.Errorf("PROXY v2 header of version %d", h[12]>>4)
	}
	n := int(binary.BigEndian.Uint16(h[14:16]))
	body := make([]byte, n) // at most 64 KiB, and only from a trusted proxy
	if _, err := io.ReadFull(br, body); err != nil {
		return netip.Addr{}, err
	}
	if h[12]&0x0f == 0 { // LOCAL: the proxy's own connection (a health check)
		return netip.Addr{}, nil
	}
	switch h[13] {
	case 0x11: // TCP over IPv4
		if n < 12 {
			return netip.Addr{}, errors.New("PROXY v2 IPv4 addresses cut short")
		}
		return netip.AddrFrom4([4]byte(body[:4])), nil
	case 0x21: // TCP over IPv6
		if n < 36 {
			return netip.Addr{}, errors.New("PROXY v2 IPv6 addresses cut short")
		}
		return netip.AddrFrom16([16]byte(body[:16])).Unmap(), nil
	}
	return netip.Addr{}, nil // another family (UNIX, UDP): the socket's own
}

// proxyConn is a trusted proxy's socket that starts with a PROXY header.
// The header is read, within the header deadline, on the first Read or
// RemoteAddr, in the connection's own goroutine (net/http asks for
// RemoteAddr first), never in the accept loop. The address it names is
// then counted against its cap; over it, the socket is answered 429 and
// fails.
type proxyConn struct {
	*limitedConn
	timeout time.Duration

	once   sync.Once
	br     *bufio.Reader
	remote net.Addr
	err    error
}

func (c *proxyConn) init() {
	c.once.Do(func() {
		c.remote = c.limitedConn.RemoteAddr()
		c.br = bufio.NewReader(c.limitedConn.Conn)
		_ = c.limitedConn.SetReadDeadline(time.Now().Add(c.timeout))
		a, err := readProxyHeader(c.br)
		_ = c.limitedConn.SetReadDeadline(time.Time{})
		if err != nil {
			c.err = fmt.Errorf("read PROXY header from %s: %w", c.remote, err)
			return
		}
		if !a.IsValid() {
			return
		}
		c.remote = &net.TCPAddr{IP: a.AsSlice()}
		if e := c.l.admitProxied(c.limitedConn, a); e != nil {
			_ = c.l.answer(c.limitedConn.Conn, e)
			c.err = io.EOF // answered: net/http closes without a word of its own
		}
	})
}

func (c *proxyConn) RemoteAddr() net.Addr {
	c.init()
	return c.remote
}

func (c *proxyConn) Read(p []byte) (int, error) {
	c.init()
	if c.err != nil {
		return 0, c.err
	}
	return c.br.Read(p)
}
