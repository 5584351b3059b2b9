// Package floor is the floor the benchmark holds seqflow's cost
// against: a message's path through Kafka with the same guarantees and
// the same WebSocket library, and nothing else. It is a measuring
// instrument of cmd/seqbench (its floor phase, the server run as
// cmd/seqfloor, the clients in seqbench), not a product: it keeps
// seqs in memory, has no store, no dedup, no presence, no receipts, no
// auth, no retries, and forgets everything when it stops.
//
// What a message does in it, with the settings of the services:
//
//   - a WebSocket frame {"t":"send"} arrives (github.com/coder/websocket,
//     JSON by github.com/go-json-experiment/json, as producer-gw);
//   - it is produced to the uplink topic keyed by its session: acks=all,
//     idempotent, snappy, a 2 ms linger (producer-gw's defaults);
//   - one transactional consumer (a GroupTransactSession, read_committed,
//     offsets in the transaction, batches taken as the sequencer takes
//     them: eventlog.TxnPoll with its merge wait and SEQFLOOR_TXN_FLOOR
//     between two transactions' polls) gives it the next seq of its
//     session and produces the event to the sequenced topic's same
//     partition; once the transaction has committed it writes the ACK
//     frame to the sender's connection (the sequencer's direct ACK, here
//     without the hop between processes);
//   - one read_committed consumer group of the sequenced topic (the
//     pusher) queues the event frame for the recipient's connection and
//     commits its offsets after.
//
// Its /metrics has the services' stage histograms for the hops it has,
// under the services' names, buckets and labels, so cmd/seqbench puts
// its stage table beside the pipeline's: the gateway's produce stage
// (frame arrived → uplink acknowledged) and its ACK (frame arrived → ACK
// queued), the sequencer's uplink wait (the uplink's record timestamp →
// returned by a poll) and its per-batch stages (prepare, produce, commit,
// total), the pusher's read (the event's record timestamp → returned by
// its poll).
//
// SEQFLOOR_ROLE splits it as seqflow is split, so what the split costs
// can be measured: "all" (the default) runs the three parts in one
// process; "gateway" serves the WebSocket clients, produces the uplinks
// and listens on SEQFLOOR_FRAMES (port 0 takes any, logged as "floor
// frames listening") for the frames the other two send it over TCP, as
// the sequencer's direct ACKs and the pusher's events reach producer-gw;
// "sequencer" and "pusher" run their part and send their frames to the
// gateway at SEQFLOOR_FRAMES, each batch's frames in one write after the
// transaction committed (the ACKs) or the poll was read (the events).
//
// Configuration (environment): SEQFLOOR_ADDR (the WebSocket endpoint /ws,
// /metrics, /readyz and /debug/pprof/; port 0 takes any, logged as "floor listening"),
// SEQFLOW_KAFKA_BROKERS, SEQFLOW_TOPIC_PREFIX (the uplink and sequenced
// topics, created by the caller), SEQFLOOR_GROUP (the prefix of its two
// consumer groups and its transactional ID), SEQFLOOR_TXN_FLOOR (12ms),
// SEQFLOOR_PRODUCE_LINGER (2ms), SEQFLOOR_ROLE, SEQFLOOR_FRAMES.
package floor

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/go-json-experiment/json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/internal/eventlog"
)

// Config is the server's configuration; see the package doc.
type Config struct {
	Addr     string
	Brokers  []string
	Topics   eventlog.Topics
	Group    string
	TxnFloor time.Duration
	Linger   time.Duration
	Role     string
	Frames   string
}

// Roles of SEQFLOOR_ROLE.
const (
	RoleAll       = "all"
	RoleGateway   = "gateway"
	RoleSequencer = "sequencer"
	RolePusher    = "pusher"
)

