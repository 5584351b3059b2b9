package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/wire"
)

// Slow-client attack parameters (TestSlowClients). The figures it logs are
// in docs/security.md.
const (
	slowAddrs      = 1500                       // distinct source addresses, 127.20.0.1 on
	slowHTTPPerSec = 250                        // trickled HTTP bodies opened per second
	slowWSPerSec   = 40                         // WebSocket slow readers opened per second
	slowAttack     = 12 * time.Second           // how long the attack opens connections
	slowReadTO     = 2 * time.Second            // GATEWAY_HTTP_READ_TIMEOUT
	slowIdleTO     = 3 * time.Second            // GATEWAY_IDLE_TIMEOUT
	slowMaxFDs     = 1800                       // the gateway's descriptors never exceed this
	slowMaxRSS     = 600 << 20                  // nor its resident memory this
	slowCut        = slowReadTO + 3*time.Second // a trickled body is cut off within this
	slowPerIP      = 4                          // GATEWAY_MAX_CONNS_PER_IP
)

// slowAddr is the i-th attacking source address, in 127.20.0.0/14.
func slowAddr(i int) *net.TCPAddr {
	i %= slowAddrs
	return &net.TCPAddr{IP: net.IPv4(127, byte(20+i/(250*250)), byte(i/250%250), byte(i%250+1))}
}

