package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestWriteLoopFramesWholeInOrder: the SDK's write loop coalesces what is
// queued into one write(2) per wake-up; a gateway stand-in (a plain
// WebSocket server, not the gateway) must still read every frame whole and
// in queue order, across the batch bound.
func TestWriteLoopFramesWholeInOrder(t *testing.T) {
	sizes := []int{1, 100, 4095, 4096, 4097, 70 << 10, 3, maxBatchBytes, 200}
	var frames [][]byte
	for i := range 300 {
		frames = append(frames, []byte(fmt.Sprintf("%06d:%s", i, strings.Repeat(string(rune('a'+i%26)), sizes[i%len(sizes)]))))
	}
	cases := []struct {
		name string
		hc   *http.Client
		held bool
	}{
		{"default client", http.DefaultClient, true},
		{"own transport", &http.Client{Transport: &http.Transport{}}, true},
		{"foreign round tripper", &http.Client{Transport: roundTripper{http.DefaultTransport}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan []byte, len(frames))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ws, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				defer ws.CloseNow()
				ws.SetReadLimit(1 << 20)
				ctx := context.Background()
				if err := ws.Write(ctx, websocket.MessageText, []byte(`{"op":"hello","conn_id":"c1","heartbeat_ms":60000}`)); err != nil {
					return
				}
				for {
					_, b, err := ws.Read(ctx)
					if err != nil {
						close(got)
						return
					}
					got <- b
				}
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := dialConn(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), "tok", tc.hc, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if (c.nc != nil) != tc.held {
				t.Fatalf("coalescing conn = %v, want one: %v", c.nc, tc.held)
			}
			ran := make(chan error, 1)
			go func() { ran <- c.run(func(serverFrame) {}) }()
			go func() {
				for i, f := range frames {
					c.out <- f
					if i%5 == 0 {
						time.Sleep(time.Millisecond)
					}
				}
			}()
			for i, want := range frames {
				var b []byte
				select {
				case b = <-got:
				case <-ctx.Done():
					t.Fatalf("frame %d: %v", i, ctx.Err())
				}
				if !bytes.Equal(b, want) {
					t.Fatalf("frame %d: got %d bytes %.20q, want %d bytes %.20q", i, len(b), b, len(want), want)
				}
			}
			c.close()
			<-ran
		})
	}
}

type roundTripper struct{ http.RoundTripper }
