package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestHostileInput is the hostile-input campaign against a running
// gateway (with the sequencer, persister and pusher as processes): each
// case sends something a broken or malicious client would and expects a
// specific error code; after every case the gateway still serves a fresh
// client and the victim's open connection, and at the end everything the
// victim and the flooder were acknowledged is in the session, with the
// seq of its ACK.
func TestHostileInput(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(map[string]string{
		"GATEWAY_MAX_FRAME_BYTES": "8192", "GATEWAY_MAX_BODY_BYTES": "1024", "GATEWAY_MAX_MEMBERS": "10",
		"GATEWAY_RATE_PER_USER": "5", "GATEWAY_RATE_BURST": "10",
	})
	victim, mallory := user("victim"), user("mallory")
	v := p.connect(gw, victim, "phone")
	sid, createSeq := createGroup(v, user("friend"))
	p.waitStored(sid, createSeq)

	// accepted is every ok ACK of the campaign: client_msg_id → where.
	type at struct {
		session string
		seq     int64
	}
	var mu sync.Mutex
	accepted := map[string]at{}
	victimSends := func(t *testing.T, n int) {
		for range n {
			id := newID()
			v.t = t
			v.send(sendFrame(sid, id, "still here"))
			a := v.mustAckOK(id)
			mu.Lock()
			accepted[id] = at{sid, a.Seq}
			mu.Unlock()
		}
	}
	victimSends(t, 3)

	// healthy: a new client connects and is answered, and the victim's
	// connection (open since the start) still takes a send.
	healthy := func(t *testing.T) {
		t.Helper()
		c := p.connect(gw, user("probe"), "phone")
		c.send(map[string]any{"op": "ping", "req_id": "alive"})
		c.expect("pong", func(f frame) bool { return f.Op == wire.OpPong && f.ReqID == "alive" })
		victimSends(t, 1)
	}

	t.Run("frames", func(t *testing.T) {
		p.t = t
		// A user of its own: the sends and syncs below would eat into
		// mallory's rate limit, which the later cases need.
		trickster := user("trickster")
		m := p.connect(gw, trickster, "phone")
		// Two sessions of the sender's own: a frame naming both must reach
		// neither (encoding/json used to send it to the last one named).
		own1, _ := createGroup(m, user("pal"))
		own2, own2Seq := createGroup(m, user("pal"))
		big := strings.Repeat("x", 9000)
		const limitText = "limit must be 1-200 (absent or 0: the default, 50)"
		cases := []struct {
			name, frame, want string
		}{
			{"not JSON", `{"op":`, "bad_frame"},
			{"JSON array", `[1,2,3]`, "bad_frame"},
			{"two values", `{"op":"ping"} {"op":"ping"}`, "bad_frame"},
			{"unknown op", `{"op":"launch_missiles","client_msg_id":"h1"}`, "unknown_type"},
			{"unknown message type", `{"op":"send","client_msg_id":"h2","session_id":"` + sid + `","type":"video","body":"x"}`, "unknown_type"},
			{"missing client_msg_id", `{"op":"send","session_id":"` + sid + `","type":"text","body":"x"}`, "missing_field"},
			{"missing session_id", `{"op":"send","client_msg_id":"h3","type":"text","body":"x"}`, "missing_field"},
			{"missing body", `{"op":"send","client_msg_id":"h4","session_id":"` + sid + `","type":"text"}`, "missing_field"},
			{"body over the body limit", `{"op":"send","client_msg_id":"h7","session_id":"` + sid + `","type":"text","body":"` + strings.Repeat("b", 1100) + `"}`, "too_large"},
			{"frame over the frame limit", `{"op":"send","client_msg_id":"h8","session_id":"` + sid + `","type":"text","body":"` + big + `"}`, "frame_too_large"},
			{"too many members", `{"op":"create_session","client_msg_id":"h9","kind":"group","member_user_ids":["a","b","c","d","e","f","g","h","i","j","k","l"]}`, "too_large"},
			{"custom body that is not an object", `{"op":"send","client_msg_id":"h10","session_id":"` + sid + `","type":"custom","body":[1]}`, "invalid_field"},
			{"op twice", `{"op":"ping","op":"sync","session_id":"` + own1 + `"}`, "ambiguous_json"},
			{"session_id twice", `{"op":"send","client_msg_id":"h11","session_id":"` + own1 + `","session_id":"` + own2 + `","type":"text","body":"x"}`, "ambiguous_json"},
			{"session_id twice, once escaped", `{"op":"send","client_msg_id":"h12","session_id":"` + own1 + `","\u0073ession_id":"` + own2 + `","type":"text","body":"x"}`, "ambiguous_json"},
			{"op and Op", `{"op":"ping","Op":"sync","session_id":"` + own1 + `"}`, "ambiguous_json"},
			{"session_id and Session_ID", `{"op":"send","client_msg_id":"h13","session_id":"` + own1 + `","Session_ID":"` + own2 + `","type":"text","body":"x"}`, "ambiguous_json"},
			{"a key twice inside a custom body", `{"op":"send","client_msg_id":"h14","session_id":"` + own1 + `","type":"custom","body":{"url":"a","url":"b"}}`, "ambiguous_json"},
			{"seq twice in a cursor", `{"op":"delivered","cursors":[{"session_id":"` + own1 + `","seq":1,"seq":99}]}`, "ambiguous_json"},
			{"lone surrogate in the body", `{"op":"send","client_msg_id":"h15","session_id":"` + own1 + `","type":"text","body":"\ud800"}`, "ambiguous_json"},
			{"sync limit over 200", `{"op":"sync","session_id":"` + own1 + `","limit":201}`, "invalid_field"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				m.t = t
				m.sendRaw([]byte(c.frame))
				e := m.expect("error "+c.want, func(f frame) bool { return f.Op == wire.OpError })
				if e.Error.Name != c.want || e.Error.Retryable {
					t.Fatalf("frame %.60q: error %+v, want %s, not retryable", c.frame, e.Error, c.want)
				}
				if c.want == "invalid_field" && strings.Contains(c.frame, `"limit"`) && e.Error.Message != limitText {
					t.Fatalf("limit error %q, want %q (docs/protocol.md)", e.Error.Message, limitText)
				}
			})
		}
		tok := p.token(trickster, "cli", time.Hour)
		for _, c := range []struct {
			name, method, path, body string
			status                   int
			want                     string
		}{
			{"invalid UTF-8 in the body", "POST", "/v1/send", "{\"client_msg_id\":\"h5\",\"session_id\":\"" + own1 + "\",\"type\":\"text\",\"body\":\"\xff\xfe\"}", 400, "invalid_utf8"},
			{"invalid UTF-8 in session_id", "POST", "/v1/send", "{\"client_msg_id\":\"h6\",\"session_id\":\"s\xc3\x28\",\"type\":\"text\",\"body\":\"x\"}", 400, "invalid_utf8"},
			{"op twice", "POST", "/v1/sync", `{"op":"sync","op":"send","session_id":"` + own1 + `"}`, 400, "ambiguous_json"},
			{"session_id twice", "POST", "/v1/send", `{"client_msg_id":"h16","session_id":"` + own1 + `","session_id":"` + own2 + `","type":"text","body":"x"}`, 400, "ambiguous_json"},
			{"session_id and SESSION_ID", "POST", "/v1/send", `{"client_msg_id":"h17","session_id":"` + own1 + `","SESSION_ID":"` + own2 + `","type":"text","body":"x"}`, 400, "ambiguous_json"},
			{"lone surrogate", "POST", "/v1/send", `{"client_msg_id":"h18","session_id":"` + own1 + `","type":"text","body":"\udfff"}`, 400, "ambiguous_json"},
			{"sync limit over 200", "GET", "/v1/sessions/" + own1 + "/messages?limit=201", "", 400, "invalid_field"},
			{"sync limit over 200 in a body", "POST", "/v1/sync", `{"session_id":"` + own1 + `","limit":500}`, 400, "invalid_field"},
		} {
			t.Run("http "+c.name, func(t *testing.T) {
				code, f := httpCall(t, gw, tok, c.method, c.path, c.body)
				if code != c.status || f.Error.Name != c.want || f.Error.Retryable {
					t.Fatalf("%s %s %.60q: %d %+v, want %d %s", c.method, c.path, c.body, code, f.Error, c.status, c.want)
				}
				if c.want == "invalid_field" && f.Error.Message != limitText {
					t.Fatalf("limit error %q, want %q (docs/protocol.md)", f.Error.Message, limitText)
				}
			})
		}
		t.Run("nothing of the refused frames reached a session", func(t *testing.T) {
			m.t = t
			id := newID()
			m.send(sendFrame(own2, id, "after the refused ones"))
			last := m.mustAckOK(id).Seq
			p.waitStored(own2, last)
			for _, s := range []string{own1, own2} {
				code, f := httpCall(t, gw, tok, "GET", "/v1/sessions/"+s+"/messages?after_seq=0&limit=200", "")
				if code != http.StatusOK {
					t.Fatalf("sync %s: %d %+v", s, code, f.Error)
				}
				for _, msg := range f.Messages {
					if msg.Kind == wire.KindMessage && msg.ClientMsgID != id {
						t.Fatalf("session %s holds %+v from a refused frame", s, msg)
					}
				}
			}
			if last != own2Seq+1 {
				t.Fatalf("the send after the refused frames got seq %d in %s, want %d: something else was sequenced there", last, own2, own2Seq+1)
			}
		})
		t.Run("binary frame", func(t *testing.T) {
			m.t = t
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := m.ws.Write(ctx, websocket.MessageBinary, []byte{0, 1, 2}); err != nil {
				t.Fatal(err)
			}
			if e := m.expect("error bad_frame", func(f frame) bool { return f.Op == wire.OpError }); e.Error.Name != "bad_frame" {
				t.Fatalf("binary frame: %+v, want bad_frame", e.Error)
			}
		})
		m.t = t
		m.send(map[string]any{"op": "ping", "req_id": "after-frames"})
		m.expect("pong", func(f frame) bool { return f.Op == wire.OpPong && f.ReqID == "after-frames" })
		healthy(t)
	})

	t.Run("endless frame closes the connection with 1009", func(t *testing.T) {
		p.t = t
		m := p.connect(gw, mallory, "laptop")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// 16 times the frame limit is where the gateway stops reading.
		_ = m.ws.Write(ctx, websocket.MessageText, []byte(strings.Repeat("z", 17*8192)))
		select {
		case <-m.done:
		case <-ctx.Done():
			t.Fatal("connection still open after an endless frame")
		}
		var ce websocket.CloseError
		if !errors.As(m.closeErr(), &ce) || ce.Code != websocket.StatusMessageTooBig || ce.Reason != "frame_too_large" {
			t.Fatalf("close %v, want 1009 frame_too_large (docs/protocol.md)", m.closeErr())
		}
		healthy(t)
	})

	// RFC 6455 (8.1): a text frame that is not UTF-8 fails the connection
	// with 1007. The frame is a real text frame (opcode 1): the WebSocket
	// library does not check what it is given to send.
	t.Run("a text frame that is not UTF-8 closes the connection with 1007", func(t *testing.T) {
		p.t = t
		m := p.connect(gw, mallory, "watch")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.send(map[string]any{"op": "ping", "req_id": "before"})
		if err := m.ws.Write(ctx, websocket.MessageText, []byte("{\"op\":\"ping\",\"req_id\":\"\xc3\x28\"}")); err != nil {
			t.Fatal(err)
		}
		m.expect("pong of the frame before", func(f frame) bool { return f.Op == wire.OpPong && f.ReqID == "before" })
		select {
		case <-m.done:
		case <-ctx.Done():
			t.Fatal("connection still open after a text frame that is not UTF-8")
		}
		var ce websocket.CloseError
		if !errors.As(m.closeErr(), &ce) || ce.Code != websocket.StatusInvalidFramePayloadData || ce.Reason != "invalid_utf8" {
			t.Fatalf("close %v, want 1007 invalid_utf8", m.closeErr())
		}
		healthy(t)
	})

	t.Run("a user not in the session can neither read nor write it", func(t *testing.T) {
		p.t = t
		m := p.connect(gw, mallory, "tablet")
		last := createSeq
		for _, op := range []map[string]any{
			{"op": "send", "client_msg_id": newID(), "session_id": sid, "type": "text", "body": "let me in"},
			{"op": "edit", "client_msg_id": newID(), "session_id": sid, "target_seq": last, "type": "text", "body": "x"},
			{"op": "recall", "client_msg_id": newID(), "session_id": sid, "target_seq": last},
			{"op": "members", "client_msg_id": newID(), "session_id": sid, "action": "add", "user_ids": []string{mallory}},
			{"op": "sync", "req_id": "q1", "session_id": sid},
			{"op": "read", "req_id": "q2", "session_id": sid, "seq": last},
		} {
			t.Run(op["op"].(string), func(t *testing.T) {
				m.t = t
				m.send(op)
				key, _ := op["client_msg_id"].(string)
				if key == "" {
					key = op["req_id"].(string)
				}
				if e := m.errorOf(key); e.Error.Name != "not_a_member" || e.Error.Retryable {
					t.Fatalf("%v by a non-member = %+v, want not_a_member", op["op"], e.Error)
				}
			})
		}
		tok := p.token(mallory, "cli", time.Hour)
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/send", `{"client_msg_id":"` + newID() + `","session_id":"` + sid + `","type":"text","body":"x"}`},
			{"GET", "/v1/sessions/" + sid + "/messages?after_seq=0", ""},
		} {
			t.Run("http "+c.method+" "+strings.Split(c.path, "?")[0], func(t *testing.T) {
				code, f := httpCall(t, gw, tok, c.method, c.path, c.body)
				if code != http.StatusForbidden || f.Error.Name != "not_a_member" {
					t.Fatalf("%d %+v, want 403 not_a_member", code, f)
				}
			})
		}
		// And what mallory's events could reveal: a sync of her own
		// sessions lists none of the victim's.
		code, f := httpCall(t, gw, tok, "GET", "/v1/changes", "")
		for _, s := range f.Sessions {
			if s.SessionID == sid {
				t.Fatalf("changes of a non-member lists the session: %d %+v", code, f)
			}
		}
		healthy(t)
	})

	t.Run("tokens", func(t *testing.T) {
		p.t = t
		claims := func(sub string, exp time.Duration) jwt.MapClaims {
			c := jwt.MapClaims{"sub": sub, "device_id": "d1", "iat": time.Now().Unix()}
			if exp != 0 {
				c["exp"] = time.Now().Add(exp).Unix()
			}
			return c
		}
		sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
			s, err := jwt.NewWithClaims(m, c).SignedString(key)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		valid := p.token(mallory, "d1", time.Hour)
		parts := strings.Split(valid, ".")
		other, _ := json.Marshal(claims(victim, time.Hour))
		tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(other) + "." + parts[2]
		cases := []struct {
			name, token, want string
		}{
			{"forged: another secret", sign(jwt.SigningMethodHS256, []byte("not-the-secret-not-the-secret-not-the"), claims(victim, time.Hour)), "unauthenticated"},
			{"forged: payload swapped, signature kept", tampered, "unauthenticated"},
			{"alg none", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims(victim, time.Hour)), "unauthenticated"},
			{"alg HS512 with the right secret", sign(jwt.SigningMethodHS512, []byte(testSecret), claims(victim, time.Hour)), "unauthenticated"},
			{"expired", sign(jwt.SigningMethodHS256, []byte(testSecret), claims(victim, -time.Minute)), "token_expired"},
			{"no expiry", sign(jwt.SigningMethodHS256, []byte(testSecret), claims(victim, 0)), "unauthenticated"},
			{"not valid yet", sign(jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{"sub": victim, "device_id": "d1",
				"exp": time.Now().Add(time.Hour).Unix(), "nbf": time.Now().Add(time.Hour).Unix()}), "unauthenticated"},
			{"user ID outside the alphabet", sign(jwt.SigningMethodHS256, []byte(testSecret), claims("bob|gw-1", time.Hour)), "unauthenticated"},
			{"oversized", strings.Repeat("a", 5000), "unauthenticated"},
		}
		for _, c := range cases {
			t.Run("ws "+c.name, func(t *testing.T) {
				_, resp, err := dial(t, gw, c.token)
				if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("dial = %v, %+v; want 401", err, resp)
				}
				var f frame
				_ = json.NewDecoder(resp.Body).Decode(&f)
				if f.Error.Name != c.want {
					t.Fatalf("error %+v, want %s", f.Error, c.want)
				}
			})
			t.Run("http "+c.name, func(t *testing.T) {
				code, f := httpCall(t, gw, c.token, "POST", "/v1/send", `{"client_msg_id":"`+newID()+`","session_id":"`+sid+`","type":"text","body":"x"}`)
				if code != http.StatusUnauthorized || f.Error.Name != c.want {
					t.Fatalf("%d %+v, want 401 %s", code, f.Error, c.want)
				}
			})
		}
		healthy(t)
	})

	t.Run("a flood past the rate limit is refused, retryable, and loses nothing accepted", func(t *testing.T) {
		p.t = t
		flooder := user("flooder")
		f := p.connect(gw, flooder, "phone")
		fsid, fseq := createGroup(f, victim)
		p.waitStored(fsid, fseq)
		var ids []string
		for range 40 {
			id := newID()
			ids = append(ids, id)
			f.send(sendFrame(fsid, id, "flood"))
		}
		got := map[string]int{}
		for _, id := range ids {
			a := f.ackOf(id)
			switch {
			case a.Op == wire.OpAck && a.Status == wire.StatusOK && a.Seq > 0:
				got["ok"]++
				mu.Lock()
				accepted[id] = at{fsid, a.Seq}
				mu.Unlock()
			case a.Op == wire.OpError && a.Error.Retryable && (a.Error.Name == "rate_limited" || a.Error.Name == "too_many_in_flight"):
				got[a.Error.Name]++
			default:
				t.Fatalf("answer to a flood send: %+v", a)
			}
		}
		if got["rate_limited"] == 0 || got["ok"] == 0 || got["ok"] > 20 {
			t.Fatalf("flood answers %v: want some ok (burst 10 + 5/s) and rate_limited for the rest", got)
		}
		healthy(t)
	})

	t.Run("a client that never reads is closed as a slow consumer", func(t *testing.T) {
		p.t = t
		// Its own gateway: the rate limit of the campaign's would make the
		// flood that fills the reader's buffers take minutes.
		// A queue of 32 frames: the sender's own connection, read by the
		// harness as fast as it can, never fills it; the stuck one does.
		g2 := p.gateway(map[string]string{"GATEWAY_CONN_QUEUE": "32", "GATEWAY_WRITE_TIMEOUT": "60s", // the queue, not the write deadline, closes it, at once
			"GATEWAY_RATE_PER_USER": "10000", "GATEWAY_RATE_BURST": "10000"})
		sender, slow := user("sender"), user("slow")
		s := p.connect(g2, sender, "phone")
		ssid, sseq := createGroup(s, slow)
		p.waitStored(ssid, sseq)
		connID := dialNeverRead(t, g2, p.token(slow, "phone", time.Hour))
		body := strings.Repeat("s", 4000)
		deadline := time.Now().Add(90 * time.Second)
		sent := 0
		for g2.g.hub.conn(connID) != nil {
			if time.Now().After(deadline) || sent > 2000 {
				t.Fatalf("a client that never reads is still connected after %d pushes of 4 KB", sent)
			}
			var window []string
			for range 16 {
				id := newID()
				window = append(window, id)
				s.send(sendFrame(ssid, id, body))
			}
			for _, id := range window {
				s.mustAckOK(id)
			}
			sent += len(window)
		}
		t.Logf("closed after %d pushes of 4 KB", sent)
		var m dto.Metric
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_ = g2.g.m.closes.WithLabelValues("slow_consumer").Write(&m)
			if m.GetCounter().GetValue() == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("slow_consumer (4008) closes = %v, want 1", m.GetCounter().GetValue())
			}
		}
		// The sender's own connection was never held up by the stuck one.
		id := newID()
		s.send(sendFrame(ssid, id, "after the slow one"))
		s.mustAckOK(id)
		healthy(t)
	})

	t.Run("slowloris connects are cut at the header timeout and do not starve others", func(t *testing.T) {
		p.t = t
		const n = 20
		type result struct {
			err error
			in  time.Duration
		}
		res := make(chan result, n)
		var conns []net.Conn
		for range n {
			c, err := net.Dial("tcp", gw.addr)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := io.WriteString(c, "GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		start := time.Now()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() { // one header byte a second, never the end of the head
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					case <-time.After(time.Second):
					}
					if _, err := fmt.Fprintf(c, "X-%d-%d: y\r\n", i, j); err != nil {
						return
					}
				}
			})
			go func() {
				_ = c.SetReadDeadline(time.Now().Add(40 * time.Second))
				_, err := io.ReadAll(c)
				res <- result{err, time.Since(start)}
			}()
		}
		// Meanwhile the gateway serves everyone else.
		healthy(t)
		for range n {
			r := <-res
			var ne net.Error
			if errors.As(r.err, &ne) && ne.Timeout() {
				t.Fatalf("a slowloris connection was still open after %s", r.in)
			}
		}
		close(stop)
		wg.Wait()
		healthy(t)
	})

	// Nothing accepted was lost: every ok ACK's message is in its session
	// with the seq the ACK named.
	t.Run("everything acknowledged is in the store with the seq of its ACK", func(t *testing.T) {
		p.t = t
		mu.Lock()
		want := make(map[string]at, len(accepted))
		last := map[string]int64{}
		for k, a := range accepted {
			want[k] = a
			last[a.session] = max(last[a.session], a.seq)
		}
		mu.Unlock()
		if len(want) < 10 || len(last) != 2 {
			t.Fatalf("only %d acknowledged messages in %d sessions to check", len(want), len(last))
		}
		tok := p.token(victim, "audit", time.Hour)
		found := map[string]int64{}
		for s, seq := range last {
			p.waitStored(s, seq)
			for after := int64(0); ; {
				code, f := httpCall(t, gw, tok, "GET", fmt.Sprintf("/v1/sessions/%s/messages?after_seq=%d&limit=200", s, after), "")
				if code != http.StatusOK {
					t.Fatalf("sync %s: %d %+v", s, code, f.Error)
				}
				for _, m := range f.Messages {
					found[m.ClientMsgID] = m.Seq
					after = m.Seq
				}
				if !f.HasMore || len(f.Messages) == 0 {
					break
				}
			}
		}
		for id, a := range want {
			if found[id] != a.seq {
				t.Errorf("acked %s/%s with seq %d; the session holds seq %d", a.session, id, a.seq, found[id])
			}
		}
	})
}

func httpCall(t *testing.T, gw *testGW, token, method, path, body string) (int, frame) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+gw.addr+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, f
}

// dialNeverRead connects with a tiny receive buffer, reads the hello and
// then never reads again; it returns the connection's ID.
func dialNeverRead(t *testing.T, gw *testGW, token string) string {
	t.Helper()
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{"Authorization": []string{"Bearer " + token}}
	ws, _, err := websocket.Dial(ctx, "ws://"+gw.addr+"/v1/ws", &websocket.DialOptions{HTTPHeader: h, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	_, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var hello frame
	if err := json.Unmarshal(b, &hello); err != nil || hello.ConnID == "" {
		t.Fatalf("hello %s: %v", b, err)
	}
	for gw.g.hub.conn(hello.ConnID) == nil && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	return hello.ConnID
}
