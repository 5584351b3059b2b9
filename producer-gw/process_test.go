package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestProcessShutdown runs the real binary: a bad config exits at once
// with a clear error; SIGTERM closes sockets with 1012 "reconnect" and
// exits 0.
func TestProcessShutdown(t *testing.T) {
	p := newPipelineNoProcs(t)
	bin := proc.Build(t, "./producer-gw")
	env := p.env(map[string]string{"GATEWAY_ADDR": proc.AnyPort})
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}

	bad := proc.Start(t, "gw-bad", bin, append(list, "GATEWAY_MAX_IN_FLIGHT=0", "GATEWAY_JWT_HS256_SECRET=short")...)
	waitExit(t, bad)
	for _, want := range []string{"GATEWAY_MAX_IN_FLIGHT", "GATEWAY_JWT_HS256_SECRET"} {
		if !bad.LogContains(want) {
			t.Fatalf("bad config: log does not name %s", want)
		}
	}

	gw := proc.Start(t, "gw", bin, list...)
	addr := proc.LoggedAddr(t, gw, "gateway listening", "GATEWAY_ADDR")
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v1/changes")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway process not listening: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, _, err := dial(t, &testGW{addr: addr}, p.token("proc-u", "d1", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	gw.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		t.Fatal("socket not closed after SIGTERM")
	}
	var ce websocket.CloseError
	if !errors.As(c.closeErr(), &ce) || ce.Code != websocket.StatusServiceRestart || ce.Reason != "reconnect" {
		t.Fatalf("close = %v, want 1012 reconnect", c.closeErr())
	}
	waitExit(t, gw)
	if gw.LogContains("producer-gw:") {
		t.Fatal("clean shutdown logged an error exit")
	}
}

