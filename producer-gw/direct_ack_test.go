package main

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestDirectAck runs the gateway against a sequencer and a persister with
// no pusher at all (sequencer/README.md, "Direct ACKs"):
//   - a create is only "accepted": a command that changes membership is
//     answered by the pusher's event alone, which does not come;
//   - once the persister stored the create, a send gets its seq, and its
//     retry the duplicate ACK, from the sequencer's direct ACKs;
//   - with SEQUENCER_DIRECT_ACK=false the same send is only "accepted".
func TestDirectAck(t *testing.T) {
	for _, on := range []bool{true, false} {
		name := map[bool]string{true: "on", false: "off"}[on]
		t.Run(name, func(t *testing.T) {
			p := newPipelineNoProcs(t)
			var extra []string
			if !on {
				extra = []string{"SEQUENCER_DIRECT_ACK=false"}
			}
			p.startSome(extra, "sequencer", "persister")
			gw := p.gateway(map[string]string{"GATEWAY_ACK_WAIT": "2s"})
			alice, bob := user("alice"), user("bob")
			a := p.connect(gw, alice, "phone")
			m := gw.g.m.seqResults
			answered := func() float64 { return testutil.ToFloat64(m.WithLabelValues("sequencer", "true")) }

			create := newID()
			a.send(map[string]any{"op": "create_session", "client_msg_id": create, "kind": "direct", "peer_user_id": bob})
			if f := a.ackOf(create); f.Op != wire.OpAck || f.Status != wire.StatusAccepted || f.Seq != 0 {
				t.Fatalf("create ack %+v, want accepted without a seq (no pusher runs)", f)
			}
			session := DirectSessionID(alice, bob)
			p.waitStored(session, 1)

			id := newID()
			a.send(sendFrame(session, id, "hi bob"))
			if !on {
				if f := a.ackOf(id); f.Op != wire.OpAck || f.Status != wire.StatusAccepted || f.Seq != 0 {
					t.Fatalf("send ack %+v with direct ACKs off, want accepted without a seq", f)
				}
				if got := answered(); got != 0 {
					t.Fatalf("seqs answered by the sequencer with direct ACKs off: %v", got)
				}
				return
			}
			ack := a.mustAckOK(id)
			if ack.Duplicate || ack.Seq != 2 {
				t.Fatalf("send ack %+v, want seq 2, not a duplicate", ack)
			}
			a.send(sendFrame(session, id, "hi bob"))
			if r := a.mustAckOK(id); r.Seq != ack.Seq || r.MsgID != ack.MsgID || !r.Duplicate {
				t.Fatalf("retried send = %+v, want seq %d msg_id %s duplicate", r, ack.Seq, ack.MsgID)
			}
			// The gateway counts a seq just after handing it to the command,
			// so the count may trail the ACK by a moment.
			for deadline := time.Now().Add(5 * time.Second); answered() < 2 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if got := answered(); got != 2 {
				t.Fatalf("seqs answered by the sequencer: %v, want 2 (the send and its retry)", got)
			}
			if got := testutil.ToFloat64(m.WithLabelValues("pusher", "true")); got != 0 {
				t.Fatalf("seqs answered by a pusher: %v, want 0 (none runs)", got)
			}
			// The arrival histogram times the send's seq; the retry's
			// duplicate ACK carries the original's server_ts, so it is left out.
			if got := testutil.CollectAndCount(gw.g.m.seqArrival, "seqflow_gateway_seq_arrival_seconds"); got != 1 {
				t.Fatalf("seq arrival series: %d, want 1 (source sequencer)", got)
			}
			if n := histCount(t, gw.g.m.seqArrival.WithLabelValues("sequencer")); n != 1 {
				t.Fatalf("seq arrivals timed from the sequencer: %d, want 1 (the send, not its retry)", n)
			}
		})
	}
}

// histCount is how many observations h holds.
func histCount(t *testing.T, h prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