// LoadConfig reads Config from e.
func LoadConfig(e *config.Env) (Config, error) {
	c := Config{
		Addr:     e.String("SEQFLOOR_ADDR", "127.0.0.1:0"),
		Brokers:  e.List("SEQFLOW_KAFKA_BROKERS", []string{"127.0.0.1:19092"}),
		Topics:   eventlog.Names(e.String("SEQFLOW_TOPIC_PREFIX", "")),
		Group:    e.String("SEQFLOOR_GROUP", "seqfloor"),
		TxnFloor: e.Duration("SEQFLOOR_TXN_FLOOR", 12*time.Millisecond, 0, time.Second),
		Linger:   e.Duration("SEQFLOOR_PRODUCE_LINGER", 2*time.Millisecond, 0, time.Second),
		Role:     e.String("SEQFLOOR_ROLE", RoleAll),
		Frames:   e.String("SEQFLOOR_FRAMES", "127.0.0.1:0"),
	}
	err := e.Err()
	switch c.Role {
	case RoleAll, RoleGateway, RoleSequencer, RolePusher:
	default:
		err = errors.Join(err, fmt.Errorf("SEQFLOOR_ROLE=%q: want all, gateway, sequencer or pusher", c.Role))
	}
	return c, err
}

// Frames of the floor's protocol, JSON over WebSocket. Send is the
// clients'; Ack and Event are the server's.
type (
	Send struct {
		T       string `json:"t"`
		ID      string `json:"id"`
		Session string `json:"session"`
		To      int    `json:"to"`
		Body    string `json:"body"`
		SentNs  int64  `json:"sent_ns"`
	}
	Ack struct {
		T   string `json:"t"`
		ID  string `json:"id"`
		Seq int64  `json:"seq"`
	}
	Event struct {
		T       string `json:"t"`
		Session string `json:"session"`
		Seq     int64  `json:"seq"`
		From    int    `json:"from"`
		ID      string `json:"id"`
		Body    string `json:"body"`
		SentNs  int64  `json:"sent_ns"`
	}
)

// uplink is the uplink and sequenced record's value.
type uplink struct {
	From    int    `json:"from"`
	To      int    `json:"to"`
	ID      string `json:"id"`
	Body    string `json:"body"`
	SentNs  int64  `json:"sent_ns"`
	Session string `json:"session"`
	Seq     int64  `json:"seq,omitempty"`
	// ArrivedNs: when the send frame arrived at the server, for the
	// ACK's histogram.
	ArrivedNs int64 `json:"arrived_ns"`
}

// Server is the floor's server: its connections by user and its Kafka
// clients. Make one with New.
type Server struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	conns map[int]*conn

	prod     *kgo.Client
	seqReady atomic.Bool
	pushRdy  atomic.Bool
	m        *metrics
	link     *link // roles sequencer and pusher: the gateway's frame listener
}

// link carries a sequencer's or pusher's frames to the gateway role:
// each a 16-byte header (payload length, user, the ACK's send-frame
// arrival in Unix ns or 0) and the JSON frame, buffered until flush.
type link struct {
	mu sync.Mutex
	c  net.Conn
	w  *bufio.Writer
}

func (l *link) put(user int, arrivedNs int64, b []byte) {
	var h [16]byte
	binary.BigEndian.PutUint32(h[0:], uint32(len(b)))
	binary.BigEndian.PutUint32(h[4:], uint32(user))
	binary.BigEndian.PutUint64(h[8:], uint64(arrivedNs))
	l.mu.Lock()
	l.w.Write(h[:]) // an error stays in w and comes back from flush
	l.w.Write(b)
	l.mu.Unlock()
}

func (l *link) flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Flush()
}

// metrics are the stage histograms of the services' hops the floor has,
// each under its service's name, buckets and labels (see the package
// doc).
type metrics struct {
	reg                  *prometheus.Registry
	gwStage, seqStage    *prometheus.HistogramVec
	gwAck                *prometheus.HistogramVec
	uplinkWait, pushRead prometheus.Histogram
}