// TestProcessCrashPresence kills the binary with SIGKILL: its connections
// stay in Redis but vanish from presence lookups within GATEWAY_PRESENCE_TTL.
func TestProcessCrashPresence(t *testing.T) {
	p := newPipelineNoProcs(t)
	bin := proc.Build(t, "./producer-gw")
	env := p.env(map[string]string{"GATEWAY_ADDR": proc.AnyPort, "GATEWAY_PRESENCE_TTL": "3s"})
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	gw := proc.Start(t, "gw", bin, list...)
	addr := proc.LoggedAddr(t, gw, "gateway listening", "GATEWAY_ADDR")
	var c *client
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if c, _, err = dial(t, &testGW{addr: addr}, p.token("crash-u", "d1", time.Hour)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway process not accepting: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{p.st.RedisAddr}})
	defer rdb.Close()
	ps := presence.New(rdb, 3*time.Second)
	if got, err := ps.Lookup(context.Background(), []string{"crash-u"}); err != nil || len(got["crash-u"]) == 0 {
		t.Fatalf("presence while connected: %+v, %v", got, err)
	}
	killed := time.Now()
	gw.Kill()
	<-c.done
	for {
		got, err := ps.Lookup(context.Background(), []string{"crash-u"})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, pc := range got["crash-u"] {
			found = found || pc.ConnID == c.hello.ConnID
		}
		if !found {
			break
		}
		if time.Since(killed) > 3*time.Second+time.Second {
			t.Fatalf("crashed gateway's connection still present %s after the kill", time.Since(killed))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitExit(t *testing.T, p *proc.Proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for p.Running() {
		if ctx.Err() != nil {
			t.Fatalf("%s did not exit", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestShutdownAnswersInFlight: a send waiting for its seq when shutdown
// starts is answered (here "accepted": no sequencer runs) before the
// socket closes with 1012, and a command after the drain began is refused
// with shutting_down.
func TestShutdownAnswersInFlight(t *testing.T) {
	p := newPipelineNoProcs(t)
	gw := p.gateway(map[string]string{"GATEWAY_ACK_WAIT": "2s", "GATEWAY_SHUTDOWN_TIMEOUT": "10s"})
	alice := user("alice")
	// No persister runs: tell the gateway about the membership the way a
	// pushed session_create would.
	gw.g.members.observe(&imv1.SequencedEvent{SessionId: "g-drain", Seq: 1, SenderUserId: alice,
		Payload: &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{Kind: imv1.SessionKind_SESSION_KIND_GROUP}}})
	c := p.connect(gw, alice, "phone")
	id := newID()
	c.send(sendFrame("g-drain", id, "in flight at shutdown"))
	// The gateway has read it and waits for a seq that cannot come.
	for deadline := time.Now().Add(30 * time.Second); gw.g.waiters.len() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the gateway never registered the send's wait for a seq")
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- gw.stop() }()
	ack := c.ackOf(id)
	if ack.Op != wire.OpAck || ack.Status != wire.StatusAccepted {
		t.Fatalf("in-flight send answered %+v, want accepted", ack)
	}
	<-c.done
	if st := websocket.CloseStatus(c.closeErr()); st != websocket.StatusServiceRestart {
		t.Fatalf("close %v after the answer, want 1012", c.closeErr())
	}
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
}

// TestSlowConsumerIsClosed: a client that stops reading does not hold
// the gateway's pushes; its connection is closed once its queue is full.
// Batches are handed to the gateway's transport handler directly.
func TestSlowConsumerIsClosed(t *testing.T) {
	p := newPipelineNoProcs(t)
	gw := p.gateway(map[string]string{"GATEWAY_CONN_QUEUE": "8", "GATEWAY_WRITE_TIMEOUT": "2s"})
	bob := user("bob")
	c := p.connect(gw, bob, "phone")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for ctx.Err() == nil && gw.g.hub.conn(c.hello.ConnID) == nil {
		time.Sleep(10 * time.Millisecond)
	}
	body := make([]byte, 16<<10)
	for i := range body {
		body[i] = 'x'
	}
	// The test client's reader stops taking frames once its buffer of
	// 1024 is full; 4000 events of 16 KiB overflow every buffer on the way.
	for seq := int64(1); seq <= 4000 && gw.g.hub.conn(c.hello.ConnID) != nil; seq++ {
		gw.g.down.onBatch(&imv1.PushBatch{GatewayId: gw.g.cfg.GatewayID, Items: []*imv1.PushItem{{
			Recipients: []*imv1.Recipient{{UserId: bob, DeviceId: "phone", ConnId: c.hello.ConnID}},
			Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{SessionId: "g-slow", Seq: seq, MsgId: seq, SenderUserId: "alice",
				Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: body}}}},
		}}})
	}
	deadline := time.Now().Add(15 * time.Second)
	for gw.g.hub.conn(c.hello.ConnID) != nil {
		if time.Now().After(deadline) {
			t.Fatal("a client that stopped reading is still connected")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The close is counted after presence is removed, just after unregister.
	for {
		var m dto.Metric
		_ = gw.g.m.closes.WithLabelValues("slow_consumer").Write(&m)
		if m.GetCounter().GetValue() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slow_consumer closes = %v, want 1", m.GetCounter().GetValue())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProcessSealsBodiesByDefault runs the real binary: without SEQFLOW_KEK
// it refuses to start unless plaintext bodies were chosen by name, and it
// reports the choice on /metrics (seqflow_bodies_sealed) and in its log.
func TestProcessSealsBodiesByDefault(t *testing.T) {
	p := newPipelineNoProcs(t)
	bin := proc.Build(t, "./producer-gw")
	envList := func(over map[string]string) []string {
		env := p.env(map[string]string{"GATEWAY_ADDR": proc.AnyPort, "GATEWAY_ADMIN_ADDR": proc.AnyPort})
		// Whatever the test's own environment holds, the process sees these.
		env["SEQFLOW_KEK"], env["SEQFLOW_PLAINTEXT_BODIES"] = "", "false"
		for k, v := range over {
			env[k] = v
		}
		var list []string
		for k, v := range env {
			list = append(list, k+"="+v)
		}
		return list
	}

	neither := proc.Start(t, "gw-unsealed", bin, envList(nil)...)
	waitExit(t, neither)
	if neither.Err() == nil {
		t.Fatal("a gateway with neither SEQFLOW_KEK nor SEQFLOW_PLAINTEXT_BODIES=true exited 0")
	}
	for _, want := range []string{"SEQFLOW_KEK is required", "SEQFLOW_PLAINTEXT_BODIES=true"} {
		if !neither.LogContains(want) {
			t.Fatalf("the refusal does not say %q", want)
		}
	}
	if neither.LogContains("gateway listening") {
		t.Fatal("the gateway listened before refusing")
	}

	for _, c := range []struct {
		name, log string
		over      map[string]string
		want      float64
	}{
		{"sealed", `"msg":"bodies sealed"`, map[string]string{"SEQFLOW_KEK": testKEK}, 1},
		{"plaintext", `"msg":"bodies in plaintext`, map[string]string{"SEQFLOW_PLAINTEXT_BODIES": "true"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := proc.Start(t, "gw-"+c.name, bin, envList(c.over)...)
			adminAddr := proc.LoggedAddr(t, gw, "admin listening", "GATEWAY_ADMIN_ADDR")
			proc.LoggedAddr(t, gw, "gateway listening", "GATEWAY_ADDR")
			if !gw.LogContains(c.log) {
				t.Fatalf("the start log does not say %s", c.log)
			}
			if got := scrapeGauge(t, adminAddr, "seqflow_bodies_sealed"); got != c.want {
				t.Fatalf("seqflow_bodies_sealed %v, want %v", got, c.want)
			}
			gw.Stop(10 * time.Second)
		})
	}
}

// scrapeGauge reads one unlabelled gauge from a /metrics endpoint.
func scrapeGauge(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s on /metrics", name)
	return 0
}
