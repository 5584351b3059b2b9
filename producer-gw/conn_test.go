package main

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

// TestWriteBatchFramesWholeInOrder: frames queued faster than the socket
// drains go out in coalesced writes, and the client still reads every
// frame whole and in queue order, across the 512 B write buffer and the
// maxBatchBytes bound, while pings cross the batches.
func TestWriteBatchFramesWholeInOrder(t *testing.T) {
	sizes := []int{1, 2, 100, 511, 512, 513, 4096, 70 << 10, 3, maxBatchBytes, 200}
	var frames [][]byte
	for i := range 400 {
		n := sizes[i%len(sizes)]
		frames = append(frames, []byte(fmt.Sprintf("%06d:%s", i, strings.Repeat(string(rune('a'+i%26)), n))))
	}
	cases := []struct {
		name    string
		enqueue func(c *conn) // how the frames reach the queue
	}{
		{"all queued before the loop wakes", func(c *conn) {
			for _, f := range frames {
				c.out <- f
			}
		}},
		{"queued while the loop writes", func(c *conn) {
			for i, f := range frames {
				c.out <- f
				if i%7 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			stop := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hj := &coalescingHijacker{ResponseWriter: w}
				ws, err := websocket.Accept(hj, r, nil)
				if err != nil {
					done <- err
					return
				}
				if hj.nc == nil {
					done <- fmt.Errorf("the hijacked socket was not wrapped")
					return
				}
				ws.SetReadLimit(1 << 20)
				c := &conn{api: &api{cfg: Config{WriteTimeout: 10 * time.Second}}, ws: ws, nc: hj.nc,
					out: make(chan []byte, len(frames))}
				readDone := make(chan struct{})
				go func() { // answers the client's pings
					defer close(readDone)
					for {
						if _, _, err := ws.Read(context.Background()); err != nil {
							return
						}
					}
				}()
				go tc.enqueue(c)
				for {
					select {
					case b := <-c.out:
						if err := c.writeBatch(b); err != nil {
							done <- err
							return
						}
						continue
					case <-stop:
					}
					break
				}
				done <- nil
				_ = ws.CloseNow()
				<-readDone
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			ws.SetReadLimit(1 << 20)
			pingErr := make(chan error, 1)
			got := make(chan []byte, len(frames))
			go func() {
				for {
					_, b, err := ws.Read(ctx)
					if err != nil {
						close(got)
						return
					}
					got <- b
				}
			}()
			go func() {
				var err error
				for range 5 {
					if err = ws.Ping(ctx); err != nil {
						break
					}
				}
				pingErr <- err
			}()
			for i, want := range frames {
				b, ok := <-got
				if !ok {
					t.Fatalf("connection ended after %d of %d frames", i, len(frames))
				}
				if !bytes.Equal(b, want) {
					t.Fatalf("frame %d: got %d bytes %.20q, want %d bytes %.20q", i, len(b), b, len(want), want)
				}
			}
			if err := <-pingErr; err != nil {
				t.Fatalf("ping across batches: %v", err)
			}
			close(stop)
			if err := <-done; err != nil {
				t.Fatalf("writeBatch: %v", err)
			}
		})
	}
}
