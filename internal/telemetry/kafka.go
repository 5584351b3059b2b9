package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// KafkaMetrics returns the kgo option that hooks a client into reg through
// kprom, as the seqflow_kafka_* series labelled with the client's ID. Give
// each instrumented client a distinct kgo.ClientID: a second live client of
// the same ID is not instrumented (kprom would otherwise panic on the
// duplicate registration); its series come back once the first is closed.
func KafkaMetrics(reg *prometheus.Registry) kgo.Opt {
	m := kprom.NewMetrics("seqflow_kafka",
		kprom.Registerer(tolerant{reg}), kprom.Gatherer(reg), kprom.WithClientLabel())
	return kgo.WithHooks(m)
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
