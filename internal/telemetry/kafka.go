package telemetry

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/plugin/kprom"
)

// KafkaMetrics returns the kgo option that hooks a client into reg through
// kprom, as the seqflow_kafka_* series labelled with the client's ID. Give
// each instrumented client a distinct kgo.ClientID: a second live client of
// the same ID is not instrumented (kprom would otherwise panic on the
// duplicate registration); its series come back once the first is closed.
//
// It adds seqflow_kafka_requests_total{request}: the requests the
// process's clients wrote to brokers, by Kafka request type (Produce,
// Fetch, OffsetCommit, EndTxn, ...), which kprom does not count; with
// replication every write request also costs the brokers' replica
// fetches, so these rates say where broker CPU goes.
func KafkaMetrics(reg *prometheus.Registry) kgo.Opt {
	m := kprom.NewMetrics("seqflow_kafka",
		kprom.Registerer(tolerant{reg}), kprom.Gatherer(reg), kprom.WithClientLabel())
	rc := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seqflow_kafka_requests_total", Help: "Requests written to Kafka brokers by this process's clients, by request type.",
	}, []string{"request"})
	if err := reg.Register(rc); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			rc = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return kgo.WithHooks(m, requestCounter{rc})
}

// requestCounter counts the requests a client writes, by type.
type requestCounter struct{ c *prometheus.CounterVec }

func (r requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		r.c.WithLabelValues(kmsg.NameForKey(key)).Inc()
	}
}

// tolerant is a Registerer whose MustRegister skips collectors already
// registered instead of panicking.
type tolerant struct{ prometheus.Registerer }

func (t tolerant) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			panic(err)
		}
	}
}
