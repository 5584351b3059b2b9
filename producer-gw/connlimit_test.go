package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// holdRequest opens a socket from src (nil: any) and starts a request
// whose body never comes; the gateway holds it until its read deadline.
// It returns the socket and whether the gateway answered at once (and
// what), or "" when it holds the request.
func holdRequest(t *testing.T, addr string, src net.IP, header string) (net.Conn, string) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if src != nil {
		d.LocalAddr = &net.TCPAddr{IP: src}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "POST /v1/send HTTP/1.1\r\nHost: gw\r\nContent-Length: 50\r\n"+header+"\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return c, "" // held
	}
	b, _ := io.ReadAll(resp.Body)
	return c, fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// TestConnCaps: the caps on the client port's connections in all, per
// client address (X-Forwarded-For believed from trusted proxies only) and
// per user; each refusal is a retryable 429 rate_limited with a reason.
func TestConnCaps(t *testing.T) {
	p := newPipelineNoProcs(t)
	bearer := func(u string) string { return "Authorization: Bearer " + p.token(u, "d", time.Hour) + "\r\n" }
	refused := func(t *testing.T, got, reason string) {
		t.Helper()
		if !strings.HasPrefix(got, "429 ") || !strings.Contains(got, `"name":"rate_limited"`) || !strings.Contains(got, `"retryable":true`) || !strings.Contains(got, reason) {
			t.Fatalf("answer %q, want 429 rate_limited, retryable, naming %q", got, reason)
		}
	}

	t.Run("total", func(t *testing.T) {
		gw := p.gateway(map[string]string{"GATEWAY_MAX_CONNS": "3"})
		var held []net.Conn
		for i := range 3 {
			c, got := holdRequest(t, gw.addr, nil, bearer(user("t")))
			if got != "" {
				t.Fatalf("socket %d: %s, want held", i, got)
			}
			held = append(held, c)
		}
		_, got := holdRequest(t, gw.addr, nil, bearer(user("t")))
		refused(t, got, "maximum of 3 connections")
		_ = held[0].Close()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, got := holdRequest(t, gw.addr, nil, bearer(user("t"))); got == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a closed socket's place was not freed")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("per address", func(t *testing.T) {
		gw := p.gateway(map[string]string{"GATEWAY_MAX_CONNS_PER_IP": "2"})
		a, b := net.IPv4(127, 0, 0, 11), net.IPv4(127, 0, 0, 12)
		for range 2 {
			if _, got := holdRequest(t, gw.addr, a, bearer(user("a"))); got != "" {
				t.Fatalf("%s, want held", got)
			}
		}
		_, got := holdRequest(t, gw.addr, a, bearer(user("a")))
		refused(t, got, "at most 2 connections per client address")
		if _, got := holdRequest(t, gw.addr, b, bearer(user("b"))); got != "" {
			t.Fatalf("another address: %s, want held", got)
		}
	})

	t.Run("trusted proxies", func(t *testing.T) {
		gw := p.gateway(map[string]string{"GATEWAY_MAX_CONNS_PER_IP": "2", "GATEWAY_TRUSTED_PROXIES": "127.0.0.21/32, 127.0.0.22"})
		proxy, other := net.IPv4(127, 0, 0, 21), net.IPv4(127, 0, 0, 23)
		xff := func(v string) string { return "X-Forwarded-For: " + v + "\r\n" }
		// Through the proxy: one client address (the right-most that is
		// not a proxy's) holds two requests; its third is refused, while
		// another client's is not, nor is the proxy's own address capped.
		for _, v := range []string{"198.51.100.1, 203.0.113.7", "203.0.113.7, 127.0.0.22"} {
			if _, got := holdRequest(t, gw.addr, proxy, xff(v)+bearer(user("x"))); got != "" {
				t.Fatalf("XFF %s: %s, want held", v, got)
			}
		}
		_, got := holdRequest(t, gw.addr, proxy, xff("203.0.113.7")+bearer(user("x")))
		refused(t, got, "per client address")
		if _, got := holdRequest(t, gw.addr, proxy, xff("203.0.113.8")+bearer(user("x"))); got != "" {
			t.Fatalf("another client through the proxy: %s, want held", got)
		}
		// From an untrusted socket the header is not believed: the socket's
		// address counts, not 203.0.113.7, which is full.
		if _, got := holdRequest(t, gw.addr, other, xff("203.0.113.7")+bearer(user("x"))); got != "" {
			t.Fatalf("XFF from an untrusted socket was believed: %s", got)
		}
	})

	t.Run("proxy protocol", func(t *testing.T) {
		gw := p.gateway(map[string]string{"GATEWAY_MAX_CONNS_PER_IP": "2", "GATEWAY_TRUSTED_PROXIES": "127.0.0.31",
			"GATEWAY_PROXY_PROTOCOL": "true"})
		proxy, other := net.IPv4(127, 0, 0, 31), net.IPv4(127, 0, 0, 32)
		// The header goes before the request line: holdRequest's header
		// argument follows it, so the test writes its own.
		hold := func(src net.IP, head []byte, u string) string {
			t.Helper()
			c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}).Dial("tcp", gw.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			_, _ = c.Write(head)
			_, _ = io.WriteString(c, "POST /v1/send HTTP/1.1\r\nHost: gw\r\nContent-Length: 50\r\n"+bearer(u)+"\r\n{")
			_ = c.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return ""
			}
			b, _ := io.ReadAll(resp.Body)
			return fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
		v1 := func(src string) []byte { return []byte("PROXY TCP4 " + src + " 127.0.0.1 40000 8080\r\n") }
		v2 := func(src [4]byte) []byte {
			b := append([]byte("\r\n\r\n\x00\r\nQUIT\n"), 0x21, 0x11, 0, 12)
			return append(append(b, src[:]...), 127, 0, 0, 1, 0x9c, 0x40, 0x1f, 0x90)
		}
		if got := hold(proxy, v1("203.0.113.7"), user("x")); got != "" {
			t.Fatalf("first through the proxy: %s, want held", got)
		}
		if got := hold(proxy, v2([4]byte{203, 0, 113, 7}), user("x")); got != "" {
			t.Fatalf("second (v2): %s, want held", got)
		}
		refused(t, hold(proxy, v1("203.0.113.7"), user("x")), "per client address")
		if got := hold(proxy, v1("203.0.113.8"), user("x")); got != "" {
			t.Fatalf("another client through the proxy: %s, want held", got)
		}
		// A header from an untrusted socket is not read: bad HTTP.
		if got := hold(other, v1("203.0.113.9"), user("x")); !strings.HasPrefix(got, "400 ") {
			t.Fatalf("PROXY header from an untrusted socket: %q, want 400", got)
		}
		// A trusted proxy's socket without one is refused and closed.
		if got := hold(proxy, nil, user("x")); !strings.HasPrefix(got, "400 ") {
			t.Fatalf("trusted socket without a header: %q, want 400", got)
		}
	})

	t.Run("per user", func(t *testing.T) {
		gw := p.gateway(map[string]string{"GATEWAY_MAX_CONNS_PER_USER": "2"})
		u := user("u")
		c1 := p.connect(gw, u, "phone")
		_ = p.connect(gw, u, "laptop")
		_, resp, err := dial(t, gw, p.token(u, "tablet", time.Hour))
		if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("third connection of a user: err %v, resp %v; want 429", err, resp)
		}
		// An HTTP request of the same user counts too; another user's not.
		_, got := holdRequest(t, gw.addr, nil, bearer(u))
		refused(t, got, "per user")
		if _, got := holdRequest(t, gw.addr, nil, bearer(user("v"))); got != "" {
			t.Fatalf("another user: %s, want held", got)
		}
		_ = c1.ws.Close(websocket.StatusNormalClosure, "")
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, _, err := dial(t, gw, p.token(u, "tablet", time.Hour))
			if err == nil {
				_ = c.ws.CloseNow()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a closed connection's place was not freed: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestHTTPBodyBounds: a body that trickles in is cut off at
// GATEWAY_HTTP_READ_TIMEOUT with a retryable "timeout"; a body over the
// frame limit is refused "frame_too_large" whether its length is declared
// (at once, unread) or not.
func TestHTTPBodyBounds(t *testing.T) {
	p := newPipelineNoProcs(t)
	gw := p.gateway(map[string]string{"GATEWAY_HTTP_READ_TIMEOUT": "1s"})
	auth := "Authorization: Bearer " + p.token(user("b"), "d", time.Hour) + "\r\n"
	answer := func(t *testing.T, c net.Conn, within time.Duration) (int, string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(within))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer within %s: %v", within, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	dialGW := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", gw.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	t.Run("trickled", func(t *testing.T) {
		c := dialGW(t)
		t0 := time.Now()
		_, _ = io.WriteString(c, "POST /v1/send HTTP/1.1\r\nHost: gw\r\n"+auth+"Content-Length: 60\r\n\r\n{")
		go func() { // a byte every 300 ms, never the whole body
			for i := 0; i < 20; i++ {
				time.Sleep(300 * time.Millisecond)
				if _, err := c.Write([]byte{' '}); err != nil {
					return
				}
			}
		}()
		status, body := answer(t, c, 5*time.Second)
		if status != http.StatusGatewayTimeout || !strings.Contains(body, `"name":"timeout"`) || !strings.Contains(body, "GATEWAY_HTTP_READ_TIMEOUT") {
			t.Fatalf("trickled body: %d %s, want 504 timeout naming GATEWAY_HTTP_READ_TIMEOUT", status, body)
		}
		if d := time.Since(t0); d > 3*time.Second {
			t.Fatalf("cut off after %s, want about 1s", d)
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("the connection stays open after the timeout")
		}
	})

	t.Run("declared over the limit", func(t *testing.T) {
		c := dialGW(t)
		_, _ = fmt.Fprintf(c, "POST /v1/send HTTP/1.1\r\nHost: gw\r\n%sContent-Length: %d\r\n\r\n{", auth, wire.DefaultLimits.MaxFrameBytes+1)
		status, body := answer(t, c, 500*time.Millisecond)
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"name":"frame_too_large"`) {
			t.Fatalf("declared body over the limit: %d %s, want 413 frame_too_large", status, body)
		}
	})

	t.Run("streamed over the limit", func(t *testing.T) {
		req, _ := http.NewRequest("POST", "http://"+gw.addr+"/v1/send", io.MultiReader(strings.NewReader(`{"body":"`),
			strings.NewReader(strings.Repeat("x", wire.DefaultLimits.MaxFrameBytes))))
		req.Header.Set("Authorization", strings.TrimSuffix(strings.TrimPrefix(auth, "Authorization: "), "\r\n"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"name":"frame_too_large"`) || req.ContentLength != 0 {
			t.Fatalf("streamed body over the limit: %d %s, want 413 frame_too_large", resp.StatusCode, b)
		}
	})
}

// TestDeliveredCharged: delivered frames are charged to the rate limiter,
// one more token per session whose receipt would ask the store; a frame
// of sessions the gateway already knows the user is not in costs one.
func TestDeliveredCharged(t *testing.T) {
	p := newPipelineNoProcs(t)
	gw := p.gateway(map[string]string{"GATEWAY_RATE_PER_USER": "1", "GATEWAY_RATE_BURST": "8",
		"GATEWAY_DELIVERED_FLUSH_INTERVAL": "50ms"})
	c := p.connect(gw, user("d"), "phone")
	random := func() []map[string]any {
		var cs []map[string]any
		for range 100 {
			cs = append(cs, map[string]any{"session_id": "g-" + uuid.NewString(), "seq": 1})
		}
		return cs
	}
	first := random()
	c.send(map[string]any{"op": "delivered", "req_id": "d1", "cursors": first})
	if f := c.result("d1"); f.Op != wire.OpResult {
		t.Fatalf("first delivered frame: %+v, want a result (the burst pays for it)", f)
	}
	c.send(map[string]any{"op": "delivered", "req_id": "d2", "cursors": random()})
	if f := c.result("d2"); f.Op != wire.OpError || f.Error.Name != "rate_limited" || !f.Error.Retryable {
		t.Fatalf("second frame of 100 unknown sessions: %+v, want rate_limited", f)
	}
	// The first frame's receipts were checked (and refused) by now: its
	// sessions are known negatives, so the same frame costs one token,
	// which the bucket holds again after a second.
	time.Sleep(1500 * time.Millisecond)
	c.send(map[string]any{"op": "delivered", "req_id": "d3", "cursors": first})
	if f := c.result("d3"); f.Op != wire.OpResult {
		t.Fatalf("frame of sessions known not to be the user's: %+v, want a result", f)
	}
}

// TestMembershipNegativeCache is a unit test with an in-process fake
// store: a negative answer serves IsMember (reads, receipts) for
// negativeTTL, never Standing (commands), and any membership event of its
// session drops it.
func TestMembershipNegativeCache(t *testing.T) {
	st := &fakeMembers{members: map[mkey]store.Standing{}}
	m := newMembership(st, 0, time.Minute) // no positive cache: each store call shows
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	isMember := func() bool {
		ok, err := m.IsMember(ctx, "s", "eve")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for range 3 {
		if isMember() {
			t.Fatal("eve is a member")
		}
	}
	if st.calls != 1 || !m.known("s", "eve") {
		t.Fatalf("store asked %d times for one negative answer, want 1 (known %v)", st.calls, m.known("s", "eve"))
	}
	if _, _ = m.Standing(ctx, "s", "eve"); st.calls != 2 {
		t.Fatal("a command's check was answered from the negative cache")
	}
	// Any membership event of the session drops it, even of another user
	// or a group change that is not a join.
	for _, ev := range []*imv1.SequencedEvent{
		{SessionId: "s", Seq: 2, Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"zed"}}}},
		{SessionId: "s", Seq: 3, Payload: &imv1.SequencedEvent_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_MuteAll_{MuteAll: &imv1.GroupChange_MuteAll{}}}}},
	} {
		before := st.calls
		m.observe(ev)
		if m.known("s", "eve") {
			t.Fatalf("negative kept across %v", ev.Payload)
		}
		_ = isMember()
		if st.calls != before+1 {
			t.Fatalf("store not asked after %v", ev.Payload)
		}
	}
	// An event of another session keeps it; negativeTTL ends it.
	m.observe(&imv1.SequencedEvent{SessionId: "other", Seq: 1, Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"eve"}}}})
	if !m.known("s", "eve") {
		t.Fatal("an event of another session dropped the negative")
	}
	now = now.Add(negativeTTL)
	m.sweep()
	if m.known("s", "eve") {
		t.Fatal("negative kept past negativeTTL")
	}
	// A negative read across a membership event of any session is not
	// kept: it may predate the event.
	st.block = func() {
		m.observe(&imv1.SequencedEvent{SessionId: "s", Seq: 5, Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"zed"}}}})
	}
	_ = isMember()
	st.block = nil
	if m.known("s", "eve") {
		t.Fatal("a negative read across a membership event was kept")
	}
	// A user added while the store still says no is not refused for
	// negativeTTL: the add drops the answer, and the event decides.
	st.members[mkey{"s", "eve"}] = store.CurrentMember
	m.observe(&imv1.SequencedEvent{SessionId: "s", Seq: 9, Payload: &imv1.SequencedEvent_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"eve"}}}})
	if !isMember() {
		t.Fatal("an added member is refused by a stale negative")
	}
}

// TestClientAddr: which address a request counts against.
func TestClientAddr(t *testing.T) {
	l := &connLimits{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	for _, c := range []struct {
		remote, xff, want string
		proxied           bool
	}{
		{"192.0.2.1:5000", "", "192.0.2.1", false},
		{"192.0.2.1:5000", "203.0.113.9", "192.0.2.1", false}, // untrusted socket: header ignored
		{"10.1.2.3:5000", "", "10.1.2.3", true},
		{"10.1.2.3:5000", "203.0.113.9", "203.0.113.9", true},
		{"10.1.2.3:5000", "1.1.1.1, 203.0.113.9, 10.9.9.9", "203.0.113.9", true}, // right-most untrusted
		{"10.1.2.3:5000", "garbage, 203.0.113.9", "203.0.113.9", true},
		{"10.1.2.3:5000", "203.0.113.9, garbage", "10.1.2.3", true},
		{"10.1.2.3:5000", "10.4.4.4, 10.5.5.5", "10.4.4.4", true}, // all trusted: the left-most
		{"[::1]:5000", "[2001:db8::1]:443", "2001:db8::1", true},
		{"[::ffff:10.1.2.3]:5000", "203.0.113.9", "203.0.113.9", true},
	} {
		r := &http.Request{RemoteAddr: c.remote, Header: http.Header{}}
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		got, proxied := l.clientAddr(r)
		if got.String() != c.want || proxied != c.proxied {
			t.Errorf("%s XFF %q: %s proxied %v, want %s %v", c.remote, c.xff, got, proxied, c.want, c.proxied)
		}
	}
}

// TestReadProxyHeader: the PROXY protocol headers read from a trusted
// proxy, versions 1 and 2.
func TestReadProxyHeader(t *testing.T) {
	v2 := func(cmd, fam byte, body ...byte) string {
		b := append([]byte("\r\n\r\n\x00\r\nQUIT\n"), cmd, fam, byte(len(body)>>8), byte(len(body)))
		return string(append(b, body...))
	}
	six := append(append(netip.MustParseAddr("2001:db8::7").AsSlice(), make([]byte, 16)...), 0, 1, 0, 2)
	for _, c := range []struct {
		name, in, want, rest string
		err                  bool
	}{
		{"v1 tcp4", "PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\nGET", "203.0.113.7", "GET", false},
		{"v1 tcp6", "PROXY TCP6 2001:db8::7 2001:db8::1 5555 80\r\nGET", "2001:db8::7", "GET", false},
		{"v1 unknown", "PROXY UNKNOWN\r\nGET", "invalid IP", "GET", false},
		{"v1 family mismatch", "PROXY TCP4 2001:db8::7 10.0.0.1 5555 80\r\n", "", "", true},
		{"v1 bad port", "PROXY TCP4 203.0.113.7 10.0.0.1 99999 80\r\n", "", "", true},
		{"v1 no CRLF", "PROXY TCP4 203.0.113.7 10.0.0.1 5555 80" + strings.Repeat(" ", 100), "", "", true},
		{"none", "GET / HTTP/1.1\r\n\r\n", "", "", true},
		{"v2 tcp4", v2(0x21, 0x11, 203, 0, 113, 7, 10, 0, 0, 1, 0, 1, 0, 2) + "GET", "203.0.113.7", "GET", false},
		{"v2 tcp6 with a TLV", v2(0x21, 0x21, append(six, 0x04, 0, 1, 'x')...) + "GET", "2001:db8::7", "GET", false},
		{"v2 local", v2(0x20, 0x00) + "GET", "invalid IP", "GET", false},
		{"v2 cut short", v2(0x21, 0x11, 203, 0, 113), "", "", true},
		{"v2 bad version", "\r\n\r\n\x00\r\nQUIT\n\x11\x11\x00\x00", "", "", true},
	} {
		br := bufio.NewReader(strings.NewReader(c.in))
		a, err := readProxyHeader(br)
		if (err != nil) != c.err {
			t.Errorf("%s: err %v, want error %v", c.name, err, c.err)
			continue
		}
		if c.err {
			continue
		}
		rest, _ := io.ReadAll(br)
		if a.String() != c.want || string(rest) != c.rest {
			t.Errorf("%s: %s, rest %q; want %s, rest %q", c.name, a, rest, c.want, c.rest)
		}
	}
}
