package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqflow/seqflow/internal/admin"
)

// TestEraserCallsTheOperatorEndpoint: the eraser's call passes
// internal/admin's operator checks (its token, JSON) and is recorded
// under eraseActor; the same endpoint refuses it with another token. An
// in-process admin server stands in for a gateway's: the route answers
// what the gateway's would, without the erasure behind it.
func TestEraserCallsTheOperatorEndpoint(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	const token = "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(tokens, []byte(eraseActor+":"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	route := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			UserID string `json:"user_id"`
		}
		if e := admin.DecodeJSON(r, &req); e != nil {
			admin.WriteError(w, e)
			return
		}
		got = append(got, req.UserID+" by "+admin.Actor(r.Context()))
		admin.WriteJSON(w, http.StatusOK, map[string]any{"keys_destroyed": 2, "sessions_left": 1, "ownership_transfers": 0})
	})
	srv := httptest.NewServer((&admin.Server{Reg: prometheus.NewRegistry(), Routes: map[string]http.Handler{"POST /erase/user": route},
		Config: admin.Config{TokensFile: tokens}}).Handler())
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	e := &eraser{token: token, hc: srv.Client()}
	ans, err := e.call(context.Background(), addr, "victim-1")
	if err != nil || ans.KeysDestroyed != 2 || ans.SessionsLeft != 1 {
		t.Fatalf("call: %+v %v", ans, err)
	}
	if len(got) != 1 || got[0] != "victim-1 by "+eraseActor {
		t.Fatalf("the endpoint saw %v", got)
	}
	e.token = token[:len(token)-1] + "X"
	if _, err := e.call(context.Background(), addr, "victim-2"); err == nil {
		t.Fatal("a wrong token was accepted")
	}
}