func newMetrics() *metrics {
	stage := prometheus.ExponentialBuckets(0.0005, 1.5, 24) // producer-gw's and the sequencer's stages
	lat := prometheus.ExponentialBuckets(0.0005, 2, 16)     // producer-gw's ACK, the pusher's latencies
	m := &metrics{
		reg: prometheus.NewRegistry(),
		gwStage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "seqflow_gateway_ack_stage_seconds",
			Help: "produce: send frame arrived to the uplink acknowledged (acks=all).", Buckets: stage}, []string{"stage"}),
		gwAck: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "seqflow_gateway_ack_seconds",
			Help: "Send frame arrived to its ACK queued for the connection.", Buckets: lat}, []string{"status"}),
		uplinkWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seqflow_sequencer_uplink_wait_seconds",
			Help: "An uplink's record timestamp to the poll that returned it.", Buckets: stage}),
		seqStage: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "seqflow_sequencer_batch_stage_seconds",
			Help: "One committed batch: prepare (poll returned to events produced), produce (flush), commit (End), total.", Buckets: stage}, []string{"stage"}),
		pushRead: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seqflow_pusher_read_latency_seconds",
			Help: "An event's record timestamp to the pusher's poll that returned it.", Buckets: lat}),
	}
	m.reg.MustRegister(m.gwStage, m.gwAck, m.uplinkWait, m.seqStage, m.pushRead)
	return m
}

// conn is one WebSocket connection and the frames queued for it.
type conn struct {
	ws *websocket.Conn
	q  chan []byte
}

// New returns a server of cfg that logs to log.
func New(cfg Config, log *slog.Logger) *Server {
	return &Server{cfg: cfg, log: log, conns: map[int]*conn{}, m: newMetrics()}
}

// Run serves until ctx ends or a part fails.
func (s *Server) Run(ctx context.Context) error {
	role := s.cfg.Role
	gateway := role == RoleAll || role == RoleGateway
	if gateway {
		prod, err := kgo.NewClient(append(eventlog.ClientOpts(s.cfg.Brokers, "seqfloor-gw"),
			append(eventlog.ProducerOpts(), kgo.DefaultProduceTopic(s.cfg.Topics.Uplink), kgo.ProducerLinger(s.cfg.Linger))...)...)
		if err != nil {
			return err
		}
		defer prod.Close()
		s.prod = prod
	}
	if role == RoleSequencer || role == RolePusher {
		c, err := net.Dial("tcp", s.cfg.Frames)
		if err != nil {
			return fmt.Errorf("dial the gateway's frames at %s: %w", s.cfg.Frames, err)
		}
		defer c.Close()
		s.link = &link{c: c, w: bufio.NewWriterSize(c, 64<<10)}
	}
	var fl net.Listener // role gateway: the frames of the other two
	if role == RoleGateway {
		var err error
		if fl, err = net.Listen("tcp", s.cfg.Frames); err != nil {
			return err
		}
		defer fl.Close()
		s.log.Info("floor frames listening", "addr", fl.Addr().String())
	}
	if role != RoleAll && role != RoleSequencer {
		s.seqReady.Store(true)
	}
	if role != RoleAll && role != RolePusher {
		s.pushRdy.Store(true)
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	s.log.Info("floor listening", "addr", ln.Addr().String(), "role", role)
	mux := http.NewServeMux()
	if gateway {
		mux.HandleFunc("/ws", s.serveWS)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.seqReady.Load() || !s.pushRdy.Load() {
			http.Error(w, "partitions not assigned yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	if role == RoleAll || role == RoleSequencer {
		wg.Go(func() { cancel(fmt.Errorf("sequencer: %w", s.sequence(ctx))) })
	}
	if role == RoleAll || role == RolePusher {
		wg.Go(func() { cancel(fmt.Errorf("pusher: %w", s.push(ctx))) })
	}
	if fl != nil {
		wg.Go(func() { cancel(fmt.Errorf("frames: %w", s.serveFrames(ctx, fl))) })
	}
	wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			cancel(err)
		}
	})
	<-ctx.Done()
	srv.Close()
	wg.Wait()
	return context.Cause(ctx)
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	user, err := strconv.Atoi(r.URL.Query().Get("user"))
	if err != nil {
		http.Error(w, "user: want an integer", http.StatusBadRequest)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c := &conn{ws: ws, q: make(chan []byte, 512)}
	s.mu.Lock()
	s.conns[user] = c
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case b := <-c.q:
				if ws.Write(ctx, websocket.MessageText, b) != nil {
					cancel()
					return
				}
			}
		}
	}()
	defer func() {
		s.mu.Lock()
		if s.conns[user] == c {
			delete(s.conns, user)
		}
		s.mu.Unlock()
		ws.CloseNow()
	}()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		arrived := time.Now()
		var m Send
		if err := json.Unmarshal(b, &m); err != nil || m.T != "send" {
			s.log.Warn("bad frame", "user", user, "err", err)
			continue
		}
		v, _ := json.Marshal(uplink{From: user, To: m.To, ID: m.ID, Body: m.Body, SentNs: m.SentNs, Session: m.Session, ArrivedNs: arrived.UnixNano()})
		s.prod.Produce(ctx, &kgo.Record{Key: []byte(m.Session), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				s.log.Warn("uplink produce", "err", err)
				return
			}
			s.m.gwStage.WithLabelValues("produce").Observe(time.Since(arrived).Seconds())
		})
	}
}

