package wire

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordConn is an in-process stand-in for a socket, for this unit test
// only: it records each Write call, so the test sees how many write(2)s
// the CoalescingConn would have made and with what bytes.
type recordConn struct {
	net.Conn
	mu       sync.Mutex
	writes   [][]byte
	deadline []time.Time
	fail     error
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return 0, r.fail
	}
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func (r *recordConn) SetWriteDeadline(t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deadline = append(r.deadline, t)
	return nil
}

func TestCoalescingConn(t *testing.T) {
	dl := time.Unix(1e9, 0)
	cases := []struct {
		name       string
		run        func(c *CoalescingConn) error
		wantWrites []string
		wantDl     []time.Time
		wantErr    bool
	}{
		{"no hold writes through", func(c *CoalescingConn) error {
			_, _ = c.Write([]byte("a"))
			_, _ = c.Write([]byte("b"))
			return nil
		}, []string{"a", "b"}, nil, false},
		{"a hold is one write in order", func(c *CoalescingConn) error {
			c.Hold()
			for _, s := range []string{"one", "two", "", "three"} {
				_, _ = c.Write([]byte(s))
			}
			if c.Buffered() != len("onetwothree") {
				return errors.New("buffered miscounted")
			}
			return c.Release(dl)
		}, []string{"onetwothree"}, []time.Time{dl, {}}, false},
		{"an empty hold writes nothing", func(c *CoalescingConn) error {
			c.Hold()
			return c.Release(dl)
		}, nil, nil, false},
		{"release without hold", func(c *CoalescingConn) error { return c.Release(dl) }, nil, nil, false},
		{"a second hold joins the first", func(c *CoalescingConn) error {
			c.Hold()
			_, _ = c.Write([]byte("x"))
			c.Hold()
			_, _ = c.Write([]byte("y"))
			if err := c.Release(time.Time{}); err != nil {
				return err
			}
			_, _ = c.Write([]byte("z"))
			return nil
		}, []string{"xy", "z"}, nil, false},
		{"large batch stays whole", func(c *CoalescingConn) error {
			c.Hold()
			_, _ = c.Write([]byte(strings.Repeat("p", maxPooledBatch+1)))
			if err := c.Release(time.Time{}); err != nil {
				return err
			}
			c.Hold() // a fresh buffer: nothing left from the big one
			_, _ = c.Write([]byte("q"))
			return c.Release(time.Time{})
		}, []string{strings.Repeat("p", maxPooledBatch+1), "q"}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recordConn{}
			err := tc.run(NewCoalescingConn(r))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			var got []string
			for _, w := range r.writes {
				got = append(got, string(w))
			}
			if strings.Join(got, "|") != strings.Join(tc.wantWrites, "|") || len(got) != len(tc.wantWrites) {
				t.Fatalf("writes = %q, want %q", got, tc.wantWrites)
			}
			if len(r.deadline) != len(tc.wantDl) {
				t.Fatalf("deadlines = %v, want %v", r.deadline, tc.wantDl)
			}
			for i := range r.deadline {
				if !r.deadline[i].Equal(tc.wantDl[i]) {
					t.Fatalf("deadlines = %v, want %v", r.deadline, tc.wantDl)
				}
			}
		})
	}
	t.Run("release error is returned and the hold ends", func(t *testing.T) {
		r := &recordConn{fail: errors.New("broken pipe")}
		c := NewCoalescingConn(r)
		c.Hold()
		_, _ = c.Write([]byte("lost"))
		if err := c.Release(time.Time{}); err == nil {
			t.Fatal("release on a broken socket returned nil")
		}
		if c.Buffered() != 0 {
			t.Fatal("hold still on after release")
		}
	})
}

// TestCoalescingConnConcurrent: writers racing a hold keep their bytes
// whole (each Write lands entirely in one batch or goes through alone).
func TestCoalescingConnConcurrent(t *testing.T) {
	r := &recordConn{}
	c := NewCoalescingConn(r)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if i%10 == 0 {
					c.Hold()
				}
				_, _ = c.Write([]byte{'<', byte('a' + w), '>'})
				if i%10 == 9 {
					_ = c.Release(time.Time{})
				}
			}
		}()
	}
	wg.Wait()
	_ = c.Release(time.Time{})
	var all []byte
	for _, w := range r.writes {
		if len(w)%3 != 0 {
			t.Fatalf("a write of %d bytes split a chunk: %q", len(w), w)
		}
		all = append(all, w...)
	}
	if len(all) != 4*200*3 {
		t.Fatalf("%d bytes written, want %d", len(all), 4*200*3)
	}
	for i := 0; i < len(all); i += 3 {
		if all[i] != '<' || all[i+2] != '>' {
			t.Fatalf("chunk at %d torn: %q", i, all[i:i+3])
		}
	}
}
