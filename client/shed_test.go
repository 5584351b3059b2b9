package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestSyncRetriesShedWithBackoff: a gateway stand-in (a plain WebSocket
// server, not the gateway) sheds the first two syncs as a gateway at its
// GATEWAY_SYNC_CONCURRENCY bound does (unavailable, retryable); Sync
// retries them on the same connection after a growing, jittered pause,
// never at once, and returns the page that follows.
func TestSyncRetriesShedWithBackoff(t *testing.T) {
	const minBackoff = 100 * time.Millisecond
	var mu sync.Mutex
	var syncs []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		if ws.Write(ctx, websocket.MessageText, []byte(`{"op":"hello","conn_id":"c1","user_id":"u","heartbeat_ms":60000}`)) != nil {
			return
		}
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var f wire.ClientFrame
			if json.Unmarshal(b, &f) != nil || f.ReqID == "" {
				continue
			}
			var reply any = wire.OK{Op: wire.OpResult, ReqID: f.ReqID}
			if f.Op == wire.OpSync {
				mu.Lock()
				syncs = append(syncs, time.Now())
				n := len(syncs)
				mu.Unlock()
				reply = wire.SyncResult{Op: wire.OpResult, ReqID: f.ReqID, SessionID: f.SessionID, Messages: []wire.Message{}}
				if n <= 2 {
					reply = wire.ErrorFrame{Op: wire.OpError, ReqID: f.ReqID, Error: wire.ErrorBody{Code: 5001, Name: "unavailable",
						Message: "too many sync and changes requests in progress on this gateway (GATEWAY_SYNC_CONCURRENCY); retry after a backoff", Retryable: true}}
				}
			}
			b, _ = json.Marshal(reply)
			if ws.Write(ctx, websocket.MessageText, b) != nil {
				return
			}
		}
	}))
	defer srv.Close()

	c, err := New(Options{URLs: []string{"ws" + strings.TrimPrefix(srv.URL, "http")}, Token: "t",
		MinBackoff: minBackoff, MaxBackoff: 2 * time.Second, RecheckAfter: -1, ResyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	if _, _, err := c.Sync(ctx, "s", 0, 10); err != nil {
		t.Fatalf("Sync: %v, want the page after two shed attempts", err)
	}
	cancel()
	<-ran

	mu.Lock()
	defer mu.Unlock()
	if len(syncs) != 3 {
		t.Fatalf("%d sync attempts, want 3 (two shed, one answered)", len(syncs))
	}
	// Attempt n waits a random pause in [d/2, d), d = minBackoff·2^n.
	for i, least := range []time.Duration{minBackoff / 2, minBackoff} {
		if gap := syncs[i+1].Sub(syncs[i]); gap < least {
			t.Fatalf("retry %d came %v after the shed attempt, want at least %v (backoff)", i+1, gap, least)
		}
	}
}
