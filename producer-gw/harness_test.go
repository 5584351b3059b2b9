package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/migrate"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/testkit/stack"
	"github.com/seqflow/seqflow/internal/wire"
)

const testSecret = "test-secret-test-secret-test-secret!"

// testKEK is a KEK for tests that start a gateway sealing bodies (32 bytes).
const testKEK = "c2VxZmxvdy10ZXN0LWtlay1zZXFmbG93LXRlc3Qta2U="

// pipeline is the real stack for protocol tests: topics under a fresh
// prefix, and sequencer, persister and pusher running as processes.
type pipeline struct {
	t      testing.TB
	st     stack.Stack
	prefix string
	topics eventlog.Topics
	pool   *pgxpool.Pool
	signer *auth.Signer
	// procs and admins are the started services and their admin
	// addresses, by name.
	procs  map[string]*proc.Proc
	admins map[string]string
}

// newPipeline is newPipelineNoProcs plus the sequencer, persister and
// pusher processes.
func newPipeline(t testing.TB) *pipeline {
	t.Helper()
	p := newPipelineNoProcs(t)
	p.startProcs()
	return p
}

// newPipelineNoProcs makes the topics and migrations only.
func newPipelineNoProcs(t testing.TB) *pipeline {
	t.Helper()
	st := stack.Require(t, "kafka", "pg", "redis")
	id := uuid.NewString()[:8]
	p := &pipeline{t: t, st: st, prefix: "t-" + id + ".", topics: eventlog.Names("t-" + id + ".")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(eventlog.ClientOpts(st.KafkaBrokers, "gw-test-admin")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	if err := eventlog.EnsureTopics(ctx, adm, eventlog.Specs(p.topics, 4), 0); err != nil {
		t.Fatalf("create topics: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(ctx, p.topics.Uplink, p.topics.Sequenced, p.topics.Duplicates, p.topics.Receipts, p.topics.Offline, p.topics.DeadLetter)
	})
	pool, err := pgxpool.New(ctx, st.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p.pool = pool
	if _, err := migrate.Up(ctx, pool, ""); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	p.signer, _ = auth.NewHS256Signer([]byte(testSecret))
	return p
}

func (p *pipeline) startProcs() { p.startSome(nil, "sequencer", "persister", "pusher") }

// startSome starts the named services (of sequencer, persister, pusher)
// with extra appended to each one's environment, and waits for them to be
// ready.
func (p *pipeline) startSome(extra []string, names ...string) {
	t, st, id := p.t, p.st, strings.TrimSuffix(strings.TrimPrefix(p.prefix, "t-"), ".")
	common := []string{
		"SEQFLOW_KAFKA_BROKERS=" + strings.Join(st.KafkaBrokers, ","),
		"SEQFLOW_PG_URL=" + st.PGURL,
		"SEQFLOW_REDIS_ADDR=" + st.RedisAddr,
		"SEQFLOW_TOPIC_PREFIX=" + p.prefix,
	}
	for _, name := range names {
		var env []string
		switch name {
		case "sequencer":
			env = []string{"SEQUENCER_GROUP=gwt-seq-" + id, "SEQUENCER_INSTANCE_ID=gwt-" + id,
				"SEQUENCER_ADMIN_ADDR=" + proc.AnyPort, "SEQUENCER_SESSION_TIMEOUT=6s"}
		case "persister":
			env = []string{"PERSISTER_GROUP=gwt-per-" + id, "PERSISTER_INSTANCE_ID=gwt-" + id,
				"PERSISTER_ADMIN_ADDR=" + proc.AnyPort, "PERSISTER_MIGRATE=false", "PERSISTER_SESSION_TIMEOUT=6s"}
		case "pusher":
			env = []string{"PUSHER_GROUP=gwt-push-" + id, "PUSHER_INSTANCE_ID=gwt-" + id,
				"PUSHER_ADMIN_ADDR=" + proc.AnyPort, "PUSHER_RESET_OFFSET=start", "PUSHER_SESSION_TIMEOUT=6s"}
		default:
			t.Fatalf("startSome: unknown service %q", name)
		}
		bin := proc.Build(t, "./"+name)
		if p.procs == nil {
			p.procs, p.admins = map[string]*proc.Proc{}, map[string]string{}
		}
		p.procs[name] = proc.Start(t, name, bin, append(append(append([]string(nil), common...), env...), extra...)...)
	}
	// Ready means partitions assigned: before that, the first commands
	// would wait for a group join instead of testing the gateway.
	for _, name := range names {
		p.admins[name] = proc.LoggedAddr(t, p.procs[name], "admin listening", strings.ToUpper(name)+"_ADMIN_ADDR")
		p.waitReady(name)
	}
}

// waitReady polls name's /readyz until it answers 200 (90s at most).
func (p *pipeline) waitReady(name string) {
	p.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + p.admins[name] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready within 90s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reader is a client reading topic from its start, read committed, closed
// when t ends.
func (p *pipeline) reader(t *testing.T, topic string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(p.st.KafkaBrokers, "gw-test-reader"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func mintWith(t *testing.T, secret, user, device string) string {
	t.Helper()
	s, err := auth.NewHS256Signer([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Mint(user, device, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// env is a gateway environment for this pipeline with overrides.
func (p *pipeline) env(over map[string]string) map[string]string {
	m := map[string]string{
		"SEQFLOW_KAFKA_BROKERS":    strings.Join(p.st.KafkaBrokers, ","),
		"SEQFLOW_PG_URL":           p.st.PGURL,
		"SEQFLOW_REDIS_ADDR":       p.st.RedisAddr,
		"SEQFLOW_TOPIC_PREFIX":     p.prefix,
		"GATEWAY_ID":               "gwt-" + uuid.NewString()[:8],
		"GATEWAY_ADDR":             "127.0.0.1:0",
		"GATEWAY_ADMIN_ADDR":       "",
		"GATEWAY_JWT_HS256_SECRET": testSecret,
		"GATEWAY_ACK_WAIT":         "10s",
		"GATEWAY_SHUTDOWN_TIMEOUT": "3s",
	}
	// Plaintext bodies unless the test brings a KEK: most tests read
	// bodies in the store and the log.
	if over["SEQFLOW_KEK"] == "" {
		m["SEQFLOW_PLAINTEXT_BODIES"] = "true"
	}
	for k, v := range stack.PeerEnv(p.st) {
		m[k] = v
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

// testGW is an in-process gateway.
type testGW struct {
	g    *Gateway
	addr string
	stop func() error
}

func (p *pipeline) gateway(over map[string]string) *testGW {
	p.t.Helper()
	return startGateway(p.t, p.env(over))
}

func startGateway(t testing.TB, env map[string]string) *testGW {
	t.Helper()
	cfg, err := LoadConfig(config.FromMap(env))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer acancel()
	addr, err := g.Addr(actx)
	if err != nil {
		cancel()
		t.Fatalf("gateway did not listen: %v", <-errc)
	}
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-errc
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("gateway Run: %v", err)
		}
	})
	return &testGW{g: g, addr: addr, stop: stop}
}

func (p *pipeline) token(user, device string, ttl time.Duration) string {
	tok, err := p.signer.Mint(user, device, ttl)
	if err != nil {
		p.t.Fatal(err)
	}
	return tok
}

// frame is any server frame, decoded loosely.
type frame struct {
	Op            string               `json:"op"`
	ReqID         string               `json:"req_id"`
	ClientMsgID   string               `json:"client_msg_id"`
	SessionID     string               `json:"session_id"`
	Status        string               `json:"status"`
	Seq           int64                `json:"seq"`
	MsgID         string               `json:"msg_id"`
	ServerTs      int64                `json:"server_ts"`
	Duplicate     bool                 `json:"duplicate"`
	Error         wire.ErrorBody       `json:"error"`
	Event         wire.Message         `json:"event"`
	Messages      []wire.Message       `json:"messages"`
	HasMore       bool                 `json:"has_more"`
	HasMoreBefore bool                 `json:"has_more_before"`
	Sessions      []wire.SessionChange `json:"sessions"`
	TotalUnread   int64                `json:"total_unread"`
	ConnID        string               `json:"conn_id"`
	// Typing and receipt frames.
	Kind        string `json:"kind"`
	UserID      string `json:"user_id"`
	DeviceID    string `json:"device_id"`
	Active      bool   `json:"active"`
	ExpiresInMs int64  `json:"expires_in_ms"`
	// seen_by results.
	Users   []string `json:"users"`
	Count   int64    `json:"count"`
	Members int64    `json:"members"`
	// settings results.
	ReadReceipts bool `json:"read_receipts"`
	// Unread counts on pushed events and unread frames.
	Unread  *int64 `json:"unread"`
	ReadSeq int64  `json:"read_seq"`

	raw []byte // the frame as sent
}

// mustDecode decodes a frame's raw bytes into v.
func mustDecode(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

// client is a WebSocket client as any non-SDK client would write it.
type client struct {
	t       testing.TB
	name    string
	ws      *websocket.Conn
	frames  chan frame
	backlog []frame
	done    chan struct{}
	closeMu sync.Mutex
	closeEr error
	hello   frame
}

func dial(t testing.TB, gw *testGW, token string) (*client, *http.Response, error) {
	t.Helper()
	return dialQuery(t, gw, token, "")
}

// dialQuery is dial with a query string for the WebSocket URL ("" for none).
func dialQuery(t testing.TB, gw *testGW, token, query string) (*client, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	u := "ws://" + gw.addr + "/v1/ws"
	if query != "" {
		u += "?" + query
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(1 << 20)
	c := &client{t: t, ws: ws, frames: make(chan frame, 1024), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				c.closeMu.Lock()
				c.closeEr = err
				c.closeMu.Unlock()
				return
			}
			// Frames whose fields do not fit frame's (a member_list's
			// members array) keep their op, req_id and raw bytes.
			var f frame
			if err := json.Unmarshal(b, &f); err != nil {
				f = frame{}
				if err := json.Unmarshal(b, &struct {
					Op    *string `json:"op"`
					ReqID *string `json:"req_id"`
				}{&f.Op, &f.ReqID}); err != nil || f.Op == "" {
					t.Errorf("undecodable server frame %s: %v", b, err)
					continue
				}
			}
			f.raw = b
			c.frames <- f
		}
	}()
	t.Cleanup(func() { _ = ws.CloseNow(); <-c.done })
	c.hello = c.expect("hello", func(f frame) bool { return f.Op == wire.OpHello })
	return c, resp, nil
}

func (p *pipeline) connect(gw *testGW, user, device string) *client {
	p.t.Helper()
	c, _, err := dial(p.t, gw, p.token(user, device, time.Hour))
	if err != nil {
		p.t.Fatalf("dial as %s/%s: %v", user, device, err)
	}
	c.name = user + "/" + device
	return c
}

func (c *client) send(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(b)
}

func (c *client) sendRaw(b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

// expectWithin returns the first frame (queued or arriving within d) that
// matches; other frames stay queued for later expectations.
func (c *client) expectWithin(d time.Duration, what string, match func(frame) bool) (frame, bool) {
	for i, f := range c.backlog {
		if match(f) {
			c.backlog = append(c.backlog[:i], c.backlog[i+1:]...)
			return f, true
		}
	}
	deadline := time.After(d)
	for {
		select {
		case f := <-c.frames:
			if match(f) {
				return f, true
			}
			c.backlog = append(c.backlog, f)
		case <-deadline:
			return frame{}, false
		case <-c.done:
			select {
			case f := <-c.frames:
				if match(f) {
					return f, true
				}
				c.backlog = append(c.backlog, f)
				continue
			default:
			}
			return frame{}, false
		}
	}
}

func (c *client) expect(what string, match func(frame) bool) frame {
	c.t.Helper()
	f, ok := c.expectWithin(20*time.Second, what, match)
	if !ok {
		c.t.Fatalf("%s: no %s within 20s (closed: %v); queued: %+v", c.name, what, c.closeErr(), c.backlog)
	}
	return f
}

func (c *client) closeErr() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	return c.closeEr
}

// ackOf waits for the ACK (or error) answering clientMsgID.
func (c *client) ackOf(clientMsgID string) frame {
	c.t.Helper()
	return c.expect("ack of "+clientMsgID, func(f frame) bool {
		return (f.Op == wire.OpAck || f.Op == wire.OpError) && f.ClientMsgID == clientMsgID
	})
}

func (c *client) mustAckOK(clientMsgID string) frame {
	c.t.Helper()
	f := c.ackOf(clientMsgID)
	if f.Op != wire.OpAck || f.Status != wire.StatusOK || f.Seq <= 0 || f.MsgID == "" || f.ServerTs == 0 {
		c.t.Fatalf("%s: ack of %s = %+v, want status ok with seq, msg_id, server_ts", c.name, clientMsgID, f)
	}
	return f
}

func (c *client) eventOf(session string, seq int64) frame {
	c.t.Helper()
	return c.expect(fmt.Sprintf("event %s/%d", session, seq), func(f frame) bool {
		return f.Op == wire.OpEvent && f.Event.SessionID == session && f.Event.Seq == seq
	})
}

func (c *client) errorOf(reqOrClientID string) frame {
	c.t.Helper()
	return c.expect("error for "+reqOrClientID, func(f frame) bool {
		return f.Op == wire.OpError && (f.ClientMsgID == reqOrClientID || f.ReqID == reqOrClientID)
	})
}

func (c *client) result(reqID string) frame {
	c.t.Helper()
	return c.expect("result "+reqID, func(f frame) bool {
		return (f.Op == wire.OpResult || f.Op == wire.OpError) && f.ReqID == reqID
	})
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

func sendFrame(session, clientMsgID, text string) map[string]any {
	return map[string]any{"op": "send", "client_msg_id": clientMsgID, "session_id": session, "type": "text", "body": text}
}

// createGroup creates a group of owner and members through c and returns
// its session ID and the create's seq.
func createGroup(c *client, members ...string) (string, int64) {
	c.t.Helper()
	id := newID()
	c.send(map[string]any{"op": "create_session", "client_msg_id": id, "kind": "group", "member_user_ids": members, "title": "t"})
	a := c.mustAckOK(id)
	return a.SessionID, a.Seq
}

// waitStored polls the store until session holds seq (the persister lags).
func (p *pipeline) waitStored(session string, seq int64) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var n int64
		_ = p.pool.QueryRow(context.Background(), `SELECT COALESCE(max(seq), 0) FROM messages WHERE session_id = $1`, session).Scan(&n)
		if n >= seq {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("store did not reach %s seq %d within 20s", session, seq)
}

func user(prefix string) string { return prefix + "-" + uuid.NewString()[:8] }
