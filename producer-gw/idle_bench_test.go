package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// BenchmarkIdle_Conns2k holds idle WebSocket connections (one user each,
// answering pings only) on an in-process gateway and reports the heap and
// goroutine stacks in use per connection after a GC. Client and gateway
// share the process, so the figures are both ends of each connection; the
// heap profile written to $SEQFLOW_BENCH_HEAPPROFILE (when set) tells them
// apart by function. SEQFLOW_BENCH_IDLE_CONNS overrides the count. The
// gateway process's RSS per connection is cmd/seqbench's idle phase.
func BenchmarkIdle_Conns2k(b *testing.B) {
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("SEQFLOW_BENCH_IDLE_CONNS")); err == nil && v > 0 {
		n = v
	}
	p := newPipelineNoProcs(b)
	gw := p.gateway(map[string]string{"GATEWAY_MAX_CONNS_PER_IP": "0", "GATEWAY_MAX_CONNS": "0"}) // all from 127.0.0.1
	url := "ws://" + gw.addr + "/v1/ws"
	for i := 0; i < b.N; i++ {
		before := inUse()
		conns := make([]*websocket.Conn, 0, n)
		for j := range n {
			h := http.Header{"Authorization": {"Bearer " + p.token(fmt.Sprintf("idle%d-%d-%s", i, j, newID()[:8]), "d", time.Hour)}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
			if err == nil {
				_, _, err = ws.Read(ctx) // hello
			}
			cancel()
			if err != nil {
				b.Fatalf("connection %d: %v", j, err)
			}
			ws.CloseRead(context.Background())
			conns = append(conns, ws)
		}
		time.Sleep(2 * time.Second) // the gateway's per-connection setup settles
		after := inUse()
		if path := os.Getenv("SEQFLOW_BENCH_HEAPPROFILE"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
		b.ReportMetric(float64(after.heap-before.heap)/float64(n), "heap_B/conn")
		b.ReportMetric(float64(after.stack-before.stack)/float64(n), "stack_B/conn")
		b.ReportMetric(float64(after.goroutines-before.goroutines)/float64(n), "goroutines/conn")
		for _, ws := range conns {
			_ = ws.CloseNow()
		}
	}
}

type memUse struct{ heap, stack, goroutines int64 }

func inUse() memUse {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memUse{int64(m.HeapInuse), int64(m.StackInuse), int64(runtime.NumGoroutine())}
}
