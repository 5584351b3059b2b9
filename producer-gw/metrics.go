package main

import "github.com/prometheus/client_golang/prometheus"

// metrics are the gateway's Prometheus series.
type metrics struct {
	connections  prometheus.Gauge
	connects     *prometheus.CounterVec   // by result: ok, unauthenticated
	closes       *prometheus.CounterVec   // by reason: client, idle, token_expired, slow_consumer, shutdown, error
	frames       *prometheus.CounterVec   // by op and transport (ws, http)
	errors       *prometheus.CounterVec   // by error name
	acks         *prometheus.CounterVec   // by status: ok, duplicate, accepted
	ackSeconds   *prometheus.HistogramVec // by status: frame received to ACK queued
	produceSecs  prometheus.Histogram
	ackStages    *prometheus.HistogramVec // by stage: produce, seq_wait, from_sequencer
	notices      prometheus.Counter
	pushItems    *prometheus.CounterVec // by outcome
	pushLag      prometheus.Histogram
	receipts     *prometheus.CounterVec // by kind: read, delivery
	receiptFails prometheus.Counter
	presenceErrs prometheus.Counter
	// rateFallbacks counts rate-limit decisions taken by this instance's
	// own buckets because Redis failed or was cooling down after a failure.
	rateFallbacks prometheus.Counter
	// rateLeases counts the leases of a user's tokens taken from Redis.
	rateLeases prometheus.Counter
	signals    *prometheus.CounterVec // by signal (typing, read) and outcome
	// unreadRecounts counts the store recounts of unread counts after a
	// read below a connection's seed, by outcome: ok, error, dropped_queue_full.
	unreadRecounts *prometheus.CounterVec
	// keyErrors counts key-store calls that failed (not erased keys), by
	// op: seal, open.
	keyErrors  *prometheus.CounterVec
	badBatches prometheus.Counter
	// pushRejected: by transport and delivery.Reject* reason
	pushRejected *prometheus.CounterVec
	pushBatches  *prometheus.CounterVec   // by transport
	seqResults   *prometheus.CounterVec   // by source, matched
	seqArrival   *prometheus.HistogramVec // by source
	seqEarly     prometheus.Counter
	// deviceSignals counts sign-outs and login-policy replacements, by
	// signal (signout, replace) and outcome.
	deviceSignals *prometheus.CounterVec
	// signOutChecks counts token checks against sign-outs by outcome
	// (refused; redis_error: refused unavailable, see docs/protocol.md).
	signOutChecks *prometheus.CounterVec
	// bodiesSealed is 1 when bodies are sealed before they enter Kafka
	// (SEQFLOW_KEK), 0 when plaintext was chosen (SEQFLOW_PLAINTEXT_BODIES).
	bodiesSealed prometheus.Gauge
	// cursorsBounded counts read and delivered cursors lowered to their
	// session's last seq (receipts.bound).
	cursorsBounded prometheus.Counter
	// sockets is the client port's open TCP connections (connlimit.go).
	sockets prometheus.Gauge
	// connRefusals counts connections and requests refused by a
	// connection cap, by cap: total, ip, user.
	connRefusals *prometheus.CounterVec
	// syncShed counts sync and changes requests answered unavailable for
	// want of a slot (syncslots.go), by op; syncSlotsInUse is the slots
	// held.
	syncShed       *prometheus.CounterVec
	syncSlotsInUse prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	lat := prometheus.ExponentialBuckets(0.0005, 2, 16)
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqflow_gateway_connections", Help: "Open WebSocket connections.",
		}),
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_connects_total", Help: "WebSocket handshakes, by result.",
		}, []string{"result"}),
		closes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_closes_total", Help: "WebSocket connections closed, by reason.",
		}, []string{"reason"}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_requests_total", Help: "Client frames and HTTP calls, by op and transport.",
		}, []string{"op", "transport"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_errors_total", Help: "Error frames and responses, by error name.",
		}, []string{"name"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_acks_total", Help: "ACKs of commands, by status (ok, duplicate, accepted).",
		}, []string{"status"}),
		ackSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seqflow_gateway_ack_seconds", Help: "From a command frame's arrival to its ACK, by status.", Buckets: lat,
		}, []string{"status"}),
		produceSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_gateway_produce_seconds", Help: "From producing an uplink to Kafka's acknowledgement (acks=all).", Buckets: lat,
		}),
		ackStages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "seqflow_gateway_ack_stage_seconds",
			Help:    "Stages of an ACK with its seq: produce (command frame's arrival to the uplink acknowledged by Kafka), seq_wait (acknowledged to the seq's arrival from the push transport), from_sequencer (the event's server_ts_ms, set by the sequencer before its transaction commits, to the seq's arrival).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 1.5, 24),
		}, []string{"stage"}),
		notices: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_gateway_seq_notices_total", Help: "Seqs delivered as seq_notice after an accepted ACK.",
		}),
		pushItems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_push_items_total", Help: "Pushed events per recipient connection, by outcome.",
		}, []string{"outcome"}),
		pushLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "seqflow_gateway_push_batch_lag_seconds", Help: "From the pusher handing a batch over to the gateway receiving it.", Buckets: lat,
		}),
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_receipts_total", Help: "Receipts produced to im.receipts.v1, by kind.",
		}, []string{"kind"}),
		receiptFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_gateway_receipt_produce_errors_total", Help: "Delivery receipts Kafka did not accept (the next one covers them).",
		}),
		signals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_signals_total",
			Help: "Ephemeral signals from this gateway's clients (typing, read cursors fanned out), by signal and outcome: sent, rate_limited, not_a_member, dropped_queue_full, dropped_large_group, dropped_error, waiting_for_store (a cursor kept for the next flush because the store does not list its reader yet).",
		}, []string{"signal", "outcome"}),
		unreadRecounts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_unread_recounts_total",
			Help: "Unread counts asked of the store again after a read below what a connection's changes counted, by outcome: ok, error, dropped_queue_full.",
		}, []string{"outcome"}),
		keyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_key_errors_total",
			Help: "Key-store calls that failed (the key store or the KEK did not answer), by op: seal (the command was refused UNAVAILABLE), open (a push was dropped for sync to fill, or a sync answered UNAVAILABLE).",
		}, []string{"op"}),
		rateFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_gateway_rate_limit_fallbacks_total",
			Help: "Rate-limit decisions taken by this instance's own buckets because Redis did not answer (or failed less than a second ago).",
		}),
		rateLeases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_gateway_rate_limit_leases_total",
			Help: "Calls to Redis that took a lease of a user's tokens (up to a tenth of the burst, spent by this gateway within a second).",
		}),
		presenceErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_gateway_presence_errors_total", Help: "Failed presence writes to Redis.",
		}),
		pushBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_push_batches_total", Help: "Push batches received, by transport (tcp: a pusher's direct stream; redis: pub/sub).",
		}, []string{"transport"}),
		seqResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_seq_results_total",
			Help: "Seqs that reached the gateway for its senders' ACKs, by source (sequencer: its direct ACK after the commit; pusher: the event or duplicate ACK it pushes) and matched (true: this source answered a waiting command; false: it was answered already or gone, or the seq came before Kafka's answer to the uplink's produce and is counted again when that answer hands it over).",
		}, []string{"source", "matched"}),
		seqArrival: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "seqflow_gateway_seq_arrival_seconds",
			Help:    "From a new seq's server_ts_ms (set by the sequencer before its transaction commits) to each copy's arrival, by source (sequencer, pusher), whether or not it answered a command; duplicates are left out.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 1.5, 24),
		}, []string{"source"}),
		seqEarly: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_gateway_seq_before_produce_ack_total",
			Help: "Commands whose seq reached the gateway before Kafka's answer to their uplink's produce did (the ACK went out when that answer came).",
		}),
		badBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_gateway_bad_push_batches_total", Help: "Push frames that failed to decode.",
		}),
		pushRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_push_rejected_total",
			Help: "Push connections and messages refused by the peer authentication, by transport (tcp, redis) and reason: conn_limit, handshake, unknown_key, wrong_gateway, bad_mac, stale, replay, idle, oversize. A refused TCP connection is closed; nothing it carried is applied.",
		}, []string{"transport", "reason"}),
		deviceSignals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_device_signals_total",
			Help: "Device signals, by signal (signout, replace) and outcome: announced, announce_error, heard, closed (a connection of this gateway closed by it), bad.",
		}, []string{"signal", "outcome"}),
		signOutChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_signout_checks_total",
			Help: "Tokens checked against their device's sign-out that were refused signed_out (refused) or refused unavailable because Redis did not answer (redis_error).",
		}, []string{"outcome"}),
		cursorsBounded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seqflow_gateway_cursors_bounded_total",
			Help: "Read and delivered cursors beyond their session's last seq, lowered to it.",
		}),
		bodiesSealed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqflow_bodies_sealed",
			Help: "1 when message bodies are sealed before they enter Kafka (SEQFLOW_KEK), 0 when plaintext bodies were chosen (SEQFLOW_PLAINTEXT_BODIES=true).",
		}),
		sockets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqflow_gateway_client_sockets", Help: "Open TCP connections of the client port (HTTP and WebSocket).",
		}),
		connRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_conn_refusals_total", Help: "Connections and requests refused by a connection cap, by cap (total, ip, user).",
		}, []string{"cap"}),
		syncShed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seqflow_gateway_sync_shed_total",
			Help: "Sync and changes requests answered unavailable (retryable) because every slot of GATEWAY_SYNC_CONCURRENCY stayed taken for GATEWAY_SYNC_QUEUE_WAIT, by op (sync, changes).",
		}, []string{"op"}),
		syncSlotsInUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "seqflow_gateway_sync_slots_in_use", Help: "Sync and changes requests reading the message store now (at most GATEWAY_SYNC_CONCURRENCY).",
		}),
	}
	reg.MustRegister(m.sockets, m.connRefusals, m.connections, m.connects, m.closes, m.frames, m.errors, m.acks, m.ackSeconds, m.produceSecs, m.ackStages,
		m.notices, m.pushItems, m.pushLag, m.receipts, m.receiptFails, m.presenceErrs, m.rateFallbacks, m.rateLeases, m.signals, m.badBatches, m.pushBatches, m.seqResults, m.seqArrival, m.seqEarly,
		m.pushRejected, m.deviceSignals, m.signOutChecks, m.unreadRecounts, m.keyErrors, m.bodiesSealed, m.cursorsBounded,
		m.syncShed, m.syncSlotsInUse)
	return m
}
