package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/rebuild"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// env is one test's private world: topics under a fresh prefix, a fresh
// store schema, unique group names.
type env struct {
	st     stack.Stack
	id     string
	prefix string
	topics eventlog.Topics
	schema string
	pool   *pgxpool.Pool
	cl     *kgo.Client
}

func newEnv(t testing.TB, parts ...string) *env {
	t.Helper()
	st := stack.Require(t, append([]string{"kafka", "pg"}, parts...)...)
	id := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	e := &env{st: st, id: id, prefix: "t-" + id + ".", schema: "p_" + id}
	e.topics = eventlog.Names(e.prefix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(st.KafkaBrokers, "persister-test"), eventlog.ProducerOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.cl = cl
	if err := eventlog.EnsureTopics(ctx, kadm.NewClient(cl), eventlog.Specs(e.topics, 4), 0); err != nil {
		t.Fatal(err)
	}
	pool, err := store.NewPool(ctx, st.PGURL, 4)
	if err != nil {
		t.Fatal(err)
	}
	e.pool = pool
	if _, err := migrate.Up(ctx, pool, ""); err != nil { // the sequencer's tables
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, pool, e.schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+e.schema+" CASCADE")
		pool.Close()
		adm := kadm.NewClient(cl)
		_, _ = adm.DeleteTopics(context.Background(), e.topics.Uplink, e.topics.Sequenced, e.topics.Duplicates,
			e.topics.Receipts, e.topics.Offline, e.topics.DeadLetter)
	})
	return e
}

func (e *env) common() []string {
	return []string{
		"SEQFLOW_KAFKA_BROKERS=" + strings.Join(e.st.KafkaBrokers, ","),
		"SEQFLOW_PG_URL=" + e.st.PGURL,
		"SEQFLOW_TOPIC_PREFIX=" + e.prefix,
	}
}

func (e *env) startSequencer(t *testing.T) *proc.Proc {
	bin := proc.Build(t, "./sequencer")
	return proc.Start(t, "sequencer", bin, append(e.common(),
		"SEQUENCER_GROUP=seq-"+e.id, "SEQUENCER_INSTANCE_ID=seq-"+e.id, "SEQUENCER_ADMIN_ADDR=127.0.0.1:0")...)
}

func (e *env) startPersister(t *testing.T, extra ...string) *proc.Proc {
	bin := proc.Build(t, "./persister")
	return proc.Start(t, "persister", bin, append(append(e.common(),
		"PERSISTER_GROUP=per-"+e.id, "PERSISTER_INSTANCE_ID=per-"+e.id, "PERSISTER_SCHEMA="+e.schema,
		"PERSISTER_ADMIN_ADDR=127.0.0.1:0"), extra...)...)
}

// load produces n message uplinks over sessions at about rate per second,
// as gateways would. It returns when all are acknowledged.
func (e *env) load(ctx context.Context, t *testing.T, sessions []string, n, rate int) {
	t.Helper()
	const tick = 50 * time.Millisecond
	per := max(rate*int(tick)/int(time.Second), 1)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for sent := 0; sent < n; {
		select {
		case <-ctx.Done():
			t.Fatalf("load interrupted after %d of %d: %v", sent, n, ctx.Err())
		case <-tk.C:
		}
		for j := 0; j < per && sent < n; j, sent = j+1, sent+1 {
			s := sessions[sent%len(sessions)]
			v, _ := proto.Marshal(&imv1.Uplink{
				SessionId: s, ClientMsgId: fmt.Sprintf("c-%d", sent), SenderUserId: "u" + fmt.Sprint(sent%3),
				SenderDeviceId: "d", GatewayId: "gw", GatewayTsMs: time.Now().UnixMilli(),
				Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(fmt.Sprintf("message %d", sent))}},
			})
			wg.Add(1)
			e.cl.Produce(ctx, &kgo.Record{Topic: e.topics.Uplink, Key: []byte(s), Value: v,
				Headers: eventlog.Headers("message", "seqflow.im.v1.Uplink", "test", "")},
				func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					wg.Done()
				})
		}
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("produce uplinks: %v", firstErr)
	}
}

func sessionIDs(id string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("s-%s-%d", id, i)
	}
	return out
}

// waitStoreEqualsLog waits until the log holds want events and the store
// holds exactly them, and returns the last report.
func (e *env) waitStoreEqualsLog(t *testing.T, want int, timeout time.Duration) *rebuild.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var rep *rebuild.Report
	for {
		l, err := rebuild.ReadLog(ctx, e.st.KafkaBrokers, e.topics.Sequenced, nil)
		if err == nil {
			rep, err = rebuild.Compare(ctx, e.pool, e.schema, l)
		}
		if err == nil && rep.LogEvents >= want && rep.Equal() {
			return rep
		}
		select {
		case <-ctx.Done():
			if rep != nil {
				for i, d := range rep.Differences {
					if i == 5 {
						break
					}
					t.Logf("session %s: %d missing %v, %d extra, %d mismatched %v", d.SessionID, len(d.Missing), head(d.Missing), len(d.Extra), len(d.Mismatched), d.Details)
				}
				t.Fatalf("store never equalled the log: log %d events (want %d), store %d rows, %d sessions differ (last error %v)",
					rep.LogEvents, want, rep.StoreRows, len(rep.Differences), err)
			}
			t.Fatalf("store never equalled the log: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func head(s []int64) []int64 {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

// restartPostgres restarts the shared PostgreSQL server of the local stack
// with a fast shutdown, the way infra/local/stack.sh runs pg_ctl: as the OS
// user owning the data directory, from /, on the directory .data/pg is or
// links to (stack.sh puts it outside a checkout that user cannot enter).
func restartPostgres(t *testing.T, root string) {
	t.Helper()
	pgDir, err := filepath.EvalSymlinks(filepath.Join(root, ".data", "pg"))
	if err != nil {
		t.Fatalf("postgres directory: %v", err)
	}
	data := filepath.Join(pgDir, "data")
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		t.Fatal("pg_ctl not found under /usr/lib/postgresql")
	}
	fi, err := os.Stat(data)
	if err != nil {
		t.Fatalf("postgres data dir: %v", err)
	}
	args := []string{bins[len(bins)-1], "-D", data, "-l", filepath.Join(pgDir, "postgres.log"), "-m", "fast", "-w", "-t", "60", "-s", "restart"}
	var cmd *exec.Cmd
	if uid := fi.Sys().(*syscall.Stat_t).Uid; os.Geteuid() == 0 && uid != 0 {
		u := fmt.Sprint(uid)
		if out, err := exec.Command("id", "-nu", u).Output(); err == nil {
			u = strings.TrimSpace(string(out))
		}
		cmd = exec.Command("runuser", append([]string{"-u", u, "--"}, args...)...)
	} else {
		cmd = exec.Command(args[0], args[1:]...)
	}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restart postgres: %v\n%s", err, out)
	}
}