// TestSlowClients attacks one real gateway process (with the sequencer,
// persister and pusher of the real stack) with thousands of slow clients
// from 1,500 source addresses in 127.0.0.0/8: HTTP requests whose body
// trickles in a byte a second (and is never finished), WebSockets that
// never read (half of them silent, half sending pings whose answers they
// never read), and one address opening many sockets at once. Meanwhile it
// counts the gateway's descriptors (/proc/<pid>/fd) and resident memory,
// and normal clients send: one WebSocket connected before the attack, and
// a new HTTP connection every half second; each must get its ACK.
//
// It fails on a gateway without a body deadline (the trickled requests
// are never cut, and descriptors grow with every one) or without a cap
// per address.
func TestSlowClients(t *testing.T) {
	if testing.Short() {
		t.Skip("slow-client attack: not in -short")
	}
	raiseNoFile(t)
	p := newPipeline(t)
	bin := proc.Build(t, "./producer-gw")
	env := p.env(map[string]string{
		"GATEWAY_ADDR":                     proc.AnyPort,
		"GATEWAY_ACK_WAIT":                 "5s",
		"GATEWAY_HTTP_READ_TIMEOUT":        slowReadTO.String(),
		"GATEWAY_HTTP_READ_HEADER_TIMEOUT": slowReadTO.String(),
		"GATEWAY_HTTP_WRITE_TIMEOUT":       "20s",
		"GATEWAY_HEARTBEAT":                "1s",
		"GATEWAY_IDLE_TIMEOUT":             slowIdleTO.String(),
		"GATEWAY_WRITE_TIMEOUT":            "2s",
		"GATEWAY_MAX_CONNS":                "2500",
		"GATEWAY_MAX_CONNS_PER_IP":         strconv.Itoa(slowPerIP),
		"GATEWAY_MAX_CONNS_PER_USER":       "16",
		"GATEWAY_SOCKET_SEND_BUFFER":       "16384",
	})
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	gwp := proc.Start(t, "gw", bin, list...)
	addr := proc.LoggedAddr(t, gwp, "gateway listening", "GATEWAY_ADDR")
	gw := &testGW{addr: addr}

	// Normal clients: alice on a WebSocket made before the attack, carol
	// over HTTP, both members of one group.
	alice, carol := user("alice"), user("carol")
	ac := p.connect(gw, alice, "phone")
	group, _ := createGroup(ac, carol)
	carolTok := p.token(carol, "laptop", time.Hour)

	// Attackers: tokens of 300 users (the per-user cap is no defence
	// against many accounts).
	toks := make([]string, 300)
	for i := range toks {
		toks[i] = p.token(fmt.Sprintf("slow-%d-%s", i, p.prefix[2:10]), "d", time.Hour)
	}
	ctx, cancel := context.WithTimeout(context.Background(), slowAttack+20*time.Second)
	defer cancel()

	pid := gwp.Pid()
	fds0, rss0 := countFDs(t, pid), vmRSS(t, pid)
	var st slowStats
	var wg sync.WaitGroup
	stopSample := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the gateway's descriptors and memory, every 200 ms
		defer close(sampled)
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopSample:
				return
			case <-tk.C:
				st.maxInt(&st.maxFDs, int64(countFDs(t, pid)))
				st.maxInt(&st.maxRSS, vmRSS(t, pid))
				st.maxInt(&st.maxHeld, st.held.Load())
			}
		}
	}()

	// The attack: connections opened at a steady rate, each on the next
	// source address, held until the gateway cuts them.
	attackEnd := time.Now().Add(slowAttack)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / (slowHTTPPerSec + slowWSPerSec))
		defer tick.Stop()
		for i := 0; time.Now().Before(attackEnd); i++ {
			<-tick.C
			wg.Add(1)
			if i%(slowHTTPPerSec+slowWSPerSec) < slowHTTPPerSec {
				go func() {
					defer wg.Done()
					st.trickle(ctx, attackEnd.Add(slowCut), addr, slowAddr(i), toks[i%len(toks)], group)
				}()
			} else {
				go func() { defer wg.Done(); st.slowReader(ctx, addr, slowAddr(i), toks[i%len(toks)], i%2 == 0) }()
			}
		}
	}()

	// One address asking for many sockets at once: the cap per address
	// answers all but slowPerIP of them at once.
	time.Sleep(time.Second)
	burst := burstFromOneAddr(t, addr, 40)

	// Normal clients while the attack runs.
	var served, tried int
	var worst time.Duration
	for n := 0; time.Now().Before(attackEnd); n++ {
		t0 := time.Now()
		id := newID()
		tried += 2
		ac.send(sendFrame(group, id, "during the attack"))
		if f, ok := ac.expectWithin(10*time.Second, "ack "+id, func(f frame) bool {
			return (f.Op == wire.OpAck || f.Op == wire.OpError) && f.ClientMsgID == id
		}); ok && f.Op == wire.OpAck && f.Status == wire.StatusOK {
			served++
		} else {
			t.Errorf("websocket client during the attack: %+v (ok=%v)", f, ok)
		}
		if err := freshHTTPSend(addr, carolTok, group); err != nil {
			t.Errorf("new HTTP client during the attack: %v", err)
		} else {
			served++
		}
		worst = max(worst, time.Since(t0))
		time.Sleep(500 * time.Millisecond)
	}
	// Everything the attack opened is cut within its bound; then the
	// descriptors are back near where they started.
	wg.Wait()
	close(stopSample)
	<-sampled
	time.Sleep(time.Second)
	fdsAfter := countFDs(t, pid)

	t.Logf("slow-client attack: %d HTTP trickles and %d WebSocket slow readers opened from %d source addresses in %s; "+
		"held by the attackers at once: max %d; trickles cut: %d (timeout answers %d), slowest cut %s; slow readers closed: %d (chatty %d, silent %d), the last after %s; "+
		"gateway descriptors: %d before, max %d during, %d after; gateway VmRSS: %.0f MiB before, max %.0f MiB during; "+
		"one address asking 40 sockets: %d refused rate_limited at once; normal clients: %d of %d sends answered ok, slowest %s",
		st.trickles.Load(), st.readers.Load(), slowAddrs, slowAttack, st.maxHeld.Load(), st.cut.Load(), st.timeoutAnswers.Load(),
		time.Duration(st.slowestCut.Load()), st.readersClosed.Load(), st.chattyClosed.Load(), st.silentClosed.Load(), time.Duration(st.slowestReader.Load()), fds0, st.maxFDs.Load(), fdsAfter,
		float64(rss0)/(1<<20), float64(st.maxRSS.Load())/(1<<20), burst, served, tried, worst)

	if n := st.trickles.Load(); n < int64(slowAttack/time.Second)*slowHTTPPerSec/2 {
		t.Fatalf("only %d trickles opened: the attack did not run", n)
	}
	if uncut := st.uncut.Load(); uncut > 0 {
		t.Errorf("%d trickled bodies were still held %s after they began (GATEWAY_HTTP_READ_TIMEOUT=%s)", uncut, slowCut, slowReadTO)
	}
	if got := st.maxFDs.Load(); got > slowMaxFDs {
		t.Errorf("the gateway held %d descriptors, want at most %d", got, slowMaxFDs)
	}
	if got := st.maxRSS.Load(); got > slowMaxRSS {
		t.Errorf("the gateway's VmRSS reached %d MiB, want at most %d", got>>20, slowMaxRSS>>20)
	}
	if want := 40 - slowPerIP; burst < want {
		t.Errorf("one address asking 40 sockets: %d refused, want at least %d (GATEWAY_MAX_CONNS_PER_IP=%d)", burst, want, slowPerIP)
	}
	if served != tried {
		t.Errorf("normal clients: %d of %d sends answered ok during the attack", served, tried)
	}
	if closed, opened := st.readersClosed.Load(), st.readers.Load(); closed != opened {
		t.Errorf("%d of %d WebSocket slow readers were never closed by the gateway", opened-closed, opened)
	}
	if fdsAfter > fds0+100 {
		t.Errorf("the gateway holds %d descriptors after the attack, %d before", fdsAfter, fds0)
	}
}

