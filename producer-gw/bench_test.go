package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/seqflow/seqflow/internal/wire"
)

// BenchmarkSendAck_1conn and _16conns measure a send's round trip through
// the whole pipeline: WebSocket frame → gateway → Kafka → sequencer → Kafka
// → pusher → Redis → gateway → ACK with the seq. Each connection is its own
// user and group and keeps one send in flight (closed loop), so the figure
// is latency under that concurrency, and msgs/s what it sustains. Run with
// a fixed count, e.g. -benchtime 2000x (setup costs seconds).
func BenchmarkSendAck_1conn(b *testing.B)   { benchSendAck(b, 1) }
func BenchmarkSendAck_16conns(b *testing.B) { benchSendAck(b, 16) }

func benchSendAck(b *testing.B, conns int) {
	p := newPipeline(b)
	gw := p.gateway(map[string]string{"GATEWAY_RATE_PER_USER": "1000000", "GATEWAY_RATE_BURST": "1000000"})
	type lane struct {
		ws  *websocket.Conn
		sid string
	}
	lanes := make([]lane, conns)
	for i := range lanes {
		u := user(fmt.Sprintf("bench%d", i))
		c := p.connect(gw, u, "d")
		sid, _ := createGroup(c)
		_ = c.ws.CloseNow()
		ws, _, err := websocket.Dial(context.Background(), "ws://"+gw.addr+"/v1/ws", &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + p.token(u, "bench", time.Hour)}}})
		if err != nil {
			b.Fatal(err)
		}
		ws.SetReadLimit(1 << 20)
		b.Cleanup(func() { _ = ws.CloseNow() })
		lanes[i] = lane{ws: ws, sid: sid}
	}
	sendOne := func(l lane, body string) (time.Duration, error) {
		id := newID()
		f, _ := json.Marshal(sendFrame(l.sid, id, body))
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := l.ws.Write(ctx, websocket.MessageText, f); err != nil {
			return 0, err
		}
		for {
			_, data, err := l.ws.Read(ctx)
			if err != nil {
				return 0, err
			}
			var fr struct {
				Op          string `json:"op"`
				ClientMsgID string `json:"client_msg_id"`
				Status      string `json:"status"`
			}
			if json.Unmarshal(data, &fr) != nil || fr.ClientMsgID != id || (fr.Op != wire.OpAck && fr.Op != wire.OpError) {
				continue // hello, our own events
			}
			if fr.Op != wire.OpAck || fr.Status != wire.StatusOK {
				return 0, fmt.Errorf("send answered %s", data)
			}
			return time.Since(start), nil
		}
	}
	for _, l := range lanes { // warm up: connections, segments, caches
		for i := 0; i < 20; i++ {
			if _, err := sendOne(l, "warm-up"); err != nil {
				b.Fatal(err)
			}
		}
	}
	body := strings.Repeat("x", 200)
	lat := make([][]time.Duration, conns)
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	b.ResetTimer()
	start := time.Now()
	for i, l := range lanes {
		n := b.N / conns
		if i < b.N%conns {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < n; j++ {
				d, err := sendOne(l, body)
				if err != nil {
					errs <- err
					return
				}
				lat[i] = append(lat[i], d)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	q := func(f float64) float64 {
		return float64(all[min(len(all)-1, int(f*float64(len(all))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(q(0.999), "p999_ms")
	b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "max_ms")
}
