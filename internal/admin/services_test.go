package admin_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
)

// TestServicesAdminPorts attacks the admin ports of real sequencer,
// persister and pusher processes on the stack (the gateway's, with its
// erasure endpoint, is producer-gw's TestAdminPlaneAuth): /metrics,
// /healthz and /readyz answer without a token; pprof is 404 where
// SEQFLOW_ADMIN_PPROF is off, whatever the token, and where it is on it
// is 401 without the token or with a wrong one, and served with it.
func TestServicesAdminPorts(t *testing.T) {
	st := stack.Require(t, "kafka", "pg", "redis")
	id := uuid.NewString()[:8]
	prefix := "t-" + id + "."
	topics := eventlog.Names(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(eventlog.ClientOpts(st.KafkaBrokers, "admin-test")...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(topics, 2), 0); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, topics.Uplink, topics.Sequenced, topics.Duplicates, topics.Receipts, topics.Offline, topics.DeadLetter)
	})
	const token = "ops-token-5d41402abc4b2a76b9719d911017c592"
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte("ops:"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"SEQFLOW_KAFKA_BROKERS=" + strings.Join(st.KafkaBrokers, ","), "SEQFLOW_PG_URL=" + st.PGURL,
		"SEQFLOW_REDIS_ADDR=" + st.RedisAddr, "SEQFLOW_TOPIC_PREFIX=" + prefix, "SEQFLOW_ADMIN_TOKENS_FILE=" + tokens}
	for _, svc := range []struct {
		name, env string
		pprof     bool
		own       []string
	}{
		{"sequencer", "SEQUENCER", false, []string{"SEQUENCER_GROUP=adm-seq-" + id, "SEQUENCER_INSTANCE_ID=adm-" + id}},
		{"persister", "PERSISTER", true, []string{"PERSISTER_GROUP=adm-per-" + id, "PERSISTER_INSTANCE_ID=adm-" + id, "PERSISTER_MIGRATE=false"}},
		{"pusher", "PUSHER", true, []string{"PUSHER_GROUP=adm-push-" + id, "PUSHER_INSTANCE_ID=adm-" + id}},
	} {
		t.Run(svc.name, func(t *testing.T) {
			env := append(append(append([]string(nil), common...), svc.own...), svc.env+"_ADMIN_ADDR="+proc.AnyPort)
			if svc.pprof {
				env = append(env, "SEQFLOW_ADMIN_PPROF=true")
			}
			p := proc.Start(t, svc.name, proc.Build(t, "./"+svc.name), env...)
			base := "http://" + proc.LoggedAddr(t, p, "admin listening", svc.env+"_ADMIN_ADDR")
			get := func(path, tok string) (int, string) {
				t.Helper()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			for _, path := range []string{"/metrics", "/healthz"} {
				if code, _ := get(path, ""); code != http.StatusOK {
					t.Errorf("GET %s without a token: %d, want 200", path, code)
				}
			}
			// Ready or not yet (partitions): answered by the open plane.
			if code, body := get("/readyz", ""); code != http.StatusOK && code != http.StatusServiceUnavailable {
				t.Errorf("GET /readyz without a token: %d %q", code, body)
			}
			paths := []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap?debug=1", "/debug/pprof/trace?seconds=1"}
			for _, path := range paths {
				for _, tok := range []string{"", token + "x", token} {
					code, body := get(path, tok)
					want := http.StatusNotFound
					switch {
					case svc.pprof && tok == token:
						want = http.StatusOK
					case svc.pprof:
						want = http.StatusUnauthorized
					}
					if code != want {
						t.Errorf("GET %s (pprof %v, token %v): %d %.100q, want %d", path, svc.pprof, tok == token, code, body, want)
					}
				}
			}
		})
	}
}
