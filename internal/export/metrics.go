package export

import "github.com/prometheus/client_golang/prometheus"

// metrics are the exporter's Prometheus series.
type metrics struct {
	events        *prometheus.CounterVec // by type (event_type column)
	files         prometheus.Counter
	bytes         prometheus.Counter
	commitSeconds prometheus.Histogram
	offsetErrors  prometheus.Counter
	fetchErrors   prometheus.Counter
	lag           *prometheus.GaugeVec // by partition
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_export_events_total", Help: "Events written to files, by event type (undecodable: a record that is no SequencedEvent).",
		}, []string{"type"}),
		files: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_export_files_total", Help: "Files committed (made visible).",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_export_bytes_total", Help: "Bytes of the files committed.",
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_export_file_commit_seconds", Help: "Time to finish a file: footer, fsync and rename, or the PUT.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		offsetErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_export_offset_commit_errors_total", Help: "Offset commits that failed (harmless: a restart resumes from the files).",
		}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_export_fetch_errors_total", Help: "Errors polls returned (franz-go retries them).",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seqflow_export_consumer_lag_records", Help: "High watermark minus next offset, per partition.",
		}, []string{"partition"}),
	}
	if reg != nil {
		reg.MustRegister(m.events, m.files, m.bytes, m.commitSeconds, m.offsetErrors, m.fetchErrors, m.lag)
	}
	return m
}
