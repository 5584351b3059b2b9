package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

func TestBackoffBounds(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: 2 * time.Second}
	cases := []struct {
		attempt int
		lo, hi  time.Duration
	}{
		{0, 50 * time.Millisecond, 100 * time.Millisecond},
		{1, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 400 * time.Millisecond, 800 * time.Millisecond},
		{10, time.Second, 2 * time.Second},
		{1000, time.Second, 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.lo.String(), func(t *testing.T) {
			seen := map[time.Duration]bool{}
			for range 200 {
				d := b.delay(c.attempt)
				if d < c.lo || d >= c.hi {
					t.Fatalf("attempt %d: %v not in [%v, %v)", c.attempt, d, c.lo, c.hi)
				}
				seen[d] = true
			}
			if len(seen) < 10 {
				t.Fatalf("attempt %d: only %d distinct delays: no jitter", c.attempt, len(seen))
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want []string // substrings of the error; nil: valid
	}{
		{name: "valid", opts: Options{URLs: []string{"ws://127.0.0.1:8080"}, Token: "t"}},
		{name: "http maps to ws", opts: Options{URLs: []string{"http://127.0.0.1:8080/"}, Token: "t"}},
		{name: "nothing", opts: Options{}, want: []string{"URLs", "no token"}},
		{name: "bad scheme and ranges", opts: Options{URLs: []string{"ftp://x"}, Token: "t", InFlight: -1, SyncLimit: 500, AckTimeout: -time.Second},
			want: []string{"scheme", "InFlight", "SyncLimit", "AckTimeout"}},
		{name: "backoff order", opts: Options{URLs: []string{"ws://h"}, Token: "t", MinBackoff: time.Second, MaxBackoff: time.Millisecond}, want: []string{"MaxBackoff"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.opts)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestWSURL(t *testing.T) {
	cases := map[string]string{
		"ws://127.0.0.1:8080":       "ws://127.0.0.1:8080/v1/ws",
		"http://127.0.0.1:8080/":    "ws://127.0.0.1:8080/v1/ws",
		"https://gw.example/v1/ws":  "wss://gw.example/v1/ws",
		"wss://gw.example/custom/p": "wss://gw.example/custom/p",
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) {
			got, err := wsURL(in)
			if err != nil || got != want {
				t.Fatalf("wsURL(%q) = %q, %v; want %q", in, got, err, want)
			}
		})
	}
}

func TestErrorClassifiers(t *testing.T) {
	cases := []struct {
		name           string
		err            error
		retryable, aut bool
	}{
		{"retryable server error", &ServerError{Name: "rate_limited", Retryable: true}, true, false},
		{"final server error", &ServerError{Name: "not_a_member"}, false, false},
		{"expired token frame", &ServerError{Name: "token_expired"}, false, true},
		{"401 handshake", &HandshakeError{Status: 401, Err: &ServerError{Name: "unauthenticated"}}, false, true},
		{"503 handshake", &HandshakeError{Status: 503}, true, false},
		{"lost connection", ErrConnectionLost, true, false},
		{"wrapped", errors.Join(errors.New("x"), &ServerError{Retryable: true}), true, false},
		{"closed", ErrClosed, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if IsRetryable(c.err) != c.retryable || IsAuth(c.err) != c.aut {
				t.Fatalf("IsRetryable %v IsAuth %v, want %v %v", IsRetryable(c.err), IsAuth(c.err), c.retryable, c.aut)
			}
		})
	}
}

func TestDirectSessionIDIsSymmetric(t *testing.T) {
	a, b := DirectSessionID("alice", "bob"), DirectSessionID("bob", "alice")
	if a != b || !strings.HasPrefix(a, "d-") || len(a) != 34 || a == DirectSessionID("alice", "carol") {
		t.Fatalf("DirectSessionID: %s %s", a, b)
	}
}

func TestDecodeFrame(t *testing.T) {
	cases := []struct {
		name string
		in   string
		ok   bool
	}{
		{"hello", `{"op":"hello","conn_id":"c","heartbeat_ms":15000}`, true},
		{"ok ack", `{"op":"ack","client_msg_id":"m","status":"ok","seq":3,"msg_id":"7"}`, true},
		{"accepted ack without seq", `{"op":"ack","client_msg_id":"m","status":"accepted"}`, true},
		{"ok ack without seq", `{"op":"ack","client_msg_id":"m","status":"ok"}`, false},
		{"ack without id", `{"op":"ack","status":"ok","seq":1}`, false},
		{"event", `{"op":"event","event":{"session_id":"s","seq":1,"kind":"message"}}`, true},
		{"event without seq", `{"op":"event","event":{"session_id":"s"}}`, false},
		{"error without body", `{"op":"error"}`, false},
		{"error", `{"op":"error","error":{"code":4001,"name":"not_a_member"}}`, true},
		{"result with a bad seq", `{"op":"result","messages":[{"seq":0}]}`, false},
		{"no op", `{}`, false},
		{"not json", `{"op":`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeFrame([]byte(c.in))
			if (err == nil) != c.ok {
				t.Fatalf("decodeFrame(%s) = %v, want ok=%v", c.in, err, c.ok)
			}
		})
	}
}

// FuzzDecodeFrame: any bytes from a gateway decode or fail cleanly, and
// what decodes meets the invariants the client relies on.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{
		`{"op":"event","event":{"session_id":"s","seq":1}}`, `{"op":"ack","client_msg_id":"m","status":"ok","seq":3}`,
		`{"op":"result","messages":[{"seq":2}],"has_more":true}`, `{"op":"error","error":{"code":1}}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeFrame(b)
		if err != nil {
			return
		}
		switch fr.Op {
		case "":
			t.Fatal("decoded a frame without op")
		case "event":
			if fr.Event == nil || fr.Event.Seq <= 0 || fr.Event.SessionID == "" {
				t.Fatalf("bad event decoded: %+v", fr.Event)
			}
		case "error":
			if fr.Error == nil {
				t.Fatal("error frame without body decoded")
			}
		}
	})
}

// TestResendLoopWakesWhenDue: on a live connection a command in flight
// does not make the resend loop tick; the loop scans when the command's
// ACK is overdue, and when a retryable error's backoff is over, and
// resends it then. Unit test of the sender with a connection that only
// queues frames (no socket, no gateway).
func TestResendLoopWakesWhenDue(t *testing.T) {
	const ackTimeout = 400 * time.Millisecond
	s := newSender(4, ackTimeout, backoff{min: 10 * time.Millisecond, max: 10 * time.Millisecond}, nil, &counters{})
	c := &conn{ctx: context.Background(), out: make(chan []byte, 16)}
	s.attach(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); s.resendLoop(ctx, time.Millisecond) }()
	defer func() { cancel(); <-done }()
	// sent waits until n frames were written to c, at most 5 s, and says
	// when the last came.
	sent := func(n int) time.Time {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); len(c.out) < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d frames sent after 5 s, want %d", len(c.out), n)
			}
		}
		return time.Now()
	}

	posted := time.Now()
	if _, err := s.post(ctx, &wire.ClientFrame{Op: wire.OpSend, ClientMsgID: "m-1"}); err != nil {
		t.Fatal(err)
	}
	sent(1)
	time.Sleep(20 * time.Millisecond) // the scan the post woke
	before := s.scans.Load()
	time.Sleep(100 * time.Millisecond)
	if n := s.scans.Load() - before; n > 0 {
		t.Fatalf("%d scans in 100 ms while m-1 waits for its ACK (due in %v), want none", n, ackTimeout)
	}
	if at := sent(2); at.Sub(posted) < ackTimeout {
		t.Fatalf("m-1 resent %v after its post, before its ACK was overdue (%v)", at.Sub(posted), ackTimeout)
	}
	errAt := time.Now()
	s.onFrame(serverFrame{Op: wire.OpError, ClientMsgID: "m-1", Error: &wire.ErrorBody{Code: 1, Retryable: true}})
	if at := sent(3); at.Sub(errAt) >= ackTimeout {
		t.Fatalf("m-1 resent %v after a retryable error with a 10 ms backoff, want before its ACK timeout (%v)", at.Sub(errAt), ackTimeout)
	}
}

// TestResendLoopSleepsWhenIdle: the resend loop ticks only while a
// command is in flight. An idle client (nothing posted, or everything
// answered) runs no scans; a post wakes the loop. Unit test of the sender
// alone: no connection, no gateway.
func TestResendLoopSleepsWhenIdle(t *testing.T) {
	s := newSender(4, time.Second, backoff{min: time.Millisecond, max: time.Millisecond}, nil, &counters{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); s.resendLoop(ctx, 2*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	waitScans := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); s.scans.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d scans after 5 s, want at least %d", s.scans.Load(), n)
			}
		}
	}
	// still reports whether the scan count stays put for 20 ticks.
	still := func() bool {
		n := s.scans.Load()
		time.Sleep(40 * time.Millisecond)
		return s.scans.Load() == n
	}

	waitScans(1)
	if !still() {
		t.Fatalf("idle client: %d scans, want the loop asleep after the first", s.scans.Load())
	}
	p, err := s.post(ctx, &wire.ClientFrame{Op: wire.OpSend, ClientMsgID: "m-1"})
	if err != nil {
		t.Fatal(err)
	}
	before := s.scans.Load()
	waitScans(before + 5) // woken by the post, and ticking while m-1 is in flight
	if still() {
		t.Fatal("a command in flight, yet the loop does not scan")
	}
	s.onFrame(serverFrame{Op: wire.OpAck, Status: wire.StatusOK, ClientMsgID: "m-1", SessionID: "s", Seq: 1})
	if a, err := p.Result(); err != nil || a.Seq != 1 {
		t.Fatalf("m-1 answered %+v, %v; want seq 1", a, err)
	}
	time.Sleep(10 * time.Millisecond) // the scan that finds nothing in flight
	if !still() {
		t.Fatalf("everything answered: %d scans, want the loop asleep again", s.scans.Load())
	}
}
