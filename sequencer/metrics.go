package main

import "github.com/prometheus/client_golang/prometheus"

// stageBuckets resolve latencies from 0.5 ms to about 5.6 s in steps of
// 1.5×, fine enough to tell 20 ms from 30 ms (the ACK target).
var stageBuckets = prometheus.ExponentialBuckets(0.0005, 1.5, 24)

// metrics are the sequencer's Prometheus series.
type metrics struct {
	records       *prometheus.CounterVec // by outcome: sequenced, duplicate, dead_letter
	batchSize     prometheus.Histogram
	txnSeconds    *prometheus.HistogramVec // by result: committed, aborted
	uplinkWait    prometheus.Histogram     // per record: uplink timestamp to poll
	merges        *prometheus.CounterVec   // by result: merged, none
	stageSeconds  *prometheus.HistogramVec // per committed batch, by stage: prepare, produce, commit, total
	renewals      *prometheus.CounterVec   // by kind: shortfall, prefetch
	renewSeconds  *prometheus.HistogramVec
	renewErrors   prometheus.Counter
	restores      prometheus.Counter
	restoreSecs   prometheus.Histogram
	dedupEvicted  prometheus.Counter
	lag           *prometheus.GaugeVec // by partition
	sessionsReset prometheus.Counter
	released      prometheus.Counter
	directAcks    *prometheus.CounterVec // by result: sent, no_receiver, failed, dropped
	directAckSecs prometheus.Histogram
	// group state: restores by source (from_snapshot true/false), saves
	// by result (saved, stale, failed)
	groupRestoreSecs *prometheus.HistogramVec
	groupSnapshots   *prometheus.CounterVec
	groupSnapSecs    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_sequencer_records_total", Help: "Uplink records handled, by outcome.",
		}, []string{"outcome"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_sequencer_batch_records", Help: "Uplink records per transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9),
		}),
		txnSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seqflow_sequencer_txn_commit_seconds", Help: "Time to end a Kafka transaction (flush, offsets, EndTxn).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"result"}),
		uplinkWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "seqflow_sequencer_uplink_wait_seconds",
			Help:    "From an uplink's record timestamp (set by the gateway's producer when it produced the record) to the poll that returned it.",
			Buckets: stageBuckets,
		}),
		merges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_sequencer_poll_merges_total",
			Help: "Polls that handed over an already buffered fetch, after which the next fetch was awaited for SEQUENCER_POLL_MERGE_WAIT, by result: merged (it came and joined the batch), none.",
		}, []string{"result"}),
		stageSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "seqflow_sequencer_batch_stage_seconds",
			Help:    "Stages of one committed batch: prepare (poll returned to events built: decode, dedup, segments), produce (flush of the events), commit (EndTxn), total (poll returned to commit).",
			Buckets: stageBuckets,
		}, []string{"stage"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_sequencer_segment_renewals_total", Help: "Session segments reserved in PostgreSQL, by kind.",
		}, []string{"kind"}),
		renewSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seqflow_sequencer_segment_renew_seconds", Help: "Latency of one segment reservation round trip.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
		}, []string{"kind"}),
		renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_sequencer_segment_renew_errors_total", Help: "Failed segment reservation round trips.",
		}),
		restores: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_sequencer_dedup_restores_total", Help: "Dedup windows rebuilt from the sequenced log on assignment.",
		}),
		restoreSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_sequencer_dedup_restore_seconds", Help: "Time to rebuild one partition's dedup window.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		dedupEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_sequencer_dedup_evicted_total", Help: "Dedup entries dropped by the size bound before their window ended.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seqflow_sequencer_consumer_lag_records", Help: "High watermark minus next offset, per uplink partition.",
		}, []string{"partition"}),
		sessionsReset: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_sequencer_session_resets_total", Help: "Kafka transact sessions rebuilt after an unrecoverable error.",
		}),
		released: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_sequencer_segments_released_total", Help: "Unused segment tails given back to PostgreSQL when partitions were revoked.",
		}),
	}
	m.directAcks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seqflow_sequencer_direct_acks_total",
		Help: "Committed seqs sent straight to the senders' gateways, by result: sent, no_receiver (the gateway has no push stream registered), failed (the send failed or timed out), dropped (a queue was full, or the sequencer stopped). All but sent are answered through the pusher.",
	}, []string{"result"})
	m.directAckSecs = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "seqflow_sequencer_direct_ack_seconds",
		Help:    "From a transaction's End returning committed to its direct ACKs written to the sender's gateway (the oldest transaction of a send).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 1.5, 28),
	})
	m.groupRestoreSecs = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "seqflow_sequencer_group_restore_seconds", Help: "Time to rebuild a partition's group state, by whether it started from a snapshot.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	}, []string{"from_snapshot"})
	m.groupSnapshots = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "seqflow_sequencer_group_snapshots_total", Help: "Group state snapshots, by result: saved, stale (a newer one is stored), failed.",
	}, []string{"result"})
	m.groupSnapSecs = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "seqflow_sequencer_group_snapshot_seconds", Help: "Time to save one group state snapshot.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	reg.MustRegister(m.groupRestoreSecs, m.groupSnapshots, m.groupSnapSecs)
	reg.MustRegister(m.directAcks, m.directAckSecs, m.records, m.batchSize, m.txnSeconds, m.uplinkWait, m.merges, m.stageSeconds, m.renewals, m.renewSeconds, m.renewErrors,
		m.restores, m.restoreSecs, m.dedupEvicted, m.lag, m.sessionsReset, m.released)
	return m
}