// send delivers frame v to user: queued for its connection here, or,
// in the roles sequencer and pusher, buffered for the gateway (sent at
// the link's flush). arrivedNs, for an ACK, is when its send frame
// arrived (0 for an event).
func (s *Server) send(user int, v any, arrivedNs int64) {
	b, _ := json.Marshal(v)
	if s.link != nil {
		s.link.put(user, arrivedNs, b)
		return
	}
	s.queue(user, b, arrivedNs)
}

// queue queues frame b for user's connection; a full queue or an absent
// user drops it (the client counts what never came).
func (s *Server) queue(user int, b []byte, arrivedNs int64) {
	s.mu.Lock()
	c := s.conns[user]
	s.mu.Unlock()
	if c == nil {
		return
	}
	select {
	case c.q <- b:
	default:
		return
	}
	if arrivedNs != 0 {
		s.m.gwAck.WithLabelValues("ok").Observe(time.Since(time.Unix(0, arrivedNs)).Seconds())
	}
}

// serveFrames (role gateway) queues the frames the sequencer and pusher
// roles send over their connections until ctx ends.
func (s *Server) serveFrames(ctx context.Context, ln net.Listener) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			r := bufio.NewReaderSize(c, 64<<10)
			var h [16]byte
			for {
				if _, err := io.ReadFull(r, h[:]); err != nil {
					return
				}
				b := make([]byte, binary.BigEndian.Uint32(h[0:]))
				if _, err := io.ReadFull(r, b); err != nil {
					return
				}
				s.queue(int(binary.BigEndian.Uint32(h[4:])), b, int64(binary.BigEndian.Uint64(h[8:])))
			}
		}()
	}
}

// flush sends the frames buffered for the gateway, in the roles
// sequencer and pusher.
func (s *Server) flush() error {
	if s.link == nil {
		return nil
	}
	if err := s.link.flush(); err != nil {
		return fmt.Errorf("frames to the gateway: %w", err)
	}
	return nil
}