// slowStats is what the attack measured.
type slowStats struct {
	trickles, readers, held, maxHeld       atomic.Int64
	cut, uncut, timeoutAnswers, slowestCut atomic.Int64
	readersClosed                          atomic.Int64
	chattyClosed, silentClosed             atomic.Int64
	slowestReader                          atomic.Int64
	maxFDs, maxRSS                         atomic.Int64
}

func (s *slowStats) maxInt(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

// dialFrom dials the gateway from a source address.
func dialFrom(ctx context.Context, src *net.TCPAddr, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: src, Timeout: 5 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

// trickle sends an authenticated POST /v1/send whose body of 4,000 bytes
// comes a byte a second, and waits for the gateway to cut it off.
func (s *slowStats) trickle(ctx context.Context, holdUntil time.Time, addr string, src *net.TCPAddr, tok, session string) {
	c, err := dialFrom(ctx, src, addr)
	if err != nil {
		return
	}
	defer c.Close()
	s.trickles.Add(1)
	s.held.Add(1)
	defer s.held.Add(-1)
	t0 := time.Now()
	body := fmt.Sprintf(`{"client_msg_id":"%s","session_id":"%s","type":"text","body":"%s"}`, newID(), session, strings.Repeat("x", 3900))
	if _, err := fmt.Fprintf(c, "POST /v1/send HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%c",
		tok, len(body), body[0]); err != nil {
		return
	}
	buf := make([]byte, 4096)
	var answer []byte
	uncut := false
	for i := 1; ; i++ {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		answer = append(answer, buf[:n]...)
		if ne, ok := err.(net.Error); ok && ne.Timeout() && n == 0 {
			if time.Since(t0) > slowCut && !uncut {
				uncut = true // held on: a gateway that never cuts it holds it
				s.uncut.Add(1)
			}
			if ctx.Err() != nil || time.Now().After(holdUntil) {
				return
			}
			if i < len(body) {
				if _, err := c.Write([]byte{body[i]}); err != nil {
					break
				}
			}
			continue
		}
		if err != nil {
			break
		}
	}
	if uncut {
		return
	}
	s.cut.Add(1)
	s.maxInt(&s.slowestCut, int64(time.Since(t0)))
	if bytes.Contains(answer, []byte(`"name":"timeout"`)) {
		s.timeoutAnswers.Add(1)
	}
}

// slowReader opens a WebSocket and never reads from it. A chatty one
// sends pings, whose answers pile up unread; a silent one starts a frame
// and trickles it in a byte every half second. Without a reader, the only
// sign of the gateway's close is a write that fails.
func (s *slowStats) slowReader(ctx context.Context, addr string, src *net.TCPAddr, tok string, chatty bool) {
	var raw net.Conn
	tr := &http.Transport{DialContext: func(ctx context.Context, _, a string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: src, Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
		}}
		c, err := d.DialContext(ctx, "tcp", a)
		raw = c
		return c, err
	}}
	defer tr.CloseIdleConnections()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ws, _, err := websocket.Dial(dctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr},
		HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	cancel()
	if err != nil {
		return
	}
	defer ws.CloseNow()
	s.readers.Add(1)
	s.held.Add(1)
	defer s.held.Add(-1)
	t0 := time.Now()
	if !chatty {
		// A masked text frame of 65,535 bytes, of which only the header
		// and a byte at a time arrive.
		if _, err := raw.Write([]byte{0x81, 0xFE, 0xFF, 0xFF, 1, 2, 3, 4}); err != nil {
			return
		}
	}
	ping := []byte(`{"op":"ping","req_id":"` + strings.Repeat("p", 60) + `"}`)
	for ctx.Err() == nil && time.Since(t0) < slowIdleTO+15*time.Second {
		var err error
		if chatty {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			err = ws.Write(wctx, websocket.MessageText, ping)
			cancel()
		} else {
			_ = raw.SetWriteDeadline(time.Now().Add(time.Second))
			_, err = raw.Write([]byte{'x'})
		}
		if err != nil {
			s.readersClosed.Add(1)
			if chatty {
				s.chattyClosed.Add(1)
			} else {
				s.silentClosed.Add(1)
			}
			s.maxInt(&s.slowestReader, int64(time.Since(t0)))
			return
		}
		if chatty {
			time.Sleep(10 * time.Millisecond)
		} else {
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// burstFromOneAddr opens n sockets from one address at once, each
// starting a request, and counts those answered 429 rate_limited at once.
func burstFromOneAddr(t *testing.T, addr string, n int) int {
	src := &net.TCPAddr{IP: net.IPv4(127, 9, 9, 9)}
	var refused atomic.Int64
	var wg sync.WaitGroup
	conns := make(chan net.Conn, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialFrom(context.Background(), src, addr)
			if err != nil {
				return
			}
			conns <- c
			_, _ = io.WriteString(c, "POST /v1/send HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{")
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == http.StatusTooManyRequests && bytes.Contains(b, []byte(`"rate_limited"`)) {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	close(conns)
	for c := range conns {
		_ = c.Close()
	}
	return int(refused.Load())
}

// freshHTTPSend sends a message over a new HTTP connection and wants its
// ACK with a seq.
func freshHTTPSend(addr, tok, session string) error {
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	b, _ := json.Marshal(sendFrame(session, newID(), "a normal client"))
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/send", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var f frame
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		return fmt.Errorf("status %d: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK || f.Status != wire.StatusOK || f.Seq <= 0 {
		return fmt.Errorf("status %d: %+v", resp.StatusCode, f)
	}
	return nil
}

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard one: the attack's
// sockets and the gateway's (a child inherits it) need thousands.
func raiseNoFile(t *testing.T) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	r.Cur = r.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur < 8192 {
		t.Skipf("RLIMIT_NOFILE is %d, the attack needs 8192 (%v)", r.Cur, err)
	}
}

// countFDs counts the open descriptors of process pid.
func countFDs(t *testing.T, pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Errorf("count descriptors: %v", err)
		return 0
	}
	return len(ents)
}

// vmRSS is the resident memory of process pid, in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("read memory: %v", err)
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
