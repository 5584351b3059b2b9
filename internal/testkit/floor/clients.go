package floor

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/go-json-experiment/json"
)

// Clients are the floor's users, one WebSocket connection each; users 2i
// and 2i+1 share session i.
type Clients struct {
	conns []*websocket.Conn
	cur   atomic.Pointer[collect]
	wg    sync.WaitGroup
	stop  context.CancelFunc
}

// Report is one run's counts, and its latencies in ms from each
// message's scheduled send: to its ACK, to its event at the recipient.
type Report struct {
	Sent, Acked, Delivered int64
	AckMs, DeliverMs       []float64
}

// collect is one run's counts and latencies.
type collect struct {
	mu               sync.Mutex
	pending          map[string]time.Time
	ackMs, deliverMs []float64
	delivered        int64
}

// frame is any server frame, as the clients read it.
type frame struct {
	T      string `json:"t"`
	ID     string `json:"id"`
	SentNs int64  `json:"sent_ns"`
}

// Dial connects users clients to the server's WebSocket endpoint url
// (ws://ADDR/ws).
func Dial(ctx context.Context, url string, users int) (*Clients, error) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Clients{stop: cancel}
	for u := range users {
		ws, _, err := websocket.Dial(ctx, url+"?user="+strconv.Itoa(u), nil)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("floor: dial user %d: %w", u, err)
		}
		c.conns = append(c.conns, ws)
		c.wg.Go(func() { c.read(rctx, ws) })
	}
	return c, nil
}

// Close closes every connection.
func (c *Clients) Close() {
	c.stop()
	for _, ws := range c.conns {
		ws.CloseNow()
	}
	c.wg.Wait()
}

// read hands a connection's frames to the current run.
func (c *Clients) read(ctx context.Context, ws *websocket.Conn) {
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		now := time.Now()
		var f frame
		if json.Unmarshal(b, &f) != nil {
			continue
		}
		r := c.cur.Load()
		if r == nil {
			continue
		}
		r.mu.Lock()
		switch f.T {
		case "ack":
			if at, ok := r.pending[f.ID]; ok {
				delete(r.pending, f.ID)
				r.ackMs = append(r.ackMs, ms(now.Sub(at)))
			}
		case "event":
			r.delivered++
			r.deliverMs = append(r.deliverMs, ms(now.Sub(time.Unix(0, f.SentNs))))
		}
		r.mu.Unlock()
	}
}

// Run sends 200-byte messages at rate for d, each user every
// len(users)/rate seconds (the users staggered), then waits up to 5 s
// for the ACKs and events. An ACK counts once per message; every event
// counts, so a duplicate shows as Delivered above Sent.
func (c *Clients) Run(ctx context.Context, rate float64, d time.Duration) Report {
	r := &collect{pending: map[string]time.Time{}}
	c.cur.Store(r)
	n := len(c.conns)
	every := time.Duration(float64(n) / rate * float64(time.Second))
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(d)
	var sent atomic.Int64
	var wg sync.WaitGroup
	body := strings.Repeat("x", 200)
	for u, ws := range c.conns {
		wg.Go(func() {
			sess := "floor-" + strconv.Itoa(u/2)
			for k := 0; ; k++ {
				at := start.Add(every*time.Duration(u)/time.Duration(n) + every*time.Duration(k))
				if at.After(end) || ctx.Err() != nil {
					return
				}
				time.Sleep(time.Until(at))
				id := strconv.Itoa(u) + "-" + strconv.Itoa(k)
				b, _ := json.Marshal(Send{T: "send", ID: id, Session: sess, To: u ^ 1, Body: body, SentNs: at.UnixNano()})
				r.mu.Lock()
				r.pending[id] = at
				r.mu.Unlock()
				if ws.Write(ctx, websocket.MessageText, b) != nil {
					r.mu.Lock()
					delete(r.pending, id)
					r.mu.Unlock()
					return
				}
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		done := len(r.pending) == 0 && r.delivered >= sent.Load()
		r.mu.Unlock()
		if done {
			break
		}
	}
	c.cur.Store(nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	return Report{Sent: sent.Load(), Acked: int64(len(r.ackMs)), Delivered: r.delivered,
		AckMs: slices.Clone(r.ackMs), DeliverMs: slices.Clone(r.deliverMs)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
