package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// frame encodes one WebSocket frame; a non-nil key masks it.
func frame(fin bool, op byte, payload []byte, key []byte) []byte {
	var b bytes.Buffer
	h0 := op
	if fin {
		h0 |= 0x80
	}
	b.WriteByte(h0)
	m := byte(0)
	if key != nil {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b.WriteByte(m | byte(n))
	case n <= 0xffff:
		b.WriteByte(m | 126)
		_ = binary.Write(&b, binary.BigEndian, uint16(n))
	default:
		b.WriteByte(m | 127)
		_ = binary.Write(&b, binary.BigEndian, uint64(n))
	}
	if key != nil {
		b.Write(key)
		for i, c := range payload {
			b.WriteByte(c ^ key[i%4])
		}
	} else {
		b.Write(payload)
	}
	return b.Bytes()
}

func TestPumpReadsMessagesAndForwardsBytes(t *testing.T) {
	key := []byte{1, 2, 3, 4}
	long := strings.Repeat("y", 70000)
	cases := []struct {
		name   string
		stream [][]byte
		want   []string
	}{
		{"unmasked text", [][]byte{frame(true, 1, []byte(`{"op":"ack"}`), nil)}, []string{`{"op":"ack"}`}},
		{"masked text", [][]byte{frame(true, 1, []byte(`{"op":"send"}`), key)}, []string{`{"op":"send"}`}},
		{"16-bit length", [][]byte{frame(true, 1, []byte(strings.Repeat("x", 300)), key)}, []string{strings.Repeat("x", 300)}},
		{"64-bit length", [][]byte{frame(true, 1, []byte(long), nil)}, []string{long}},
		{"fragments with a ping between", [][]byte{
			frame(false, 1, []byte("ab"), key), frame(true, 9, []byte("p"), key), frame(false, 0, []byte("cd"), key), frame(true, 0, []byte("e"), key),
		}, []string{"abcde"}},
		{"binary and pong are not messages", [][]byte{frame(true, 2, []byte{0, 1}, nil), frame(true, 10, nil, nil), frame(true, 1, []byte("t"), nil)}, []string{"t"}},
		{"stray continuation is ignored", [][]byte{frame(true, 0, []byte("zz"), nil), frame(true, 1, []byte("ok"), nil)}, []string{"ok"}},
		{"over the read bound: forwarded, not read", [][]byte{frame(true, 1, make([]byte, maxMessage+1), nil), frame(true, 1, []byte("next"), nil)}, []string{"next"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := bytes.Join(c.stream, nil)
			var out bytes.Buffer
			var got []string
			err := pump(&out, bufio.NewReader(bytes.NewReader(in)), func(m []byte) { got = append(got, string(m)) })
			if !errors.Is(err, io.EOF) {
				t.Fatalf("pump = %v, want io.EOF at the end of the stream", err)
			}
			if !bytes.Equal(out.Bytes(), in) {
				t.Fatalf("forwarded %d bytes, want the %d read, unchanged", out.Len(), len(in))
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Fatalf("messages %.80q, want %.80q", got, c.want)
			}
		})
	}
}

func TestPumpRejectsHugeFrames(t *testing.T) {
	var h bytes.Buffer
	h.Write([]byte{0x81, 127})
	_ = binary.Write(&h, binary.BigEndian, uint64(1<<40))
	err := pump(io.Discard, bufio.NewReader(&h), func([]byte) {})
	if !errors.Is(err, errFrameTooLarge) {
		t.Fatalf("pump = %v, want errFrameTooLarge", err)
	}
}

// FuzzFrameReader feeds arbitrary bytes (the proxy reads them off the
// network) to the frame reader: it must not panic, and what it forwards is
// exactly a prefix of what it read.
func FuzzFrameReader(f *testing.F) {
	f.Add(frame(true, 1, []byte(`{"op":"ack","client_msg_id":"c","session_id":"s","status":"ok","seq":1}`), nil))
	f.Add(frame(false, 1, []byte("ab"), []byte{9, 9, 9, 9}))
	f.Add([]byte{0x81, 127, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x81, 126, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		book := newAckBook(1)
		cs := book.open(0)
		_ = pump(&out, bufio.NewReader(bytes.NewReader(data)), func(m []byte) {
			if len(m) > maxMessage {
				t.Fatalf("handed out a %d-byte message", len(m))
			}
			book.fromServer(cs, m)
			book.fromClient(cs, m)
		})
		if !bytes.HasPrefix(data, out.Bytes()) {
			t.Fatalf("forwarded bytes are not a prefix of the input")
		}
		book.close(cs)
		if n := book.InFlight(0); n != 0 {
			t.Fatalf("in flight %d after close", n)
		}
	})
}

