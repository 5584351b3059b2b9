package main

import "github.com/prometheus/client_golang/prometheus"

// metrics are the persister's Prometheus series.
type metrics struct {
	records      *prometheus.CounterVec // by outcome: inserted, duplicate, receipt, dead_letter
	deadLetters  *prometheus.CounterVec // by code
	batchSize    prometheus.Histogram
	writeSeconds *prometheus.HistogramVec // by result: ok, poison, retry
	retries      *prometheus.CounterVec   // by class: transient, error
	commitErrors prometheus.Counter
	fetchErrors  prometheus.Counter
	eventAge     prometheus.Histogram
	lag          *prometheus.GaugeVec // by topic, partition
	switches     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_persister_records_total", Help: "Records handled, by outcome.",
		}, []string{"outcome"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_persister_dead_letters_total", Help: "Records dead-lettered, by error code.",
		}, []string{"code"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_persister_batch_records", Help: "Records per poll batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		writeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seqflow_persister_write_seconds", Help: "Time of one database write attempt.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_persister_write_retries_total", Help: "Failed database writes retried, by class.",
		}, []string{"class"}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_persister_offset_commit_errors_total", Help: "Offset commits that failed (the records are written again, as no-ops).",
		}),
		fetchErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_persister_fetch_errors_total", Help: "Errors polls returned (fetch and group errors; franz-go retries them).",
		}),
		eventAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_persister_event_age_seconds", Help: "Time from sequencing (server_ts_ms) to the database commit of an event.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seqflow_persister_consumer_lag_records", Help: "High watermark minus next offset, per topic partition.",
		}, []string{"topic", "partition"}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_persister_schema_switches_total", Help: "Switch-overs to another store schema.",
		}),
	}
	reg.MustRegister(m.records, m.deadLetters, m.batchSize, m.writeSeconds, m.retries, m.commitErrors, m.fetchErrors, m.eventAge, m.lag, m.switches)
	return m
}
