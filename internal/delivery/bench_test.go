package delivery_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/delivery"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// BenchmarkTransport_Redis and BenchmarkTransport_TCP measure one pusher
// sending to one gateway on this machine, against the local Redis:
//   - pingpong: send a batch, wait until the gateway's handler has it;
//     reports the p50 and p99 hand-off-to-handler latency;
//   - stream: send batches back to back (as a partition's lane does) and
//     wait for the last; ns/op is the cost of one batch at full speed.
//
// items is the number of events in a batch; each event has a 100-byte text
// body and 3 recipients. Run with
//
//	go test ./internal/delivery -run '^$' -bench 'BenchmarkTransport_' -benchtime 2000x
//
// stream also reports redis-cpu-µs/item: the Redis server's CPU time (user
// + sys, from INFO cpu) over the run, per item. The local Redis is shared,
// so other users' commands count too; treat it as an upper bound.
func BenchmarkTransport_Redis(b *testing.B) {
	rdb := newRedis(b)
	benchTransport(b, rdb, delivery.NewRedisSender(rdb, testKeys, delivery.RedisSenderOptions{}), delivery.NewRedisReceiver(rdb, testKeys, delivery.RedisReceiverOptions{}))
}

func BenchmarkTransport_TCP(b *testing.B) {
	rdb := newRedis(b)
	reg := delivery.NewRedisRegistry(rdb, testKeys)
	benchTransport(b, rdb, delivery.NewTCPSender(reg, testKeys, delivery.TCPSenderOptions{}), delivery.NewTCPReceiver(reg, testKeys, delivery.TCPReceiverOptions{}))
}

// redisCPU returns the Redis server's CPU seconds so far.
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return total
}

func benchBatch(gw string, items int, seq *int64) *imv1.PushBatch {
	b := &imv1.PushBatch{GatewayId: gw}
	for range items {
		*seq++
		b.Items = append(b.Items, &imv1.PushItem{
			Recipients: []*imv1.Recipient{{UserId: "u1", DeviceId: "d1", ConnId: "c1"}, {UserId: "u2", DeviceId: "d1", ConnId: "c2"}, {UserId: "u3", DeviceId: "d2", ConnId: "c3"}},
			Item: &imv1.PushItem_Event{Event: &imv1.SequencedEvent{SessionId: "bench-session", Seq: *seq, MsgId: 1 << 40, SenderUserId: "u1",
				ServerTsMs: time.Now().UnixMilli(), Payload: &imv1.SequencedEvent_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(strings.Repeat("x", 100))}}}},
		})
	}
	return b
}

func benchTransport(b *testing.B, rdb redis.UniversalClient, s delivery.Sender, r delivery.Receiver) {
	defer s.Close()
	gw := "bench-" + uuid.NewString()[:8]
	var got atomic.Int64
	arrived := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- r.Receive(ctx, gw, func(pb *imv1.PushBatch) {
			got.Add(int64(len(pb.Items)))
			select {
			case arrived <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { cancel(); <-errc }()
	var seq int64
	// Wait until the receiver is subscribed / registered.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := s.Send(context.Background(), benchBatch(gw, 1, &seq)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("receiver never became ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor := func(n int64) {
		deadline := time.Now().Add(30 * time.Second)
		for got.Load() < n {
			select {
			case <-arrived:
			case <-time.After(time.Millisecond):
			}
			if time.Now().After(deadline) {
				b.Fatalf("received %d of %d items", got.Load(), n)
			}
		}
	}
	waitFor(1)
	for _, items := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("pingpong/items=%d", items), func(b *testing.B) {
			batches := make([]*imv1.PushBatch, b.N)
			for i := range batches {
				batches[i] = benchBatch(gw, items, &seq)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				want := got.Load() + int64(items)
				start := time.Now()
				if err := s.Send(ctx, batches[i]); err != nil {
					b.Fatal(err)
				}
				waitFor(want)
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
		b.Run(fmt.Sprintf("stream/items=%d", items), func(b *testing.B) {
			batches := make([]*imv1.PushBatch, b.N)
			for i := range batches {
				batches[i] = benchBatch(gw, items, &seq)
			}
			want := got.Load() + int64(b.N*items)
			cpu0 := redisCPU(b, rdb)
			b.ResetTimer()
			for i := range b.N {
				if err := s.Send(ctx, batches[i]); err != nil {
					b.Fatal(err)
				}
			}
			waitFor(want)
			b.StopTimer()
			b.ReportMetric(float64(b.N*items)/b.Elapsed().Seconds(), "items/s")
			b.ReportMetric((redisCPU(b, rdb)-cpu0)*1e6/float64(b.N*items), "redis-cpu-µs/item")
		})
	}
}
