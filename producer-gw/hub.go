package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/seqflow/seqflow/internal/presence"
)

// presenceWriter records which connections are online on which gateway,
// for the pushers to route to (a *presence.Store, in Redis). Put and
// Remove block on Redis; ctx bounds them.
type presenceWriter interface {
	Put(ctx context.Context, conns ...presence.Conn) error
	Remove(ctx context.Context, conns ...presence.Conn) error
}

// hub is the registry of this gateway's open WebSocket connections: the
// push path finds a recipient's connection in it, the drain closes them
// all, and Run keeps their presence entries alive.
type hub struct {
	gate     *gate
	presence presenceWriter
	ttl      time.Duration // presence entries' lifetime; refreshed every ttl/3
	log      *slog.Logger
	m        *metrics
	// refreshed, when set, is called with the open connections after each
	// presence refresh (devices.refresh: their devices' last seen).
	refreshed func(ctx context.Context, cs []*conn)

	mu    sync.Mutex
	conns map[string]*conn
	wg    sync.WaitGroup // connection handlers, from add to done
}

func newHub(gate *gate, pw presenceWriter, ttl time.Duration, log *slog.Logger, m *metrics) *hub {
	return &hub{gate: gate, presence: pw, ttl: ttl, log: log, m: m, conns: map[string]*conn{}}
}

// add registers c unless the gateway drains. After a true, the handler
// must call remove and then done.
func (h *hub) add(c *conn) bool {
	return h.gate.admit(func() {
		h.mu.Lock()
		h.conns[c.id] = c
		h.mu.Unlock()
		h.wg.Add(1)
	})
}

// remove takes c out of the registry: nothing is pushed to it any more.
func (h *hub) remove(c *conn) {
	h.mu.Lock()
	delete(h.conns, c.id)
	h.mu.Unlock()
}

// done marks the end of the handler of a connection add admitted.
func (h *hub) done() { h.wg.Done() }

// conn returns the open connection id, nil if there is none.
func (h *hub) conn(id string) *conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[id]
}

func (h *hub) all() []*conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := make([]*conn, 0, len(h.conns))
	for _, c := range h.conns {
		cs = append(cs, c)
	}
	return cs
}

// closeAll asks every open connection to close with code and reason; why
// labels the closes in metrics.
func (h *hub) closeAll(code websocket.StatusCode, reason, why string) {
	for _, c := range h.all() {
		c.closeWith(code, reason, why)
	}
}

// wait blocks until every admitted connection's handler is done.
func (h *hub) wait() { h.wg.Wait() }

// Run re-registers the presence of every open connection each TTL/3 until
// ctx ends, and returns ctx.Err(). A failed refresh is counted and logged;
// the next one retries.
func (h *hub) Run(ctx context.Context) error {
	return every(ctx, h.ttl/3, func() {
		cs := h.all()
		pcs := make([]presence.Conn, 0, len(cs))
		for _, c := range cs {
			pcs = append(pcs, c.presence())
		}
		pctx, cancel := context.WithTimeout(ctx, h.ttl/3)
		defer cancel()
		if err := h.presence.Put(pctx, pcs...); err != nil {
			h.m.presenceErrs.Inc()
			h.log.Warn("refresh presence", "connections", len(pcs), "err", err)
		}
		if h.refreshed != nil && len(cs) > 0 {
			h.refreshed(pctx, cs)
		}
	})
}
