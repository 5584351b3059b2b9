package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
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
				c.out <- outFrame{b: f}
			}
		}},
		{"queued while the loop writes", func(c *conn) {
			for i, f := range frames {
				c.out <- outFrame{b: f}
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
					out: make(chan outFrame, len(frames))}
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
					case f := <-c.out:
						if err := c.writeBatch(nil, f.b); err != nil {
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

// countWrites is an in-process wrapper of the server's socket, for this
// unit test only: it counts the write(2)s the connection makes.
type countWrites struct {
	net.Conn
	n atomic.Int64
}

func (c *countWrites) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// TestReceiptsRideWithTheNextWrite: a receipt frame offered to a
// connection waits for the connection's next write and goes out in it,
// after the frames of that write; with nothing else to write it goes out
// alone once receiptDelay has passed. A lazy frame (the sending
// connection's echo of its own message) waits the same way but keeps its
// place in the queue: it goes out before the frames queued after it.
func TestReceiptsRideWithTheNextWrite(t *testing.T) {
	type step struct {
		lazy  []string      // offered with offerLazy
		echo  []string      // then queued as lazy frames
		wait  time.Duration // then waited for (less than echoDelay)
		frame string        // then queued with enqueue ("" = none)
	}
	cases := []struct {
		name       string
		steps      []step
		want       []string // frames the client reads, in order
		wantWrites int64
	}{
		{"a receipt goes out with the next event", []step{{lazy: []string{"r1"}, frame: "e1"}}, []string{"e1", "r1"}, 1},
		{"receipts in order, with the next event", []step{{lazy: []string{"r1", "r2", "r3"}, frame: "e1"}}, []string{"e1", "r1", "r2", "r3"}, 1},
		{"a receipt alone goes out by itself", []step{{lazy: []string{"r1"}}}, []string{"r1"}, 1},
		{"each write takes what waits", []step{{lazy: []string{"r1"}, frame: "e1"}, {lazy: []string{"r2"}, frame: "e2"}}, []string{"e1", "r1", "e2", "r2"}, 2},
		{"an echo waits for the next frame and goes out before it", []step{{echo: []string{"m1"}, wait: echoDelay / 3, frame: "e2"}}, []string{"m1", "e2"}, 1},
		{"echoes keep their order", []step{{echo: []string{"m1", "m2", "m3"}, wait: echoDelay / 3, frame: "e4"}}, []string{"m1", "m2", "m3", "e4"}, 1},
		{"an echo alone goes out by itself", []step{{echo: []string{"m1"}}}, []string{"m1"}, 1},
		{"echoes, then the frame, then the receipts", []step{{lazy: []string{"r1"}, echo: []string{"m1"}, frame: "e2"}}, []string{"m1", "e2", "r1"}, 1},
		{"each write takes the echoes before it", []step{{echo: []string{"m1"}, frame: "e2"}, {echo: []string{"m3"}}}, []string{"m1", "e2", "m3"}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			type server struct {
				c  *conn
				cw *countWrites
			}
			ready := make(chan server, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hj := &coalescingHijacker{ResponseWriter: w}
				ws, err := websocket.Accept(hj, r, nil)
				if err != nil {
					t.Error(err)
					return
				}
				cw := &countWrites{Conn: hj.nc.Conn}
				hj.nc.Conn = cw
				c := &conn{api: &api{cfg: Config{WriteTimeout: 10 * time.Second, Heartbeat: time.Hour, IdleTimeout: time.Hour}},
					ws: ws, nc: hj.nc, out: make(chan outFrame, 16), closing: make(chan struct{}), lazyWake: make(chan struct{}, 1)}
				c.touch()
				go func() {
					for {
						if _, _, err := ws.Read(context.Background()); err != nil {
							return
						}
					}
				}()
				ready <- server{c, cw}
				c.writeLoop()
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			s := <-ready
			defer close(s.c.closing)
			var got []string
			for _, st := range tc.steps {
				// The write loop is idle: nothing is queued until the
				// step's frames are.
				for _, l := range st.lazy {
					if !s.c.offerLazy([]byte(l)) {
						t.Fatalf("offerLazy(%s) refused", l)
					}
				}
				n := len(st.lazy) + len(st.echo)
				for _, m := range st.echo {
					if !s.c.enqueueFrame(outFrame{b: []byte(m), lazy: true}) {
						t.Fatalf("enqueueFrame(%s) refused", m)
					}
				}
				time.Sleep(st.wait)
				if st.frame != "" {
					s.c.enqueue([]byte(st.frame))
					n++
				}
				for range n {
					_, b, err := ws.Read(ctx)
					if err != nil {
						t.Fatalf("read after %q: %v", got, err)
					}
					got = append(got, string(b))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("frames %q, want %q", got, tc.want)
			}
			if n := s.cw.n.Load(); n != tc.wantWrites {
				t.Fatalf("%d writes, want %d", n, tc.wantWrites)
			}
		})
	}
}