// sequence is the sequencer: poll, wait out the floor, one transaction
// for the batch, then the ACKs.
func (s *Server) sequence(ctx context.Context) error {
	sess, err := kgo.NewGroupTransactSession(append(eventlog.ClientOpts(s.cfg.Brokers, "seqfloor-seq"),
		kgo.TransactionalID(s.cfg.Group+"-txn"),
		kgo.TransactionTimeout(10*time.Second),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		eventlog.Compression(),
		kgo.ProducerLinger(0),
		kgo.ManualFlushing(),
		kgo.MaxBufferedRecords(2*maxBatch),
		kgo.ConsumerGroup(s.cfg.Group+"-seq"),
		kgo.ConsumeTopics(s.cfg.Topics.Uplink),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { s.seqReady.Store(true) }),
	)...)
	if err != nil {
		return err
	}
	defer sess.Close()
	poll := eventlog.TxnPoll{MaxRecords: maxBatch, MergeWait: 5 * time.Millisecond, Floor: s.cfg.TxnFloor}
	seqs := map[string]int64{}
	var prev time.Time
	for {
		fs, polled := poll.Poll(ctx, ctx, sess, prev)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := s.fatalFetch(fs); err != nil {
			return err
		}
		if fs.NumRecords() == 0 {
			sess.AllowRebalance()
			continue
		}
		prev = polled
		// The stages start where the sequencer's do: when the batch's
		// last records were taken (a merge or floor poll that found
		// none does not move it).
		got := polled
		if err := sess.Begin(); err != nil {
			return err
		}
		var acks []uplink
		var failed atomic.Pointer[error]
		fs.EachRecord(func(r *kgo.Record) {
			s.m.uplinkWait.Observe(got.Sub(r.Timestamp).Seconds())
			var u uplink
			if json.Unmarshal(r.Value, &u) != nil {
				return
			}
			seqs[u.Session]++
			u.Seq = seqs[u.Session]
			v, _ := json.Marshal(u)
			sess.Produce(ctx, &kgo.Record{Topic: s.cfg.Topics.Sequenced, Partition: r.Partition, Key: r.Key, Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			})
			acks = append(acks, u)
		})
		prepared := time.Now()
		if err := sess.Client().Flush(ctx); err != nil {
			return err
		}
		flushed := time.Now()
		how := kgo.TryCommit
		if failed.Load() != nil {
			s.log.Warn("produce failed: the transaction is aborted, its uplinks are read again", "err", *failed.Load())
			how = kgo.TryAbort
		}
		committed, err := sess.End(ctx, how)
		if err != nil {
			return err
		}
		ended := time.Now()
		sess.AllowRebalance()
		if !committed || how == kgo.TryAbort {
			// Aborted (a rebalance, a failed produce): the batch's
			// uplinks come again, to this owner or the next, and get
			// the same seqs from this one (the floor keeps no seqs
			// across owners).
			for _, u := range acks {
				seqs[u.Session]--
			}
			continue
		}
		for stage, d := range map[string]time.Duration{"prepare": prepared.Sub(got), "produce": flushed.Sub(prepared),
			"commit": ended.Sub(flushed), "total": ended.Sub(got)} {
			s.m.seqStage.WithLabelValues(stage).Observe(d.Seconds())
		}
		for _, u := range acks {
			s.send(u.From, Ack{T: "ack", ID: u.ID, Seq: u.Seq}, u.ArrivedNs)
		}
		if err := s.flush(); err != nil {
			return err
		}
	}
}

// fatalFetch logs the fetch errors of fs a poll may carry on from and
// returns the first it may not (eventlog.FatalFetch).
func (s *Server) fatalFetch(fs kgo.Fetches) error {
	return eventlog.FatalFetch(fs, func(t string, p int32, err error) {
		s.log.Warn("fetch error", "topic", t, "partition", p, "err", err)
	})
}

// maxBatch is the most uplinks in one transaction (the sequencer's
// SEQUENCER_MAX_POLL_RECORDS default); the producer buffers twice that.
const maxBatch = 5000

// push is the pusher: read_committed, one event frame per record queued
// for its recipient's connection, offsets committed after (a frame for a
// recipient not connected, or whose queue is full, is dropped: the
// clients count it as not delivered).
func (s *Server) push(ctx context.Context) error {
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(s.cfg.Brokers, "seqfloor-push"),
		kgo.ConsumerGroup(s.cfg.Group+"-push"),
		kgo.ConsumeTopics(s.cfg.Topics.Sequenced),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { s.pushRdy.Store(true) }),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := s.fatalFetch(fs); err != nil {
			return err
		}
		got := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			s.m.pushRead.Observe(got.Sub(r.Timestamp).Seconds())
			var u uplink
			if json.Unmarshal(r.Value, &u) != nil {
				return
			}
			s.send(u.To, Event{T: "event", Session: u.Session, Seq: u.Seq, From: u.From, ID: u.ID, Body: u.Body, SentNs: u.SentNs}, 0)
		})
		if err := s.flush(); err != nil {
			return err
		}
		cl.MarkCommitRecords(fs.Records()...)
		cl.AllowRebalance()
	}
}
