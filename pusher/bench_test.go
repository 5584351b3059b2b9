package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/seqflow/seqflow/internal/membership"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// BenchmarkRoute_* measure the pusher's CPU work for one message in a
// group: membership lookup, the presence-key union, and grouping the online
// members' connections by gateway (presence itself is a map here; its
// Redis round trip is in BenchmarkPush_*). 3% of members are online, spread
// over 10 gateways. Run with
//
//	go test ./pusher -run '^$' -bench 'BenchmarkRoute_'
func BenchmarkRoute_Members10(b *testing.B)  { benchRoute(b, 10) }
func BenchmarkRoute_Members1k(b *testing.B)  { benchRoute(b, 1_000) }
func BenchmarkRoute_Members10k(b *testing.B) { benchRoute(b, 10_000) }

func benchRoute(b *testing.B, members int) {
	ids := make([]string, members)
	online := map[string][]presence.Conn{}
	for i := range ids {
		ids[i] = fmt.Sprintf("user-%06d", i)
		if i%33 == 0 {
			online[ids[i]] = []presence.Conn{{UserID: ids[i], DeviceID: "d", ConnID: "c" + ids[i], GatewayID: fmt.Sprintf("gw-%d", i%10)}}
		}
	}
	part := membership.NewPartition()
	part.Apply(&imv1.SequencedEvent{SessionId: "s", Seq: 1, SenderUserId: ids[0],
		Payload: &imv1.SequencedEvent_SessionCreate{SessionCreate: &imv1.SessionCreate{MemberUserIds: ids}}})
	ev := textEv("s", 2, ids[0], "hello")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ev.Seq = int64(i + 2)
		res := part.Apply(ev)
		evs := []routed{{ev: ev, recipients: res.Recipients}}
		_ = users(evs, nil)
		pl, _ := buildPlan(evs, nil, online, planOpts{offline: false})
		if len(pl.batches) == 0 {
			b.Fatal("no batches")
		}
	}
}

// BenchmarkPush_* measure a running pusher against the local Kafka and
// Redis: the time from a sequenced event becoming visible (its Kafka
// transaction committed) to its batch reaching the gateways' handlers over
// Redis pub/sub, one message at a time. Reports p50/p99 in µs. Run with
//
//	go test ./pusher -run '^$' -bench 'BenchmarkPush_' -benchtime 300x
func BenchmarkPush_Direct(b *testing.B)   { benchPush(b, 2, 2) }
func BenchmarkPush_Group10k(b *testing.B) { benchPush(b, 10_000, 300) }

func benchPush(b *testing.B, members, onlineN int) {
	e := newEnv(b)
	gws := []*gateway{e.gateway("gw-0"), e.gateway("gw-1"), e.gateway("gw-2")}
	ids := make([]string, members)
	type oc struct {
		g *gateway
		c presence.Conn
	}
	var online []oc
	for i := range ids {
		ids[i] = e.user(fmt.Sprintf("u%05d", i))
		if len(online) < onlineN && (members <= onlineN || i%(members/onlineN) == 0) {
			g := gws[len(online)%len(gws)]
			online = append(online, oc{g, g.connect(ids[i], "d")})
		}
	}
	cfg := e.config()
	cfg.Offline = false // measure the push path alone
	r := e.startPusher(cfg)
	s := e.session("bench")
	e.emit(createEv(s, ids[0], ids[1:]...))
	last := online[len(online)-1]
	eventually(b, "the create", func() bool { return len(last.g.seqs(last.c, s)) == 1 })
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		seq := int64(i + 2)
		e.emit(msgEv(s, ids[0], "hello"))
		visible := time.Now()
		for _, o := range online {
			for {
				got := o.g.seqs(o.c, s)
				if len(got) > 0 && got[len(got)-1] == seq {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
		lat = append(lat, time.Since(visible))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	var m dto.Metric
	if err := r.p.m.presenceSecs.Write(&m); err != nil {
		b.Fatal(err)
	}
	h := m.GetHistogram()
	b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1e6, "presence-µs/poll")
}
