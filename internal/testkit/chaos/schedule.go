package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Kind is a kind of fault. The names are the keys of max_recovery_s in
// the report.
type Kind string

// Fault kinds.
const (
	// Kill9 kills one instance of a service with SIGKILL and restarts it.
	KillSequencer Kind = "kill9_sequencer"
	KillPersister Kind = "kill9_persister"
	KillPusher    Kind = "kill9_pusher"
	KillGateway   Kind = "kill9_gateway"
	// GatewayMidSend kills a gateway -9 at a moment when commands are in
	// flight through it (sent, not answered); the SDK resends them.
	GatewayMidSend Kind = "kill9_gateway_mid_send"
	// Stop pauses one instance with SIGSTOP for longer than the session
	// timeout (a zombie: its group evicts it, it wakes up fenced) and
	// resumes it with SIGCONT.
	StopSequencer Kind = "sigstop_sequencer"
	StopPersister Kind = "sigstop_persister"
	StopPusher    Kind = "sigstop_pusher"
	StopGateway   Kind = "sigstop_gateway"
	// KafkaBroker kills a broker -9 (the leader of most of the sequenced
	// topic's partitions: a leader failover) and restarts it.
	KafkaBroker Kind = "kafka_broker"
	// KafkaCoordinator kills -9 the broker that coordinates a sequencer
	// instance's transactions, and restarts it.
	KafkaCoordinator Kind = "kafka_txn_coordinator"
	// RedisWipe kills Redis -9 and starts it again with no data.
	RedisWipe Kind = "redis_restart_wiped"
	// PostgresRestart stops PostgreSQL in immediate mode (crash recovery
	// on start) and starts it again.
	PostgresRestart Kind = "postgres_restart"
)

// AllKinds is every fault kind, in a fixed order.
var AllKinds = []Kind{
	KillSequencer, KillPersister, KillPusher, KillGateway, GatewayMidSend,
	StopSequencer, StopPersister, StopPusher, StopGateway,
	KafkaBroker, KafkaCoordinator, RedisWipe, PostgresRestart,
}

// ShortKinds is the reduced set of chaos:short: every kind of the issue
// (kill -9 of each service type, a zombie, leader and coordinator
// failover, Redis wiped, PostgreSQL restarted, a gateway killed mid-send)
// at least once, in minutes.
var ShortKinds = []Kind{
	KillSequencer, KillPersister, KillPusher, GatewayMidSend,
	StopSequencer, StopPusher, KafkaCoordinator, RedisWipe, PostgresRestart,
}

// service returns the service a process fault targets, "" for others.
func (k Kind) service() string {
	switch k {
	case KillSequencer, StopSequencer:
		return "sequencer"
	case KillPersister, StopPersister:
		return "persister"
	case KillPusher, StopPusher:
		return "pusher"
	case KillGateway, GatewayMidSend, StopGateway:
		return "gateway"
	}
	return ""
}

func (k Kind) isStop() bool {
	return k == StopSequencer || k == StopPersister || k == StopPusher || k == StopGateway
}

// Fault is one planned fault.
type Fault struct {
	N    int  // 1-based place in the schedule
	Kind Kind // what
	// Instance is the service instance (0 or 1) for process faults, and
	// the sequencer instance whose coordinator is killed.
	Instance int
	// Node is the broker (1..3) for KafkaBroker when no leader is known.
	Node int
	// Hold is how long the fault lasts before the restart or SIGCONT.
	Hold time.Duration
	// Gap is the pause after recovery before the next fault.
	Gap time.Duration
}

func (f Fault) String() string {
	return fmt.Sprintf("#%d %s instance=%d node=%d hold=%s", f.N, f.Kind, f.Instance, f.Node, f.Hold)
}

// Schedule returns the first n faults of the endless schedule of seed
// over kinds: rounds in which every kind occurs once, each round in a
// seeded order, with seeded targets and durations. The same seed and
// kinds give the same faults, so a failing run can be repeated.
// sessionTimeout sets the zombie pauses: longer than it by 2–4s.
func Schedule(seed uint64, kinds []Kind, n int, sessionTimeout time.Duration) []Fault {
	rnd := rand.New(rand.NewPCG(seed, 0x5eedf10))
	var out []Fault
	for len(out) < n && len(kinds) > 0 {
		round := append([]Kind(nil), kinds...)
		rnd.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		for _, k := range round {
			if len(out) == n {
				break
			}
			f := Fault{N: len(out) + 1, Kind: k, Instance: rnd.IntN(2), Node: 1 + rnd.IntN(3),
				Gap: time.Duration(1000+rnd.IntN(2000)) * time.Millisecond}
			switch {
			case k.isStop():
				f.Hold = sessionTimeout + time.Duration(2000+rnd.IntN(2000))*time.Millisecond
			case k == KafkaBroker || k == KafkaCoordinator:
				f.Hold = time.Duration(3000+rnd.IntN(4000)) * time.Millisecond
			case k == RedisWipe || k == PostgresRestart:
				f.Hold = time.Duration(500+rnd.IntN(2500)) * time.Millisecond
			default: // kill -9: restarted at once or after up to 2s
				f.Hold = time.Duration(rnd.IntN(2000)) * time.Millisecond
			}
			out = append(out, f)
		}
	}
	return out
}

// budget is the longest a fault of kind k is expected to take from
// injection to recovery; a fault is injected only while the load's send
// phase has that long left, so the drain runs on a healed pipeline.
func (f Fault) budget(sessionTimeout time.Duration) time.Duration {
	switch {
	case f.Kind == KafkaBroker || f.Kind == KafkaCoordinator:
		return f.Hold + 75*time.Second // the restart waits for the cluster to be in sync
	case f.Kind.isStop():
		return f.Hold + 2*sessionTimeout + 20*time.Second
	default:
		return f.Hold + sessionTimeout + 20*time.Second
	}
}
