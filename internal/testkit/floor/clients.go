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
	runs  atomic.Int64
	cur   atomic.Pointer[collect]
	wg    sync.WaitGroup
	stop  context.CancelFunc
}

// Report is one run's counts, and its latencies in ms from each
// message's scheduled send: to its ACK, to its event at the recipient.
// Acked and Delivered count each message once; what came more than once,
// to the wrong user or with another seq than its ACK's, and sessions
// whose seqs in the run are not consecutive, are counted apart.
type Report struct {
	Sent, Acked, Delivered int64
	Duplicates             int64 // a second ACK or event of a message
	Misrouted              int64 // an event at a user it was not sent to
	SeqErrors              int64 // event seq ≠ ACK seq, or a session's seqs with a gap or a repeat
	AckMs, DeliverMs       []float64
}

// Harmed is the messages the run lost (not acked or not delivered) plus
// every duplicate, misrouted event and seq error.
func (r Report) Harmed() int64 {
	return r.Sent - min(r.Acked, r.Delivered) + r.Duplicates + r.Misrouted + r.SeqErrors
}

// sent is a message of the current run, as the clients track it.
type sent struct {
	at               time.Time
	session          string
	to               int
	ackSeq, eventSeq int64
	acked, delivered bool
}

// collect is one run's messages and latencies.
type collect struct {
	mu                    sync.Mutex
	msgs                  map[string]*sent
	ackMs, deliverMs      []float64
	acked, delivered      int64
	dups, misrouted, errs int64
}

// frame is any server frame, as the clients read it.
type frame struct {
	T      string `json:"t"`
	ID     string `json:"id"`
	Seq    int64  `json:"seq"`
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
		c.wg.Go(func() { c.read(rctx, u, ws) })
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

// read hands user's frames to the current run. A frame of a message of
// another run (late, after its run ended) is dropped.
func (c *Clients) read(ctx context.Context, user int, ws *websocket.Conn) {
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
		if r := c.cur.Load(); r != nil {
			r.take(user, f, now)
		}
	}
}

// take counts a frame that user received at now.
func (r *collect) take(user int, f frame, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.msgs[f.ID]
	if m == nil {
		return
	}
	switch {
	case f.T == "ack" && m.acked, f.T == "event" && m.delivered:
		r.dups++
	case f.T == "event" && user != m.to:
		r.misrouted++
	case f.T == "ack":
		m.acked, m.ackSeq = true, f.Seq
		r.acked++
		r.ackMs = append(r.ackMs, ms(now.Sub(m.at)))
	case f.T == "event":
		m.delivered, m.eventSeq = true, f.Seq
		r.delivered++
		r.deliverMs = append(r.deliverMs, ms(now.Sub(time.Unix(0, f.SentNs))))
	}
}

// seqErrors counts the messages whose event seq is not their ACK's, and
// the sessions whose seqs in the run have a gap or a repeat.
func (r *collect) seqErrors() int64 {
	var n int64
	bySession := map[string][]int64{}
	for _, m := range r.msgs {
		if m.acked && m.delivered && m.ackSeq != m.eventSeq {
			n++
		}
		if m.acked {
			bySession[m.session] = append(bySession[m.session], m.ackSeq)
		}
	}
	for _, seqs := range bySession {
		slices.Sort(seqs)
		for i := 1; i < len(seqs); i++ {
			if seqs[i] != seqs[i-1]+1 {
				n++
				break
			}
		}
	}
	return n
}

// Run sends 200-byte messages at rate for d, each user every
// len(users)/rate seconds (the users staggered), then waits up to 5 s
// for the ACKs and events. Message IDs carry the run's number, so
// frames of an earlier run never count in this one.
func (c *Clients) Run(ctx context.Context, rate float64, d time.Duration) Report {
	r := &collect{msgs: map[string]*sent{}}
	c.cur.Store(r)
	run := strconv.FormatInt(c.runs.Add(1), 10)
	n := len(c.conns)
	every := time.Duration(float64(n) / rate * float64(time.Second))
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(d)
	var count atomic.Int64
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
				id := "r" + run + "-" + strconv.Itoa(u) + "-" + strconv.Itoa(k)
				b, _ := json.Marshal(Send{T: "send", ID: id, Session: sess, To: u ^ 1, Body: body, SentNs: at.UnixNano()})
				r.mu.Lock()
				r.msgs[id] = &sent{at: at, session: sess, to: u ^ 1}
				r.mu.Unlock()
				if ws.Write(ctx, websocket.MessageText, b) != nil {
					r.mu.Lock()
					delete(r.msgs, id)
					r.mu.Unlock()
					return
				}
				count.Add(1)
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
		r.mu.Lock()
		done := r.acked >= count.Load() && r.delivered >= count.Load()
		r.mu.Unlock()
		if done {
			break
		}
	}
	c.cur.Store(nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	return Report{Sent: count.Load(), Acked: r.acked, Delivered: r.delivered,
		Duplicates: r.dups, Misrouted: r.misrouted, SeqErrors: r.seqErrors(),
		AckMs: slices.Clone(r.ackMs), DeliverMs: slices.Clone(r.deliverMs)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
