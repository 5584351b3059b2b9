package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqflow/seqflow/internal/presence"
)

// metrics are the pusher's Prometheus series.
type metrics struct {
	events         *prometheus.CounterVec // by kind: message, session_create, membership, edit, recall, duplicate, undecodable
	pushLatency    prometheus.Histogram   // event server time → batch handed to the transport
	readLatency    prometheus.Histogram   // event server time → its poll returned
	sendSeconds    prometheus.Histogram   // one Send call
	fanoutConns    prometheus.Histogram   // online connections per event
	fanoutGateways prometheus.Histogram   // gateways per event
	fanoutMembers  prometheus.Histogram   // recipients (members and sender) per event
	batches        prometheus.Counter     // batches handed to the transport
	droppedBatches *prometheus.CounterVec // by reason
	droppedItems   *prometheus.CounterVec // by reason; one item is one event for one gateway
	offline        *prometheus.CounterVec // by result: produced, failed, skipped_large
	unknownSession prometheus.Counter     // events of sessions without a create in the log
	replays        prometheus.Counter     // membership replays on assignment
	replaySeconds  prometheus.Histogram   // time of one replay
	replayRecords  prometheus.Counter     // records read by replays
	presenceSecs   prometheus.Histogram   // one poll's presence lookup
	pollRecords    prometheus.Histogram   // records per poll
	inflight       prometheus.Gauge       // polls handed off but not committed
	lanes          prometheus.Gauge       // live gateway senders
	lag            *prometheus.GaugeVec   // by topic, partition
	commits        *prometheus.CounterVec // by result: ok, error
}

func newMetrics(reg prometheus.Registerer) *metrics {
	latency := prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5 ms .. 16 s
	size := prometheus.ExponentialBuckets(1, 4, 9)          // 1 .. 65536
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_pusher_events_total", Help: "Records consumed, by kind.",
		}, []string{"kind"}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_push_latency_seconds", Help: "From the event's server_ts_ms to its batch being handed to the transport (the gateway measures the rest, to the socket).",
			Buckets: latency,
		}),
		readLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_read_latency_seconds", Help: "From the event's server_ts_ms to the poll that returned it (the sequencer's transaction commit and the fetch); push_latency minus this is the pusher's own time.",
			Buckets: latency,
		}),
		sendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_send_seconds", Help: "Duration of one transport Send.", Buckets: latency,
		}),
		fanoutConns: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_fanout_connections", Help: "Online connections one event is pushed to.", Buckets: size,
		}),
		fanoutGateways: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_fanout_gateways", Help: "Gateways one event is pushed to.", Buckets: size,
		}),
		fanoutMembers: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_fanout_members", Help: "Users (members and the sender) one event is for.", Buckets: size,
		}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_pusher_batches_total", Help: "Batches handed to the transport.",
		}),
		droppedBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_pusher_dropped_batches_total", Help: "Batches not handed to a gateway, by reason (queue_full, no_receiver, timeout, too_large, closed, transport, presence_error; peer_auth: the gateway's registry entry or listener failed the peer authentication and pub/sub did not take the batch either).",
		}, []string{"reason"}),
		droppedItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_pusher_dropped_items_total", Help: "Events not pushed to one gateway, by reason; clients recover them by sync.",
		}, []string{"reason"}),
		offline: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_pusher_offline_notifications_total", Help: "Offline notifications, by result (produced, failed, skipped_large).",
		}, []string{"result"}),
		unknownSession: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_pusher_unknown_session_events_total", Help: "Events of sessions with no session_create in the log; only the sender receives them.",
		}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_pusher_membership_replays_total", Help: "Partitions whose membership was rebuilt from the sequenced log.",
		}),
		replaySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_membership_replay_seconds", Help: "Time to rebuild one partition's membership.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
		replayRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_pusher_membership_replay_records_total", Help: "Records read by membership replays.",
		}),
		presenceSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_presence_lookup_seconds", Help: "One poll's presence lookup.", Buckets: latency,
		}),
		pollRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_pusher_poll_records", Help: "Records per poll batch.", Buckets: size,
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqflow_pusher_inflight_polls", Help: "Poll batches handed off but not yet marked for commit.",
		}),
		lanes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqflow_pusher_gateway_lanes", Help: "Gateways with a live sender goroutine.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seqflow_pusher_consumer_lag_records", Help: "High watermark minus next offset, per topic partition.",
		}, []string{"topic", "partition"}),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_pusher_commits_total", Help: "Offset commits, by result.",
		}, []string{"result"}),
	}
	reg.MustRegister(m.events, m.pushLatency, m.readLatency, m.sendSeconds, m.fanoutConns, m.fanoutGateways, m.fanoutMembers,
		m.batches, m.droppedBatches, m.droppedItems, m.offline, m.unknownSession, m.replays, m.replaySeconds,
		m.replayRecords, m.presenceSecs, m.pollRecords, m.inflight, m.lanes, m.lag, m.commits)
	return m
}

// watchCache exports the presence cache's hit and miss counts.
func (m *metrics) watchCache(reg prometheus.Registerer, c *presence.Cache) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seqflow_pusher_presence_cache_hits_total", Help: "Recipients whose presence came from the pusher's cache.",
		}, func() float64 { return float64(c.Hits()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seqflow_pusher_presence_cache_misses_total", Help: "Recipients whose presence was read from Redis.",
		}, func() float64 { return float64(c.Misses()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "seqflow_pusher_presence_changes_heard_total", Help: "Users whose presence change a gateway announced and the cache heard (their entries dropped).",
		}, func() float64 { return float64(c.Heard()) }),
	)
}