func TestAckBook(t *testing.T) {
	msg := func(v map[string]any) []byte { b, _ := json.Marshal(v); return b }
	b := newAckBook(2)
	c0, c1 := b.open(0), b.open(1)
	b.fromClient(c0, msg(map[string]any{"op": "send", "client_msg_id": "m1", "session_id": "s"}))
	b.fromClient(c0, msg(map[string]any{"op": "send", "client_msg_id": "m2", "session_id": "s"}))
	b.fromClient(c0, msg(map[string]any{"op": "ping", "req_id": "p"}))
	b.fromClient(c1, msg(map[string]any{"op": "send", "client_msg_id": "m3", "session_id": "s"}))
	if b.InFlight(0) != 2 || b.InFlight(1) != 1 {
		t.Fatalf("in flight %d, %d; want 2, 1", b.InFlight(0), b.InFlight(1))
	}
	b.fromServer(c0, msg(map[string]any{"op": "ack", "client_msg_id": "m1", "session_id": "s", "status": "accepted"}))
	if b.InFlight(0) != 2 || len(b.Acked()) != 0 {
		t.Fatal("an accepted ACK (no seq yet) answered the command")
	}
	b.fromServer(c0, msg(map[string]any{"op": "seq_notice", "client_msg_id": "m1", "session_id": "s", "status": "ok", "seq": 5, "msg_id": "50"}))
	b.fromServer(c0, msg(map[string]any{"op": "error", "client_msg_id": "m2", "error": map[string]any{"name": "rate_limited"}}))
	b.fromServer(c1, msg(map[string]any{"op": "ack", "client_msg_id": "m3", "session_id": "s", "status": "ok", "seq": 6, "msg_id": "60"}))
	// A retry answered again, with another seq: a conflict.
	b.fromServer(c1, msg(map[string]any{"op": "ack", "client_msg_id": "m3", "session_id": "s", "status": "ok", "seq": 7, "msg_id": "60", "duplicate": true}))
	b.fromServer(c1, msg(map[string]any{"op": "event", "event": map[string]any{"client_msg_id": "m9", "session_id": "s", "seq": 9}}))
	if b.InFlight(0) != 0 || b.InFlight(1) != 0 {
		t.Fatalf("in flight %d, %d after the answers", b.InFlight(0), b.InFlight(1))
	}
	got := map[string]Acked{}
	for _, a := range b.Acked() {
		got[a.ClientMsgID] = a
	}
	if len(got) != 2 || got["m1"].Seq != 5 || got["m1"].Op != "send" || got["m1"].Conflict ||
		got["m3"].Seq != 6 || !got["m3"].Conflict || got["m3"].Acks != 2 {
		t.Fatalf("acked = %+v", got)
	}
	b.fromClient(c1, msg(map[string]any{"op": "send", "client_msg_id": "m4", "session_id": "s"}))
	b.close(c1)
	if b.InFlight(1) != 0 {
		t.Fatalf("a closed connection's commands still count as in flight: %d", b.InFlight(1))
	}
}

// TestProxy runs real WebSocket servers and a client through the proxy:
// frames pass unchanged both ways, ACKs are recorded, compression is not
// negotiated, and a proxy whose preferred gateway is down or mute uses
// the next.
func TestProxy(t *testing.T) {
	var mu sync.Mutex
	var exts []string
	echo := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			exts = append(exts, r.Header.Get("Sec-WebSocket-Extensions"))
			mu.Unlock()
			ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionContextTakeover})
			if err != nil {
				return
			}
			defer ws.CloseNow()
			ws.SetReadLimit(1 << 20)
			for {
				_, b, err := ws.Read(r.Context())
				if err != nil {
					return
				}
				var f wireFrame
				_ = json.Unmarshal(b, &f)
				ack, _ := json.Marshal(map[string]any{"op": "ack", "client_msg_id": f.ClientMsgID, "session_id": f.SessionID,
					"status": "ok", "seq": 1, "msg_id": name})
				if ws.Write(r.Context(), websocket.MessageText, ack) != nil {
					return
				}
			}
		}))
	}
	live := echo("live")
	defer live.Close()
	mute, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	downLn, _ := net.Listen("tcp", "127.0.0.1:0")
	down := downLn.Addr().String()
	downLn.Close()
	liveAddr := strings.TrimPrefix(live.URL, "http://")

	cases := []struct {
		name      string
		upstreams []string
	}{
		{"preferred gateway up", []string{liveAddr}},
		{"preferred gateway down", []string{down, liveAddr}},
		{"preferred gateway mute (SIGSTOPped)", []string{mute.Addr().String(), liveAddr}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			book := newAckBook(2)
			px, err := newProxy(book, c.upstreams, func(a string) int {
				if a == liveAddr {
					return 1
				}
				return 0
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- px.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Errorf("proxy Run = %v, want context.Canceled", err)
				}
			}()
			dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
			defer dcancel()
			ws, _, err := websocket.Dial(dctx, px.URL(), &websocket.DialOptions{CompressionMode: websocket.CompressionContextTakeover})
			if err != nil {
				t.Fatalf("dial through the proxy: %v", err)
			}
			defer ws.CloseNow()
			body := strings.Repeat("é", 40000) // long enough for a 64-bit length, multi-byte runes
			send, _ := json.Marshal(map[string]any{"op": "send", "client_msg_id": "c1", "session_id": "s1", "body": body})
			if err := ws.Write(dctx, websocket.MessageText, send); err != nil {
				t.Fatal(err)
			}
			_, b, err := ws.Read(dctx)
			if err != nil {
				t.Fatal(err)
			}
			var f wireFrame
			if json.Unmarshal(b, &f) != nil || f.Op != "ack" || f.ClientMsgID != "c1" || f.MsgID != "live" {
				t.Fatalf("answer %s", b)
			}
			acked := book.Acked()
			if len(acked) != 1 || acked[0].SessionID != "s1" || acked[0].Seq != 1 || acked[0].Op != "send" {
				t.Fatalf("acked = %+v", acked)
			}
			mu.Lock()
			last := exts[len(exts)-1]
			mu.Unlock()
			if last != "" {
				t.Fatalf("the gateway saw Sec-WebSocket-Extensions %q; the proxy must drop it", last)
			}
		})
	}
}
